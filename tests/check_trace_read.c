/* The trace reader (tools/trace_read.c) on damaged input: every truncation and every flipped
 * byte of a small, valid, hand-built trace is either read or refused with a message naming the
 * file and what was wrong; never a crash (the sanitizer gate runs this suite too). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu.h"
#include "trace_read.h"

#define NAME "hand.sptr"

typedef struct bytes {
  unsigned char d[4096];
  size_t n;
} bytes;

static void put(bytes *b, const void *p, size_t n) {
  ck_assert_uint_le(b->n + n, sizeof b->d);
  memcpy(b->d + b->n, p, n);
  b->n += n;
}

static spool_trace_record rec(int kind, uint64_t seq, uint64_t ptr, uint64_t size) {
  return (spool_trace_record){.kind = (uint8_t)kind, .seq = seq, .time_ns = seq * 1000,
                              .ptr = ptr, .size = size, .stream = 0x10};
}

/* A header, "device=0" as config, and one block: a site, an alloc naming it, its free. The
 * offsets of the block and its payload go to *block and *payload. */
static bytes valid_trace(size_t *block, size_t *payload) {
  bytes b = {0};
  spool_trace_header h = {.version = SPOOL_TRACE_VERSION, .header_bytes = sizeof h,
                          .record_bytes = sizeof(spool_trace_record), .bom = SPOOL_TRACE_BOM,
                          .config_bytes = 8};
  memcpy(h.magic, SPOOL_TRACE_MAGIC, 8);
  put(&b, &h, sizeof h);
  put(&b, "device=0", 8);
  unsigned char pay[512];
  size_t n = 0;
  spool_trace_record site = {.kind = SPOOL_TRACE_SITE, .site = 1, .aux = 5, .size = 42};
  memcpy(pay + n, &site, sizeof site), n += sizeof site;
  memcpy(pay + n, "a.c\0\0\0\0\0", 8), n += 8;
  spool_trace_record a = rec(SPOOL_TRACE_ALLOC, 1, 0x1000, 4096);
  a.site = 1;
  memcpy(pay + n, &a, sizeof a), n += sizeof a;
  spool_trace_record f = rec(SPOOL_TRACE_FREE, 2, 0x1000, 0);
  memcpy(pay + n, &f, sizeof f), n += sizeof f;
  spool_trace_block bh = {SPOOL_TRACE_BLOCK_MAGIC, (uint32_t)n, 3,
                          spool_trace_fnv1a(pay, n), 7, 1};
  *block = b.n;
  put(&b, &bh, sizeof bh);
  *payload = b.n;
  put(&b, pay, n);
  return b;
}

/* Rewrites the block's checksum after a change of its payload. */
static void reseal(bytes *b, size_t block, size_t payload) {
  spool_trace_block bh;
  memcpy(&bh, b->d + block, sizeof bh);
  bh.checksum = spool_trace_fnv1a(b->d + payload, bh.payload_bytes);
  memcpy(b->d + block, &bh, sizeof bh);
}

static void refused(const bytes *b, const char *words) {
  tf_trace t;
  char err[TF_ERR] = "";
  ck_assert_int_eq(tf_parse(b->d, b->n, NAME, &t, err), -1);
  ck_assert_msg(strstr(err, NAME) != NULL, "message \"%s\" does not name the file", err);
  ck_assert_msg(strstr(err, words) != NULL, "message \"%s\" lacks \"%s\"", err, words);
}

START_TEST(reader_reads_the_valid_trace) {
  size_t block, payload;
  bytes b = valid_trace(&block, &payload);
  tf_trace t;
  char err[TF_ERR];
  ck_assert_msg(tf_parse(b.d, b.n, NAME, &t, err) == 0, "%s", err);
  ck_assert_str_eq(t.config, "device=0");
  ck_assert_uint_eq(t.n, 2);
  ck_assert_uint_eq(t.ev[0].kind, SPOOL_TRACE_ALLOC);
  ck_assert_uint_eq(t.ev[0].thread, 7);
  ck_assert_str_eq(t.sites[t.ev[0].site].text, "a.c");
  ck_assert_int_eq(t.sites[t.ev[0].site].line, 42);
  ck_assert_int_eq(t.ev[1].site, -1);
  ck_assert(!t.ended);
  tf_free(&t);
}
END_TEST

