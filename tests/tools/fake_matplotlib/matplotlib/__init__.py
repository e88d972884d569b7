"""A stand-in for matplotlib in the trace tools' test: enough of it for spool_plot.py, which
then writes what it was asked to draw instead of a picture (the test reads that back)."""


def use(backend):
    del backend
