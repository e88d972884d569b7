/* The workloads, how long each runs, and the sequences they replay.
 *
 * Every sequence (sizes, churn victims) is generated once per run from a fixed seed before any
 * strategy runs, so every strategy replays exactly the same one. */
#ifndef SPOOL_BENCH_WORKLOAD_H
#define SPOOL_BENCH_WORKLOAD_H

#include "common.h"

/* The method of the reference numbers, which these reproduce so that numbers compare. */
enum {
  BENCH_STREAMS = 4,       /* the reference method's streams, which most workloads use */
  BENCH_MAX_STREAMS = 8,   /* the most any workload's `streams` asks for */
  BENCH_SYNC_ROUNDS = 50,  /* pairs: every stream synchronized every 50 rounds (a pair each) */
  BENCH_CHURN_SYNC = 1000, /* churn: every stream synchronized every 1,000 steps */
  BENCH_THREAD_SYNC = 64,  /* threads: each thread synchronizes its stream every 64 pairs */
  BENCH_MAX_THREADS = 64,
};

#define BENCH_SEED UINT64_C(0x5b0015eed) /* every sequence derives from it */

typedef enum workload_kind {
  KIND_PAIRS,    /* alloc (+ a kernel on the buffer) + free, one pair per iteration */
  KIND_PIPELINE, /* the five-kernel image pipeline, a frame per iteration */
  KIND_CHURN,    /* free a random live buffer, allocate a new one, a step per iteration */
  KIND_THREADS,  /* host threads each on its own stream, a pair per iteration */
} workload_kind;

typedef enum workload_id {
  WL_1MIB,
  WL_64MIB,
  WL_RANDOM,
  WL_SINGLE8,
  WL_1MIB_K,
  WL_64MIB_K,
  WL_RANDOM_K,
  WL_PIPELINE,
  WL_CHURN,
  WL_THREADS,
  WL_COUNT
} workload_id;

typedef struct workload {
  const char *name; /* --only, table, CSV */
  const char *what; /* one line for --help and the table */
  workload_kind kind;
  bool kernels; /* KIND_PAIRS: a kernel launched on each buffer between alloc and free */
  size_t fixed; /* bytes of every buffer; 0: log-uniform from lo to hi */
  size_t lo, hi;
  /* Non-blocking streams the iterations go round robin over (pairs, pipeline, churn; at most
   * BENCH_MAX_STREAMS); 0 for the threads workload, whose threads each have their own. */
  int streams;
  /* Slow strategies (cudaMalloc, ~150 us a pair at 64 MiB) run a 1/slow_div share of the pairs
   * where that share is the same workload: fixed sizes, or the threads' i.i.d. small sizes. */
  int slow_div;
} workload;

extern const workload WORKLOADS[WL_COUNT];

/* Looks a workload up by name; -1 if there is none. */
int workload_find(const char *name);

/* How much each workload runs: the full run, or --quick (a smoke run of a few seconds). */
typedef struct counts {
  long pairs, pairs_warmup;       /* KIND_PAIRS: per rep, and before the first rep */
  int frames, frames_warmup;      /* KIND_PIPELINE: per rep, and before the first rep */
  int frame_group;                /* frames queued between two synchronizes */
  int width, height;              /* frame size */
  long churn_live;                /* buffers live at every step */
  long churn_steps, churn_warmup; /* per rep, and before the first rep */
  long thread_pairs;              /* KIND_THREADS: per thread per rep ... */
  long thread_warmup;             /* ... and per thread before the first rep */
} counts;

void counts_init(counts *c, bool quick);

/* n sizes for w (its fixed size, or log-uniform from its range) from seed; malloc'd, the caller
 * frees. NULL (with a message) when the host is out of memory. */
size_t *sequence_sizes(const workload *w, long n, uint64_t seed);

/* Churn: `live` buffers made first, then per step the slot to free and the size to allocate
 * in its place. */
typedef struct churn_seq {
  long live, steps;
  size_t *init;    /* [live] */
  uint32_t *slot;  /* [steps] */
  size_t *size;    /* [steps] */
} churn_seq;

bool churn_seq_make(churn_seq *q, const workload *w, long live, long steps, uint64_t seed);
void churn_seq_free(churn_seq *q);

/* Largest value of sizes[0..n). */
size_t sequence_max(const size_t *sizes, long n);

#endif /* SPOOL_BENCH_WORKLOAD_H */
