/* The threads workload: several host threads, each on its own non-blocking stream, each running
 * the pairs loop (no kernel, its stream synchronized every BENCH_THREAD_SYNC pairs) on its own
 * slice of the pre-generated sizes. The threads start each rep together at a barrier. */
#ifndef SPOOL_BENCH_THREADS_H
#define SPOOL_BENCH_THREADS_H

#include "strategy.h"
#include "workload.h"

typedef struct threads_plan {
  const size_t *sizes; /* thread t replays sizes[t * slice ...]: warmup pairs once, then ... */
  long slice;
  long warmup;
  long pairs;          /* ... the first `pairs` of its slice in every rep */
  int reps;
  const cudaStream_t *streams; /* one per thread */
  int device;
  const char *workload, *strategy; /* for messages */
} threads_plan;

/* Runs nthreads threads. rep_ns[r]: rep r's wall time, from the earliest thread's start to the
 * latest one's end. *live_high: the sum of the threads' own highest live bytes (an upper bound of
 * the highest total, which the threads would have to share a counter to know exactly). */
bool threads_run(allocator *a, const threads_plan *pl, int nthreads, double *rep_ns,
                 uint64_t *live_high);

#endif /* SPOOL_BENCH_THREADS_H */
