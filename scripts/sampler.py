#!/usr/bin/env python3
"""sampler.py: what scripts/sampler.c's samples say, by function and by line.

    python3 scripts/sampler.py SAMPLES BINARY [FUNCTION]

BINARY is the program that ran (built with -g for lines; the name must match the one in the
maps). With FUNCTION, only the samples whose stack holds it are counted (e.g. churn_steps, the
timed loop of spool_bench's churn). Prints:
  - the module each sample stopped in (the program, libc, libcuda, ...);
  - self: the function that was running; a sample in a library is charged to the innermost
    function of the program on its stack, as "function -> library";
  - inclusive: the samples whose stack holds each function (inlined ones too);
  - the lines that were running, in the program.
"""
import collections
import os
import subprocess
import sys


def load(path):
    maps, stacks = [], []
    with open(path) as f:
        for line in f:
            if line.startswith('M '):
                fields = line[2:].split()
                if len(fields) >= 6 and 'x' in fields[1]:
                    lo, hi = (int(x, 16) for x in fields[0].split('-'))
                    maps.append((lo, hi, int(fields[2], 16), fields[5]))
            elif line.startswith('S'):
                stacks.append([int(x, 16) for x in line.split()[1:]])
    return maps, stacks


def module_of(maps, addr):
    for lo, hi, off, name in maps:
        if lo <= addr < hi:
            return name, addr - lo + off
    return '?', addr


def frames_of(maps, stack):
    """(module, file offset) from the interrupted instruction outwards: the handler's frames and
    the signal trampoline are dropped; return addresses step back into their call."""
    loc = [module_of(maps, a) for a in stack]
    start = 0  # the first frames are the handler's, in the preloaded sampler
    while start < len(loc) and loc[start][0] == loc[0][0]:
        start += 1
    if start < len(loc) and 'libc' in os.path.basename(loc[start][0]):
        start += 1  # __restore_rt
    return [(m, o if i == 0 else o - 1) for i, (m, o) in enumerate(loc[start:])]


def names_of(binary, offsets):
    """offset -> (function, innermost inlined function, file:line of the innermost)."""
    if not offsets:
        return {}
    out = subprocess.run(['addr2line', '-a', '-f', '-i', '-e', binary] +
                         ['%x' % o for o in offsets], capture_output=True, text=True).stdout
    names, cur, chain = {}, None, []

    def close():
        if cur is not None:
            fn = [chain[i] for i in range(0, len(chain) - 1, 2)] or ['?']
            ln = [chain[i + 1] for i in range(0, len(chain) - 1, 2)] or ['?']
            names[cur] = (fn[-1], fn[0], os.path.basename(ln[0]))

    for line in out.splitlines():
        if line.startswith('0x'):
            close()
            cur, chain = int(line, 16), []
        else:
            chain.append(line)
    close()
    return names


def main(path, binary, keep):
    maps, stacks = load(path)
    prog = os.path.basename(binary)
    samples = [frames_of(maps, s) for s in stacks]
    mine = lambda m: os.path.basename(m) == prog
    names = names_of(binary, sorted({o for fr in samples for m, o in fr if mine(m)}))
    if keep:
        samples = [fr for fr in samples
                   if any(mine(m) and keep in names[o][:2] for m, o in fr)]
    total = max(len(samples), 1)
    where, self_, incl, lines = (collections.Counter() for _ in range(4))
    for fr in samples:
        if not fr:
            continue
        seen, innermost = set(), None
        for m, o in fr:
            if mine(m):
                outer, inner, _ = names[o]
                innermost = innermost or inner
                for f in (outer, inner):
                    if f not in seen:
                        seen.add(f)
                        incl[f] += 1
        m0, o0 = fr[0]
        where[os.path.basename(m0)] += 1
        if mine(m0):
            outer, inner, line = names[o0]
            self_[inner if inner == outer else '%s [in %s]' % (inner, outer)] += 1
            lines['%s %s' % (inner, line)] += 1
        else:
            self_['%s -> %s' % (innermost or '?', os.path.basename(m0))] += 1
    print('samples %d%s' % (len(samples), ' holding ' + keep if keep else ''))
    for title, counter, n in (('module', where, 10), ('self', self_, 40),
                              ('inclusive', incl, 60), ('lines', lines, 40)):
        print('\n-- %s' % title)
        for k, v in counter.most_common(n):
            print('%7d %5.1f%%  %s' % (v, 100.0 * v / total, k))


if __name__ == '__main__':
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
