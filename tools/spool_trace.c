/* spool-trace: a trace as CSV (dump) or as figures (stats). Exit status: 0 done, 1 bad usage,
 * 2 the trace could not be read (the message names the file, the block or record, and what was
 * wrong). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spool/spool.h>

#include "export.h"
#include "tool_text.h"
#include "trace_stats.h"
#include "u64map.h"

static const char USAGE[] =
    "usage: spool-trace dump TRACE      every event as CSV, one line each\n"
    "       spool-trace stats TRACE     peak live, churn, sizes, streams, lifetimes\n"
    "       spool-trace plot TRACE -o FILE.png          live bytes over time (matplotlib)\n"
    "       spool-trace export-torch TRACE -o FILE.pickle  a snapshot for PyTorch's memory_viz\n"
    "       spool-trace --help\n"
    "TRACE: a file written by a pool with trace=PATH (or SPOOL_TRACE=PATH; docs/trace.md), an\n"
    "RMM logging_resource_adaptor CSV, or a PyTorch memory snapshot pickle (read with python3,\n"
    "no PyTorch needed); the format is told by the content.\n"
    "Exit status: 0 done, 1 bad usage, 2 the trace could not be read, 3 the output could not\n"
    "be written.\n";

static const char *action(const tf_event *e) {
  if (e->kind == SPOOL_TRACE_ALLOC && e->status == SPOOL_ERR_OOM) return "oom";
  if (e->kind == SPOOL_TRACE_ALLOC && e->aux) return "batch";
  if (e->kind == SPOOL_TRACE_FREE && (e->flags & SPOOL_TRACE_AFTER)) return "free_after";
  return tf_kind_name(e->kind);
}

static void print_site(FILE *out, const tf_trace *t, const tf_event *e) {
  if (e->site < 0) return;
  const tf_site *s = &t->sites[e->site];
  fputc('"', out);
  for (const char *c = s->text; *c; c++) fprintf(out, *c == '"' ? "\"\"" : "%c", *c);
  if (s->tag) fputc('"', out);
  else fprintf(out, ":%d\"", s->line);
}

/* Buffer numbers are the reader's: the n-th successful allocation is buffer n, and a free
 * names the buffer live at its address. */
static int dump(const tf_trace *t) {
  u64map ids = {0};
  uint64_t next = 0;
  printf("seq,time_us,thread,action,status,ptr,size,stream,buffer,capturing,site\n");
  for (size_t i = 0; i < t->n; i++) {
    const tf_event *e = &t->ev[i];
    uint64_t id = 0, size = e->size;
    if (e->kind == SPOOL_TRACE_ALLOC && e->status == 0) {
      id = ++next;
      u64map_put(&ids, e->ptr, id);
    } else if (e->kind == SPOOL_TRACE_FREE || e->kind == SPOOL_TRACE_RECORD_STREAM) {
      if (u64map_get(&ids, e->ptr, &id) && e->kind == SPOOL_TRACE_FREE && e->status == 0)
        u64map_del(&ids, e->ptr);
    }
    printf("%" PRIu64 ",%.3f,%" PRIu64 ",%s,%s,0x%" PRIx64 ",%" PRIu64 ",0x%" PRIx64 ",",
           e->seq, (double)e->time_ns / 1000.0, e->thread, action(e),
           spool_status_name((spool_status)e->status), e->ptr, size, e->stream);
    if (id) printf("%" PRIu64, id);
    printf(",%d,", (e->flags & SPOOL_TRACE_CAPTURING) != 0);
    print_site(stdout, t, e);
    putchar('\n');
  }
  u64map_free(&ids);
  return 0;
}

static void print_streams(const ts_stats *s) {
  printf("streams:          %zu seen, at most %u with live buffers at once\n", s->nstreams,
         s->peak_streams_live);
  for (size_t i = 0; i < s->nstreams && i < TS_STREAMS; i++) {
    const ts_stream *st = &s->streams[i];
    char b[32];
    printf("  stream 0x%" PRIx64, st->stream);
    if (st->thread) printf(" (thread %" PRIu64 ")", st->thread);
    printf(": %" PRIu64 " allocs, peak %" PRIu64 " live buffers, %s\n", st->allocs,
           st->peak_live, tool_size_text(st->peak_bytes, b));
  }
}

