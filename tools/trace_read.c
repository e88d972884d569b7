/* The reader of spool traces. A trace is untrusted input: every length is checked against what
 * is left before it is used, so that a truncated or damaged file is a message, never a crash. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "trace_read.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[SPOOL_TRACE_KINDS] = {
    "?", "alloc", "free", "record_stream", "scope_begin", "scope_end", "trim",
    "stream_release", "flush", "site", "end", "chunk_alloc", "chunk_free"};

const char *tf_kind_name(int kind) {
  return kind > 0 && kind < SPOOL_TRACE_KINDS ? kind_names[kind] : "?";
}

int tf_fail(char err[TF_ERR], const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, TF_ERR, fmt, ap);
  va_end(ap);
  return -1;
}

int tf_push(tf_trace *t, const tf_event *e) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    tf_event *ev = realloc(t->ev, cap * sizeof *ev);
    if (!ev) return -1;
    t->ev = ev;
    t->cap = cap;
  }
  t->ev[t->n++] = *e;
  return 0;
}

static int push_site(tf_trace *t, const char *text, size_t len, int line, bool tag) {
  if (t->nsites == t->sites_cap) {
    size_t cap = t->sites_cap ? t->sites_cap * 2 : 64;
    tf_site *s = realloc(t->sites, cap * sizeof *s);
    if (!s) return -1;
    t->sites = s;
    t->sites_cap = cap;
  }
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, text, len);
  copy[len] = '\0';
  t->sites[t->nsites++] = (tf_site){copy, line, tag};
  return 0;
}

static int by_seq(const void *a, const void *b) {
  uint64_t x = ((const tf_event *)a)->seq, y = ((const tf_event *)b)->seq;
  return x < y ? -1 : x > y;
}

void tf_sort(tf_trace *t) {
  if (t->n > 1) qsort(t->ev, t->n, sizeof *t->ev, by_seq);
}

void tf_free(tf_trace *t) {
  for (size_t i = 0; i < t->nsites; i++) free(t->sites[i].text);
  free(t->sites);
  free(t->ev);
  free(t->config);
  memset(t, 0, sizeof *t);
}

/* ---- the header ------------------------------------------------------------------------------ */

static int parse_header(const unsigned char *d, size_t len, const char *name, tf_trace *t,
                        size_t *off, char err[TF_ERR]) {
  spool_trace_header h;
  if (len < sizeof h)
    return tf_fail(err, "%s: %zu bytes: truncated, a trace header has %zu", name, len, sizeof h);
  memcpy(&h, d, sizeof h);
  if (memcmp(h.magic, SPOOL_TRACE_MAGIC, 8) != 0)
    return tf_fail(err, "%s: not a spool trace (no 'SPOOLTRC' at byte 0)", name);
  if (h.bom != SPOOL_TRACE_BOM)
    return tf_fail(err, "%s: byte-order mark 0x%08" PRIx32 " (expected 0x%08x: written on a "
                "machine of the other byte order, or corrupt)", name, h.bom, SPOOL_TRACE_BOM);
  if (h.version != SPOOL_TRACE_VERSION)
    return tf_fail(err, "%s: trace format version %" PRIu32 "; this reader knows version %d",
                name, h.version, SPOOL_TRACE_VERSION);
  if (h.header_bytes < sizeof h || h.header_bytes > len)
    return tf_fail(err, "%s: header size %" PRIu32 " (expected %zu to the file's %zu bytes)",
                name, h.header_bytes, sizeof h, len);
  if (h.record_bytes != sizeof(spool_trace_record))
    return tf_fail(err, "%s: record size %" PRIu32 " (expected %zu)", name, h.record_bytes,
                sizeof(spool_trace_record));
  if (h.config_bytes > SPOOL_TRACE_CONFIG_MAX || h.config_bytes > len - h.header_bytes)
    return tf_fail(err, "%s: config text of %" PRIu32 " bytes at byte %" PRIu32 " runs past the "
                "end of the file (%zu bytes): truncated or corrupt", name, h.config_bytes,
                h.header_bytes, len);
  t->config = malloc(h.config_bytes + 1u);
  if (!t->config) return tf_fail(err, "%s: no memory for the config text", name);
  memcpy(t->config, d + h.header_bytes, h.config_bytes);
  t->config[h.config_bytes] = '\0';
  t->device = h.device;
  t->device_total = h.device_total;
  t->pid = h.pid;
  t->start_unix_ns = h.start_unix_ns;
  *off = (size_t)h.header_bytes + h.config_bytes;
  return 0;
}

/* ---- blocks ---------------------------------------------------------------------------------- */

