#!/usr/bin/env python3
"""Draws what `spool-trace plot` writes on standard input (time_s,stream,stream_live,
total_live,reserved,event per line) as a PNG: the live bytes of each stream and in total, the
heap's reserved bytes and the idle ones (reserved less live) over time, with out-of-memory
failures (red) and trims (grey) marked. Needs matplotlib.

  spool_plot.py OUT.png < points.csv

Exit status: 0 done, 1 bad usage, 2 bad input, 3 matplotlib is missing.
"""
import csv
import io
import sys


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr if len(argv) != 2 else sys.stdout)
        return 0 if len(argv) == 2 else 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("spool_plot.py: matplotlib is not installed (pip install matplotlib); "
              "`spool-trace dump` gives the same data as CSV", file=sys.stderr)
        return 3
    streams, total, ooms, trims = {}, ([], []), [], []
    reserved, idle = ([], []), ([], [])
    rows = csv.reader(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8"))
    for n, row in enumerate(rows, 1):
        if n == 1:
            continue
        try:
            when, stream, live, all_live, held, event = float(row[0]), row[1], int(row[2]), \
                int(row[3]), int(row[4]), row[5]
        except (ValueError, IndexError) as err:
            print(f"spool_plot.py: standard input line {n}: {err}", file=sys.stderr)
            return 2
        if held:
            reserved[0].append(when)
            reserved[1].append(held / 2**20)
            idle[0].append(when)
            idle[1].append(max(held - all_live, 0) / 2**20)
        if event == "oom":
            ooms.append(when)
        elif event == "trim":
            trims.append(when)
        elif event != "chunk":
            xs, ys = streams.setdefault(stream, ([], []))
            xs.append(when)
            ys.append(live / 2**20)
            total[0].append(when)
            total[1].append(all_live / 2**20)
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.step(total[0], total[1], where="post", label="total live", color="black", linewidth=1.5)
    if reserved[0]:
        ax.step(*reserved, where="post", label="reserved (heap chunks)", color="tab:blue",
                linewidth=1.5)
        ax.step(*idle, where="post", label="idle (reserved - live)", color="tab:orange",
                linewidth=1, linestyle="--")
    # One stream's line would lie on the total; several get colours the totals do not use.
    palette = ["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    for i, (stream, (xs, ys)) in enumerate(sorted(streams.items()) if len(streams) > 1 else []):
        ax.step(xs, ys, where="post", label=f"stream {stream}", linewidth=0.8,
                color=palette[i % len(palette)])
    for x in ooms:
        ax.axvline(x, color="red", linestyle="--", linewidth=0.8)
    for x in trims:
        ax.axvline(x, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("MiB")
    ax.set_title("spool trace: live, reserved and idle bytes (red: out of memory, grey: trim)")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
