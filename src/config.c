/* Configuration: defaults, the key=value text form (string, file, SPOOL_CONF), validation and
 * formatting back to text.
 *
 * Every key is one row of spool__keys below: its name, a value type (how to parse and format it)
 * and where it lives in spool_config. A new key is one row, plus a type if no existing one fits.
 *
 * Choices made here (the README's config section says the same):
 *  - keys are case-sensitive (they are the struct's field names); values are not: `4gib`, `ON`
 *    and `Own` all read;
 *  - an entry never spans lines: a list's brackets and a string's double quotes must close on
 *    the line that opens them; inside quotes, ',', '#' and brackets are plain text, and there are
 *    no escapes (a string cannot hold '"');
 *  - parsing works on a copy and commits only when the whole text is good, so a half-applied
 *    config never reaches a pool;
 *  - nothing here allocates except spool_config_load's file buffer, and nothing is global but
 *    constant tables: everything is thread safe for distinct cfg. */
#define _POSIX_C_SOURCE 200809L /* strerror_r */

#include "internal.h"
#include "text.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small text helpers --------------------------------------------------------------------- */

typedef struct spool__span {
  const char *s;
  size_t n;
} spool__span;

static spool__span spool__span_of(const char *begin, const char *end) {
  spool__span sp;
  sp.s = begin;
  sp.n = (size_t)(end - begin);
  return sp;
}

static spool__span spool__trim(spool__span sp) {
  while (sp.n > 0 && spool__text_is_space(sp.s[0])) {
    sp.s++;
    sp.n--;
  }
  while (sp.n > 0 && spool__text_is_space(sp.s[sp.n - 1])) sp.n--;
  return sp;
}

static int spool__same(spool__span sp, const char *word) {
  return strlen(word) == sp.n && memcmp(sp.s, word, sp.n) == 0;
}

/* Quotable form of user text for a message: long values are cut, so that one bad line cannot
 * push the line number and the reason out of the message buffer, and control bytes are shown
 * as \xNN, so that a stray byte (a tab, an escape) is seen instead of acting on the terminal. */
#define SPOOL__QUOTE 72
static const char *spool__quote(spool__span sp, char out[SPOOL__QUOTE]) {
  size_t i, o = 0;
  for (i = 0; i < sp.n && o + 8 < SPOOL__QUOTE; i++) {
    unsigned char c = (unsigned char)sp.s[i];
    if (c < 0x20 || c == 0x7F) o += (size_t)snprintf(out + o, SPOOL__QUOTE - o, "\\x%02X", c);
    else out[o++] = (char)c;
  }
  if (i < sp.n) o += (size_t)snprintf(out + o, SPOOL__QUOTE - o, "...");
  out[o] = '\0';
  return out;
}

/* Appends to a buffer and counts what it would need, so one function both measures and writes
 * (buf NULL and cap 0 measure only). */
typedef struct spool__writer {
  char *buf;
  size_t cap;
  size_t used; /* characters wanted so far, NUL excluded; may exceed cap */
} spool__writer;

static void spool__put(spool__writer *w, const char *fmt, ...) SPOOL__PRINTF(2, 3);
static void spool__put(spool__writer *w, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  if (w->used < w->cap)
    n = vsnprintf(w->buf + w->used, w->cap - w->used, fmt, ap);
  else
    n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n > 0) w->used += (size_t)n;
}

/* ---- value types ---------------------------------------------------------------------------- */

typedef struct spool__key spool__key;

typedef struct spool__type {
  const char *expected; /* for messages: "expected <this>, got ..."; NULL: built from choices */
  /* Parses v (trimmed, not empty) into the key's field of cfg. Returns 0, or -1 with a short
   * reason in why ("" when the expected text says it all). */
  int (*parse)(const spool__key *key, spool__span v, spool_config *cfg, char *why, size_t why_len);
  /* Writes the field as text that parse reads back to the same value. */
  void (*format)(const spool__key *key, const spool_config *cfg, spool__writer *w);
  unsigned long max; /* counts (spool__count_parse): the largest value */
} spool__type;

struct spool__key {
  const char *name;              /* the text key and the field's name */
  const spool__type *type;
  size_t offset;                 /* of the field in spool_config */
  size_t size;                   /* of the field: a string's capacity, NUL included */
  const char *const *choices;    /* choice keys: accepted words by value, NULL-terminated */
  const char *help;              /* one line, for people reading this table */
};

static void *spool__field(const spool__key *key, spool_config *cfg) {
  return (char *)cfg + key->offset;
}

static const void *spool__cfield(const spool__key *key, const spool_config *cfg) {
  return (const char *)cfg + key->offset;
}

/* A whole number from 0 to max. No sign, no spaces inside: "+1" or "1 2" are typos. */
static int spool__parse_count(spool__span v, unsigned long max, unsigned long *out, char *why,
                              size_t why_len) {
  unsigned long long x = 0;
  size_t i;
  if (v.n > 0 && v.s[0] == '-') return spool__text_why(why, why_len, "negative");
  for (i = 0; i < v.n; i++) {
    if (v.s[i] < '0' || v.s[i] > '9') return spool__text_why(why, why_len, "not an integer");
    x = x * 10 + (unsigned long long)(v.s[i] - '0'); /* x <= max before: cannot overflow */
    if (x > max) return spool__text_why(why, why_len, "too large (most is %lu)", max);
  }
  if (v.n == 0) return spool__text_why(why, why_len, "empty");
  *out = (unsigned long)x;
  return 0;
}

/* An int >= 0 (device ordinals, list items). */
static int spool__parse_int(spool__span v, int *out, char *why, size_t why_len) {
  unsigned long x;
  if (spool__parse_count(v, INT_MAX, &x, why, why_len) != 0) return -1;
  *out = (int)x;
  return 0;
}

