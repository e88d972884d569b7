#!/usr/bin/env python3
"""ab_summary: the medians of an A/B log of `scripts/gpu-lease ab`, and the rounds each tree
won against the first (the first round's first tree).

    python3 scripts/ab_summary.py AB_LOG

The log holds blocks headed `== TREE ROUND WORKLOAD`, each followed by spool_bench's rows for
spool and spool-tuned. The figure compared is, per workload kind:
  pairs (1mib, 64mib, random, single8, ...): ns per pair over the no-allocation loop, lower wins
  churn: ns a step over the loop, lower wins
  pipeline: host us to queue a frame, lower wins (its wall time is printed beside)
  threads: M pairs/s at the most threads run, higher wins
Beside the medians: the median over the rounds of each round's ratio to the first tree, which
the host's changes of speed between rounds move less than they move the medians, with a 90%
interval for it (the rounds resampled 2,000 times: two processes of one tree can differ by more
than the change measured, so a ratio whose interval straddles 1 has not shown a difference),
and the ratio of the fastest rounds (each tree's best over the first tree's best: the run the
host disturbed least). Memory (reserved high and live high) is printed as the first round saw
it.
"""
import random
import re
import statistics
import sys


def interval(ratios, resamples=2000, seed=1):
    """The 5th and 95th percentiles of the median of ratios resampled with replacement."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                  for _ in range(resamples))
    return meds[int(0.05 * resamples)], meds[int(0.95 * resamples) - 1]


def figure(workload, fields):
    """(value, higher_is_better, memory) of one row's fields after the strategy name (and,
    for threads, after the thread count)."""
    if workload == 'threads':
        return float(fields[0]), True, ' '.join(fields[4:8])
    if workload.startswith('pipeline'):
        return float(fields[0]), False, ' '.join(fields[5:9]) + ' wall ' + fields[4]
    return float(fields[3]), False, ' '.join(fields[4:8])


def parse(path):
    """The trees in the log's order, and (workload, strategy, tree, round) -> a row's fields
    after the strategy name (threads: the row of the most threads)."""
    trees, raw, head = [], {}, None
    for line in open(path):
        m = re.match(r'== (\S+) (\d+) (\S+)', line)
        if m:
            head = m.groups()
            if head[0] not in trees:
                trees.append(head[0])
            continue
        f = line.split()
        if not head or not f or not f[0].startswith('spool'):
            continue
        tree, rnd, wl = head
        key = (wl, f[0], tree, int(rnd))
        if wl == 'threads':
            if key in raw and int(raw[key][0]) > int(f[1]):
                continue
            raw[key] = f[1:]
        else:
            raw[key] = f[1:]
    return trees, raw


def main(path):
    trees, raw = parse(path)
    if not trees:
        sys.exit('ab_summary: no "== TREE ROUND WORKLOAD" blocks in ' + path)
    rows = {}  # (workload, strategy, tree) -> [(round, value, higher, memory)]
    for (wl, strategy, tree, rnd), f in sorted(raw.items(), key=lambda kv: kv[0][3]):
        try:
            value, higher, memory = figure(wl, f[1:] if wl == 'threads' else f)
        except (IndexError, ValueError):
            continue
        rows.setdefault((wl, strategy, tree), []).append((rnd, value, higher, memory))
    base = trees[0]
    workloads = []
    for (wl, _, _) in rows:
        if wl not in workloads:
            workloads.append(wl)
    print(f'medians; "won" counts the rounds a tree beat {base} in; "x" is the median over the '
          f'rounds of the tree\'s figure / {base}\'s in the same round')
    for wl in workloads:
        for strategy in ('spool', 'spool-tuned'):
            ref = {r[0]: r[1] for r in rows.get((wl, strategy, base), [])}
            if not ref:
                continue
            for tree in trees:
                got = rows.get((wl, strategy, tree), [])
                if not got:
                    continue
                med = statistics.median(r[1] for r in got)
                higher = got[0][2]
                line = f'{wl:9} {strategy:12} {tree:8} {med:9.1f}'
                if tree != base:
                    won = sum(1 for r in got if r[0] in ref and
                              (r[1] >= ref[r[0]] if higher else r[1] <= ref[r[0]]))
                    ratios = [r[1] / ref[r[0]] for r in got if ref.get(r[0])]
                    ratio = statistics.median(ratios) if ratios else float('nan')
                    lo, hi = interval(ratios) if ratios else (float('nan'), float('nan'))
                    pick = max if higher else min
                    best = pick(r[1] for r in got) / pick(ref.values())
                    line += f'  won {won}/{len(got)}  x{ratio:.2f} [{lo:.2f}, {hi:.2f}]'
                    line += f'  best x{best:.2f}'
                else:
                    line += ' ' * 44
                print(line + f'  all {" ".join(f"{r[1]:.1f}" for r in got)}  [{got[0][3]}]')


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