static void print_hist(const ts_stats *s) {
  printf("sizes:            %" PRIu64 " B to %" PRIu64 " B\n", s->min_size, s->max_size);
  for (unsigned k = 0; k < TS_BUCKETS; k++) {
    if (!s->hist[k]) continue;
    char lo[32], hi[32];
    printf("  (%s, %s]: %" PRIu64 "\n", tool_size_text(k ? (uint64_t)1 << (k - 1) : 0, lo),
           tool_size_text((uint64_t)1 << k, hi), s->hist[k]);
  }
}

static int stats(const tf_trace *t) {
  ts_stats s;
  char err[TF_ERR], a[32], b[32];
  if (ts_compute(t, &s, err) != 0) return fprintf(stderr, "spool-trace: %s\n", err), 2;
  double secs = (double)s.duration_ns / 1e9;
  printf("trace:            %s format, device %d, ", t->format, t->device);
  if (!strcmp(t->format, "spool")) printf("%" PRIu64 " blocks, ", t->blocks);
  printf("%" PRIu64 " events%s\n", s.events,
         t->ended ? "" : " (no end record: the pool was not destroyed, e.g. a crash)");
  printf("duration:         %.6f s\n", secs);
  printf("allocations:      %" PRIu64 " (%" PRIu64 " failed, %" PRIu64 " out of memory), %"
         PRIu64 " frees (%" PRIu64 " refused or unmatched)\n", s.allocs, s.failed_allocs,
         s.ooms, s.frees, s.bad_frees);
  printf("peak live:        %s in %" PRIu64 " buffers\n", tool_size_text(s.peak_live_bytes, a),
         s.peak_live_buffers);
  printf("median live:      %s\n", tool_size_text(s.steady_live_bytes, a));
  if (s.chunk_allocs)
    printf("heap chunks:      peak %s (%" PRIu64 " taken from the pool, %" PRIu64
           " given back)\n", tool_size_text(s.chunk_bytes_peak, a), s.chunk_allocs,
           s.chunk_frees);
  printf("churn:            %s allocated, %.0f allocations/s, %s/s\n",
         tool_size_text(s.bytes_allocated, a), secs > 0 ? (double)s.allocs / secs : 0.0,
         tool_size_text(secs > 0 ? (uint64_t)((double)s.bytes_allocated / secs) : 0, b));
  printf("lifetimes:        median %.3f ms, p90 %.3f ms, max %.3f ms (%" PRIu64 " freed)\n",
         (double)s.life_p50_ns / 1e6, (double)s.life_p90_ns / 1e6,
         (double)s.life_max_ns / 1e6, s.lifetimes);
  printf("other events:     %" PRIu64 " trims, %" PRIu64 " stream releases, %" PRIu64
         " scopes, %" PRIu64 " hand-offs\n", s.trims, s.releases, s.scopes, s.handoffs);
  printf("graph capture:    %" PRIu64 " captures seen, %" PRIu64 " allocations under one\n",
         s.captures, s.captured);
  printf("left live at end: %" PRIu64 " buffers, %s\n", s.leaks, tool_size_text(s.leak_bytes, a));
  print_hist(&s);
  print_streams(&s);
  return 0;
}

/* The commands that write a file: plot and export-torch. */
static int export(const char *cmd, const tf_trace *t, const char *out) {
  char err[TF_ERR];
  int rc = !strcmp(cmd, "plot") ? tf_export_plot(t, out, err) : tf_export_torch(t, out, err);
  if (rc != 0) return fprintf(stderr, "spool-trace: %s\n", err), 3;
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
    return fputs(USAGE, stdout), 0;
  const char *cmd = argc > 1 ? argv[1] : "";
  bool reads = argc == 3 && (!strcmp(cmd, "dump") || !strcmp(cmd, "stats"));
  bool writes = argc == 5 && (!strcmp(cmd, "plot") || !strcmp(cmd, "export-torch")) &&
                !strcmp(argv[3], "-o");
  if (!reads && !writes) {
    fprintf(stderr, "spool-trace: %s\n%s", argc < 2 ? "no command" : "bad arguments", USAGE);
    return 1;
  }
  tf_trace t;
  char err[TF_ERR];
  if (tf_load(argv[2], &t, err) != 0) return fprintf(stderr, "spool-trace: %s\n", err), 2;
  int rc = writes ? export(cmd, &t, argv[4]) : !strcmp(cmd, "dump") ? dump(&t) : stats(&t);
  tf_free(&t);
  return rc;
}
