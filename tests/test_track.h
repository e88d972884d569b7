/* test_track.h: the helpers that the suites of tracking share (check_track, check_refusals,
 * check_leaks, check_poison): pools from config text, spool's texts for pointers and call sites,
 * reading reports back, the check that a free was refused, the pool's counters, device bytes.
 * Static inline: each suite uses only some of them. */
#ifndef SPOOL_TEST_TRACK_H
#define SPOOL_TEST_TRACK_H

#include "test_main.h"

#include <unistd.h>


/* A fresh pool from explicit config text on top of the defaults. */
static inline spool_pool *pool_with(const char *text) {
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, text));
  return test_pool_create(&cfg);
}

/* "%p" of a pointer, as spool prints it. */
typedef struct ptext {
  char s[300];
} ptext;

static inline ptext ptr_text(const void *p) {
  ptext t;
  snprintf(t.s, sizeof t.s, "%p", p);
  return t;
}

/* "file:line", as spool prints a call site. */
static inline ptext site_of(const char *file, int line) {
  ptext t;
  ck_assert_uint_lt(strlen(file), sizeof t.s - 12);
  snprintf(t.s, sizeof t.s, "%s:%d", file, line);
  return t;
}

#define CK_LAST_ERROR_PTR(p) CK_LAST_ERROR_HAS(ptr_text(p).s)

/* The text has the word; the message shows the text. */
#define CK_TEXT_HAS(text, word)                                                               \
  do {                                                                                        \
    const char *ck_t_ = (text);                                                               \
    ck_assert_ptr_nonnull(ck_t_);                                                             \
    ck_assert_msg(strstr(ck_t_, (word)) != NULL, "\"%s\" lacks \"%s\"", ck_t_, (word));        \
  } while (0)

#define CK_TEXT_LACKS(text, word)                                                             \
  do {                                                                                        \
    const char *ck_t_ = (text);                                                               \
    ck_assert_ptr_nonnull(ck_t_);                                                             \
    ck_assert_msg(strstr(ck_t_, (word)) == NULL, "\"%s\" has \"%s\"", ck_t_, (word));          \
  } while (0)

/* The whole of f (a tmpfile written by spool), NUL-terminated; the caller frees it. */
static inline char *slurp(FILE *f) {
  ck_assert_int_eq(fflush(f), 0);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  char *text = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  text[n] = '\0';
  return text;
}

/* The file at path, or NULL when it cannot be opened. */
static inline char *slurp_path(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = slurp(f);
  fclose(f);
  return text;
}

/* spool_leaks into a tmpfile; returns the report (the caller frees it). */
static inline char *leak_report(spool_pool *p) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_SPOOL(spool_leaks(p, f));
  char *text = slurp(f);
  fclose(f);
  return text;
}

/* A new empty file in /tmp; path receives its name. */
static inline void temp_path(char path[64]) {
  snprintf(path, 64, "/tmp/spool_check_track_XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
}

/* A free that must be refused with want: nothing reaches the driver, only bad_frees moves, and
 * the message names the pointer and says nothing was freed. */
static inline void expect_refused_at(spool_pool *p, void *ptr, cudaStream_t s,
                                     spool_status want, const char *file, int line) {
  spool_stats before = test_stats(p);
#ifdef SPOOL_TEST_SIM
  long frees = cudasim_calls("cudaFreeAsync");
  long sets = cudasim_calls("cudaMemsetAsync");
  long live = cudasim_live_allocations();
#endif
  if (file) CK_STATUS(spool_free_at(p, ptr, s, file, line), want);
  else CK_STATUS(spool_free(p, ptr, s), want);
  CK_LAST_ERROR_PTR(ptr);
  CK_LAST_ERROR_HAS("nothing was freed");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees);
  ck_assert_int_eq(cudasim_calls("cudaMemsetAsync"), sets);
  ck_assert_int_eq(cudasim_live_allocations(), live);
#endif
  spool_stats after = test_stats(p);
  ck_assert_uint_eq(after.bad_frees, before.bad_frees + 1);
  ck_assert_uint_eq(after.buffers_in_use, before.buffers_in_use);
  ck_assert_uint_eq(after.bytes_in_use, before.bytes_in_use);
  ck_assert_uint_eq(after.frees, before.frees);
  ck_assert_uint_eq(after.allocs, before.allocs);
}

static inline void expect_refused(spool_pool *p, void *ptr, cudaStream_t s, spool_status want) {
  expect_refused_at(p, ptr, s, want, NULL, 0);
}

static inline void check_counts(spool_pool *p, uint64_t in_use, uint64_t buffers,
                                uint64_t allocs, uint64_t frees, uint64_t bad_frees) {
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, in_use);
  ck_assert_uint_eq(st.buffers_in_use, buffers);
  ck_assert_uint_eq(st.allocs, allocs);
  ck_assert_uint_eq(st.frees, frees);
  ck_assert_uint_eq(st.bad_frees, bad_frees);
}

/* The index of the first byte of p[0..n) that is not byte; n when there is none. (One assert for
 * the lot: Check marks every passing assert, which is slow over megabytes.) */
static inline size_t first_not(const unsigned char *p, size_t n, unsigned char byte) {
  size_t i = 0;
  while (i < n && p[i] == byte) i++;
  return i;
}

/* Every byte of [ptr, ptr + n) on the device is byte (read after a synchronize of s). */
static inline void check_device_bytes(const void *ptr, size_t n, unsigned char byte,
                                      cudaStream_t s) {
  unsigned char *host = malloc(n);
  ck_assert_ptr_nonnull(host);
  memset(host, (unsigned char)~byte, n);
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaMemcpy(host, ptr, n, cudaMemcpyDeviceToHost));
  size_t i = first_not(host, n, byte);
  ck_assert_msg(i == n, "byte %zu of %zu at %p is 0x%02x, not 0x%02x", i, n, ptr,
                i < n ? host[i] : 0, byte);
  free(host);
}

#endif
