#!/usr/bin/env python3
"""timers: a copy of spool's tree whose heap functions count their own time, to see where a
workload's time goes on a real host (cudasim's instruction counts miss the driver's costs and
the CPU's cache misses).

    python3 scripts/timers.py DIR      DIR: a copy of the tree (it is changed in place)

Each function named in `targets` becomes a wrapper that reads the CPU's time stamp counter
around the original (renamed NAME__body) and adds to a counter; src/prof_report.c, added to
the library's sources, prints calls, total ms and ns per call of each at process exit. The
wrapper itself costs about 30 ns a call on an H200 host (two rdtsc), which the ns per call
include. Only the measured reps are counted (spool_bench's warm-up, fill and drain are
left out: the copy's bench/measure.c marks where the reps begin and end). Never built into spool: `bash scripts/gpu-lease timers` makes the copy, builds
spool_bench from it and runs churn and 1mib.
"""
import re, sys, os
root = sys.argv[1]
targets = {
 'src/heap.c': ['spool__alloc_site', 'spool__free_site', 'miss', 'to_heap', 'new_chunk', 'adopt_locked',
                'free_live_slow'],
 'src/chunks.c': ['spool__heap_fence_now', 'spool__heap_fit', 'spool__chunk_get', 'spool__chunk_put',
                  'spool__heap_idle', 'spool__heap_publish_ready', 'spool__heap_release', 'spool__heap_add_chunk',
                  'bins_fit', 'carve', 'spool__heap_stream_op'],
 'src/track.c': ['spool__index_insert', 'spool__index_remove'],
 'src/capture.c': ['spool__event_done_quiet', 'spool__event_record_quiet'],
 'src/front.c': ['spool__front_bury', 'spool__front_spill', 'spool__front_spill_below'],
}
names = [n for f in targets for n in targets[f]]
hdr = '''
#include <x86intrin.h>
extern unsigned long long spool_prof_cyc[64], spool_prof_n[64];
'''
for f, fns in targets.items():
    p = os.path.join(root, f); s = open(p).read()
    for fn in fns:
        idx = names.index(fn)
        m = re.search(r'^((?:static )?(?:SPOOL__NOINLINE )?(?:inline )?[\w ]+?\*?\s*)\b' + fn + r'\((.*?)\)\s*\{', s, re.S | re.M)
        if not m: print("miss", fn); continue
        ret = m.group(1); params = m.group(2)
        start = m.start()
        # find function end: matching brace
        i = m.end() - 1; depth = 0
        while True:
            if s[i] == '{': depth += 1
            elif s[i] == '}':
                depth -= 1
                if depth == 0: break
            i += 1
        end = i + 1
        body = s[start:end].replace(fn + '(', fn + '__body(', 1)
        body = 'static ' + body.replace('static ', '', 1) if not ret.strip().startswith('static') else body
        argnames = []
        for prm in params.split(','):
            prm = prm.strip()
            mm = re.search(r'(\w+)\s*(\[\])?$', prm)
            argnames.append(mm.group(1))
        isvoid = re.search(r'\bvoid\s*$', ret.replace('static','').replace('SPOOL__NOINLINE','').replace('inline','').strip()) and '*' not in ret
        call = fn + '__body(' + ', '.join(argnames) + ')'
        sig = ret + fn + '(' + params + ')'
        if isvoid:
            wrap = sig + ' {\n  unsigned long long t0 = __rdtsc();\n  ' + call + ';\n  spool_prof_cyc[%d] += __rdtsc() - t0; spool_prof_n[%d]++;\n}\n' % (idx, idx)
        else:
            rt = ret.replace('static','').replace('SPOOL__NOINLINE','').replace('inline','').strip()
            wrap = sig + ' {\n  unsigned long long t0 = __rdtsc();\n  ' + rt + ' r = ' + call + ';\n  spool_prof_cyc[%d] += __rdtsc() - t0; spool_prof_n[%d]++;\n  return r;\n}\n' % (idx, idx)
        s = s[:start] + body + '\n' + wrap + s[end:]
    # header after the last #include line
    inc = list(re.finditer(r'^#include .*$', s, re.M))[-1]
    s = s[:inc.end()] + hdr + s[inc.end():]
    open(p, 'w').write(s)
