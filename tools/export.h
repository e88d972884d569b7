/* A trace in other tools' forms: a PyTorch memory snapshot (for memory_viz) and a picture. */
#ifndef SPOOL_TOOLS_EXPORT_H
#define SPOOL_TOOLS_EXPORT_H

#include "trace_read.h"

/* Writes t as a snapshot pickle to out (through spool_snapshot.py). 0, or -1 with err. */
int tf_export_torch(const tf_trace *t, const char *out, char err[TF_ERR]);

/* Draws t's live bytes over time, per stream and in total, to out (a PNG, through
 * spool_plot.py, which needs matplotlib and says so when it is missing). 0, or -1 with err. */
int tf_export_plot(const tf_trace *t, const char *out, char err[TF_ERR]);

#endif
