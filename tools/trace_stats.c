/* One walk over a trace in seq order, with a table of live buffers keyed by address. A free
 * whose address is not live (a refused free, or one whose allocation came before the trace)
 * counts as a bad free and changes nothing. */
#include "trace_stats.h"

#include <stdlib.h>
#include <string.h>

#include <spool/spool.h>

#include "u64map.h"

#define STATUS_OOM SPOOL_ERR_OOM

unsigned ts_bucket(uint64_t n) {
  unsigned k = 0;
  while (k + 1 < TS_BUCKETS && ((uint64_t)1 << k) < n) k++;
  return k;
}

static unsigned stream_index(ts_stats *s, const tf_event *e) {
  uint64_t thread = e->stream == TS_PER_THREAD_STREAM ? e->thread : 0;
  for (unsigned i = 0; i < s->nstreams && i < TS_STREAMS; i++)
    if (s->streams[i].stream == e->stream && s->streams[i].thread == thread) return i;
  if (s->nstreams < TS_STREAMS) {
    s->streams[s->nstreams] = (ts_stream){.stream = e->stream, .thread = thread};
    return (unsigned)s->nstreams++;
  }
  return TS_STREAMS - 1; /* the last row collects the rest */
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct walk {
  u64map live; /* ptr -> index of its alloc event */
  uint64_t *lives, *samples;
  size_t nlives, nsamples;
  uint64_t live_bytes, live_buffers;
  unsigned streams_live;
  uint64_t chunk_bytes;
} walk;

static void on_alloc(const tf_trace *t, size_t i, ts_stats *s, walk *w) {
  const tf_event *e = &t->ev[i];
  if (e->status != 0) {
    s->failed_allocs++;
    if (e->status == STATUS_OOM) s->ooms++;
    return;
  }
  s->allocs++;
  s->bytes_allocated += e->size;
  s->hist[ts_bucket(e->size)]++;
  if (e->size > s->max_size) s->max_size = e->size;
  if (s->min_size == 0 || e->size < s->min_size) s->min_size = e->size;
  if (e->flags & SPOOL_TRACE_CAPTURING) s->captured++;
  u64map_put(&w->live, e->ptr, i);
  w->live_bytes += e->size;
  w->live_buffers++;
  if (w->live_bytes > s->peak_live_bytes) s->peak_live_bytes = w->live_bytes;
  if (w->live_buffers > s->peak_live_buffers) s->peak_live_buffers = w->live_buffers;
  ts_stream *st = &s->streams[stream_index(s, e)];
  st->allocs++;
  if (st->live++ == 0 && ++w->streams_live > s->peak_streams_live)
    s->peak_streams_live = w->streams_live;
  st->bytes += e->size;
  if (st->live > st->peak_live) st->peak_live = st->live;
  if (st->bytes > st->peak_bytes) st->peak_bytes = st->bytes;
  w->samples[w->nsamples++] = w->live_bytes;
}

static void on_free(const tf_trace *t, const tf_event *e, ts_stats *s, walk *w) {
  uint64_t at;
  if (e->status != 0 || !u64map_get(&w->live, e->ptr, &at)) {
    s->bad_frees++;
    return;
  }
  const tf_event *a = &t->ev[at];
  u64map_del(&w->live, e->ptr);
  s->frees++;
  w->live_bytes -= a->size;
  w->live_buffers--;
  ts_stream *st = &s->streams[stream_index(s, a)];
  st->bytes -= a->size;
  if (--st->live == 0) w->streams_live--;
  w->lives[w->nlives++] = e->time_ns >= a->time_ns ? e->time_ns - a->time_ns : 0;
}

/* Spool sees a capture only in its calls' flags: one begins where a stream's flag comes on. */
static void on_capture_flag(const tf_event *e, ts_stats *s) {
  bool now = (e->flags & SPOOL_TRACE_CAPTURING) != 0;
  ts_stream *st = &s->streams[stream_index(s, e)];
  if (now && !st->capturing) s->captures++;
  st->capturing = now;
}

static void on_event(const tf_trace *t, size_t i, ts_stats *s, walk *w) {
  const tf_event *e = &t->ev[i];
  if (e->kind == SPOOL_TRACE_ALLOC || e->kind == SPOOL_TRACE_FREE) on_capture_flag(e, s);
  switch (e->kind) {
  case SPOOL_TRACE_ALLOC: on_alloc(t, i, s, w); break;
  case SPOOL_TRACE_FREE: on_free(t, e, s, w); break;
  case SPOOL_TRACE_TRIM: s->trims++; break;
  case SPOOL_TRACE_STREAM_RELEASE: s->releases++; break;
  case SPOOL_TRACE_SCOPE_BEGIN: s->scopes++; break;
  case SPOOL_TRACE_RECORD_STREAM: s->handoffs++; break;
  case SPOOL_TRACE_CHUNK_ALLOC:
    s->chunk_allocs++;
    w->chunk_bytes += e->size;
    if (w->chunk_bytes > s->chunk_bytes_peak) s->chunk_bytes_peak = w->chunk_bytes;
    break;
  case SPOOL_TRACE_CHUNK_FREE:
    s->chunk_frees++;
    w->chunk_bytes -= e->size < w->chunk_bytes ? e->size : w->chunk_bytes;
    break;
  default: break;
  }
}

int ts_compute(const tf_trace *t, ts_stats *s, char err[TF_ERR]) {
  memset(s, 0, sizeof *s);
  walk w = {0};
  w.lives = malloc((t->n + 1) * sizeof *w.lives);
  w.samples = malloc((t->n + 1) * sizeof *w.samples);
  if (!w.lives || !w.samples) {
    free(w.lives);
    free(w.samples);
    strcpy(err, "no memory for the trace's statistics");
    return -1;
  }
  s->events = t->n;
  for (size_t i = 0; i < t->n; i++) on_event(t, i, s, &w);
  if (t->n) s->duration_ns = t->ev[t->n - 1].time_ns - t->ev[0].time_ns;
  s->leaks = w.live_buffers;
  s->leak_bytes = w.live_bytes;
  qsort(w.lives, w.nlives, sizeof *w.lives, cmp_u64);
  s->lifetimes = w.nlives;
  if (w.nlives) {
    s->life_p50_ns = w.lives[w.nlives / 2];
    s->life_p90_ns = w.lives[w.nlives * 9 / 10];
    s->life_max_ns = w.lives[w.nlives - 1];
  }
  qsort(w.samples, w.nsamples, sizeof *w.samples, cmp_u64);
  if (w.nsamples) s->steady_live_bytes = w.samples[w.nsamples / 2];
  u64map_free(&w.live);
  free(w.lives);
  free(w.samples);
  return 0;
}
