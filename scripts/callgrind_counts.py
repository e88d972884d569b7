#!/usr/bin/env python3
"""callgrind_counts: instructions and L1 misses a step of spool_bench_sim's churn under
callgrind, grouped by whose code ran them: spool's (src/), cudasim's (tests/cudasim/), the
bench's own loop, and libc. Instruction counts, not time: they miss the driver's costs and the
real host's caches, but two trees' counts compare exactly (the sim is deterministic), where an
A/B on the GPU's host carries that host's noise.

    python3 scripts/callgrind_counts.py BUILD [--strategy spool-tuned] [--top 30] [--keep FILE]

BUILD: a build tree holding bench/spool_bench_sim (for line-level names, configure it with
-DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g). Only the churn loop is counted
(--toggle-collect on churn_steps): the warm-up and 3 reps, whose step counts the bench's own
method line gives. Prints each
group's instructions and L1 misses a step, then the functions with the most instructions of
their own (inlined code counted where it was inlined into).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

LOOP = 'churn_steps'  # the measured function: the warm-up and every rep of churn
REPS = 3
# spool_bench's method line under the churn table says how many steps each part runs.
METHOD = re.compile(r'(\d+) steps per rep after a warm-up of (\d+)')


def steps_of(stdout):
    """The steps LOOP ran, from the bench's own words (warm-up + REPS reps)."""
    m = METHOD.search(stdout)
    if not m:
        sys.exit("callgrind_counts: the bench did not print churn's step counts "
                 "('N steps per rep after a warm-up of M'): an older spool_bench?")
    return int(m.group(2)) + REPS * int(m.group(1))


def groups_of(path):
    if 'cudasim' in path:
        return 'sim'
    if '/src/' in path or path.startswith('src/'):
        return 'spool'
    if 'bench' in path:
        return 'bench'
    return 'libc'


def parse(text):
    """(group, function) -> [instructions, L1 misses] from callgrind_annotate's self costs."""
    num = r'(?:([\d,]+)(?:\s+\(\s*[\d.]+%\))?|\.)'
    pat = re.compile(r'^\s*' + num + r'\s+' + num + r'\s+' + num + r'\s+(\S+?):(\S+)')
    out = collections.defaultdict(lambda: [0, 0])
    started = False
    for line in text.splitlines():
        if 'file:function' in line:
            started = True
            continue
        m = pat.match(line) if started else None
        if not m:
            continue
        ir, mr, mw = (int(m.group(i).replace(',', '')) if m.group(i) else 0 for i in (1, 2, 3))
        key = (groups_of(m.group(4)), m.group(5))
        out[key][0] += ir
        out[key][1] += mr + mw
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('build')
    ap.add_argument('--strategy', default='spool-tuned')
    ap.add_argument('--top', type=int, default=30)
    ap.add_argument('--keep', help='keep the callgrind output in this file')
    a = ap.parse_args()
    bench = os.path.join(a.build, 'bench', 'spool_bench_sim')
    if not os.access(bench, os.X_OK):
        sys.exit(f'callgrind_counts: no {bench}: build the target spool_bench_sim first')
    if a.keep:
        out = a.keep
    else:
        with tempfile.NamedTemporaryFile(prefix='callgrind-', suffix='.out', delete=False) as f:
            out = f.name
    run = subprocess.run(['valgrind', '--tool=callgrind', f'--toggle-collect={LOOP}',
                          '--cache-sim=yes', f'--callgrind-out-file={out}', bench, '--only',
                          'churn', '--strategies', a.strategy, '--reps', str(REPS)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f'callgrind_counts: the run failed:\n{run.stderr[-2000:]}')
    steps = steps_of(run.stdout)
    ann = subprocess.run(['callgrind_annotate', '--auto=no', '--inclusive=no',
                          '--show=Ir,D1mr,D1mw', out], capture_output=True, text=True).stdout
    costs = parse(ann)
    if not a.keep:
        os.unlink(out)
    total = collections.defaultdict(lambda: [0, 0])
    for (g, _), (ir, d1) in costs.items():
        total[g][0] += ir
        total[g][1] += d1
    print(f'churn, {a.strategy}: a step, over {steps} steps')
    for g in ('spool', 'sim', 'bench', 'libc'):
        ir, d1 = total[g][0] / steps, total[g][1] / steps
        print(f'  {g:6} {ir:8.1f} instructions {d1:6.2f} L1 misses')
    print('functions (self):')
    for (g, f), (ir, d1) in sorted(costs.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f'  {ir / steps:8.1f} {d1 / steps:6.2f}  {g:5} {f}')


if __name__ == '__main__':
    main()
