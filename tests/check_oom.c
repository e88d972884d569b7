/* check_oom: the out-of-memory policy (trim this and the other pools of the device, synchronize,
 * retry oom_retries times, then the user's handler, then SPOOL_ERR_OOM with the numbers),
 * spool_set_oom_handler, and spool_stats_json (parsed by a small strict JSON reader).
 *
 * Built twice: check_oom_sim (cudasim, SPOOL_TEST_SIM) and check_oom_gpu (real CUDA). The tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too: they use a pool limited by
 * max_size (multiples of 32 MiB, the granularity CUDA rounds max_size to on the H200) and never
 * assert CUDA's exact rounding of reserved memory. */
#include "test_main.h"

#include <stdbool.h>

/* ---- helpers ------------------------------------------------------------------------------- */

/* The policy's own steps are tested without stream caches, whose flush (a device synchronize
 * when they hold blocks) would come first; check_cache tests that flush. */
static spool_config uncached_config(void) {
  spool_config cfg = test_config();
  cfg.cache = false;
  return cfg;
}

static spool_pool *uncached_pool(void) {
  spool_config cfg = uncached_config();
  return test_pool_create(&cfg);
}

static spool_pool *pool_limited(uint64_t max_size) {
  spool_config cfg = uncached_config();
  cfg.max_size = max_size;
  return test_pool_create(&cfg);
}

#define CK_MSG_HAS(word) CK_LAST_ERROR_HAS(word)

/* The relations between the failure and OOM counters that hold whatever happened. */
static void check_oom_relations(const spool_stats *st) {
  ck_assert_uint_ge(st->alloc_failures, st->ooms);
  ck_assert_uint_eq(st->allocs - st->frees, st->buffers_in_use);
}

/* What an OOM handler saw and what it does. Nothing here asserts (the handler runs inside
 * spool): the test checks the record afterwards. */
typedef struct oom_record {
  int calls;
  int ret;                /* what the handler returns */
  spool_pool *pool;       /* arguments of the last call */
  size_t bytes;
  cudaStream_t stream;
  void *user;
  void *to_free;          /* freed (spool_free on free_stream) at the first call, if set */
  cudaStream_t free_stream;
  bool trim;              /* spool_trim(pool, 0) at every call */
  int frees, trims;
  spool_status free_status, trim_status;
} oom_record;

static int oom_handler(spool_pool *pool, size_t bytes, cudaStream_t stream, void *user) {
  oom_record *r = (oom_record *)user;
  r->calls++;
  r->pool = pool;
  r->bytes = bytes;
  r->stream = stream;
  r->user = user;
  if (r->to_free) {
    r->free_status = spool_free(pool, r->to_free, r->free_stream);
    r->to_free = NULL;
    r->frees++;
  }
  if (r->trim) {
    r->trim_status = spool_trim(pool, 0);
    r->trims++;
  }
  return r->ret;
}

static oom_record oom_record_init(int ret) {
  oom_record r;
  memset(&r, 0, sizeof r);
  r.ret = ret;
  r.free_status = SPOOL_STATUS_COUNT;
  r.trim_status = SPOOL_STATUS_COUNT;
  return r;
}

static void check_handler_args(const oom_record *r, spool_pool *pool, size_t bytes,
                               cudaStream_t stream) {
  ck_assert_ptr_eq(r->pool, pool);
  ck_assert_uint_eq(r->bytes, bytes);
  ck_assert_ptr_eq((void *)r->stream, (void *)stream);
  ck_assert_ptr_eq(r->user, (const void *)r);
}

/* An allocation that must fail with want: *ptr comes back NULL. */
static void alloc_fails(spool_pool *pool, size_t size, cudaStream_t stream, spool_status want) {
  void *p = TEST_SENTINEL;
  CK_STATUS(spool_alloc(pool, &p, size, stream), want);
  ck_assert_ptr_null(p);
}

static void *alloc_ok(spool_pool *pool, size_t size, cudaStream_t stream) {
  void *p = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(pool, &p, size, stream));
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_ne(p, TEST_SENTINEL);
  return p;
}

/* ---- a tiny strict JSON reader ----------------------------------------------------------------
 * One object whose values are unsigned integers or null: `{`, members `"key":value` separated
 * by commas, `}`, then the end of the string. Insignificant JSON whitespace is allowed between
 * tokens; anything else (strings as values, signs, fractions, exponents, leading zeros,
 * escapes in keys, trailing commas, nesting, trailing text) is rejected. */

#define JSON_MAX_MEMBERS 64
#define JSON_MAX_KEY 64

typedef struct json_member {
  char key[JSON_MAX_KEY];
  bool is_null;
  bool is_list; /* a list of flat objects ("streams"): value counts them */
  uint64_t value;
} json_member;

typedef struct json_doc {
  json_member m[JSON_MAX_MEMBERS];
  int n;
} json_doc;

static const char *json_ws(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  return s;
}

static bool json_key(const char **sp, char out[JSON_MAX_KEY]) {
  const char *s = *sp;
  if (*s != '"') return false;
  s++;
  size_t n = 0;
  while (*s != '"') {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c > 0x7E || c == '\\') return false; /* also the end of the string */
    if (n + 1 >= JSON_MAX_KEY) return false;
    out[n++] = (char)c;
    s++;
  }
  if (n == 0) return false;
  out[n] = '\0';
  *sp = s + 1;
  return true;
}

static bool json_object(const char **sp, json_doc *d);

/* "[{...},{...}]": objects of numbers and nulls; m->value is their count. */
static bool json_list(const char **sp, json_member *m) {
  const char *s = json_ws(*sp + 1);
  m->is_list = true;
  m->value = 0;
  if (*s == ']') {
    *sp = s + 1;
    return true;
  }
  for (;;) {
    json_doc item;
    if (!json_object(&s, &item)) return false;
    m->value++;
    s = json_ws(s);
    if (*s == ']') {
      *sp = s + 1;
      return true;
    }
    if (*s++ != ',') return false;
    s = json_ws(s);
  }
}

static bool json_value(const char **sp, json_member *m) {
  const char *s = *sp;
  if (*s == '[') return json_list(sp, m);
  if (strncmp(s, "null", 4) == 0) {
    m->is_null = true;
    m->value = 0;
    *sp = s + 4;
    return true;
  }
  if (*s < '0' || *s > '9') return false;
  if (*s == '0' && s[1] >= '0' && s[1] <= '9') return false; /* leading zero */
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') {
    uint64_t d = (uint64_t)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return false; /* overflow */
    v = v * 10 + d;
    s++;
  }
  m->is_null = false;
  m->value = v;
  *sp = s;
  return true;
}

