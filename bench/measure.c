/* The runner (see measure.h). */
#include "measure.h"

#include <stdlib.h>
#include <string.h>

#include "loops.h"
#include "pipeline.h"
#include "threads.h"

bool env_open(bench_env *e, const options *o, report *rep) {
  memset(e, 0, sizeof *e);
  e->o = o;
  e->rep = rep;
  counts_init(&e->c, o->quick);
  CUDA_TRY(cudaSetDevice(o->device));
  CUDA_TRY(cudaFree(NULL)); /* the context now, not inside the first measurement */
  for (int i = 0; i < BENCH_MAX_STREAMS; ++i)
    CUDA_TRY(cudaStreamCreateWithFlags(&e->streams[i], cudaStreamNonBlocking));
  int most = 0;
  for (int i = 0; i < o->nthreads; ++i) most = o->threads[i] > most ? o->threads[i] : most;
  for (; e->ntstreams < most; ++e->ntstreams)
    CUDA_TRY(cudaStreamCreateWithFlags(&e->tstreams[e->ntstreams], cudaStreamNonBlocking));
  return true;
}

bool env_close(bench_env *e) {
  bool ok = bench_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__, __LINE__);
  for (int i = 0; i < BENCH_MAX_STREAMS; ++i)
    if (e->streams[i] != NULL)
      ok = bench_cuda_ok(cudaStreamDestroy(e->streams[i]), "cudaStreamDestroy", __FILE__,
                         __LINE__) && ok;
  for (int i = 0; i < e->ntstreams; ++i)
    ok = bench_cuda_ok(cudaStreamDestroy(e->tstreams[i]), "cudaStreamDestroy", __FILE__,
                       __LINE__) && ok;
  memset(e, 0, sizeof *e);
  return ok;
}

/* ---- one workload's inputs, made once and replayed by every strategy ------------------------- */

typedef struct job {
  const workload *wl;
  size_t *sizes; /* pairs: the sequence; threads: one slice per thread */
  long slice;
  churn_seq churn;
  pipeline pipe;
  size_t slot; /* the baseline's buffer size: the largest the workload asks for */
} job;

static bool job_make(bench_env *e, job *j, const workload *wl) {
  const counts *c = &e->c;
  memset(j, 0, sizeof *j);
  j->wl = wl;
  switch (wl->kind) {
  case KIND_PAIRS: { /* random, random+k and single8 replay one sequence (one seed, one range) */
    const long n = c->pairs > c->pairs_warmup ? c->pairs : c->pairs_warmup;
    j->sizes = sequence_sizes(wl, n, BENCH_SEED);
    j->slot = j->sizes != NULL ? sequence_max(j->sizes, n) : 0;
    return j->sizes != NULL;
  }
  case KIND_THREADS:
    j->slice = c->thread_pairs > c->thread_warmup ? c->thread_pairs : c->thread_warmup;
    j->sizes = sequence_sizes(wl, j->slice * e->ntstreams, BENCH_SEED + 1);
    j->slot = wl->hi;
    return j->sizes != NULL;
  case KIND_CHURN:
    j->slot = wl->hi;
    return churn_seq_make(&j->churn, wl, c->churn_live,
                          c->churn_warmup + (long)e->o->reps * c->churn_steps, BENCH_SEED + 2);
  case KIND_PIPELINE:
    j->slot = (size_t)c->width * (size_t)c->height * sizeof(float);
    return pipeline_open(&j->pipe, c->width, c->height, e->streams, wl->streams);
  }
  return false;
}

static bool job_free(job *j) {
  const bool ok = j->wl->kind != KIND_PIPELINE || pipeline_close(&j->pipe);
  free(j->sizes);
  churn_seq_free(&j->churn);
  return ok;
}

/* ---- the timed bodies, one per kind: warm-up, then rep[r] = host ns per iteration ------------ */

/* cudaMalloc runs a share of the pairs where that share is the same workload (workload.h). */
static long share(const allocator *a, const workload *wl, long n) {
  const long m = a->st->slow ? n / wl->slow_div : n;
  return m > 0 ? m : 1;
}

static bool body_pairs(bench_env *e, job *j, allocator *a, result *res, double *rep,
                       live_count *live) {
  const long n = share(a, j->wl, e->c.pairs);
  pairs_plan pl = {j->sizes, share(a, j->wl, e->c.pairs_warmup), e->streams, j->wl->streams,
                   BENCH_SYNC_ROUNDS, j->wl->kernels};
  double ns = 0;
  if (!loop_pairs(a, &pl, live, &ns)) return false;
  pl.n = n;
  for (int r = 0; r < e->o->reps; ++r) {
    if (!loop_pairs(a, &pl, live, &rep[r])) return false;
    rep[r] /= (double)n;
  }
  res->iters = n;
  return true;
}

static bool body_pipeline(bench_env *e, job *j, allocator *a, result *res, double *rep,
                          live_count *live) {
  const counts *c = &e->c;
  double q = 0, w = 0, wall[BENCH_MAX_REPS];
  if (!pipeline_run(a, &j->pipe, 0, c->frames_warmup, c->frame_group, live, &q, &w)) return false;
  for (int r = 0; r < e->o->reps; ++r) {
    const int first = c->frames_warmup + r * c->frames;
    if (!pipeline_run(a, &j->pipe, first, c->frames, c->frame_group, live, &q, &w)) return false;
    rep[r] = q / c->frames;
    wall[r] = w / c->frames;
  }
  res->iters = c->frames;
  res->pairs_per_iter = PIPELINE_PAIRS;
  res->wall_ns = bench_median(wall, e->o->reps);
  return true;
}

