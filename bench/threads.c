/* Threads workload (see threads.h). Threads are created first and wait at a gate; only when all
 * exist does the rep barrier get its count and the gate open, so that a failed pthread_create
 * cannot leave the others waiting at a barrier forever. A thread that fails goes on meeting the
 * barriers (doing no work) for the same reason. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */

#include "threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "loops.h"

typedef struct shared {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int gate; /* 0 closed, 1 go, -1 abort */
  pthread_barrier_t bar;
  atomic_bool failed;
} shared;

typedef struct worker {
  allocator *a;
  const threads_plan *pl;
  shared *sh;
  int t;
  double *start, *end; /* [reps] */
  live_count live;
} worker;

static int wait_gate(shared *sh) {
  pthread_mutex_lock(&sh->mu);
  while (sh->gate == 0) pthread_cond_wait(&sh->cv, &sh->mu);
  const int g = sh->gate;
  pthread_mutex_unlock(&sh->mu);
  return g;
}

static void open_gate(shared *sh, int g) {
  pthread_mutex_lock(&sh->mu);
  sh->gate = g;
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->mu);
}

static bool warm_up(worker *w, const pairs_plan *pp) {
  pairs_plan warm = *pp;
  warm.n = w->pl->warmup;
  double ns = 0;
  return bench_cuda_ok(cudaSetDevice(w->pl->device), "cudaSetDevice", __FILE__, __LINE__) &&
         loop_pairs(w->a, &warm, &w->live, &ns);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  const threads_plan *pl = w->pl;
  if (wait_gate(w->sh) < 0) return NULL;
  bench_context(pl->workload, pl->strategy);
  const pairs_plan pp = {pl->sizes + (size_t)w->t * (size_t)pl->slice, pl->pairs,
                         &pl->streams[w->t], 1, BENCH_THREAD_SYNC, false};
  bool ok = warm_up(w, &pp);
  if (!ok) atomic_store(&w->sh->failed, true);
  for (int r = 0; r < pl->reps; ++r) {
    pthread_barrier_wait(&w->sh->bar);
    if (atomic_load(&w->sh->failed)) continue;
    double ns = 0;
    w->start[r] = bench_now_ns();
    ok = loop_pairs(w->a, &pp, &w->live, &ns);
    w->end[r] = bench_now_ns();
    if (!ok) atomic_store(&w->sh->failed, true);
  }
  bench_context(NULL, NULL);
  return NULL;
}

/* Creates the threads behind the gate; opens it (go or abort) and joins them. */
static bool start_and_join(worker *w, int n, shared *sh) {
  pthread_t *tid = calloc((size_t)n, sizeof *tid);
  if (tid == NULL) return bench_fail("out of host memory for %d threads", n);
  int made = 0;
  for (; made < n; ++made)
    if (pthread_create(&tid[made], NULL, worker_main, &w[made]) != 0) break;
  const bool all = made == n;
  if (all) pthread_barrier_init(&sh->bar, NULL, (unsigned)n);
  open_gate(sh, all ? 1 : -1);
  for (int i = 0; i < made; ++i) pthread_join(tid[i], NULL);
  if (all) pthread_barrier_destroy(&sh->bar);
  free(tid);
  return all ? true : bench_fail("pthread_create failed for thread %d of %d", made + 1, n);
}

/* Rep r's wall time: earliest start to latest end over the threads. */
static double rep_wall(const worker *w, int n, int r) {
  double t0 = w[0].start[r], t1 = w[0].end[r];
  for (int i = 1; i < n; ++i) {
    t0 = w[i].start[r] < t0 ? w[i].start[r] : t0;
    t1 = w[i].end[r] > t1 ? w[i].end[r] : t1;
  }
  return t1 - t0;
}

bool threads_run(allocator *a, const threads_plan *pl, int nthreads, double *rep_ns,
                 uint64_t *live_high) {
  worker *w = calloc((size_t)nthreads, sizeof *w);
  double *times = calloc(2 * (size_t)nthreads * (size_t)pl->reps, sizeof *times);
  shared sh;
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.mu, NULL);
  pthread_cond_init(&sh.cv, NULL);
  atomic_init(&sh.failed, false);
  bool ok = w != NULL && times != NULL;
  if (!ok) bench_fail("out of host memory for %d threads", nthreads);
  for (int i = 0; ok && i < nthreads; ++i) {
    w[i] = (worker){a, pl, &sh, i, times + 2 * i * pl->reps, times + (2 * i + 1) * pl->reps,
                    {0, 0}};
  }
  ok = ok && start_and_join(w, nthreads, &sh) && !atomic_load(&sh.failed);
  *live_high = 0;
  for (int r = 0; ok && r < pl->reps; ++r) rep_ns[r] = rep_wall(w, nthreads, r);
  for (int i = 0; ok && i < nthreads; ++i) *live_high += w[i].live.high;
  pthread_cond_destroy(&sh.cv);
  pthread_mutex_destroy(&sh.mu);
  free(times);
  free(w);
  return ok;
}
