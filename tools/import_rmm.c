/* RMM's logging_resource_adaptor CSV (Thread,Time,Action,Pointer,Size,Stream) as a trace: one
 * event per line, in the file's order, times from the first line's. Beyond RMM's actions,
 * segment_alloc and segment_free (what spool_snapshot.py writes for a snapshot's segments) are
 * the allocator's own chunks. Time is either seconds
 * (1634567890.123456) or a clock time (10:28:07:529553 or 10:28:07.529553). */
#include "import.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spool/spool.h>

#include "u64map.h"

#define FIELDS 6

bool tf_is_rmm(const unsigned char *d, size_t len) {
  static const char head[] = "Thread,Time,Action,Pointer,Size,Stream";
  if (len >= 3 && d[0] == 0xEF && d[1] == 0xBB && d[2] == 0xBF) d += 3, len -= 3; /* UTF-8 mark */
  return len >= sizeof head - 1 && memcmp(d, head, sizeof head - 1) == 0;
}

static bool number(const char *s, int base, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, base);
  if (errno || end == s || *end || s[0] == '-') return false;
  *out = v;
  return true;
}

/* Digits after a point as nanoseconds (at most 9 digits); false for anything else. */
static bool fraction(const char *c, uint64_t *ns) {
  uint64_t frac = 0;
  unsigned digits = 0;
  for (; *c; c++, digits++) {
    if (*c < '0' || *c > '9' || digits >= 9) return false;
    frac = frac * 10 + (uint64_t)(*c - '0');
  }
  while (digits++ < 9) frac *= 10;
  *ns = frac;
  return true;
}

/* Nanoseconds from either time form, exactly (a double would lose the microseconds of a time
 * since the epoch). */
static bool time_of(const char *s, uint64_t *ns) {
  unsigned h, m, sec;
  char sep;
  int used = 0;
  uint64_t frac = 0;
  if (sscanf(s, "%u:%u:%u%c%n", &h, &m, &sec, &sep, &used) == 4 && (sep == ':' || sep == '.')) {
    if (!fraction(s + used, &frac)) return false;
    *ns = ((uint64_t)h * 3600 + m * 60 + sec) * 1000000000u + frac;
    return true;
  }
  char *end;
  errno = 0;
  unsigned long long whole = strtoull(s, &end, 10);
  if (errno || end == s || s[0] == '-' || (*end && *end != '.')) return false;
  if (*end == '.' && !fraction(end + 1, &frac)) return false;
  *ns = (uint64_t)whole * 1000000000u + frac;
  return true;
}

/* Splits line (changed in place) at its commas into f; the count of fields. */
static int split(char *line, char *f[FIELDS]) {
  int n = 0;
  for (char *p = line;; n++) {
    char *comma = strchr(p, ',');
    if (n < FIELDS) f[n] = p;
    if (!comma) return n + 1;
    *comma = '\0';
    p = comma + 1;
  }
}

static int event_of(char **f, tf_event *e, const char *where, char err[TF_ERR]) {
  uint64_t thread;
  if (!number(f[0], 10, &thread))
    return tf_fail(err, "%s: Thread '%s' is not a number", where, f[0]);
  if (!time_of(f[1], &e->time_ns))
    return tf_fail(err, "%s: Time '%s' is neither seconds nor HH:MM:SS.ffffff", where, f[1]);
  if (!strcmp(f[2], "allocate")) e->kind = SPOOL_TRACE_ALLOC;
  else if (!strcmp(f[2], "allocate failure"))
    e->kind = SPOOL_TRACE_ALLOC, e->status = SPOOL_ERR_OOM;
  else if (!strcmp(f[2], "deallocate") || !strcmp(f[2], "free")) e->kind = SPOOL_TRACE_FREE;
  else if (!strcmp(f[2], "segment_alloc")) e->kind = SPOOL_TRACE_CHUNK_ALLOC;
  else if (!strcmp(f[2], "segment_free")) e->kind = SPOOL_TRACE_CHUNK_FREE;
  else return tf_fail(err, "%s: Action '%s' (expected allocate, allocate failure or deallocate)",
                   where, f[2]);
  if (!number(f[3], 16, &e->ptr) || (e->ptr == 0 && e->status == SPOOL_OK))
    return tf_fail(err, "%s: Pointer '%s' is not a non-zero hex address", where, f[3]);
  if (!number(f[4], 10, &e->size))
    return tf_fail(err, "%s: Size '%s' is not a number", where, f[4]);
  if (!number(f[5], 16, &e->stream))
    return tf_fail(err, "%s: Stream '%s' is not a hex handle", where, f[5]);
  if (e->kind == SPOOL_TRACE_FREE) e->size = 0; /* the reader knows it from the allocation */
  if (e->kind == SPOOL_TRACE_CHUNK_ALLOC || e->kind == SPOOL_TRACE_CHUNK_FREE) e->status = 0;
  e->thread = thread;
  return 0;
}

/* Threads get small numbers in the order they first appear, as a spool trace has them. */
static int number_threads(tf_trace *t, char err[TF_ERR]) {
  u64map ids = {0};
  uint64_t next = 0;
  for (size_t i = 0; i < t->n; i++) {
    uint64_t id, key = t->ev[i].thread + 1;
    if (!u64map_get(&ids, key, &id)) {
      id = ++next;
      if (!u64map_put(&ids, key, id)) return u64map_free(&ids), tf_fail(err, "no memory");
    }
    t->ev[i].thread = id;
  }
  u64map_free(&ids);
  return 0;
}

int tf_parse_rmm(const unsigned char *d, size_t len, const char *name, tf_trace *t,
                 char err[TF_ERR]) {
  memset(t, 0, sizeof *t);
  t->format = "rmm";
  t->config = calloc(1, 1);
  char *text = malloc(len + 1);
  if (!t->config || !text) return free(text), tf_free(t), tf_fail(err, "%s: no memory", name);
  memcpy(text, d, len);
  text[len] = '\0';
  uint64_t t0 = 0, line_no = 0;
  int rc = 0;
  for (char *line = text, *next; rc == 0 && line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r') line[--n] = '\0';
    if (++line_no == 1 || n == 0) continue; /* the header; blank lines */
    char where[TF_ERR / 2], *f[FIELDS];
    snprintf(where, sizeof where, "%s: line %" PRIu64, name, line_no);
    int got = split(line, f);
    if (got != FIELDS) {
      rc = tf_fail(err, "%s: %d fields (expected 6: Thread,Time,Action,Pointer,Size,Stream)",
                where, got);
      break;
    }
    tf_event e = {.site = -1, .seq = t->n + 1};
    rc = event_of(f, &e, where, err);
    if (rc == 0 && t->n == 0) t0 = e.time_ns;
    e.time_ns = e.time_ns >= t0 ? e.time_ns - t0 : 0;
    if (rc == 0 && tf_push(t, &e) != 0) rc = tf_fail(err, "%s: no memory", name);
  }
  free(text);
  if (rc == 0 && line_no == 0) rc = tf_fail(err, "%s: empty", name);
  if (rc == 0) rc = number_threads(t, err);
  t->ended = true;
  if (rc != 0) tf_free(t);
  return rc;
}