/* One object of members, from *sp (at its '{') to just past its '}'. */
static bool json_object(const char **sp, json_doc *d) {
  const char *s = *sp;
  memset(d, 0, sizeof *d);
  if (*s++ != '{') return false;
  s = json_ws(s);
  if (*s == '}') {
    *sp = s + 1;
    return true;
  }
  for (;;) {
    if (d->n >= JSON_MAX_MEMBERS) return false;
    json_member *m = &d->m[d->n];
    s = json_ws(s);
    if (!json_key(&s, m->key)) return false;
    s = json_ws(s);
    if (*s++ != ':') return false;
    s = json_ws(s);
    if (!json_value(&s, m)) return false;
    d->n++;
    s = json_ws(s);
    if (*s == ',') {
      s++;
      continue;
    }
    if (*s != '}') return false;
    *sp = s + 1;
    return true;
  }
}

static bool json_parse(const char *s, json_doc *d) {
  s = json_ws(s);
  return json_object(&s, d) && *json_ws(s) == '\0';
}

/* The member named key, which must be there exactly once. */
static const json_member *json_get(const json_doc *d, const char *key) {
  const json_member *found = NULL;
  int count = 0;
  for (int i = 0; i < d->n; i++)
    if (strcmp(d->m[i].key, key) == 0) {
      found = &d->m[i];
      count++;
    }
  ck_assert_msg(count == 1, "JSON key \"%s\" appears %d times", key, count);
  return found;
}

static uint64_t json_number(const json_doc *d, const char *key) {
  const json_member *m = json_get(d, key);
  ck_assert_msg(!m->is_null, "JSON key \"%s\" is null", key);
  return m->value;
}

/* Every spool_stats field (size excluded), by name. */
#define STAT_FIELD(name) {#name, offsetof(spool_stats, name)}
static const struct {
  const char *name;
  size_t offset;
} stat_fields[] = {
    STAT_FIELD(bytes_in_use),      STAT_FIELD(bytes_in_use_peak),   STAT_FIELD(buffers_in_use),
    STAT_FIELD(buffers_in_use_peak), STAT_FIELD(bytes_reserved),    STAT_FIELD(bytes_reserved_peak),
    STAT_FIELD(allocs),            STAT_FIELD(frees),               STAT_FIELD(bytes_used),
    STAT_FIELD(bytes_used_peak),   STAT_FIELD(bytes_allocated),     STAT_FIELD(alloc_failures),
    STAT_FIELD(ooms),              STAT_FIELD(trims),               STAT_FIELD(oom_retries),
    STAT_FIELD(oom_recoveries),    STAT_FIELD(oom_handler_calls),   STAT_FIELD(bad_frees),
    STAT_FIELD(cache_hits),        STAT_FIELD(cache_misses),        STAT_FIELD(bytes_cached),
    STAT_FIELD(cache_flushes),     STAT_FIELD(bytes_front),         STAT_FIELD(bytes_heap),
    STAT_FIELD(largest_free_block), STAT_FIELD(chunk_allocs),       STAT_FIELD(chunk_frees),
    STAT_FIELD(fences),
};
#undef STAT_FIELD
#define STAT_FIELD_COUNT ((int)(sizeof stat_fields / sizeof stat_fields[0]))

static uint64_t stat_value(const spool_stats *st, size_t offset) {
  uint64_t v;
  memcpy(&v, (const char *)st + offset, sizeof v);
  return v;
}

/* The JSON of pool into a malloc'd string. */
static char *stats_json(spool_pool *pool) {
  size_t len = 8192;
  char *buf = malloc(len);
  ck_assert_ptr_nonnull(buf);
  memset(buf, 'X', len);
  CK_SPOOL(spool_stats_json(pool, buf, len));
  ck_assert_msg(memchr(buf, '\0', len) != NULL, "spool_stats_json wrote no NUL");
  return buf;
}

/* The size "needed" that a too-small spool_stats_json message gives. */
static size_t needed_from_message(void) {
  const char *msg = spool_last_error();
  const char *at = strstr(msg, "needs ");
  ck_assert_msg(at != NULL, "message \"%s\" does not say what is needed", msg);
  at += strlen("needs ");
  ck_assert_msg(*at >= '0' && *at <= '9', "message \"%s\": no number after \"needs\"", msg);
  char *end = NULL;
  unsigned long long v = strtoull(at, &end, 10);
  ck_assert_ptr_ne(end, at);
  return (size_t)v;
}

/* ---- tests on the GPU and in sim: a pool limited by max_size --------------------------------- */

START_TEST(set_handler_null_pool) {
  oom_record r = oom_record_init(1);
  CK_STATUS(spool_set_oom_handler(NULL, oom_handler, &r), SPOOL_ERR_INVALID);
  CK_MSG_HAS("spool_set_oom_handler");
  CK_MSG_HAS("NULL");
  CK_STATUS(spool_set_oom_handler(NULL, NULL, NULL), SPOOL_ERR_INVALID);
  spool_pool *pool = uncached_pool();
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  CK_SPOOL(spool_set_oom_handler(pool, NULL, NULL));
  CK_SPOOL(spool_set_oom_handler(pool, NULL, &r)); /* a user pointer without a handler: none */
  ck_assert_int_eq(r.calls, 0);
  test_pool_destroy(pool);
}
END_TEST

/* 2 x 32 MiB fill a 64 MiB pool; the third fails with every number in the message. */
START_TEST(limit_oom_message) {
  spool_pool *pool = pool_limited(64 * MiB);
  cudaStream_t s = test_stream_create();
  void *a = alloc_ok(pool, 32 * MiB, s);
  void *b = alloc_ok(pool, 32 * MiB, s);
  CK_CUDA(cudaStreamSynchronize(s));
  alloc_fails(pool, 32 * MiB, s, SPOOL_ERR_OOM);
  CK_MSG_HAS("spool_alloc");
  CK_MSG_HAS("out of device memory");
  CK_MSG_HAS("asked 32.00 MiB");
  CK_MSG_HAS("64.00 MiB in use");
  CK_MSG_HAS("reserved");
  CK_MSG_HAS("limit 64.00 MiB");
  CK_MSG_HAS("free of");
  CK_MSG_HAS("after 2 retries");
  CK_MSG_HAS("device 0");
  char stream_text[64];
  snprintf(stream_text, sizeof stream_text, "stream %p", (void *)s);
  CK_MSG_HAS(stream_text);
#ifdef SPOOL_TEST_SIM
  CK_MSG_HAS("64.00 MiB reserved");
#endif
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 1);
  ck_assert_uint_ge(st.oom_retries, 1);
  ck_assert_uint_eq(st.oom_recoveries, 0);
  ck_assert_uint_eq(st.oom_handler_calls, 0);
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.bytes_in_use, 64 * MiB);
  /* The pool is usable afterwards: after a free the same request fits. */
  CK_SPOOL(spool_free(pool, b, s));
  b = alloc_ok(pool, 32 * MiB, s);
  CK_SPOOL(spool_free(pool, a, s));
  CK_SPOOL(spool_free(pool, b, s));
  st = test_stats(pool);
  ck_assert_uint_eq(st.allocs, 3);
  ck_assert_uint_eq(st.alloc_failures, 1);
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* The handler frees one of the two buffers and asks for another try: the third allocation
 * succeeds. It may also trim the pool. */
