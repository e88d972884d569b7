/* The timed loops of the pairs and churn workloads (the threads workload runs the pairs loop on
 * each thread). The same code runs every strategy and the no-allocation baseline: only the
 * allocator's two functions differ. */
#ifndef SPOOL_BENCH_LOOPS_H
#define SPOOL_BENCH_LOOPS_H

#include "strategy.h"
#include "workload.h"

/* n pairs of sizes[i] bytes: alloc on streams[i % nstreams], a kernel on the buffer when touch,
 * free on the same stream; every stream synchronized after each sync_rounds rounds (a round is
 * one pair per stream), and all of them at the end. */
typedef struct pairs_plan {
  const size_t *sizes;
  long n;
  const cudaStream_t *streams;
  int nstreams;
  int sync_rounds;
  bool touch;
} pairs_plan;

/* Runs the plan; *ns is the host time from the first alloc to the end of the last synchronize. */
bool loop_pairs(allocator *a, const pairs_plan *pl, live_count *live, double *ns);

/* Synchronizes streams[0..n). */
bool sync_streams(const cudaStream_t *streams, int n);

/* Churn's live buffers: slot i holds ptr[i] of size[i] bytes, allocated on streams[stream[i]],
 * one of the nstreams streams the churn goes round robin over. */
typedef struct churn_slots {
  long n;
  void **ptr;
  size_t *size;
  int *stream;
  const cudaStream_t *streams;
  int nstreams;
} churn_slots;

/* Makes the slots over streams[0..nstreams) and allocates the sequence's first q->live buffers,
 * round robin. */
bool churn_fill(allocator *a, const churn_seq *q, const cudaStream_t *streams, int nstreams,
                churn_slots *sl, live_count *live);

/* Steps [first, first + count) of q: free the slot's buffer on the stream it was allocated on,
 * allocate its successor on stream step % nstreams; every stream synchronized after each
 * BENCH_CHURN_SYNC steps and at the end. *ns: host time of the steps. */
bool churn_steps(allocator *a, const churn_seq *q, long first, long count, churn_slots *sl,
                 live_count *live, double *ns);

/* Frees every live buffer (going on after a failure), synchronizes, releases the slots. */
bool churn_drain(allocator *a, churn_slots *sl, live_count *live);

#endif /* SPOOL_BENCH_LOOPS_H */