static int spool__int_parse(const spool__key *key, spool__span v, spool_config *cfg, char *why,
                            size_t why_len) {
  int x;
  if (spool__parse_int(v, &x, why, why_len) != 0) return -1;
  memcpy(spool__field(key, cfg), &x, sizeof x);
  return 0;
}

static void spool__int_format(const spool__key *key, const spool_config *cfg, spool__writer *w) {
  int x;
  memcpy(&x, spool__cfield(key, cfg), sizeof x);
  spool__put(w, "%d", x);
}

/* oom_retries: each retry runs after the pool gave back what it could (a trim, a synchronize
 * where one is needed), so it costs milliseconds and only succeeds if other work frees memory
 * meanwhile. A handful is the useful range; 100 (well under a second of retrying) leaves room
 * for any patient policy, while a slip such as 100000 would turn an out-of-memory error into a
 * hang of minutes. spool_config_validate applies the same bound to a struct filled in code. */
#define SPOOL__OOM_RETRIES_MAX 100
#define SPOOL__STR2(x) #x
#define SPOOL__STR(x) SPOOL__STR2(x)

/* An unsigned field from a count of at most the type's max. */
static int spool__count_parse(const spool__key *key, spool__span v, spool_config *cfg,
                              char *why, size_t why_len) {
  unsigned long x;
  unsigned u;
  if (spool__parse_count(v, key->type->max, &x, why, why_len) != 0) return -1;
  u = (unsigned)x;
  memcpy(spool__field(key, cfg), &u, sizeof u);
  return 0;
}

/* chunk_idle: a count of heap allocations; a million is far past any useful wait. */
#define SPOOL__CHUNK_IDLE_MAX 1000000
/* quarantine: 0 (none) to 65536 freed blocks per stream. */
#define SPOOL__QUARANTINE_MAX 65536

/* fence_every: 1 (a fence per heap operation) to 65536 (practically none). */
#define SPOOL__FENCE_EVERY_MAX 65536

static int spool__fence_parse(const spool__key *key, spool__span v, spool_config *cfg,
                              char *why, size_t why_len) {
  if (spool__count_parse(key, v, cfg, why, why_len) != 0) return -1;
  unsigned u;
  memcpy(&u, spool__field(key, cfg), sizeof u);
  if (u != 0) return 0;
  snprintf(why, why_len, "0 would never let another stream reuse what a stream freed");
  return -1;
}

static void spool__uint_format(const spool__key *key, const spool_config *cfg, spool__writer *w) {
  unsigned x;
  memcpy(&x, spool__cfield(key, cfg), sizeof x);
  spool__put(w, "%u", x);
}

static int spool__size_parse(const spool__key *key, spool__span v, spool_config *cfg, char *why,
                             size_t why_len) {
  uint64_t x;
  if (spool__parse_size(v.s, v.n, &x, why, why_len) != 0) return -1;
  memcpy(spool__field(key, cfg), &x, sizeof x);
  return 0;
}

/* Exact bytes, not "1.50 GiB": the text must read back to the very same number. */
static void spool__size_format(const spool__key *key, const spool_config *cfg, spool__writer *w) {
  uint64_t x;
  memcpy(&x, spool__cfield(key, cfg), sizeof x);
  if (x == UINT64_MAX)
    spool__put(w, "max");
  else
    spool__put(w, "%llu", (unsigned long long)x);
}

/* heap_max_block: a size of at most SPOOL_HEAP_MAX_BLOCK_LIMIT, refused at its line. */
static int spool__block_parse(const spool__key *key, spool__span v, spool_config *cfg,
                              char *why, size_t why_len) {
  uint64_t x;
  if (spool__parse_size(v.s, v.n, &x, why, why_len) != 0) return -1;
  if (x > SPOOL_HEAP_MAX_BLOCK_LIMIT) {
    snprintf(why, why_len, "larger than 1 TiB (larger blocks are better served by the pool "
             "itself: cache=off, or a pool of their own)");
    return -1;
  }
  memcpy(spool__field(key, cfg), &x, sizeof x);
  return 0;
}

static int spool__bool_parse(const spool__key *key, spool__span v, spool_config *cfg, char *why,
                             size_t why_len) {
  static const char *const yes[] = {"on", "true", "1"}, *const no[] = {"off", "false", "0"};
  bool x;
  size_t i;
  for (i = 0; i < 3; i++) {
    if (spool__text_same_nocase(v.s, v.n, yes[i]) || spool__text_same_nocase(v.s, v.n, no[i]))
      break;
  }
  if (i == 3) return spool__text_why(why, why_len, "%s", "");
  x = spool__text_same_nocase(v.s, v.n, yes[i]);
  memcpy(spool__field(key, cfg), &x, sizeof x);
  return 0;
}

static void spool__bool_format(const spool__key *key, const spool_config *cfg, spool__writer *w) {
  bool x;
  memcpy(&x, spool__cfield(key, cfg), sizeof x);
  spool__put(w, "%s", x ? "on" : "off");
}

/* A string (a path): bare, or in double quotes to keep ',', '#', brackets and edge spaces.
 * Quotes have no escapes, so a string cannot hold '"'; "" is the empty string (a bare empty
 * value is an error, as for every key). The field is a char array of key->size bytes. */
static int spool__string_parse(const spool__key *key, spool__span v, spool_config *cfg, char *why,
                               size_t why_len) {
  char *field = spool__field(key, cfg);
  spool__span s = v;
  if (v.s[0] == '"') {
    const char *close = memchr(v.s + 1, '"', v.n - 1);
    if (close == NULL) return spool__text_why(why, why_len, "no closing '\"'");
    if (close != v.s + v.n - 1)
      return spool__text_why(why, why_len, "text after the closing '\"'");
    s = spool__span_of(v.s + 1, close);
  } else {
    size_t i;
    int depth = 0;
    if (memchr(v.s, '"', v.n) != NULL)
      return spool__text_why(why, why_len, "'\"' may only enclose the whole value");
    /* The entry splitter took commas after an unclosed '[' as part of this value: refuse it
     * rather than swallow the entries that followed. */
    for (i = 0; i < v.n; i++) {
      if (v.s[i] == '[')
        depth++;
      else if (v.s[i] == ']' && depth > 0)
        depth--;
    }
    if (depth > 0)
      return spool__text_why(why, why_len, "unclosed '[': put a path with one in double quotes");
  }
  if (s.n >= key->size)
    return spool__text_why(why, why_len, "%zu bytes long, most is %zu", s.n, key->size - 1);
  memset(field, 0, key->size);
  memcpy(field, s.s, s.n);
  return 0;
}