START_TEST(limit_handler_frees) {
  spool_pool *pool = pool_limited(64 * MiB);
  cudaStream_t s = test_stream_create();
  void *a = alloc_ok(pool, 32 * MiB, s);
  void *b = alloc_ok(pool, 32 * MiB, s);
  oom_record r = oom_record_init(1);
  r.to_free = a;
  r.free_stream = s;
  r.trim = true;
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  void *c = alloc_ok(pool, 32 * MiB, s);
  ck_assert_int_eq(r.calls, 1);
  check_handler_args(&r, pool, 32 * MiB, s);
  ck_assert_int_eq(r.frees, 1);
  ck_assert_int_eq(r.free_status, SPOOL_OK);
  ck_assert_int_eq(r.trim_status, SPOOL_OK);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.oom_handler_calls, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  ck_assert_uint_eq(st.alloc_failures, 0);
  ck_assert_uint_eq(st.ooms, 0);
  ck_assert_uint_eq(st.allocs, 3);
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_ge(st.trims, 1);
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.bytes_in_use, 64 * MiB);
  CK_SPOOL(spool_free(pool, b, s));
  CK_SPOOL(spool_free(pool, c, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* A handler that keeps asking for another try without freeing anything is called exactly
 * SPOOL_OOM_HANDLER_CALLS times; then the allocation fails. */
START_TEST(limit_handler_bounded) {
  spool_pool *pool = pool_limited(64 * MiB);
  cudaStream_t s = test_stream_create();
  void *a = alloc_ok(pool, 32 * MiB, s);
  void *b = alloc_ok(pool, 32 * MiB, s);
  oom_record r = oom_record_init(1);
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  alloc_fails(pool, 32 * MiB, s, SPOOL_ERR_OOM);
  CK_MSG_HAS("asked 32.00 MiB");
  CK_MSG_HAS("limit 64.00 MiB");
  ck_assert_int_eq(r.calls, SPOOL_OOM_HANDLER_CALLS);
  check_handler_args(&r, pool, 32 * MiB, s);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.oom_handler_calls, SPOOL_OOM_HANDLER_CALLS);
  ck_assert_uint_eq(st.oom_recoveries, 0);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 1);
  /* A handler that declines is called once. */
  r = oom_record_init(0);
  alloc_fails(pool, 32 * MiB, s, SPOOL_ERR_OOM);
  ck_assert_int_eq(r.calls, 1);
  st = test_stats(pool);
  ck_assert_uint_eq(st.oom_handler_calls, SPOOL_OOM_HANDLER_CALLS + 1);
  ck_assert_uint_eq(st.alloc_failures, 2);
  ck_assert_uint_eq(st.ooms, 2);
  /* Removed: not called any more. */
  CK_SPOOL(spool_set_oom_handler(pool, NULL, NULL));
  r = oom_record_init(1);
  alloc_fails(pool, 32 * MiB, s, SPOOL_ERR_OOM);
  ck_assert_int_eq(r.calls, 0);
  st = test_stats(pool);
  ck_assert_uint_eq(st.oom_handler_calls, SPOOL_OOM_HANDLER_CALLS + 1);
  ck_assert_uint_eq(st.ooms, 3);
  CK_SPOOL(spool_free(pool, a, s));
  CK_SPOOL(spool_free(pool, b, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* ---- spool_stats_json ------------------------------------------------------------------------ */

START_TEST(json_reader_is_strict) {
  json_doc d;
  ck_assert(json_parse("{}", &d) && d.n == 0);
  ck_assert(json_parse("{\"a\":0,\"b_1\":18446744073709551615,\"c\":null}", &d));
  ck_assert_int_eq(d.n, 3);
  ck_assert_uint_eq(d.m[1].value, UINT64_MAX);
  ck_assert(d.m[2].is_null);
  ck_assert(json_parse(" { \"a\" : 1 , \"b\" : null } ", &d));
  ck_assert(json_parse("{\"s\":[{\"x\":1},{\"x\":null}],\"t\":[]}", &d)); /* lists */
  ck_assert(d.m[0].is_list && d.m[0].value == 2 && d.m[1].is_list && d.m[1].value == 0);
  static const char *const bad[] = {
      "",        "{",           "}",             "{\"a\":1",       "{\"a\":1,}",  "{,}",
      "{\"a\"}", "{\"a\":}",    "{a:1}",         "{\"a\":-1}",     "{\"a\":01}",  "{\"a\":1.5}",
      "{\"a\":1e3}", "{\"a\":\"1\"}", "{\"a\":true}", "{\"a\":nul}", "{\"a\":{}}",  "{\"\":1}",
      "{\"a\\\"\":1}", "{\"a\":1}x", "{\"a\":1}{}", "{\"a\":18446744073709551616}", "[1]",
      "{\"a\":[1]}", "{\"a\":[{}}", "{\"a\":[{},]}",
      "{\"a\" 1}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(!json_parse(bad[i], &d), "accepted %s", bad[i]);
}
END_TEST

START_TEST(json_matches_stats) {
  spool_pool *pool = uncached_pool();
  cudaStream_t s = test_stream_create();
  void *a = alloc_ok(pool, 1 * MiB, s);
  void *b = alloc_ok(pool, 3 * MiB + 5, s);
  void *c = alloc_ok(pool, 512, s);
  CK_SPOOL(spool_free(pool, b, s));
  CK_SPOOL(spool_trim(pool, 0));
  CK_STATUS(spool_free(pool, b, s), SPOOL_ERR_DOUBLE_FREE); /* bad_frees 1 */
  CK_CUDA(cudaStreamSynchronize(s));
  spool_stats st = test_stats(pool);
  char *json = stats_json(pool);
  json_doc d;
  ck_assert_msg(json_parse(json, &d), "not the JSON expected: %s", json);
  ck_assert_int_eq(d.n, STAT_FIELD_COUNT + 4);
  for (int i = 0; i < STAT_FIELD_COUNT; i++) {
    uint64_t want = stat_value(&st, stat_fields[i].offset);
    uint64_t got = json_number(&d, stat_fields[i].name);
    ck_assert_msg(got == want, "JSON %s is %" PRIu64 ", spool_stats_get says %" PRIu64,
                  stat_fields[i].name, got, want);
  }
  ck_assert_uint_eq(json_number(&d, "device"), 0);
  uint64_t dev_free = json_number(&d, "device_free");
  uint64_t dev_total = json_number(&d, "device_total");
  ck_assert_uint_gt(dev_total, 0);
  ck_assert_uint_le(dev_free, dev_total);
  size_t free_b = 0, total_b = 0;
  CK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  ck_assert_uint_eq(dev_total, total_b);
#ifdef SPOOL_TEST_SIM
  ck_assert_uint_eq(dev_free, free_b);
#endif
  /* A sample of values known without CUDA's rounding. */
  ck_assert_uint_eq(json_number(&d, "allocs"), 3);
  ck_assert_uint_eq(json_number(&d, "frees"), 1);
  ck_assert_uint_eq(json_number(&d, "buffers_in_use"), 2);
  ck_assert_uint_eq(json_number(&d, "bytes_in_use"), 1 * MiB + 512);
  ck_assert_uint_eq(json_number(&d, "bytes_allocated"), 4 * MiB + 517);
  ck_assert_uint_eq(json_number(&d, "bad_frees"), 1);
  ck_assert_uint_eq(json_number(&d, "trims"), 1);
  free(json);
  CK_SPOOL(spool_free(pool, a, s));
  CK_SPOOL(spool_free(pool, c, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

START_TEST(json_len_too_small) {
  spool_pool *pool = uncached_pool();
  void *a = alloc_ok(pool, 2 * MiB, NULL);
  CK_CUDA(cudaDeviceSynchronize());
  char *json = stats_json(pool);
  size_t needed = strlen(json) + 1;
  char *buf = malloc(needed + 16);
  ck_assert_ptr_nonnull(buf);
  for (size_t len = 0; len < needed; len++) {
    memset(buf, 'X', needed + 16);
    CK_STATUS(spool_stats_json(pool, buf, len), SPOOL_ERR_INVALID);
    CK_MSG_HAS("spool_stats_json");
    ck_assert_msg(needed_from_message() == needed, "len %zu: message \"%s\", needed %zu", len,
                  spool_last_error(), needed);
    if (len > 0) ck_assert_int_eq(buf[0], '\0');
    else ck_assert_int_eq(buf[0], 'X');
    for (size_t i = len; i < needed + 16; i++)
      ck_assert_msg(buf[i] == 'X', "len %zu: byte %zu written", len, i);
  }
  memset(buf, 'X', needed + 16);
  CK_SPOOL(spool_stats_json(pool, buf, needed));
  // device_free comes from cudaMemGetInfo and moves when other processes (a parallel ctest)
  // allocate between the two calls: compare the pool's own fields, before it.
  const char *tail = strstr(json, "\"device_free\"");
  ck_assert_ptr_nonnull(tail);
  ck_assert_int_eq(strncmp(buf, json, (size_t)(tail - json)), 0);
  ck_assert_int_eq(buf[needed - 1], '\0');
  ck_assert_int_eq(buf[needed], 'X');
  free(buf);
  free(json);
  CK_SPOOL(spool_free(pool, a, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* buf NULL with len 0 asks for the size: SPOOL_ERR_INVALID, nothing written, and the number in
 * the message is exactly what the JSON takes, its NUL included; a buffer of that size works. */
START_TEST(json_size_query) {
  spool_pool *pool = uncached_pool();
  void *a = alloc_ok(pool, 2 * MiB, NULL);
  CK_CUDA(cudaDeviceSynchronize());
  char *json = stats_json(pool);
  size_t needed = strlen(json) + 1;
  CK_STATUS(spool_stats_json(pool, NULL, 0), SPOOL_ERR_INVALID);
  CK_MSG_HAS("spool_stats_json");
  CK_MSG_HAS("the JSON needs");
  ck_assert_msg(needed_from_message() == needed, "message \"%s\", the JSON is %zu bytes: %s",
                spool_last_error(), needed - 1, json);
  /* Asking again gives the same answer; then a buffer of exactly that size takes it. */
  CK_STATUS(spool_stats_json(pool, NULL, 0), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(needed_from_message(), needed);
  char *buf = malloc(needed + 1);
  ck_assert_ptr_nonnull(buf);
  memset(buf, 'X', needed + 1);
  CK_SPOOL(spool_stats_json(pool, buf, needed));
  // device_free comes from cudaMemGetInfo and moves when other processes (a parallel ctest)
  // allocate between the two calls: compare the pool's own fields, before it.
  const char *tail = strstr(json, "\"device_free\"");
  ck_assert_ptr_nonnull(tail);
  ck_assert_int_eq(strncmp(buf, json, (size_t)(tail - json)), 0);
  ck_assert_int_eq(buf[needed], 'X');
  free(buf);
  free(json);
  CK_SPOOL(spool_free(pool, a, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* spool_stats_json_sized(pool, NULL, 0, &n) is the size query: SPOOL_OK with n the JSON's
 * length and NUL, nothing written; a buffer of n bytes then takes it, and one byte less is
 * refused with n set all the same. */
START_TEST(json_sized_query_returns_the_size) {
  spool_pool *pool = uncached_pool();
  void *a = alloc_ok(pool, 2 * MiB, NULL);
  CK_CUDA(cudaDeviceSynchronize());
  size_t needed = 0;
  CK_SPOOL(spool_stats_json_sized(pool, NULL, 0, &needed));
  char *json = stats_json(pool);
  ck_assert_uint_eq(needed, strlen(json) + 1);
  char *buf = malloc(needed + 1);
  ck_assert_ptr_nonnull(buf);
  memset(buf, 'X', needed + 1);
  size_t again = 0;
  CK_SPOOL(spool_stats_json_sized(pool, buf, needed, &again));
  ck_assert_uint_eq(again, needed);
  ck_assert_int_eq(buf[needed - 1], '\0');
  ck_assert_int_eq(buf[needed], 'X');
  CK_SPOOL(spool_stats_json_sized(pool, buf, 0, &again)); /* len 0: a query whatever buf is */
  ck_assert_int_eq(buf[needed], 'X');
  again = 0;
  CK_STATUS(spool_stats_json_sized(pool, buf, needed - 1, &again), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(again, needed);
  ck_assert_int_eq(buf[0], '\0');
  CK_MSG_HAS("spool_stats_json_sized");
  free(buf);
  free(json);
  CK_SPOOL(spool_free(pool, a, NULL));
  test_pool_destroy(pool);
}
END_TEST

START_TEST(json_sized_null_arguments) {
  size_t needed = 99;
  char buf[64];
  CK_STATUS(spool_stats_json_sized(NULL, buf, sizeof buf, &needed), SPOOL_ERR_INVALID);
  CK_MSG_HAS("pool is NULL");
  ck_assert_uint_eq(needed, 0);
  spool_pool *pool = uncached_pool();
  CK_STATUS(spool_stats_json_sized(pool, NULL, 0, NULL), SPOOL_ERR_INVALID);
  CK_MSG_HAS("needed is NULL");
  needed = 99;
  CK_STATUS(spool_stats_json_sized(pool, NULL, 4096, &needed), SPOOL_ERR_INVALID);
  CK_MSG_HAS("buf is NULL, len 4096");
  ck_assert_uint_eq(needed, 0);
  test_pool_destroy(pool);
}
END_TEST

START_TEST(json_null_arguments) {
  char buf[64];
  CK_STATUS(spool_stats_json(NULL, buf, sizeof buf), SPOOL_ERR_INVALID);
  CK_MSG_HAS("spool_stats_json");
  CK_MSG_HAS("pool is NULL");
  spool_pool *pool = uncached_pool();
  CK_STATUS(spool_stats_json(pool, NULL, 4096), SPOOL_ERR_INVALID);
  CK_MSG_HAS("buf is NULL");
  /* NULL with len 0 asks for the size, as snprintf(NULL, 0, ...) would. */
  CK_STATUS(spool_stats_json(pool, NULL, 0), SPOOL_ERR_INVALID);
  CK_MSG_HAS("the JSON needs");
  test_pool_destroy(pool);
}
END_TEST

/* ---- sim only: each step of the policy, with injected failures -------------------------------- */

#ifdef SPOOL_TEST_SIM

static const char MALLOC[] = "cudaMallocFromPoolAsync";

typedef struct call_counts {
  long malloc, trim, sync;
} call_counts;

static call_counts counts_now(void) {
  call_counts c = {cudasim_calls(MALLOC), cudasim_calls("cudaMemPoolTrimTo"),
                   cudasim_calls("cudaDeviceSynchronize")};
  return c;
}

static spool_pool *pool_retries(unsigned retries) {
  spool_config cfg = uncached_config();
  cfg.oom_retries = retries;
  return test_pool_create(&cfg);
}

/* The first try fails: the pool trims (no synchronize yet) and the first retry succeeds. */
START_TEST(sim_first_retry_succeeds) {
  spool_pool *pool = uncached_pool();
  cudaStream_t s = test_stream_create();
  call_counts before = counts_now();
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  void *p = alloc_ok(pool, 1 * MiB, s);
  ck_assert_int_eq(cudasim_armed(), 0);
  call_counts after = counts_now();
  ck_assert_int_eq(after.malloc - before.malloc, 2);
  ck_assert_int_ge(after.trim - before.trim, 1);
  ck_assert_int_eq(after.sync - before.sync, 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.oom_retries, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  ck_assert_uint_eq(st.oom_handler_calls, 0);
  ck_assert_uint_eq(st.alloc_failures, 0);
  ck_assert_uint_eq(st.ooms, 0);
  ck_assert_uint_eq(st.allocs, 1);
  ck_assert_uint_eq(st.bytes_in_use, 1 * MiB);
  CK_SPOOL(spool_free(pool, p, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* The first two tries fail: the second retry comes after a device synchronize. */
START_TEST(sim_second_retry_synchronizes) {
  spool_pool *pool = uncached_pool();
  cudaStream_t s = test_stream_create();
  call_counts before = counts_now();
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  cudasim_fail(MALLOC, 2, cudaErrorMemoryAllocation);
  void *p = alloc_ok(pool, 1 * MiB, s);
  ck_assert_int_eq(cudasim_armed(), 0);
  call_counts after = counts_now();
  ck_assert_int_eq(after.malloc - before.malloc, 3);
  ck_assert_int_ge(after.trim - before.trim, 2);
  ck_assert_int_ge(after.sync - before.sync, 1);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_ge(st.oom_retries, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  ck_assert_uint_eq(st.oom_handler_calls, 0);
  ck_assert_uint_eq(st.alloc_failures, 0);
  CK_SPOOL(spool_free(pool, p, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* The counters as spool.h defines them: oom_retries counts ALLOCATIONS tried again, and
 * oom_recoveries counts, "of those", the ones that then succeeded (so recoveries <= retries). */
START_TEST(sim_retry_counters_as_documented) {
  spool_pool *pool = uncached_pool();
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  cudasim_fail(MALLOC, 2, cudaErrorMemoryAllocation);
  void *p = alloc_ok(pool, 1 * MiB, NULL);
  spool_stats st = test_stats(pool);
  ck_assert_msg(st.oom_retries == 1,
                "one allocation was tried again (twice); oom_retries is %" PRIu64
                " (spool.h: \"allocations tried again after running out of memory\")",
                st.oom_retries);
  CK_SPOOL(spool_free(pool, p, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* Recovered by the handler alone (oom_retries=0): still an allocation tried again, so
 * oom_recoveries ("of those") cannot exceed oom_retries. */
START_TEST(sim_recoveries_within_retries) {
  spool_pool *pool = pool_retries(0);
  oom_record r = oom_record_init(1);
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  void *p = alloc_ok(pool, 1 * MiB, NULL);
  spool_stats st = test_stats(pool);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  ck_assert_msg(st.oom_recoveries <= st.oom_retries,
                "oom_recoveries %" PRIu64 " > oom_retries %" PRIu64
                " (spool.h: recoveries are \"of those\" retried)",
                st.oom_recoveries, st.oom_retries);
  CK_SPOOL(spool_free(pool, p, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* oom_retries=0 and no handler: SPOOL_ERR_OOM at once, nothing trimmed. */
START_TEST(sim_no_retries_no_handler) {
  spool_pool *pool = pool_retries(0);
  call_counts before = counts_now();
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  alloc_fails(pool, 1 * MiB, NULL, SPOOL_ERR_OOM);
  CK_MSG_HAS("out of device memory");
  CK_MSG_HAS("asked 1.00 MiB");
  CK_MSG_HAS("after 0 retries");
  ck_assert_int_eq(cudasim_armed(), 0);
  call_counts after = counts_now();
  ck_assert_int_eq(after.malloc - before.malloc, 1);
  ck_assert_int_eq(after.trim - before.trim, 0);
  ck_assert_int_eq(after.sync - before.sync, 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.oom_retries, 0);
  ck_assert_uint_eq(st.oom_recoveries, 0);
  ck_assert_uint_eq(st.oom_handler_calls, 0);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 1);
  void *p = alloc_ok(pool, 1 * MiB, NULL); /* usable */
  CK_SPOOL(spool_free(pool, p, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* oom_retries=0 with a handler: the handler is asked straight away; its "try again" works. */
START_TEST(sim_no_retries_handler) {
  spool_pool *pool = pool_retries(0);
  cudaStream_t s = test_stream_create();
  oom_record r = oom_record_init(1);
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  call_counts before = counts_now();
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  void *p = alloc_ok(pool, 3 * MiB, s);
  ck_assert_int_eq(r.calls, 1);
  check_handler_args(&r, pool, 3 * MiB, s);
  call_counts after = counts_now();
  ck_assert_int_eq(after.malloc - before.malloc, 2);
  /* before the handler's "try again", what it freed goes back to the pool: one trim */
  ck_assert_int_eq(after.trim - before.trim, 1);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.oom_handler_calls, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  ck_assert_uint_eq(st.alloc_failures, 0);
  /* Declining at once: one call, then SPOOL_ERR_OOM. */
  r = oom_record_init(0);
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  alloc_fails(pool, 3 * MiB, s, SPOOL_ERR_OOM);
  ck_assert_int_eq(r.calls, 1);
  CK_MSG_HAS("after 0 retries");
  CK_SPOOL(spool_free(pool, p, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* Every retry fails; the handler frees a buffer, trims, and asks again: success. */
START_TEST(sim_handler_recovers) {
  spool_pool *pool = uncached_pool();
  cudaStream_t s = test_stream_create();
  void *old = alloc_ok(pool, 4 * MiB, s);
  oom_record r = oom_record_init(1);
  r.to_free = old;
  r.free_stream = s;
  r.trim = true;
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  call_counts before = counts_now();
  for (int i = 1; i <= 3; i++) cudasim_fail(MALLOC, i, cudaErrorMemoryAllocation);
  void *p = alloc_ok(pool, 2 * MiB, s);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(r.calls, 1);
  check_handler_args(&r, pool, 2 * MiB, s);
  ck_assert_int_eq(r.free_status, SPOOL_OK);
  ck_assert_int_eq(r.trim_status, SPOOL_OK);
  call_counts after = counts_now();
  ck_assert_int_eq(after.malloc - before.malloc, 4);
  ck_assert_int_ge(after.sync - before.sync, 1);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.oom_handler_calls, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  ck_assert_uint_ge(st.oom_retries, 1);
  ck_assert_uint_eq(st.alloc_failures, 0);
  ck_assert_uint_eq(st.ooms, 0);
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_eq(st.trims, 1);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.bytes_in_use, 2 * MiB);
  CK_SPOOL(spool_free(pool, p, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* The handler keeps saying "try again" while memory stays short: exactly
 * SPOOL_OOM_HANDLER_CALLS calls, then SPOOL_ERR_OOM; declining: one call. */
START_TEST(sim_handler_bounded) {
  spool_pool *pool = uncached_pool();
  oom_record r = oom_record_init(1);
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  call_counts before = counts_now();
  int fails = 1 + 2 + SPOOL_OOM_HANDLER_CALLS;
  for (int i = 1; i <= fails; i++) cudasim_fail(MALLOC, i, cudaErrorMemoryAllocation);
  alloc_fails(pool, 1 * MiB, NULL, SPOOL_ERR_OOM);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(r.calls, SPOOL_OOM_HANDLER_CALLS);
  call_counts after = counts_now();
  ck_assert_int_eq(after.malloc - before.malloc, fails);
  CK_MSG_HAS("after 5 retries"); /* 2 of the policy, 3 at the handler's request */
  spool_stats st = test_stats(pool);
  ck_assert_uint_eq(st.oom_handler_calls, SPOOL_OOM_HANDLER_CALLS);
  ck_assert_uint_eq(st.oom_recoveries, 0);
  ck_assert_uint_eq(st.ooms, 1);
  /* Declining: one call, 3 tries in all. */
  r = oom_record_init(0);
  before = counts_now();
  for (int i = 1; i <= 3; i++) cudasim_fail(MALLOC, i, cudaErrorMemoryAllocation);
  alloc_fails(pool, 1 * MiB, NULL, SPOOL_ERR_OOM);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(r.calls, 1);
  ck_assert_int_eq(counts_now().malloc - before.malloc, 3);
  /* Removed: not called. */
  CK_SPOOL(spool_set_oom_handler(pool, NULL, &r));
  r = oom_record_init(1);
  for (int i = 1; i <= 3; i++) cudasim_fail(MALLOC, i, cudaErrorMemoryAllocation);
  alloc_fails(pool, 1 * MiB, NULL, SPOOL_ERR_OOM);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(r.calls, 0);
  st = test_stats(pool);
  ck_assert_uint_eq(st.oom_handler_calls, SPOOL_OOM_HANDLER_CALLS + 1);
  ck_assert_uint_eq(st.ooms, 3);
  ck_assert_uint_eq(st.alloc_failures, 3);
  test_pool_destroy(pool);
}
END_TEST

/* A replaced handler is not called; the new one gets its own user pointer. */
START_TEST(sim_handler_replaced) {
  spool_pool *pool = pool_retries(0);
  oom_record r1 = oom_record_init(1), r2 = oom_record_init(0);
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r1));
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r2));
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  alloc_fails(pool, 1 * MiB, NULL, SPOOL_ERR_OOM);
  ck_assert_int_eq(r1.calls, 0);
  ck_assert_int_eq(r2.calls, 1);
  ck_assert_ptr_eq(r2.user, (void *)&r2);
  test_pool_destroy(pool);
}
END_TEST

/* Real memory, the sim's capacity: a 64 MiB device, where a pool that keeps its free memory
 * (release threshold max) holds 48 MiB in 12 MiB pieces. A second pool's 32 MiB allocation
 * fits only because the policy trims the FIRST pool; a pool on another device is left alone. */
START_TEST(sim_trims_other_pools) {
  cudasim_set_device_count(2);
  cudasim_set_capacity(0, 64 * MiB);
  spool_pool *holder = uncached_pool(); /* release_threshold max by default */
  spool_config cfg1 = uncached_config();
  cfg1.device = 1;
  spool_pool *other_dev = test_pool_create(&cfg1);
  void *bufs[4];
  for (int i = 0; i < 4; i++) bufs[i] = alloc_ok(holder, 12 * MiB, NULL);
  for (int i = 0; i < 4; i++) CK_SPOOL(spool_free(holder, bufs[i], NULL));
  CK_CUDA(cudaSetDevice(1)); /* NULL is the current device's stream: it must be the pool's */
  void *o = alloc_ok(other_dev, 12 * MiB, NULL);
  CK_SPOOL(spool_free(other_dev, o, NULL));
  CK_CUDA(cudaSetDevice(0));
  CK_CUDA(cudaDeviceSynchronize());
  ck_assert_uint_eq(test_stats(holder).bytes_reserved, 48 * MiB);
  ck_assert_uint_eq(test_stats(other_dev).bytes_reserved, 12 * MiB);

  /* Without the policy the second pool cannot have its memory: the trim is what helps. */
  spool_pool *strict = pool_retries(0);
  alloc_fails(strict, 32 * MiB, NULL, SPOOL_ERR_OOM);
  CK_MSG_HAS("16.00 MiB free of 64.00 MiB");
  ck_assert_uint_eq(test_stats(holder).bytes_reserved, 48 * MiB);
  test_pool_destroy(strict);

  spool_pool *needy = uncached_pool();
  call_counts before = counts_now();
  void *p = alloc_ok(needy, 32 * MiB, NULL);
  ck_assert_int_eq(counts_now().sync - before.sync, 0); /* the first retry sufficed */
  spool_stats hs = test_stats(holder);
  ck_assert_uint_lt(hs.bytes_reserved, 48 * MiB);
  ck_assert_uint_eq(hs.bytes_reserved, 0);
  ck_assert_uint_eq(test_stats(other_dev).bytes_reserved, 12 * MiB); /* other device: kept */
  spool_stats ns = test_stats(needy);
  ck_assert_uint_eq(ns.oom_retries, 1);
  ck_assert_uint_eq(ns.oom_recoveries, 1);
  ck_assert_uint_eq(ns.alloc_failures, 0);
  ck_assert_uint_eq(ns.bytes_reserved, 32 * MiB);
  CK_SPOOL(spool_free(needy, p, NULL));
  test_pool_destroy(needy);
  test_pool_destroy(other_dev);
  test_pool_destroy(holder);
}
END_TEST

/* Fragmentation within one pool: 60 MiB of free memory in 12 MiB segments on a 64 MiB device
 * cannot hold 24 MiB; trimming the pool itself gives the driver one contiguous range again. */
START_TEST(sim_trims_own_fragments) {
  cudasim_set_capacity(0, 64 * MiB);
  spool_pool *pool = uncached_pool();
  void *bufs[5];
  for (int i = 0; i < 5; i++) bufs[i] = alloc_ok(pool, 12 * MiB, NULL);
  for (int i = 0; i < 5; i++) CK_SPOOL(spool_free(pool, bufs[i], NULL));
  CK_CUDA(cudaDeviceSynchronize());
  ck_assert_uint_eq(test_stats(pool).bytes_reserved, 60 * MiB);
  void *p = alloc_ok(pool, 24 * MiB, NULL);
  spool_stats st = test_stats(pool);
  ck_assert_uint_eq(st.bytes_reserved, 24 * MiB);
  ck_assert_uint_eq(st.oom_retries, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  CK_SPOOL(spool_free(pool, p, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* Memory freed on a stream whose work is not done cannot be trimmed: only the synchronize
 * before the second retry makes it available. With oom_retries=1 the allocation fails. */
START_TEST(sim_synchronize_releases_pending_frees) {
  cudasim_set_capacity(0, 64 * MiB);
  spool_pool *holder = uncached_pool();
  cudaStream_t held = test_stream_create();
  cudasim_hold(held);
  void *big = alloc_ok(holder, 48 * MiB, held);
  CK_SPOOL(spool_free(holder, big, held)); /* pending until a synchronize */

  spool_pool *one = pool_retries(1);
  alloc_fails(one, 32 * MiB, NULL, SPOOL_ERR_OOM);
  CK_MSG_HAS("after 1 retry;");
  ck_assert_uint_eq(test_stats(holder).bytes_reserved, 48 * MiB);
  ck_assert_int_gt(cudasim_pending(held), 0);
  test_pool_destroy(one);

  spool_pool *two = uncached_pool();
  call_counts before = counts_now();
  void *p = alloc_ok(two, 32 * MiB, NULL);
  ck_assert_int_ge(counts_now().sync - before.sync, 1);
  ck_assert_uint_eq(test_stats(holder).bytes_reserved, 0);
  spool_stats st = test_stats(two);
  ck_assert_uint_ge(st.oom_retries, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  CK_SPOOL(spool_free(two, p, NULL));
  test_pool_destroy(two);
  test_stream_destroy(held);
  test_pool_destroy(holder);
}
END_TEST

/* The final message: every number, on a device that is really full. */
START_TEST(sim_final_message) {
  cudasim_set_capacity(0, 64 * MiB);
  spool_pool *pool = uncached_pool();
  cudaStream_t s = test_stream_create();
  void *big = alloc_ok(pool, 48 * MiB, s);
  alloc_fails(pool, 32 * MiB, s, SPOOL_ERR_OOM);
  CK_MSG_HAS("spool_alloc: out of device memory");
  CK_MSG_HAS("asked 32.00 MiB");
  CK_MSG_HAS("48.00 MiB in use in 1 buffer");
  CK_MSG_HAS("48.00 MiB reserved");
  CK_MSG_HAS("limit none");
  CK_MSG_HAS("16.00 MiB free of 64.00 MiB");
  CK_MSG_HAS("after 2 retries");
  char stream_text[64];
  snprintf(stream_text, sizeof stream_text, "stream %p", (void *)s);
  CK_MSG_HAS(stream_text);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 1);
  ck_assert_uint_eq(st.oom_recoveries, 0);
  ck_assert_uint_eq(st.allocs, 1);
  ck_assert_uint_eq(st.bytes_in_use, 48 * MiB);
  /* Usable afterwards: what fits still fits. */
  void *small = alloc_ok(pool, 8 * MiB, s);
  CK_SPOOL(spool_free(pool, small, s));
  CK_SPOOL(spool_free(pool, big, s));
  void *p = alloc_ok(pool, 32 * MiB, s);
  CK_SPOOL(spool_free(pool, p, s));
  test_stream_destroy(s);
  test_pool_destroy(pool);
}
END_TEST

/* A failure other than out of memory during a retry ends the policy with SPOOL_ERR_CUDA. */
START_TEST(sim_other_error_during_retry) {
  spool_pool *pool = uncached_pool();
  oom_record r = oom_record_init(1);
  CK_SPOOL(spool_set_oom_handler(pool, oom_handler, &r));
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  cudasim_fail(MALLOC, 2, cudaErrorUnknown);
  alloc_fails(pool, 1 * MiB, NULL, SPOOL_ERR_CUDA);
  CK_MSG_HAS("spool_alloc");
  CK_MSG_HAS("cudaMallocFromPoolAsync");
  CK_MSG_HAS("cudaErrorUnknown");
  CK_MSG_HAS("out of memory");
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(r.calls, 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  spool_stats st = test_stats(pool);
  check_oom_relations(&st);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 0);
  ck_assert_uint_eq(st.oom_recoveries, 0);
  ck_assert_uint_eq(st.allocs, 0);
  /* The same from the try the handler asked for. */
  CK_SPOOL(spool_set_oom_handler(pool, NULL, NULL));
  spool_pool *p0 = pool_retries(0);
  CK_SPOOL(spool_set_oom_handler(p0, oom_handler, &r));
  cudasim_fail(MALLOC, 1, cudaErrorMemoryAllocation);
  cudasim_fail(MALLOC, 2, cudaErrorUnknown);
  alloc_fails(p0, 1 * MiB, NULL, SPOOL_ERR_CUDA);
  CK_MSG_HAS("cudaErrorUnknown");
  ck_assert_int_eq(r.calls, 1);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  st = test_stats(p0);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 0);
  void *q = alloc_ok(p0, 1 * MiB, NULL); /* usable */
  CK_SPOOL(spool_free(p0, q, NULL));
  test_pool_destroy(p0);
  test_pool_destroy(pool);
}
END_TEST

/* cudaMemGetInfo fails: device_free and device_total are null, the call succeeds, and the
 * thread's last error is the one from before. */
START_TEST(sim_json_meminfo_fails) {
  spool_pool *pool = uncached_pool();
  void *a = alloc_ok(pool, 1 * MiB, NULL);
  char buf[4096];
  CK_STATUS(spool_stats_json(NULL, buf, sizeof buf), SPOOL_ERR_INVALID); /* a known last error */
  char before[1024];
  snprintf(before, sizeof before, "%s", spool_last_error());
  ck_assert_str_ne(before, "");
  cudasim_fail("cudaMemGetInfo", 1, cudaErrorUnknown);
  memset(buf, 'X', sizeof buf);
  CK_SPOOL(spool_stats_json(pool, buf, sizeof buf));
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_str_eq(spool_last_error(), before);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  ck_assert_ptr_nonnull(memchr(buf, '\0', sizeof buf));
  json_doc d;
  ck_assert_msg(json_parse(buf, &d), "not the JSON expected: %s", buf);
  ck_assert_int_eq(d.n, STAT_FIELD_COUNT + 4);
  ck_assert(json_get(&d, "device_free")->is_null);
  ck_assert(json_get(&d, "device_total")->is_null);
  ck_assert_uint_eq(json_number(&d, "device"), 0);
  spool_stats st = test_stats(pool);
  for (int i = 0; i < STAT_FIELD_COUNT; i++)
    ck_assert_uint_eq(json_number(&d, stat_fields[i].name), stat_value(&st, stat_fields[i].offset));
  /* The size needed with nulls is the size of this text. */
  size_t needed = strlen(buf) + 1;
  cudasim_fail("cudaMemGetInfo", 1, cudaErrorUnknown);
  char small[8];
  CK_STATUS(spool_stats_json(pool, small, sizeof small), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(needed_from_message(), needed);
  ck_assert_int_eq(small[0], '\0');
  CK_SPOOL(spool_free(pool, a, NULL));
  test_pool_destroy(pool);
}
END_TEST

/* The pool's attributes cannot be read: SPOOL_ERR_CUDA. */
START_TEST(sim_json_attribute_fails) {
  spool_pool *pool = uncached_pool();
  char buf[4096];
  cudasim_fail("cudaMemPoolGetAttribute", 1, cudaErrorUnknown);
  CK_STATUS(spool_stats_json(pool, buf, sizeof buf), SPOOL_ERR_CUDA);
  CK_MSG_HAS("spool_stats_json");
  CK_MSG_HAS("cudaMemPoolGetAttribute");
  CK_MSG_HAS("cudaErrorUnknown");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  CK_SPOOL(spool_stats_json(pool, buf, sizeof buf));
  test_pool_destroy(pool);
}
END_TEST

#endif /* SPOOL_TEST_SIM */

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *oom_suite(void) {
  Suite *s = suite_create("oom");
  TCase *tc = test_tcase("limit");
  tcase_add_test(tc, set_handler_null_pool);
  tcase_add_test(tc, limit_oom_message);
  tcase_add_test(tc, limit_handler_frees);
  tcase_add_test(tc, limit_handler_bounded);
  suite_add_tcase(s, tc);

  tc = test_tcase("json");
  tcase_add_test(tc, json_reader_is_strict);
  tcase_add_test(tc, json_matches_stats);
  tcase_add_test(tc, json_len_too_small);
  tcase_add_test(tc, json_null_arguments);
  tcase_add_test(tc, json_size_query);
  tcase_add_test(tc, json_sized_query_returns_the_size);
  tcase_add_test(tc, json_sized_null_arguments);
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim_policy");
  tcase_add_test(tc, sim_first_retry_succeeds);
  tcase_add_test(tc, sim_second_retry_synchronizes);
  tcase_add_test(tc, sim_retry_counters_as_documented);
  tcase_add_test(tc, sim_recoveries_within_retries);
  tcase_add_test(tc, sim_no_retries_no_handler);
  tcase_add_test(tc, sim_no_retries_handler);
  tcase_add_test(tc, sim_handler_recovers);
  tcase_add_test(tc, sim_handler_bounded);
  tcase_add_test(tc, sim_handler_replaced);
  tcase_add_test(tc, sim_trims_other_pools);
  tcase_add_test(tc, sim_trims_own_fragments);
  tcase_add_test(tc, sim_synchronize_releases_pending_frees);
  tcase_add_test(tc, sim_final_message);
  tcase_add_test(tc, sim_other_error_during_retry);
  suite_add_tcase(s, tc);

  tc = test_tcase("sim_json");
  tcase_add_test(tc, sim_json_meminfo_fails);
  tcase_add_test(tc, sim_json_attribute_fails);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(oom_suite()); }