static bool body_churn(bench_env *e, job *j, allocator *a, result *res, double *rep,
                       live_count *live) {
  const counts *c = &e->c;
  churn_slots sl;
  memset(&sl, 0, sizeof sl);
  double ns = 0;
  bool ok = churn_fill(a, &j->churn, e->streams, j->wl->streams, &sl, live) &&
            churn_steps(a, &j->churn, 0, c->churn_warmup, &sl, live, &ns);
  for (int r = 0; ok && r < e->o->reps; ++r) {
    const long first = c->churn_warmup + r * c->churn_steps;
    ok = churn_steps(a, &j->churn, first, c->churn_steps, &sl, live, &rep[r]);
    rep[r] /= (double)c->churn_steps;
  }
  ok = churn_drain(a, &sl, live) && ok;
  res->iters = c->churn_steps;
  return ok;
}

static bool body_threads(bench_env *e, job *j, allocator *a, result *res, double *rep,
                         live_count *live) {
  const long n = share(a, j->wl, e->c.thread_pairs);
  const threads_plan pl = {j->sizes, j->slice, share(a, j->wl, e->c.thread_warmup), n,
                           e->o->reps, e->tstreams, e->o->device, j->wl->name, a->st->name};
  if (!threads_run(a, &pl, res->threads, rep, &live->high)) return false;
  for (int r = 0; r < e->o->reps; ++r) rep[r] /= (double)n;
  res->iters = n;
  return true;
}

static bool body(bench_env *e, job *j, allocator *a, result *res, double *rep, live_count *live) {
  switch (j->wl->kind) {
  case KIND_PAIRS: return body_pairs(e, j, a, res, rep, live);
  case KIND_PIPELINE: return body_pipeline(e, j, a, res, rep, live);
  case KIND_CHURN: return body_churn(e, j, a, res, rep, live);
  case KIND_THREADS: return body_threads(e, j, a, res, rep, live);
  }
  return false;
}

/* ---- one strategy ---------------------------------------------------------------------------- */

static void summarize(result *res, double *rep, int reps) {
  res->ns_min = bench_min(rep, reps);
  res->ns_max = bench_max(rep, reps);
  res->ns = bench_median(rep, reps);
}

/* Measures st on j with the given thread count and adds the row; false ends the run. */
static bool run_one(bench_env *e, job *j, strategy_id sid, int threads) {
  const strategy *st = &STRATEGIES[sid];
  result res;
  memset(&res, 0, sizeof res);
  res.wl = j->wl, res.st = st, res.threads = threads, res.reps = e->o->reps;
  res.pairs_per_iter = 1;
  res.conf = sid == ST_SPOOL_TUNED ? e->o->tuned : st->conf;
  if (res.conf != NULL && !strategy_conf_ok(res.conf, res.note, sizeof res.note)) {
    res.skipped = true; /* this spool does not know a key of the text (yet) */
    return report_add(e->rep, &res);
  }
  if (st->usable != NULL && !st->usable(res.note, sizeof res.note)) {
    res.skipped = true; /* e.g. PyTorch chose another backend for this process */
    return report_add(e->rep, &res);
  }
  allocator a;
  strategy_init(&a, st, e->o->device, res.conf, j->slot);
  bench_context(j->wl->name, st->name);
  double rep[BENCH_MAX_REPS];
  live_count live = {0, 0};
  bool ok = st->setup(&a) && st->reset_peaks(&a) && body(e, j, &a, &res, rep, &live) &&
            st->reserved_high(&a, &res.reserved_high);
  if (ok && st->allocated_high != NULL) {
    res.have_allocated = st->allocated_high(&a, &res.allocated_high);
    ok = res.have_allocated;
  }
  if (ok) {
    res.live_high = live.high;
    if (st->live_is_reserved) res.reserved_high = live.high;
    res.have_cache = strategy_cache_stats(&a, &res.cache);
    summarize(&res, rep, e->o->reps);
  }
  ok = st->teardown(&a) && ok;
  bench_context(NULL, NULL);
  return ok && report_add(e->rep, &res);
}

/* The baseline first: every other row is read against it. */
static bool run_all(bench_env *e, job *j, int threads) {
  for (int s = 0; s < ST_COUNT; ++s)
    if (e->o->strategy[s] && !run_one(e, j, (strategy_id)s, threads)) return false;
  return true;
}

bool measure_workload(bench_env *e, workload_id id) {
  const workload *wl = &WORKLOADS[id];
  job j;
  bench_context(wl->name, "setup");
  bool ok = job_make(e, &j, wl);
  bench_context(NULL, NULL);
  if (wl->kind == KIND_THREADS) {
    for (int i = 0; ok && i < e->o->nthreads; ++i) ok = run_all(e, &j, e->o->threads[i]);
  } else {
    ok = ok && run_all(e, &j, 1);
  }
  ok = job_free(&j) && ok;
  report_table(stdout, e->rep, wl, &e->c);
  return ok;
}