/* Bare when it reads back as is; quoted when empty, with edge spaces, ',', '#' or brackets. A
 * string that holds '"' or a line break cannot be written (validate rejects it); the field is
 * read no further than its size, terminated or not. */
static void spool__string_format(const spool__key *key, const spool_config *cfg,
                                 spool__writer *w) {
  const char *s = spool__cfield(key, cfg);
  size_t n = strnlen(s, key->size), i;
  int quote = n == 0 || spool__text_is_space(s[0]) || spool__text_is_space(s[n - 1]);
  for (i = 0; i < n && !quote; i++)
    quote = s[i] == ',' || s[i] == '#' || s[i] == '[' || s[i] == ']';
  spool__put(w, quote ? "\"%.*s\"" : "%.*s", (int)n, s);
}

/* A choice is stored as its index in key->choices, in an enum field. */
_Static_assert(sizeof(spool_pool_source) == sizeof(int), "choice fields are int-sized enums");
_Static_assert(sizeof(spool_track) == sizeof(int), "choice fields are int-sized enums");
_Static_assert(sizeof(spool_ipc) == sizeof(int), "choice fields are int-sized enums");

static int spool__choice_parse(const spool__key *key, spool__span v, spool_config *cfg, char *why,
                               size_t why_len) {
  int i;
  for (i = 0; key->choices[i] != NULL; i++) {
    if (spool__text_same_nocase(v.s, v.n, key->choices[i])) {
      memcpy(spool__field(key, cfg), &i, sizeof i);
      return 0;
    }
  }
  return spool__text_why(why, why_len, "%s", "");
}

static void spool__choice_format(const spool__key *key, const spool_config *cfg,
                                 spool__writer *w) {
  int x, i;
  memcpy(&x, spool__cfield(key, cfg), sizeof x);
  for (i = 0; key->choices[i] != NULL; i++) {
    if (i == x) {
      spool__put(w, "%s", key->choices[i]);
      return;
    }
  }
  spool__put(w, "%d", x); /* not a valid value (validate says so); still no out-of-bounds read */
}

/* Peers: `[1,2]`, `[]`, or a bare `1`. Checked here (duplicates, count) as well as in validate,
 * so that the error names the line. Parses item into peers[count]: the array has one slot more
 * than SPOOL_MAX_PEERS, so the item can be read before the count is checked. */
static int spool__peer_item(spool__span item, int *peers, int count, char *why, size_t why_len) {
  char q[SPOOL__QUOTE], r[64];
  int i;
  if (item.n == 0) return spool__text_why(why, why_len, "empty entry in the list");
  if (spool__parse_int(item, &peers[count], r, sizeof r) != 0)
    return spool__text_why(why, why_len, "'%s': %s", spool__quote(item, q), r);
  if (count >= SPOOL_MAX_PEERS)
    return spool__text_why(why, why_len, "more than %d devices", SPOOL_MAX_PEERS);
  for (i = 0; i < count; i++) {
    if (peers[i] == peers[count])
      return spool__text_why(why, why_len, "device %d is listed twice", peers[i]);
  }
  return 0;
}

static int spool__peers_parse(const spool__key *key, spool__span v, spool_config *cfg, char *why,
                              size_t why_len) {
  int peers[SPOOL_MAX_PEERS + 1] = {0}, count = 0;
  const char *p, *item, *end;
  (void)key;
  if (v.s[0] != '[') { /* a bare single ordinal */
    if (spool__peer_item(v, peers, 0, why, why_len) != 0) return -1;
    count = 1;
  } else if (v.s[v.n - 1] != ']') {
    return spool__text_why(why, why_len, "%s",
                           memchr(v.s, ']', v.n) ? "text after ']'" : "no closing ']'");
  } else {
    end = v.s + v.n - 1;
    if (spool__trim(spool__span_of(v.s + 1, end)).n > 0) {
      for (item = p = v.s + 1;; p++) {
        if (p == end || *p == ',') {
          if (spool__peer_item(spool__trim(spool__span_of(item, p)), peers, count, why,
                               why_len) != 0)
            return -1;
          count++;
          if (p == end) break;
          item = p + 1;
        }
      }
    }
  }
  memcpy(cfg->peer_access, peers, sizeof cfg->peer_access); /* unused slots become 0 */
  cfg->peer_access_count = count;
  return 0;
}

static void spool__peers_format(const spool__key *key, const spool_config *cfg,
                                spool__writer *w) {
  int i, n = cfg->peer_access_count;
  (void)key;
  if (n < 0) n = 0; /* invalid counts (validate rejects them) must not read out of bounds */
  if (n > SPOOL_MAX_PEERS) n = SPOOL_MAX_PEERS;
  spool__put(w, "[");
  for (i = 0; i < n; i++) spool__put(w, i ? ",%d" : "%d", cfg->peer_access[i]);
  spool__put(w, "]");
}

static const spool__type spool__type_int = {"an integer >= 0", spool__int_parse,
                                            spool__int_format, 0};
static const spool__type spool__type_size = {"a size such as 512MiB, 4GiB, 1.5G or max",
                                             spool__size_parse, spool__size_format, 0};
static const spool__type spool__type_bool = {"on, off, true, false, 1 or 0", spool__bool_parse,
                                             spool__bool_format, 0};