# the counters and their report
rep = '''#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>
unsigned long long spool_prof_cyc[64], spool_prof_n[64];
static unsigned long long snap_cyc[64], snap_n[64];
static int snapped;
static const char *names[] = {%s};
/* 0: the reps begin (counters cleared); 1: they ended (counters kept for the report) */
void spool_prof_mark(int end) {
  for (int i = 0; i < 64; i++) {
    if (end) { snap_cyc[i] += spool_prof_cyc[i]; snap_n[i] += spool_prof_n[i]; }
    spool_prof_cyc[i] = spool_prof_n[i] = 0;
  }
  if (end) snapped = 1;
}
static unsigned long long t0c; static struct timespec t0w;
__attribute__((constructor)) static void prof_start(void) { t0c = __rdtsc(); clock_gettime(CLOCK_MONOTONIC, &t0w); }
__attribute__((destructor)) static void prof_report(void) {
  struct timespec w; clock_gettime(CLOCK_MONOTONIC, &w); unsigned long long c = __rdtsc();
  double ns = (w.tv_sec - t0w.tv_sec) * 1e9 + (w.tv_nsec - t0w.tv_nsec), ghz = (c - t0c) / ns;
  fprintf(stderr, "prof: tsc %%.3f GHz%%s\\n", ghz, snapped ? ", the measured reps only" : "");
  if (snapped) for (int i = 0; i < 64; i++) { spool_prof_cyc[i] = snap_cyc[i]; spool_prof_n[i] = snap_n[i]; }
  for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
    if (spool_prof_n[i]) fprintf(stderr, "prof: %%-28s %%10llu calls %%12.1f ms %%8.1f ns/call\\n", names[i], spool_prof_n[i], spool_prof_cyc[i] / ghz / 1e6, spool_prof_cyc[i] / ghz / spool_prof_n[i]);
}
''' % ', '.join('"%s"' % n for n in names)
open(os.path.join(root, 'src/prof_report.c'), 'w').write(rep)
# the bench marks its measured reps (churn and pairs)
mp = os.path.join(root, 'bench/measure.c')
m = open(mp).read()
m = m.replace('static bool body_pairs(', 'void spool_prof_mark(int end) __attribute__((weak));\n'
              '#define MARK(e) do { if (spool_prof_mark) spool_prof_mark(e); } while (0)\n'
              'static bool body_pairs(', 1)
for loop in ['  for (int r = 0; r < e->o->reps; ++r) {\n    if (!loop_pairs(',
             '  for (int r = 0; ok && r < e->o->reps; ++r) {\n    const long first = c->churn_warmup']:
    if loop not in m: sys.exit('timers: bench/measure.c has no reps loop ' + loop[:60])
    m = m.replace(loop, '  MARK(0);\n' + loop, 1)
for after in ['  res->iters = n;\n  return true;\n}\n\nstatic bool body_pipeline',
              '  ok = churn_drain(a, &sl, live) && ok;']:
    if after not in m: sys.exit('timers: bench/measure.c has no end of reps ' + after[:40])
    m = m.replace(after, '  MARK(1);\n' + after, 1)
open(mp, 'w').write(m)
cm = os.path.join(root, 'CMakeLists.txt')
text = open(cm).read()
if 'src/prof_report.c' not in text:
    text = text.replace(' src/version.c ', ' src/version.c src/prof_report.c ', 1)
    if 'src/prof_report.c' not in text:
        sys.exit('timers: no src/version.c in CMakeLists.txt to add src/prof_report.c beside')
    open(cm, 'w').write(text)
