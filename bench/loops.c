/* The pairs and churn loops (see loops.h). Counters count down instead of taking a remainder
 * per iteration: a division would cost the baseline and every strategy a few ns alike, which
 * only adds noise to figures of tens of ns. */
#include "loops.h"

#include <stdlib.h>

#include "kernels.h"

bool sync_streams(const cudaStream_t *streams, int n) {
  for (int i = 0; i < n; ++i) CUDA_TRY(cudaStreamSynchronize(streams[i]));
  return true;
}

/* One pair; the buffer is freed even when its kernel failed to launch. */
static inline bool one_pair(allocator *a, size_t n, cudaStream_t s, bool touch,
                            live_count *live) {
  void *p = NULL;
  if (!a->alloc(a, &p, n, s)) return false;
  live_add(live, n);
  const bool ok = !touch || bench_cuda_ok(bench_touch(p, n, s), "launch of touch", __FILE__,
                                          __LINE__);
  live_sub(live, n);
  return a->free(a, p, s) && ok;
}

bool loop_pairs(allocator *a, const pairs_plan *pl, live_count *live, double *ns) {
  const long per_sync = (long)pl->nstreams * pl->sync_rounds;
  long to_sync = per_sync;
  int k = 0;
  const double t0 = bench_now_ns();
  for (long i = 0; i < pl->n; ++i) {
    if (!one_pair(a, pl->sizes[i], pl->streams[k], pl->touch, live)) return false;
    if (++k == pl->nstreams) k = 0;
    if (--to_sync == 0) {
      if (!sync_streams(pl->streams, pl->nstreams)) return false;
      to_sync = per_sync;
    }
  }
  if (!sync_streams(pl->streams, pl->nstreams)) return false;
  *ns = bench_now_ns() - t0;
  return true;
}

/* ---- churn ----------------------------------------------------------------------------------- */

bool churn_fill(allocator *a, const churn_seq *q, const cudaStream_t *streams, int nstreams,
                churn_slots *sl, live_count *live) {
  sl->streams = streams;
  sl->nstreams = nstreams;
  sl->n = q->live;
  sl->ptr = calloc((size_t)q->live, sizeof *sl->ptr);
  sl->size = calloc((size_t)q->live, sizeof *sl->size);
  sl->stream = calloc((size_t)q->live, sizeof *sl->stream);
  if (sl->ptr == NULL || sl->size == NULL || sl->stream == NULL)
    return bench_fail("out of host memory for %ld churn slots", q->live);
  for (long i = 0; i < q->live; ++i) {
    const int k = (int)(i % nstreams);
    if (!a->alloc(a, &sl->ptr[i], q->init[i], streams[k])) return false;
    sl->size[i] = q->init[i];
    sl->stream[i] = k;
    live_add(live, q->init[i]);
  }
  return sync_streams(streams, nstreams);
}

/* Replaces slot j's buffer. The old one is freed on its own stream (where its allocation was
 * ordered), the new one allocated on stream k; a failed alloc leaves the slot empty. */
static inline bool churn_step(allocator *a, churn_slots *sl, uint32_t j, size_t n, int k,
                              live_count *live) {
  const cudaStream_t *streams = sl->streams;
  if (!a->free(a, sl->ptr[j], streams[sl->stream[j]])) return false;
  live_sub(live, sl->size[j]);
  sl->ptr[j] = NULL;
  if (!a->alloc(a, &sl->ptr[j], n, streams[k])) return false;
  live_add(live, n);
  sl->size[j] = n;
  sl->stream[j] = k;
  return true;
}

bool churn_steps(allocator *a, const churn_seq *q, long first, long count, churn_slots *sl,
                 live_count *live, double *ns) {
  long to_sync = BENCH_CHURN_SYNC;
  const int nstreams = sl->nstreams;
  int k = (int)(first % nstreams);
  const double t0 = bench_now_ns();
  for (long i = first; i < first + count; ++i) {
    if (!churn_step(a, sl, q->slot[i], q->size[i], k, live)) return false;
    if (++k == nstreams) k = 0;
    if (--to_sync == 0) {
      if (!sync_streams(sl->streams, nstreams)) return false;
      to_sync = BENCH_CHURN_SYNC;
    }
  }
  if (!sync_streams(sl->streams, nstreams)) return false;
  *ns = bench_now_ns() - t0;
  return true;
}

bool churn_drain(allocator *a, churn_slots *sl, live_count *live) {
  bool ok = true;
  for (long i = 0; sl->ptr != NULL && i < sl->n; ++i) {
    if (sl->ptr[i] == NULL) continue;
    ok = a->free(a, sl->ptr[i], sl->streams[sl->stream[i]]) && ok;
    live_sub(live, sl->size[i]);
  }
  if (sl->streams != NULL) ok = sync_streams(sl->streams, sl->nstreams) && ok;
  free(sl->ptr);
  free(sl->size);
  free(sl->stream);
  sl->ptr = NULL, sl->size = NULL, sl->stream = NULL, sl->n = 0;
  sl->streams = NULL, sl->nstreams = 0;
  return ok;
}