static const spool__type spool__type_choice = {NULL, spool__choice_parse, spool__choice_format, 0};
static const spool__type spool__type_peers = {"a list of device ordinals such as [1,2], [] or 1",
                                              spool__peers_parse, spool__peers_format, 0};
static const spool__type spool__type_retries = {
    "an integer from 0 to " SPOOL__STR(SPOOL__OOM_RETRIES_MAX), spool__count_parse,
    spool__uint_format, SPOOL__OOM_RETRIES_MAX};
static const spool__type spool__type_block = {"a size up to 1TiB, such as 64MiB",
                                              spool__block_parse, spool__size_format, 0};
static const spool__type spool__type_idle = {
    "an integer from 0 to " SPOOL__STR(SPOOL__CHUNK_IDLE_MAX), spool__count_parse,
    spool__uint_format, SPOOL__CHUNK_IDLE_MAX};
static const spool__type spool__type_quarantine = {
    "an integer from 0 to " SPOOL__STR(SPOOL__QUARANTINE_MAX), spool__count_parse,
    spool__uint_format, SPOOL__QUARANTINE_MAX};
static const spool__type spool__type_fence = {
    "an integer from 1 to " SPOOL__STR(SPOOL__FENCE_EVERY_MAX), spool__fence_parse,
    spool__uint_format, SPOOL__FENCE_EVERY_MAX};
static const spool__type spool__type_path = {
    "a file path or \"\" (in double quotes if it has ',' or '#')",
    spool__string_parse, spool__string_format, 0};

/* ---- the keys ------------------------------------------------------------------------------- */

static const char *const spool__pool_choices[] = {"own", "default", NULL}; /* by enum value */
static const char *const spool__track_choices[] = {"off", "counts", "full", NULL};
static const char *const spool__ipc_choices[] = {"none", "posix_fd", NULL};

/* offset and size of a field: two initializers of a row */
#define SPOOL__AT(field) offsetof(spool_config, field), sizeof(((spool_config *)0)->field)
static const spool__key spool__keys[] = {
    {"device", &spool__type_int, SPOOL__AT(device), NULL, "CUDA device ordinal of the pool"},
    {"release_threshold", &spool__type_size, SPOOL__AT(release_threshold), NULL,
     "reserved bytes kept at a synchronize instead of returned to the driver"},
    {"reserve", &spool__type_size, SPOOL__AT(reserve), NULL, "bytes reserved at create"},
    {"max_size", &spool__type_size, SPOOL__AT(max_size), NULL,
     "most bytes the pool may reserve; 0: no limit"},
    {"reuse_follow_event_dependencies", &spool__type_bool,
     SPOOL__AT(reuse_follow_event_dependencies), NULL, "cudaMemPoolReuseFollowEventDependencies"},
    {"reuse_allow_opportunistic", &spool__type_bool, SPOOL__AT(reuse_allow_opportunistic), NULL,
     "cudaMemPoolReuseAllowOpportunistic"},
    {"reuse_allow_internal_dependencies", &spool__type_bool,
     SPOOL__AT(reuse_allow_internal_dependencies), NULL,
     "cudaMemPoolReuseAllowInternalDependencies"},
    {"peer_access", &spool__type_peers, SPOOL__AT(peer_access), NULL,
     "devices given read-write access to the pool's memory"},
    {"pool", &spool__type_choice, SPOOL__AT(pool), spool__pool_choices,
     "own: a new cudaMemPool; default: the device's default pool"},
    {"track", &spool__type_choice, SPOOL__AT(track), spool__track_choices,
     "what the pool knows of live buffers: counts only, a table, or call sites too"},
    {"report", &spool__type_path, SPOOL__AT(report), NULL,
     "file the leak report is appended to; \"\": SPOOL_REPORT, else stderr"},
    {"oom_retries", &spool__type_retries, SPOOL__AT(oom_retries), NULL,
     "retries of an allocation that ran out of memory, after the pool gave back what it could"},
    {"poison", &spool__type_bool, SPOOL__AT(poison), NULL,
     "fill new buffers with 0xA5 and freed ones with 0xDD"},
    {"quarantine", &spool__type_quarantine, SPOOL__AT(quarantine), NULL,
     "with poison=on: freed blocks each stream keeps out of reuse"},
    {"cache", &spool__type_bool, SPOOL__AT(cache), NULL,
     "the stream-ordered heap in front of the pool (off: every call goes to the pool)"},
    {"front_limit", &spool__type_size, SPOOL__AT(front_limit), NULL,
     "bytes of freed blocks each stream keeps ready for a repeat of their size"},
    {"front_brief", &spool__type_bool, SPOOL__AT(front_brief), NULL,
     "a stream of short-lived buffers keeps its working set in its front, past front_limit"},
    {"heap_max_block", &spool__type_block, SPOOL__AT(heap_max_block), NULL,
     "largest allocation the heap serves; larger ones go to the pool"},
    {"chunk_idle", &spool__type_idle, SPOOL__AT(chunk_idle), NULL,
     "heap allocations an all-free chunk waits before it goes back to the pool"},
    {"fence_every", &spool__type_fence, SPOOL__AT(fence_every), NULL,
     "heap operations on a stream between the events that let other streams reuse its frees"},
    {"fence_bytes", &spool__type_size, SPOOL__AT(fence_bytes), NULL,
     "a free of a heap block this large lets other streams reuse it at once (0: never)"},
    {"capture_check", &spool__type_bool, SPOOL__AT(capture_check), NULL,
     "ask whether the stream is being captured before using the heap"},
    {"cache_owner", &spool__type_bool, SPOOL__AT(cache_owner), NULL,
     "a stream's front used by one thread takes no lock on that thread's path"},
    {"ipc", &spool__type_choice, SPOOL__AT(ipc), spool__ipc_choices,
     "none, or posix_fd: the pool can be shared with other processes"},
    {"nvtx", &spool__type_bool, SPOOL__AT(nvtx), NULL,
     "tell memory tools (compute-sanitizer) which parts of the heap are live buffers"},
    {"trace", &spool__type_path, SPOOL__AT(trace), NULL,
     "file the pool records its calls to; \"\": SPOOL_TRACE, else none"},
};
#undef SPOOL__AT
#define SPOOL__NKEYS (sizeof spool__keys / sizeof spool__keys[0])
#define SPOOL__KEY_MAX 48 /* longest key name the suggestion code handles */