/* The records of one block, whose payload p of n bytes passed its checksum. */
static int parse_records(const unsigned char *p, uint32_t n, const spool_trace_block *b,
                         const char *where, tf_trace *t, char err[TF_ERR]) {
  size_t first_site = t->nsites; /* block-local site id k is sites[first_site + k - 1] */
  uint32_t count = 0, sites = 0;
  for (uint32_t at = 0; at < n; count++) {
    spool_trace_record r;
    if (n - at < sizeof r)
      return tf_fail(err, "%s, record %" PRIu32 " at payload byte %" PRIu32 ": %" PRIu32 " bytes "
                  "left, a record has %zu", where, count, at, n - at, sizeof r);
    memcpy(&r, p + at, sizeof r);
    at += (uint32_t)sizeof r;
    if (r.kind == 0 || r.kind >= SPOOL_TRACE_KINDS)
      return tf_fail(err, "%s, record %" PRIu32 ": unknown kind %u", where, count, r.kind);
    if (r.kind == SPOOL_TRACE_SITE) {
      uint32_t padded = (r.aux + 7u) & ~7u;
      if (r.aux > SPOOL_TRACE_SITE_MAX || padded > n - at || r.site != sites + 1)
        return tf_fail(err, "%s, record %" PRIu32 ": site %" PRIu32 " with %" PRIu32 " bytes of "
                    "text (expected site %" PRIu32 ", at most %u bytes within the block)",
                    where, count, r.site, r.aux, sites + 1, SPOOL_TRACE_SITE_MAX);
      if (push_site(t, (const char *)p + at, strnlen((const char *)p + at, r.aux),
                    (int)(r.size > INT32_MAX ? INT32_MAX : r.size),
                    (r.flags & SPOOL_TRACE_TAG) != 0) != 0)
        return tf_fail(err, "%s: no memory for a site", where);
      sites++;
      at += padded;
      continue;
    }
    if (r.site > sites)
      return tf_fail(err, "%s, record %" PRIu32 " (%s, seq %" PRIu64 "): site %" PRIu32 " is not "
                  "defined in its block (%" PRIu32 " are)", where, count, tf_kind_name(r.kind),
                  r.seq, r.site, sites);
    tf_event e = {r.kind, r.status, r.flags, r.aux, r.seq, r.time_ns, r.ptr, r.size,
                  r.stream, b->thread, r.site ? (int32_t)(first_site + r.site - 1) : -1};
    if (tf_push(t, &e) != 0) return tf_fail(err, "%s: no memory for the events", where);
    if (r.kind == SPOOL_TRACE_END) t->ended = true;
  }
  if (count != b->records)
    return tf_fail(err, "%s: %" PRIu32 " records, its header says %" PRIu32 " (corrupt)", where,
                count, b->records);
  return 0;
}

static int parse_block(const unsigned char *d, size_t len, size_t *off, const char *name,
                       tf_trace *t, char err[TF_ERR]) {
  char where[TF_ERR / 2];
  snprintf(where, sizeof where, "%s: block %" PRIu64 " at byte %zu", name, t->blocks + 1, *off);
  spool_trace_block b;
  size_t left = len - *off;
  if (left < sizeof b)
    return tf_fail(err, "%s: truncated: %zu of the block header's %zu bytes", where, left,
                sizeof b);
  memcpy(&b, d + *off, sizeof b);
  if (b.magic != SPOOL_TRACE_BLOCK_MAGIC)
    return tf_fail(err, "%s: block mark 0x%08" PRIx32 " (expected 0x%08x): corrupt", where,
                b.magic, SPOOL_TRACE_BLOCK_MAGIC);
  if (b.payload_bytes > SPOOL_TRACE_BLOCK_PAYLOAD)
    return tf_fail(err, "%s: payload of %" PRIu32 " bytes (at most %u): corrupt", where,
                b.payload_bytes, SPOOL_TRACE_BLOCK_PAYLOAD);
  if (b.payload_bytes > left - sizeof b)
    return tf_fail(err, "%s: truncated: %zu of its %" PRIu32 " payload bytes", where,
                left - sizeof b, b.payload_bytes);
  const unsigned char *p = d + *off + sizeof b;
  uint32_t sum = spool_trace_fnv1a(p, b.payload_bytes);
  if (sum != b.checksum)
    return tf_fail(err, "%s: checksum 0x%08" PRIx32 " does not match its payload's 0x%08" PRIx32
                ": corrupt", where, b.checksum, sum);
  if (parse_records(p, b.payload_bytes, &b, where, t, err) != 0) return -1;
  *off += sizeof b + b.payload_bytes;
  t->blocks++;
  return 0;
}

int tf_parse(const unsigned char *data, size_t len, const char *name, tf_trace *t,
             char err[TF_ERR]) {
  memset(t, 0, sizeof *t);
  t->format = "spool";
  size_t off = 0;
  int rc = parse_header(data, len, name, t, &off, err);
  while (rc == 0 && off < len) rc = parse_block(data, len, &off, name, t, err);
  if (rc != 0) {
    tf_free(t);
    return -1;
  }
  tf_sort(t);
  return 0;
}
