/* A trace as a PyTorch memory snapshot, for PyTorch's memory_viz: the trace's events as RMM's
 * CSV into spool_snapshot.py, which pickles them as a snapshot's device trace. */
#define _POSIX_C_SOURCE 200809L /* fdopen */
#include "export.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <spool/spool.h>

#include "helper.h"
#include "u64map.h"

/* One CSV line per allocation, failed allocation, matched free and heap chunk (as a
 * segment). */
static void write_csv(const tf_trace *t, FILE *out) {
  u64map sizes = {0};
  fprintf(out, "Thread,Time,Action,Pointer,Size,Stream\n");
  for (size_t i = 0; i < t->n; i++) {
    const tf_event *e = &t->ev[i];
    uint64_t size = e->size;
    const char *action = NULL;
    if (e->kind == SPOOL_TRACE_ALLOC && e->status == SPOOL_OK) {
      action = "allocate";
      (void)u64map_put(&sizes, e->ptr, size);
    } else if (e->kind == SPOOL_TRACE_ALLOC && e->status == SPOOL_ERR_OOM) {
      action = "allocate failure";
    } else if (e->kind == SPOOL_TRACE_FREE && e->status == SPOOL_OK &&
               u64map_get(&sizes, e->ptr, &size)) {
      action = "deallocate";
      u64map_del(&sizes, e->ptr);
    } else if (e->kind == SPOOL_TRACE_CHUNK_ALLOC || e->kind == SPOOL_TRACE_CHUNK_FREE) {
      action = e->kind == SPOOL_TRACE_CHUNK_ALLOC ? "segment_alloc" : "segment_free";
    }
    if (action)
      fprintf(out, "%" PRIu64 ",%" PRIu64 ".%06" PRIu64 ",%s,0x%" PRIx64 ",%" PRIu64 ",0x%" PRIx64
              "\n", e->thread, e->time_ns / 1000000000u, e->time_ns / 1000 % 1000000, action,
              e->ptr, size, e->stream);
  }
  u64map_free(&sizes);
}

int tf_export_torch(const tf_trace *t, const char *out, char err[TF_ERR]) {
  const char *args[] = {"from-csv", out};
  return tool_helper_feed("spool_snapshot.py", args, 2, t, write_csv, out, "writing the snapshot",
                          err);
}
