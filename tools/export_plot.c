/* A trace as a picture: spool_plot.py (matplotlib) draws the live bytes per stream and in
 * total, the heap's reserved bytes (its chunks) and the idle ones (reserved less live) over time,
 * from lines of `time_s,stream,stream_live,total_live,reserved,event` that this file writes,
 * with out-of-memory failures and trims marked. */
#define _POSIX_C_SOURCE 200809L /* fdopen */
#include "export.h"

#include <inttypes.h>
#include <stdio.h>

#include <spool/spool.h>

#include "helper.h"
#include "u64map.h"

typedef struct level {
  uint64_t total, reserved; /* live bytes, the heap's chunks */
} level;

static void point(FILE *out, const tf_event *e, uint64_t stream, uint64_t stream_live,
                  const level *l, const char *what) {
  fprintf(out, "%.9f,0x%" PRIx64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%s\n",
          (double)e->time_ns / 1e9, stream, stream_live, l->total, l->reserved, what);
}

/* Events that change no stream's live bytes: 1 when e was one (and is drawn). */
static int other_point(FILE *out, const tf_event *e, level *l) {
  if (e->kind == SPOOL_TRACE_ALLOC && e->status == SPOOL_ERR_OOM) {
    point(out, e, e->stream, 0, l, "oom");
  } else if (e->kind == SPOOL_TRACE_TRIM) {
    point(out, e, 0, 0, l, "trim");
  } else if (e->kind == SPOOL_TRACE_CHUNK_ALLOC || e->kind == SPOOL_TRACE_CHUNK_FREE) {
    if (e->kind == SPOOL_TRACE_CHUNK_ALLOC) l->reserved += e->size;
    else l->reserved -= e->size < l->reserved ? e->size : l->reserved;
    point(out, e, 0, 0, l, "chunk");
  } else {
    return 0;
  }
  return 1;
}

static void write_points(const tf_trace *t, FILE *out) {
  u64map live = {0}, per_stream = {0}; /* ptr -> alloc index; stream + 1 -> its live bytes */
  uint64_t at, now;
  level l = {0, 0};
  fprintf(out, "time_s,stream,stream_live,total_live,reserved,event\n");
  for (size_t i = 0; i < t->n; i++) {
    const tf_event *e = &t->ev[i], *a = e;
    int64_t delta = 0;
    if (e->kind == SPOOL_TRACE_ALLOC && e->status == SPOOL_OK) {
      (void)u64map_put(&live, e->ptr, i);
      delta = (int64_t)e->size;
    } else if (e->kind == SPOOL_TRACE_FREE && e->status == SPOOL_OK &&
               u64map_get(&live, e->ptr, &at)) {
      a = &t->ev[at];
      u64map_del(&live, e->ptr);
      delta = -(int64_t)a->size;
    } else {
      (void)other_point(out, e, &l);
      continue;
    }
    now = 0;
    (void)u64map_get(&per_stream, a->stream + 1, &now);
    now = (uint64_t)((int64_t)now + delta);
    (void)u64map_put(&per_stream, a->stream + 1, now);
    l.total = (uint64_t)((int64_t)l.total + delta);
    point(out, e, a->stream, now, &l, delta > 0 ? "alloc" : "free");
  }
  u64map_free(&live);
  u64map_free(&per_stream);
}

int tf_export_plot(const tf_trace *t, const char *out, char err[TF_ERR]) {
  const char *args[] = {out};
  return tool_helper_feed("spool_plot.py", args, 1, t, write_points, out, "drawing the picture",
                          err);
}
