/* Reading a trace into memory: spool's own binary traces (src/trace_format.h), with every
 * block's checksum and record checked. Plain C, no CUDA. */
#ifndef SPOOL_TOOLS_TRACE_READ_H
#define SPOOL_TOOLS_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace_format.h"

typedef struct tf_site {
  char *text;
  int line;
  bool tag;
} tf_site;

/* One event (site records are folded into `site`). */
typedef struct tf_event {
  uint8_t kind, status, flags; /* spool_trace_kind, spool_status, SPOOL_TRACE_CAPTURING ... */
  uint32_t aux;
  uint64_t seq, time_ns, ptr, size, stream, thread;
  int32_t site; /* index into tf_trace.sites, -1: none */
} tf_event;

typedef struct tf_trace {
  const char *format; /* "spool", "rmm" or "torch" */
  int device;
  uint64_t device_total, pid, start_unix_ns, blocks;
  char *config; /* the recorded pool's config text, "" when unknown */
  tf_event *ev; /* in seq order */
  size_t n, cap;
  tf_site *sites;
  size_t nsites, sites_cap;
  bool ended; /* the END record is there: the pool was destroyed */
} tf_trace;

#define TF_ERR 512 /* room for a reader's message */

/* Reads path into *t (zeroed first): a spool trace, RMM's logging CSV or a PyTorch memory
 * snapshot, told apart by their content (import.h). 0 on success; -1 with a message in err
 * naming the file, the block or record (the line), its byte offset and what was wrong (t is
 * then freed). */
int tf_load(const char *path, tf_trace *t, char err[TF_ERR]);
/* The same from bytes in memory; name is what messages call them. */
int tf_parse(const unsigned char *data, size_t len, const char *name, tf_trace *t,
             char err[TF_ERR]);
void tf_free(tf_trace *t);

/* "alloc", "free", ... ; "?" for an unknown kind. */
const char *tf_kind_name(int kind);
/* Appends an event (for importers and tests); -1 without memory. */
int tf_push(tf_trace *t, const tf_event *e);
/* Writes the formatted message to err and returns -1, for a reader's refusals. */
int tf_fail(char err[TF_ERR], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts the events in seq order. */
void tf_sort(tf_trace *t);

#endif