START_TEST(reader_refuses_every_truncation_but_at_a_block_boundary) {
  size_t block, payload;
  bytes b = valid_trace(&block, &payload);
  for (size_t cut = 0; cut < b.n; cut++) {
    bytes c = b;
    c.n = cut;
    tf_trace t;
    char err[TF_ERR] = "";
    int rc = tf_parse(c.d, c.n, NAME, &t, err);
    if (cut == block) { /* the header alone: a trace without events */
      ck_assert_int_eq(rc, 0);
      ck_assert_uint_eq(t.n, 0);
      tf_free(&t);
      continue;
    }
    ck_assert_msg(rc == -1, "a cut at byte %zu was read", cut);
    ck_assert_msg(strstr(err, "truncated") != NULL, "cut at %zu: \"%s\"", cut, err);
  }
}
END_TEST

START_TEST(reader_refuses_every_flipped_byte_of_a_block) {
  size_t block, payload;
  bytes b = valid_trace(&block, &payload);
  for (size_t i = block; i < b.n; i++) {
    if (i >= block + 16 && i < payload) continue; /* thread and first seq: free to be anything */
    bytes c = b;
    c.d[i] ^= 0x40;
    tf_trace t;
    char err[TF_ERR] = "";
    ck_assert_msg(tf_parse(c.d, c.n, NAME, &t, err) == -1, "a flip at byte %zu was read", i);
    ck_assert_msg(strstr(err, "block 1") != NULL, "flip at %zu: \"%s\"", i, err);
  }
}
END_TEST

START_TEST(reader_names_a_bad_record_that_passes_the_checksum) {
  size_t block, payload;
  bytes b = valid_trace(&block, &payload);
  bytes c = b;
  c.d[payload + sizeof(spool_trace_record) + 8] = 99; /* the alloc's kind */
  reseal(&c, block, payload);
  refused(&c, "record 1: unknown kind 99");
  c = b;
  spool_trace_record a;
  memcpy(&a, c.d + payload + sizeof a + 8, sizeof a);
  a.site = 2;
  memcpy(c.d + payload + sizeof a + 8, &a, sizeof a);
  reseal(&c, block, payload);
  refused(&c, "site 2 is not defined in its block");
  c = b;
  spool_trace_record s;
  memcpy(&s, c.d + payload, sizeof s);
  s.aux = 60000; /* site text past the block */
  memcpy(c.d + payload, &s, sizeof s);
  reseal(&c, block, payload);
  refused(&c, "bytes of text");
}
END_TEST

START_TEST(reader_refuses_a_bad_header) {
  size_t block, payload;
  bytes b = valid_trace(&block, &payload);
  bytes c = b;
  c.d[0] = 'X';
  refused(&c, "not a spool trace");
  c = b;
  c.d[8] = 9; /* version */
  refused(&c, "version 9");
  c = b;
  c.d[20] ^= 0xFF; /* byte-order mark */
  refused(&c, "byte-order mark");
  c = b;
  c.d[28] = 250; /* config longer than the file */
  refused(&c, "config text");
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("trace_read");
  TCase *tc = tcase_create("trace_read");
  tcase_add_test(tc, reader_reads_the_valid_trace);
  tcase_add_test(tc, reader_refuses_every_truncation_but_at_a_block_boundary);
  tcase_add_test(tc, reader_refuses_every_flipped_byte_of_a_block);
  tcase_add_test(tc, reader_names_a_bad_record_that_passes_the_checksum);
  tcase_add_test(tc, reader_refuses_a_bad_header);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_cpu_main(suite()); }
