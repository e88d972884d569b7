/* Workload table, run lengths and sequence generation (see workload.h). */
#include "workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* name, what, kind, kernels, fixed, lo, hi, streams, slow_div */
const workload WORKLOADS[WL_COUNT] = {
    {"1mib", "1 MiB every pair, no kernel", KIND_PAIRS, false, MIB, 0, 0, BENCH_STREAMS, 1},
    {"64mib", "64 MiB every pair, no kernel", KIND_PAIRS, false, 64 * MIB, 0, 0, BENCH_STREAMS,
     10},
    {"random", "log-uniform 256 B..32 MiB, no kernel", KIND_PAIRS, false, 0, 256, 32 * MIB,
     BENCH_STREAMS, 1},
    /* random's sequence on twice the streams: what an allocator that keeps its free memory per
     * stream reserves when one temporary at a time visits 8 of them. */
    {"single8", "random on 8 streams: one temporary live at a time, no kernel", KIND_PAIRS, false,
     0, 256, 32 * MIB, 8, 1},
    {"1mib+k", "1 MiB every pair, a kernel per buffer", KIND_PAIRS, true, MIB, 0, 0,
     BENCH_STREAMS, 1},
    {"64mib+k", "64 MiB every pair, a kernel per buffer", KIND_PAIRS, true, 64 * MIB, 0, 0,
     BENCH_STREAMS, 10},
    {"random+k", "log-uniform 256 B..32 MiB, a kernel per buffer", KIND_PAIRS, true, 0, 256,
     32 * MIB, BENCH_STREAMS, 1},
    {"pipeline", "five-kernel 3840x2160 image pipeline, 5 temporaries per frame", KIND_PIPELINE,
     true, 0, 0, 0, BENCH_STREAMS, 1},
    {"churn", "live buffers log-uniform 256 B..32 MiB: free a random one, allocate a new one",
     KIND_CHURN, false, 0, 256, 32 * MIB, BENCH_STREAMS, 1},
    {"threads", "host threads, each on its own stream, 4..32 KiB log-uniform, no kernel",
     KIND_THREADS, false, 0, 4 * KIB, 32 * KIB, 0, 4},
};

int workload_find(const char *name) {
  for (int i = 0; i < WL_COUNT; ++i)
    if (strcmp(WORKLOADS[i].name, name) == 0) return i;
  return -1;
}

/* Budgeted for well under 5 minutes on an H200 (docs/benchmarks.md has the sums); --quick is a
 * smoke run that only shows everything works. */
void counts_init(counts *c, bool quick) {
  const long div = quick ? 20 : 1;
  c->pairs = 20000 / div;
  c->pairs_warmup = 5000 / div;
  c->frames = quick ? 16 : 240;
  c->frames_warmup = quick ? 8 : 16;
  c->frame_group = 8;
  c->width = 3840;
  c->height = 2160;
  c->churn_live = quick ? 200 : 2000;
  c->churn_steps = 10000 / div;
  c->churn_warmup = 2000 / div;
  c->thread_pairs = 20000 / div;
  c->thread_warmup = 2000 / div;
}

/* ---- random numbers -------------------------------------------------------------------------- */

/* splitmix64: small, fast, and the same sequence on every machine. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Uniform in [0, 1), from the top 53 bits. */
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* Log-uniform in [lo, hi]: every power of two in the range is as likely as the next. */
static size_t log_uniform(uint64_t *s, size_t lo, size_t hi) {
  const double a = log2((double)lo), b = log2((double)hi);
  const size_t v = (size_t)exp2(a + rng_unit(s) * (b - a));
  return v < lo ? lo : v > hi ? hi : v;
}

/* ---- sequences ------------------------------------------------------------------------------- */

size_t *sequence_sizes(const workload *w, long n, uint64_t seed) {
  size_t *v = malloc((size_t)n * sizeof *v);
  if (v == NULL) {
    bench_fail("out of host memory for %ld sizes", n);
    return NULL;
  }
  uint64_t s = seed;
  for (long i = 0; i < n; ++i) v[i] = w->fixed != 0 ? w->fixed : log_uniform(&s, w->lo, w->hi);
  return v;
}

bool churn_seq_make(churn_seq *q, const workload *w, long live, long steps, uint64_t seed) {
  memset(q, 0, sizeof *q);
  q->live = live;
  q->steps = steps;
  q->init = malloc((size_t)live * sizeof *q->init);
  q->slot = malloc((size_t)steps * sizeof *q->slot);
  q->size = malloc((size_t)steps * sizeof *q->size);
  if (q->init == NULL || q->slot == NULL || q->size == NULL) {
    churn_seq_free(q);
    return bench_fail("out of host memory for a churn of %ld steps", steps);
  }
  uint64_t s = seed;
  for (long i = 0; i < live; ++i) q->init[i] = log_uniform(&s, w->lo, w->hi);
  for (long i = 0; i < steps; ++i) {
    q->slot[i] = (uint32_t)(rng_next(&s) % (uint64_t)live);
    q->size[i] = log_uniform(&s, w->lo, w->hi);
  }
  return true;
}

void churn_seq_free(churn_seq *q) {
  free(q->init);
  free(q->slot);
  free(q->size);
  memset(q, 0, sizeof *q);
}

size_t sequence_max(const size_t *sizes, long n) {
  size_t m = 0;
  for (long i = 0; i < n; ++i) m = sizes[i] > m ? sizes[i] : m;
  return m;
}