static const spool__key *spool__find_key(spool__span name) {
  size_t i;
  for (i = 0; i < SPOOL__NKEYS; i++) {
    if (spool__same(name, spool__keys[i].name)) return &spool__keys[i];
  }
  return NULL;
}

/* "own or default", "a, b or c" */
static const char *spool__expected(const spool__key *key, char *out, size_t len) {
  spool__writer w;
  int i;
  if (key->type->expected != NULL) return key->type->expected;
  w.buf = out;
  w.cap = len;
  w.used = 0;
  out[0] = '\0';
  for (i = 0; key->choices[i] != NULL; i++) {
    const char *sep = i == 0 ? "" : key->choices[i + 1] == NULL ? " or " : ", ";
    spool__put(&w, "%s%s", sep, key->choices[i]);
  }
  return out;
}

/* ---- suggestions for unknown keys ---------------------------------------------------------- */

/* Levenshtein distance between the user's text and a key name, one row of the table at a time.
 * Case is ignored: keys are lowercase, so `DEVICE` is one fix away from `device` for the user. */
static size_t spool__distance(spool__span a, const char *b) {
  size_t row[SPOOL__KEY_MAX + 1], bn = strlen(b), i, j;
  if (bn > SPOOL__KEY_MAX) return SIZE_MAX;
  for (j = 0; j <= bn; j++) row[j] = j;
  for (i = 1; i <= a.n; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (j = 1; j <= bn; j++) {
      size_t up = row[j], best = diag + (spool__text_lower(a.s[i - 1]) != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[bn];
}

/* The key a typo most likely meant, or NULL. "Close" grows with the key's length (one slip per
 * four letters, plus one), so `dev` is not taken for `device` but `relase_threshold`,
 * `release-threshold` and `Reserve` are recognised. */
static const spool__key *spool__nearest_key(spool__span name) {
  const spool__key *best = NULL;
  size_t best_d = SIZE_MAX, i;
  if (name.n > 2 * SPOOL__KEY_MAX) return NULL;
  for (i = 0; i < SPOOL__NKEYS; i++) {
    size_t d = spool__distance(name, spool__keys[i].name);
    if (d <= 1 + strlen(spool__keys[i].name) / 4 && d < best_d) {
      best = &spool__keys[i];
      best_d = d;
    }
  }
  return best;
}

/* ---- parsing -------------------------------------------------------------------------------- */

typedef struct spool__source {
  const char *name; /* "config", "SPOOL_CONF" or a path */
  int is_file;      /* messages read "path:3:" for files, "config line 3:" otherwise */
} spool__source;

typedef struct spool__parser {
  const spool__source *src;
  unsigned line;
  spool_config *cfg;       /* the working copy */
  const spool__key *prev;  /* key of the previous entry on this line, for hints */
} spool__parser;

static spool_status spool__bad(const spool__parser *p, const char *fmt, ...) SPOOL__PRINTF(2, 3);
static spool_status spool__bad(const spool__parser *p, const char *fmt, ...) {
  char detail[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  if (p->src->is_file)
    return spool__fail(SPOOL_ERR_CONFIG, "%s:%u: %s", p->src->name, p->line, detail);
  return spool__fail(SPOOL_ERR_CONFIG, "%s line %u: %s", p->src->name, p->line, detail);
}

/* Keys of earlier versions, refused with the keys that replaced them: a config written for
 * the size-class caches must not run silently on defaults it did not choose. */
static const char *const spool__retired[][2] = {
    {"cache_limit", "the caches became a heap that gives memory back by itself; bound what "
                    "each stream keeps ready with front_limit, and how long free chunks wait "
                    "with chunk_idle"},
    {"cache_max_block", "use heap_max_block (the largest allocation the heap serves)"},
};

static spool_status spool__unknown_key(const spool__parser *p, spool__span name) {
  char q[SPOOL__QUOTE], list[1024];
  const spool__key *near = spool__nearest_key(name);
  spool__writer w;
  size_t i;
  for (i = 0; i < sizeof spool__retired / sizeof spool__retired[0]; i++)
    if (spool__same(name, spool__retired[i][0]))
      return spool__bad(p, "key '%s' is gone: %s", spool__retired[i][0], spool__retired[i][1]);
  if (near != NULL)
    return spool__bad(p, "unknown key '%s' (did you mean '%s'?)", spool__quote(name, q),
                      near->name);
  w.buf = list;
  w.cap = sizeof list;
  w.used = 0;
  for (i = 0; i < SPOOL__NKEYS; i++) spool__put(&w, "%s%s", i ? ", " : "", spool__keys[i].name);
  return spool__bad(p, "unknown key '%s' (valid keys: %s)", spool__quote(name, q), list);
}

static spool_status spool__no_equals(const spool__parser *p, spool__span entry) {
  char q[SPOOL__QUOTE];
  /* `peer_access=1,2` splits at the comma; say how to write a list instead of only "no '='". */
  const char *hint = p->prev != NULL && p->prev->type == &spool__type_peers
                         ? "; a list needs brackets, as in peer_access=[1,2]"
                         : "";
  return spool__bad(p, "'%s' has no '=' (expected key=value%s)", spool__quote(entry, q), hint);
}

static spool_status spool__apply(spool__parser *p, spool__span entry) {
  char q[SPOOL__QUOTE], why[160], choices[160];
  const char *eq, *expected;
  const spool__key *key;
  spool__span name, value;

  entry = spool__trim(entry);
  if (entry.n == 0) return SPOOL_OK; /* "a=1,,b=2", blank lines, trailing commas */
  eq = memchr(entry.s, '=', entry.n);
  if (eq == NULL) return spool__no_equals(p, entry);
  name = spool__trim(spool__span_of(entry.s, eq));
  value = spool__trim(spool__span_of(eq + 1, entry.s + entry.n));
  if (name.n == 0)
    return spool__bad(p, "'%s' has no key before '=' (expected key=value)",
                      spool__quote(entry, q));
  key = spool__find_key(name);
  if (key == NULL) return spool__unknown_key(p, name);
  expected = spool__expected(key, choices, sizeof choices);
  if (value.n == 0) return spool__bad(p, "%s: empty value (expected %s)", key->name, expected);
  why[0] = '\0';
  if (key->type->parse(key, value, p->cfg, why, sizeof why) != 0)
    return spool__bad(p, "%s: expected %s, got '%s'%s%s%s", key->name, expected,
                      spool__quote(value, q), why[0] ? " (" : "", why, why[0] ? ")" : "");
  p->prev = key;
  return SPOOL_OK;
}

/* One line: the part before a '#' outside double quotes, split at commas outside brackets and
 * quotes. An unclosed quote or bracket runs to the end of the line (the type says what is
 * wrong), never into the next one. */
static spool_status spool__parse_line(spool__parser *p, const char *line, const char *end) {
  const char *c, *entry = line;
  int depth = 0, quoted = 0;
  spool_status st;
  for (c = line;; c++) {
    if (c == end || (!quoted && (*c == '#' || (*c == ',' && depth == 0)))) {
      if ((st = spool__apply(p, spool__span_of(entry, c))) != SPOOL_OK) return st;
      if (c == end || *c == '#') return SPOOL_OK;
      entry = c + 1;
    } else if (*c == '"') {
      quoted = !quoted;
    } else if (quoted) {
      continue;
    } else if (*c == '[') {
      depth++;
    } else if (*c == ']' && depth > 0) {
      depth--;
    }
  }
}

static spool_status spool__parse_text(spool_config *cfg, const char *text, size_t len,
                                      const spool__source *src) {
  spool_config work = *cfg;
  spool__parser p;
  const char *line = text, *end = text + len;
  spool_status st;

  p.src = src;
  p.line = 0;
  p.cfg = &work;
  for (;;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    p.line++;
    p.prev = NULL;
    if ((st = spool__parse_line(&p, line, nl ? nl : end)) != SPOOL_OK) return st;
    if (nl == NULL) break;
    line = nl + 1;
  }
  *cfg = work;
  return SPOOL_OK;
}

/* ---- the public functions ------------------------------------------------------------------- */

void spool_config_init(spool_config *cfg) {
  if (cfg == NULL) return; /* documented as a caller error; a no-op beats a crash */
  memset(cfg, 0, sizeof *cfg);
  cfg->device = 0;
  cfg->release_threshold = UINT64_MAX; /* keep everything, as CCCL's device_memory_pool does */
  cfg->reserve = 0;
  cfg->max_size = 0;
  cfg->reuse_follow_event_dependencies = true; /* CUDA's own defaults for a new pool */
  cfg->reuse_allow_opportunistic = true;
  cfg->reuse_allow_internal_dependencies = true;
  cfg->peer_access_count = 0;
  cfg->pool = SPOOL_POOL_OWN;
  cfg->track = SPOOL_TRACK_COUNTS; /* cheapest level that catches double frees and strays */
  cfg->report[0] = '\0';          /* SPOOL_REPORT, else stderr */
  cfg->oom_retries = 2;
  cfg->poison = false;
  cfg->cache = true;
  cfg->front_limit = SPOOL_FRONT_LIMIT_DEFAULT;
  cfg->front_brief = true;
  cfg->heap_max_block = SPOOL_HEAP_MAX_BLOCK_LIMIT;
  cfg->chunk_idle = SPOOL_CHUNK_IDLE_DEFAULT;
  cfg->fence_every = SPOOL_FENCE_EVERY_DEFAULT;
  cfg->quarantine = SPOOL_QUARANTINE_DEFAULT;
  cfg->capture_check = true;
  cfg->cache_owner = true;
  cfg->ipc = SPOOL_IPC_NONE;
  cfg->nvtx = true;
}

spool_status spool_config_parse(spool_config *cfg, const char *text) {
  static const spool__source src = {"config", 0};
  if (cfg == NULL) return spool__fail(SPOOL_ERR_INVALID, "spool_config_parse: cfg is NULL");
  if (text == NULL) return spool__fail(SPOOL_ERR_INVALID, "spool_config_parse: text is NULL");
  return spool__parse_text(cfg, text, strlen(text), &src);
}

/* errno in words, without strerror's shared buffer. */
static const char *spool__errno_text(int err, char *buf, size_t len) {
#if defined(_GNU_SOURCE) && defined(__GLIBC__)
  return strerror_r(err, buf, len); /* the GNU variant, if a build asks for it */
#else
  if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
  return buf;
#endif
}

static spool_status spool__io_fail(const char *what, const char *path, int err) {
  char msg[128];
  return spool__fail(SPOOL_ERR_IO, "spool_config_load: cannot %s '%s': %s", what, path,
                     spool__errno_text(err, msg, sizeof msg));
}

/* A config is a few lines: a file past this is not one (/dev/zero, a log, a device). */
#define SPOOL__CONFIG_FILE_MAX ((size_t)1 << 20)

/* Reads the file into a NUL-terminated malloc'd buffer, up to its first NUL byte (which the
 * caller refuses, with its line) or SPOOL__CONFIG_FILE_MAX bytes. */
static spool_status spool__read_file(const char *path, char **text, size_t *len) {
  FILE *f = fopen(path, "rb");
  size_t cap = 4096, n = 0;
  char *buf;
  if (f == NULL) return spool__io_fail("open", path, errno);
  buf = malloc(cap);
  while (buf != NULL) {
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    bool nul = memchr(buf + n, '\0', got) != NULL;
    n += got;
    if (!nul && n > SPOOL__CONFIG_FILE_MAX) {
      fclose(f);
      free(buf);
      return spool__fail(SPOOL_ERR_CONFIG, "spool_config_load: '%s' is larger than 1 MiB: not "
                         "a config file", path);
    }
    if (nul || n < cap - 1) break; /* a NUL, the end of file or an error: ferror says which */
    if (cap > SIZE_MAX / 2) { /* cannot grow further */
      free(buf);
      buf = NULL;
      break;
    }
    {
      char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  if (buf == NULL) {
    fclose(f);
    return spool__fail(SPOOL_ERR_HOST_OOM, "spool_config_load: out of host memory reading '%s'",
                       path);
  }
  if (ferror(f)) {
    int err = errno;
    fclose(f);
    free(buf);
    return spool__io_fail("read", path, err); /* e.g. EISDIR: fopen accepts a directory */
  }
  fclose(f);
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return SPOOL_OK;
}

spool_status spool_config_load(spool_config *cfg, const char *path) {
  spool__source src;
  char *text = NULL;
  const char *start, *nul;
  size_t len = 0;
  spool_status st;

  if (cfg == NULL) return spool__fail(SPOOL_ERR_INVALID, "spool_config_load: cfg is NULL");
  if (path == NULL) return spool__fail(SPOOL_ERR_INVALID, "spool_config_load: path is NULL");
  if ((st = spool__read_file(path, &text, &len)) != SPOOL_OK) return st;
  src.name = path;
  src.is_file = 1;
  start = text;
  if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) start += 3; /* editors' UTF-8 mark */
  nul = memchr(start, '\0', len - (size_t)(start - text));
  if (nul != NULL) {
    unsigned line = 1;
    const char *c;
    for (c = start; c < nul; c++) line += *c == '\n';
    st = spool__fail(SPOOL_ERR_CONFIG, "%s:%u: contains a NUL byte (not a text file?)", path,
                     line);
  } else {
    st = spool__parse_text(cfg, start, len - (size_t)(start - text), &src);
  }
  free(text);
  return st;
}

spool_status spool_config_from_env(spool_config *cfg) {
  static const spool__source src = {"SPOOL_CONF", 0};
  const char *text;
  if (cfg == NULL) return spool__fail(SPOOL_ERR_INVALID, "spool_config_from_env: cfg is NULL");
  text = getenv("SPOOL_CONF");
  if (text == NULL || text[0] == '\0') return SPOOL_OK;
  if (strncmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3; /* a UTF-8 mark, as in files */
  return spool__parse_text(cfg, text, strlen(text), &src);
}

/* ---- validation ----------------------------------------------------------------------------- */

/* "2.00 GiB (2147483648 bytes)": readable, and exact where two values would print alike. */
static const char *spool__size_words(uint64_t v, char out[64]) {
  char human[SPOOL__SIZE_TEXT];
  spool__format_size(v, human);
  if (v < 1024 || v == UINT64_MAX)
    snprintf(out, 64, "%s", human);
  else
    snprintf(out, 64, "%s (%llu bytes)", human, (unsigned long long)v);
  return out;
}

static spool_status spool__validate_sizes(const spool_config *cfg) {
  char a[64], b[64];
  if (cfg->reserve > cfg->release_threshold)
    return spool__fail(SPOOL_ERR_CONFIG,
                       "config: reserve %s is more than release_threshold %s: the first "
                       "synchronize would give it back",
                       spool__size_words(cfg->reserve, a),
                       spool__size_words(cfg->release_threshold, b));
  if (cfg->max_size != 0 && cfg->reserve > cfg->max_size)
    return spool__fail(SPOOL_ERR_CONFIG,
                       "config: reserve %s is more than max_size %s: the pool may never hold it",
                       spool__size_words(cfg->reserve, a), spool__size_words(cfg->max_size, b));
  return SPOOL_OK;
}

static spool_status spool__validate_peers(const spool_config *cfg) {
  int i, j;
  if (cfg->peer_access_count < 0 || cfg->peer_access_count > SPOOL_MAX_PEERS)
    return spool__fail(SPOOL_ERR_CONFIG, "config: peer_access_count is %d (expected 0 to %d)",
                       cfg->peer_access_count, SPOOL_MAX_PEERS);
  for (i = 0; i < cfg->peer_access_count; i++) {
    if (cfg->peer_access[i] < 0)
      return spool__fail(SPOOL_ERR_CONFIG,
                         "config: peer_access[%d] is %d (expected a device ordinal >= 0)", i,
                         cfg->peer_access[i]);
    for (j = 0; j < i; j++) {
      if (cfg->peer_access[j] == cfg->peer_access[i])
        return spool__fail(SPOOL_ERR_CONFIG,
                           "config: peer_access lists device %d twice (peer_access[%d] and "
                           "peer_access[%d])",
                           cfg->peer_access[i], j, i);
    }
  }
  return SPOOL_OK;
}

/* A path must end within its array, and be writable as config text (format's promise). */
static spool_status spool__validate_path(const char *path, const char *key) {
  size_t n = strnlen(path, SPOOL_REPORT_PATH_MAX), i;
  if (n == SPOOL_REPORT_PATH_MAX)
    return spool__fail(SPOOL_ERR_CONFIG,
                       "config: %s has no terminating NUL within its %d bytes", key,
                       SPOOL_REPORT_PATH_MAX);
  for (i = 0; i < n; i++) {
    if (path[i] == '"' || path[i] == '\n')
      return spool__fail(SPOOL_ERR_CONFIG,
                         "config: %s holds %s at byte %zu (a %s path cannot hold '\"' "
                         "or a line break: config text could not give it)", key,
                         path[i] == '"' ? "'\"'" : "a line break", i, key);
  }
  return SPOOL_OK;
}

spool_status spool_config_validate(const spool_config *cfg) {
  spool_status st;
  if (cfg == NULL) return spool__fail(SPOOL_ERR_INVALID, "spool_config_validate: cfg is NULL");
  if (cfg->device < 0)
    return spool__fail(SPOOL_ERR_CONFIG, "config: device is %d (expected a device ordinal >= 0)",
                       cfg->device);
  if ((st = spool__validate_sizes(cfg)) != SPOOL_OK) return st;
  if ((st = spool__validate_peers(cfg)) != SPOOL_OK) return st;
  if (cfg->pool != SPOOL_POOL_OWN && cfg->pool != SPOOL_POOL_DEFAULT)
    return spool__fail(SPOOL_ERR_CONFIG, "config: pool is %d (expected SPOOL_POOL_OWN or "
                       "SPOOL_POOL_DEFAULT)", (int)cfg->pool);
  if (cfg->track != SPOOL_TRACK_OFF && cfg->track != SPOOL_TRACK_COUNTS &&
      cfg->track != SPOOL_TRACK_FULL)
    return spool__fail(SPOOL_ERR_CONFIG, "config: track is %d (expected SPOOL_TRACK_OFF, "
                       "SPOOL_TRACK_COUNTS or SPOOL_TRACK_FULL)", (int)cfg->track);
  /* Poisoning a freed buffer needs its size, which only the table knows. */
  if (cfg->poison && cfg->track == SPOOL_TRACK_OFF)
    return spool__fail(SPOOL_ERR_CONFIG, "config: poison=on needs the buffers' sizes, which "
                       "track=off does not keep (use track=counts or full)");
  if (cfg->oom_retries > SPOOL__OOM_RETRIES_MAX)
    return spool__fail(SPOOL_ERR_CONFIG, "config: oom_retries is %u (expected 0 to %d)",
                       cfg->oom_retries, SPOOL__OOM_RETRIES_MAX);
  if ((st = spool__validate_path(cfg->report, "report")) != SPOOL_OK) return st;
  if ((st = spool__validate_path(cfg->trace, "trace")) != SPOOL_OK) return st;
  if (cfg->heap_max_block > SPOOL_HEAP_MAX_BLOCK_LIMIT) {
    char have[SPOOL__SIZE_TEXT];
    return spool__fail(SPOOL_ERR_CONFIG, "config: heap_max_block is %s (expected at most 1 "
                       "TiB; larger blocks are better served by the pool itself)",
                       spool__format_size(cfg->heap_max_block, have));
  }
  if (cfg->quarantine > SPOOL__QUARANTINE_MAX)
    return spool__fail(SPOOL_ERR_CONFIG, "config: quarantine is %u (expected 0 to %d)",
                       cfg->quarantine, SPOOL__QUARANTINE_MAX);
  if (cfg->fence_every == 0 || cfg->fence_every > SPOOL__FENCE_EVERY_MAX)
    return spool__fail(SPOOL_ERR_CONFIG, "config: fence_every is %u (expected 1 to %d)",
                       cfg->fence_every, SPOOL__FENCE_EVERY_MAX);
  if (cfg->chunk_idle > SPOOL__CHUNK_IDLE_MAX)
    return spool__fail(SPOOL_ERR_CONFIG, "config: chunk_idle is %u (expected 0 to %d)",
                       cfg->chunk_idle, SPOOL__CHUNK_IDLE_MAX);
  if ((st = spool__ipc_validate(cfg)) != SPOOL_OK) return st;
  /* max_size has no lower bound here: CUDA rounds it to its granularity, and any floor spool
   * picked would be a guess. Whether CUDA can honour it is spool_pool_create's question. */
  return SPOOL_OK;
}

/* ---- formatting ----------------------------------------------------------------------------- */

static void spool__write_config(const spool_config *cfg, spool__writer *w) {
  size_t i;
  for (i = 0; i < SPOOL__NKEYS; i++) {
    spool__put(w, "%s=", spool__keys[i].name);
    spool__keys[i].type->format(&spool__keys[i], cfg, w);
    spool__put(w, "\n");
  }
}

/* Both entry points: with needed NULL (spool_config_format) even len 0 is a buffer too small. */
static spool_status config_format(const spool_config *cfg, char *buf, size_t len,
                                  size_t *needed, const char *ctx) {
  spool__writer w = {NULL, 0, 0};
  if (needed) *needed = 0;
  if (cfg == NULL) return spool__fail(SPOOL_ERR_INVALID, "%s: cfg is NULL", ctx);
  if (buf == NULL && (len || !needed))
    return spool__fail(SPOOL_ERR_INVALID, "%s: buf is NULL, len %zu", ctx, len);
  spool__write_config(cfg, &w); /* measure first: buf stays untouched on failure */
  if (needed) *needed = w.used + 1;
  if (needed && len == 0) return SPOOL_OK;
  if (w.used >= len)
    return spool__fail(SPOOL_ERR_INVALID, "%s: buf has %zu bytes, the text needs %zu (NUL "
                       "included)", ctx, len, w.used + 1);
  w.buf = buf;
  w.cap = len;
  w.used = 0;
  spool__write_config(cfg, &w);
  return SPOOL_OK;
}

spool_status spool_config_format(const spool_config *cfg, char *buf, size_t len) {
  return config_format(cfg, buf, len, NULL, "spool_config_format");
}

spool_status spool_config_format_sized(const spool_config *cfg, char *buf, size_t len,
                                       size_t *needed) {
  static const char ctx[] = "spool_config_format_sized";
  if (!needed) return spool__fail(SPOOL_ERR_INVALID, "%s: needed is NULL", ctx);
  return config_format(cfg, buf, len, needed, ctx);
}
