#!/usr/bin/env python3
"""Plots spool_bench's CSV as PNG files.

    python3 bench/plot.py CSV OUTDIR

Writes into OUTDIR (created if needed):
  pairs.png        host ns per alloc+free pair, no kernels (1mib, 64mib, random, single8,
                   churn)
  over_launch.png  ns per pair over the bare launch (1mib+k, 64mib+k, random+k, pipeline)
  threads.png      alloc+free pairs per second, all threads together, per thread count
  memory.png       reserved high / live high per workload (threads left out: there a pool's
                   reservation granularity, not the allocator, sets the ratio)

spool_bench --plots DIR runs it. Without matplotlib it prints one line saying the plots were
skipped and exits 0, so that the table and the CSV stand on their own. Python 3.6+, standard
library besides matplotlib.
"""

import csv
import os
import sys

PAIRS = ["1mib", "64mib", "random", "single8", "churn"]
KERNELS = ["1mib+k", "64mib+k", "random+k", "pipeline"]
# One colour per strategy in every plot, whichever strategies a run had.
COLORS = {"none": "0.55", "cudaMalloc": "C0", "async-t0": "C1", "async-tmax": "C2",
          "spool-nocache": "C3", "spool": "C4", "spool-tuned": "C5", "torch-native": "C6",
          "torch-expandable": "C7"}


def read(path):
    """The '# ...' header lines and the rows, as dicts of strings."""
    with open(path, newline="") as f:
        lines = f.readlines()
    header = [l[1:].strip() for l in lines if l.startswith("#")]
    rows = [r for r in csv.DictReader(l for l in lines if not l.startswith("#"))]
    return header, [r for r in rows if r["status"] == "ok"]


def strategies(rows):
    """Strategy names in the order the CSV first lists them."""
    seen = []
    for r in rows:
        if r["strategy"] not in seen:
            seen.append(r["strategy"])
    return seen


def value(rows, workload, strategy, column, threads="1"):
    for r in rows:
        if (r["workload"], r["strategy"], r["threads"]) == (workload, strategy, threads):
            return float(r[column]) if r[column] != "" else None
    return None


def bars(plt, rows, workloads, column, names, title, ylabel, path, scale, line=None):
    """Grouped bars: one group per workload present, one bar per strategy present."""
    workloads = [w for w in workloads if any(r["workload"] == w for r in rows)]
    names = [s for s in names if any(value(rows, w, s, column) is not None for w in workloads)]
    if not workloads or not names:
        return False
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(names)
    for i, s in enumerate(names):
        xs, ys = [], []
        for j, w in enumerate(workloads):
            v = value(rows, w, s, column)
            if v is not None:
                xs.append(j - 0.4 + (i + 0.5) * width)
                ys.append(v)
        ax.bar(xs, ys, width, label=s, color=COLORS.get(s))
    if line is not None:
        ax.axhline(line[0], color="black", linestyle="--", linewidth=1, label=line[1])
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads)
    ax.set_yscale(scale)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def threads_plot(plt, rows, names, title, path):
    rows = [r for r in rows if r["workload"] == "threads"]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(9, 5))
    for s in names:
        pts = sorted((int(r["threads"]), float(r["pairs_per_s"]) / 1e6)
                     for r in rows if r["strategy"] == s and r["pairs_per_s"] != "")
        if pts:
            style = "--" if s == "none" else "-o"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=s, color=COLORS.get(s))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sorted({int(r["threads"]) for r in rows})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("host threads, each on its own stream")
    ax.set_ylabel("million alloc+free pairs per second, all threads")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv):
    if len(argv) != 3:
        print("usage: plot.py CSV OUTDIR", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on the GPU machine
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; plots skipped (the table and CSV are "
              "complete)")
        return 0
    csv_path, out = argv[1], argv[2]
    header, rows = read(csv_path)
    os.makedirs(out, exist_ok=True)
    names = strategies(rows)
    others = [s for s in names if s != "none"]
    # First header lines: spool version and commit, then the device.
    where = " | ".join(h.replace("spool_bench: ", "") for h in header[:2])
    made = []
    jobs = [
        ("pairs.png", lambda p: bars(plt, rows, PAIRS, "ns_per_iter", names,
                                     "host ns per alloc+free pair, no kernels (median)\n" + where,
                                     "ns per pair (churn: per step)", p, "log",
                                     (50, "target 50 ns (1mib, 64mib, random)"))),
        ("over_launch.png", lambda p: bars(plt, rows, KERNELS, "over_none_ns_per_pair", others,
                                           "ns per alloc+free pair over a bare launch\n" + where,
                                           "ns per pair", p, "symlog")),
        ("threads.png", lambda p: threads_plot(plt, rows, names,
                                               "alloc+free pairs/s, threads on own streams\n"
                                               + where, p)),
        ("memory.png", lambda p: bars(plt, rows, PAIRS + KERNELS, "reserved_over_live", others,
                                      "reserved high / live high\n" + where,
                                      "reserved / live", p, "linear",
                                      (1.15, "target 1.15 (churn)"))),
    ]
    for name, job in jobs:
        path = os.path.join(out, name)
        if job(path):
            made.append(path)
    print("plot.py: wrote " + (", ".join(made) if made else "nothing (no rows to plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
