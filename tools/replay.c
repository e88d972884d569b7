/* The replay walks the trace in seq order, one thread, making each recorded call on the stream
 * that stands for the recorded one: what was ordered on one stream stays ordered, and the pool
 * sees the streams it saw. Kernels are not replayed, so every stream's work is done at once; an
 * allocation the recording could not satisfy but the replay can is freed at once, as the
 * program went on without it. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <spool/spool.h>

#include "trace_stats.h"
#include "u64map.h"

typedef struct rp_stream {
  uint64_t stream, thread; /* as recorded */
  cudaStream_t s;
} rp_stream;

typedef struct rp_live {
  void *p;
  cudaStream_t s;
  uint64_t next_free; /* a free slot: the next free one, plus 1 */
} rp_live;

typedef struct rp {
  spool_pool *pool;
  rp_stream *streams;
  size_t nstreams, streams_cap;
  u64map live; /* recorded ptr -> slot + 1 */
  rp_live *slots;
  size_t nslots, slots_cap;
  uint64_t free_head; /* slot + 1, 0: none */
  u64map failed; /* recorded ptrs whose replayed allocation failed */
  uint64_t ns;
  rp_result *r;
  char *err;
} rp;

static int fail(rp *x, const char *what, const char *detail) {
  snprintf(x->err, TF_ERR, "%s: %s", what, detail);
  return -1;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The stream standing for the recorded one; NULL when none can be made (err set). */
static cudaStream_t stream_for(rp *x, const tf_event *e, uint64_t stream) {
  uint64_t thread = stream == TS_PER_THREAD_STREAM ? e->thread : 0;
  for (size_t i = 0; i < x->nstreams; i++)
    if (x->streams[i].stream == stream && x->streams[i].thread == thread)
      return x->streams[i].s;
  if (x->nstreams == x->streams_cap) {
    size_t cap = x->streams_cap ? x->streams_cap * 2 : 16;
    rp_stream *s = realloc(x->streams, cap * sizeof *s);
    if (!s) return fail(x, "replay", "no memory for the streams"), NULL;
    x->streams = s;
    x->streams_cap = cap;
  }
  cudaStream_t s = NULL;
  cudaError_t ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (ce != cudaSuccess) return fail(x, "cudaStreamCreateWithFlags", cudaGetErrorName(ce)), NULL;
  x->streams[x->nstreams++] = (rp_stream){stream, thread, s};
  return s;
}

static int keep(rp *x, uint64_t ptr, void *p, cudaStream_t s) {
  uint64_t slot;
  if (x->free_head) {
    slot = x->free_head - 1;
    x->free_head = x->slots[slot].next_free;
  } else {
    if (x->nslots == x->slots_cap) {
      size_t cap = x->slots_cap ? x->slots_cap * 2 : 1024;
      rp_live *l = realloc(x->slots, cap * sizeof *l);
      if (!l) return fail(x, "replay", "no memory for the live buffers");
      x->slots = l;
      x->slots_cap = cap;
    }
    slot = x->nslots++;
  }
  x->slots[slot] = (rp_live){p, s, 0};
  if (!u64map_put(&x->live, ptr, slot + 1)) return fail(x, "replay", "no memory");
  return 0;
}

/* Counts one spool call begun at t0 and returns its status. */
static spool_status tally(rp *x, uint64_t t0, spool_status s) {
  x->ns += now_ns() - t0;
  x->r->ops++;
  return s;
}

static int on_alloc(rp *x, const tf_event *e) {
  if (e->status != SPOOL_OK && e->status != SPOOL_ERR_OOM) return 0; /* a refused call */
  cudaStream_t s = stream_for(x, e, e->stream);
  if (!s) return -1;
  void *p = NULL;
  uint64_t t0 = now_ns();
  spool_status st = tally(x, t0, spool_alloc(x->pool, &p, e->size, s));
  if (st != SPOOL_OK) {
    x->r->failed_allocs++;
    x->r->ooms += st == SPOOL_ERR_OOM;
    return u64map_put(&x->failed, e->ptr, 1) ? 0 : fail(x, "replay", "no memory");
  }
  x->r->allocs++;
  if (e->status != SPOOL_OK) { /* the recording went on without it */
    t0 = now_ns();
    (void)tally(x, t0, spool_free(x->pool, p, s));
    x->r->frees++;
    return 0;
  }
  u64map_del(&x->failed, e->ptr);
  return keep(x, e->ptr, p, s);
}

static int on_free(rp *x, const tf_event *e) {
  uint64_t slot;
  if (e->status != SPOOL_OK) return 0;
  if (!u64map_get(&x->live, e->ptr, &slot)) {
    x->r->skipped_frees += u64map_del(&x->failed, e->ptr);
    return 0;
  }
  cudaStream_t s = stream_for(x, e, e->stream);
  if (!s) return -1;
  rp_live *l = &x->slots[slot - 1];
  uint64_t t0 = now_ns();
  spool_status st = tally(x, t0, spool_free(x->pool, l->p, s));
  if (st != SPOOL_OK) return fail(x, "spool_free", spool_last_error());
  x->r->frees++;
  u64map_del(&x->live, e->ptr);
  l->next_free = x->free_head;
  x->free_head = slot;
  return 0;
}

static int on_record_stream(rp *x, const tf_event *e) {
  uint64_t slot;
  if (e->status != SPOOL_OK || !u64map_get(&x->live, e->ptr, &slot)) return 0;
  cudaStream_t s = stream_for(x, e, e->stream);
  if (!s) return -1;
  uint64_t t0 = now_ns();
  spool_status st = tally(x, t0, spool_record_stream(x->pool, x->slots[slot - 1].p, s));
  return st == SPOOL_OK ? 0 : fail(x, "spool_record_stream", spool_last_error());
}

static int on_trim(rp *x, const tf_event *e) {
  uint64_t t0 = now_ns();
  spool_status st = tally(x, t0, spool_trim(x->pool, e->size));
  return st == SPOOL_OK ? 0 : fail(x, "spool_trim", spool_last_error());
}

static int on_release(rp *x, const tf_event *e) {
  cudaStream_t s = stream_for(x, e, e->stream);
  if (!s) return -1;
  uint64_t t0 = now_ns();
  spool_status st = tally(x, t0, spool_stream_release(x->pool, s));
  return st == SPOOL_OK ? 0 : fail(x, "spool_stream_release", spool_last_error());
}

static int on_event(rp *x, const tf_event *e) {
  switch (e->kind) {
  case SPOOL_TRACE_ALLOC: return on_alloc(x, e);
  case SPOOL_TRACE_FREE: return on_free(x, e);
  case SPOOL_TRACE_RECORD_STREAM: return on_record_stream(x, e);
  case SPOOL_TRACE_TRIM: return on_trim(x, e);
  case SPOOL_TRACE_STREAM_RELEASE: return on_release(x, e);
  default: return 0; /* scopes are in the trace as their chunks' allocations and frees */
  }
}

static void figures(rp *x) {
  spool_stats st;
  if (spool_stats_get(x->pool, &st) != SPOOL_OK) return;
  rp_result *r = x->r;
  r->peak_live = st.bytes_in_use_peak;
  r->peak_reserved = st.bytes_reserved_peak;
  r->hits = st.cache_hits;
  r->misses = st.cache_misses;
  r->hit_rate = r->hits + r->misses ? (double)r->hits / (double)(r->hits + r->misses) : 0;
  r->reserved_over_live = r->peak_live ? (double)r->peak_reserved / (double)r->peak_live : 0;
  r->utilization = r->peak_reserved ? (double)r->peak_live / (double)r->peak_reserved : 0;
  r->ns_per_op = r->ops ? (double)x->ns / (double)r->ops : 0;
}

/* Frees what the recording left live, releases and destroys the streams, destroys the pool. */
static void finish(rp *x) {
  for (size_t i = 0; i < x->live.cap; i++)
    if (x->live.keys[i]) {
      rp_live *l = &x->slots[x->live.vals[i] - 1];
      (void)spool_free(x->pool, l->p, l->s);
    }
  for (size_t i = 0; i < x->nstreams; i++) {
    (void)spool_stream_release(x->pool, x->streams[i].s);
    (void)cudaStreamDestroy(x->streams[i].s);
  }
  (void)spool_pool_destroy(x->pool);
  u64map_free(&x->live);
  u64map_free(&x->failed);
  free(x->slots);
  free(x->streams);
}

static int replay_once(const tf_trace *t, const char *config, int device, rp_result *out,
                       char err[TF_ERR]) {
  memset(out, 0, sizeof *out);
  if (getenv("SPOOL_TRACE") && *getenv("SPOOL_TRACE")) {
    snprintf(err, TF_ERR, "SPOOL_TRACE is set: the replay's pools would trace over it (unset "
             "it)");
    return -1;
  }
  spool_config cfg;
  spool_config_init(&cfg);
  if (config && spool_config_parse(&cfg, config) != SPOOL_OK) {
    snprintf(err, TF_ERR, "--config '%s': %s", config, spool_last_error());
    return -1;
  }
  cfg.trace[0] = '\0';
  cfg.device = device;
  rp x = {.r = out, .err = err};
  if (spool_pool_create(&x.pool, &cfg) != SPOOL_OK) {
    snprintf(err, TF_ERR, "--config '%s': %s", config ? config : "", spool_last_error());
    return -1;
  }
  int rc = 0;
  for (size_t i = 0; i < t->n && rc == 0; i++) rc = on_event(&x, &t->ev[i]);
  if (rc == 0) figures(&x);
  finish(&x);
  return rc;
}

int rp_run(const tf_trace *t, const char *config, int device, rp_result *out,
           char err[TF_ERR]) {
  /* A process's first replay pays CUDA's first costs (module loading, the first streams, the
   * first mapping of device memory): tens of microseconds a call that no config deserves. */
  static bool warmed;
  if (!warmed) {
    warmed = true;
    if (replay_once(t, config, device, out, err) != 0) return -1;
  }
  return replay_once(t, config, device, out, err);
}
