/* Shared harness of the CUDA-facing Check suites (check_pool, check_alloc, check_stats).
 *
 * Each suite is built twice (tests/CMakeLists.txt, spool_cuda_suite):
 *  - <suite>_sim: SPOOL_TEST_SIM defined, linked to cudasim. Every test starts from
 *    cudasim_reset() (per-test fixture), so tests are independent; Check forks per test as usual.
 *  - <suite>_gpu: linked to the real runtime. main() exits 77 (skipped) with a one-line reason
 *    when no device can be opened; tests run in one process (CK_NOFORK: CUDA after fork is
 *    undefined), so every test leaves the device as it found it (pools destroyed, streams
 *    destroyed, the default pool's settings restored, current device 0).
 *
 * Everything outside `#ifdef SPOOL_TEST_SIM` must hold on real CUDA (13.x, H200) as well.
 */
#ifndef SPOOL_TEST_MAIN_H
#define SPOOL_TEST_MAIN_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, pthreads */
#endif

#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <spool/spool.h>

#ifdef SPOOL_TEST_SIM
#include "cudasim.h"
#define TEST_SIM 1
#else
#define TEST_SIM 0
#endif

#define TEST_TIMEOUT_S 120 /* CUDA's first initialisation can take seconds */

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* ---- assertions ------------------------------------------------------------------------- */

/* Every CUDA call a test makes goes through CK_CUDA. */
#define CK_CUDA(call)                                                                         \
  do {                                                                                        \
    cudaError_t ck_cuda_e_ = (call);                                                          \
    ck_assert_msg(ck_cuda_e_ == cudaSuccess, "%s failed: %s (%d)", #call,                     \
                  cudaGetErrorName(ck_cuda_e_), (int)ck_cuda_e_);                             \
  } while (0)

/* A spool call that must return want; the message shows what came back and spool's words. */
#define CK_STATUS(call, want)                                                                 \
  do {                                                                                        \
    spool_status ck_st_got_ = (call);                                                         \
    spool_status ck_st_want_ = (want);                                                        \
    ck_assert_msg(ck_st_got_ == ck_st_want_, "%s returned %s, expected %s; last error: %s",   \
                  #call, spool_status_name(ck_st_got_), spool_status_name(ck_st_want_),        \
                  spool_last_error());                                                        \
  } while (0)

#define CK_SPOOL(call) CK_STATUS(call, SPOOL_OK)

/* spool_last_error() contains each of the given words. */
#define CK_LAST_ERROR_HAS(word)                                                               \
  do {                                                                                        \
    const char *ck_le_ = spool_last_error();                                                  \
    ck_assert_ptr_nonnull(ck_le_);                                                            \
    ck_assert_msg(strstr(ck_le_, (word)) != NULL, "last error \"%s\" lacks \"%s\"", ck_le_,   \
                  (word));                                                                    \
  } while (0)

/* A pointer no spool call returns; out-parameters are preset to it to see that they are set. */
#define TEST_SENTINEL ((void *)(uintptr_t)0x5A5A5A50u)

/* ---- helpers ---------------------------------------------------------------------------- */

static inline int test_device_count(void) {
  int n = 0;
  CK_CUDA(cudaGetDeviceCount(&n));
  return n;
}

static inline cudaStream_t test_stream_create(void) {
  cudaStream_t s = NULL;
  CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ck_assert_ptr_nonnull(s);
  return s;
}

static inline void test_stream_destroy(cudaStream_t s) {
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaStreamDestroy(s));
}

static inline spool_config test_config(void) {
  spool_config cfg;
  memset(&cfg, 0xA5, sizeof cfg); /* spool_config_init must set every field */
  spool_config_init(&cfg);
  return cfg;
}

/* Creates a pool that must be created; cfg NULL: the defaults (SPOOL_CONF is unset in main). */
static inline spool_pool *test_pool_create(const spool_config *cfg) {
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_SPOOL(spool_pool_create(&p, cfg));
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_ne(p, TEST_SENTINEL);
  return p;
}

static inline void test_pool_destroy(spool_pool *p) { CK_SPOOL(spool_pool_destroy(p)); }

/* A pool with the defaults and text on top (NULL: the defaults). */
static inline spool_pool *test_pool_with(const char *text) {
  spool_config cfg = test_config();
  if (text) CK_SPOOL(spool_config_parse(&cfg, text));
  return test_pool_create(&cfg);
}

/* size bytes that must be allocated on s. */
static inline void *test_alloc_on(spool_pool *p, size_t size, cudaStream_t s) {
  void *ptr = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &ptr, size, s));
  ck_assert_ptr_nonnull(ptr);
  ck_assert_ptr_ne(ptr, TEST_SENTINEL);
  return ptr;
}

/* 300 pairs on s of small sizes that change every time (4, 64 and 124 KiB in turn): with
 * front_limit=0 each is a heap operation in the small band, and enough heap allocations pass
 * for every look for idle chunks (chunk_idle=16) to be due. */
static inline void test_small_band_misses(spool_pool *p, cudaStream_t s) {
  for (int i = 0; i < 300; i++)
    CK_SPOOL(spool_free(p, test_alloc_on(p, (size_t)(4 + i % 3 * 60) * 1024, s), s));
}

static inline spool_stats test_stats(spool_pool *p) {
  spool_stats st;
  memset(&st, 0xEE, sizeof st);
  CK_SPOOL(spool_stats_get(p, &st));
  ck_assert_uint_eq(st.size, sizeof(spool_stats));
  return st;
}

static inline uint64_t test_pool_attr_u64(cudaMemPool_t h, enum cudaMemPoolAttr attr) {
  uint64_t v = 0;
  CK_CUDA(cudaMemPoolGetAttribute(h, attr, &v));
  return v;
}

static inline int test_pool_attr_int(cudaMemPool_t h, enum cudaMemPoolAttr attr) {
  int v = -1;
  CK_CUDA(cudaMemPoolGetAttribute(h, attr, &v));
  return v;
}

static inline void test_pool_set_attr_u64(cudaMemPool_t h, enum cudaMemPoolAttr attr,
                                          uint64_t v) {
  CK_CUDA(cudaMemPoolSetAttribute(h, attr, &v));
}

/* Deterministic pseudo-random numbers (xorshift64*), one state per user. */
static inline uint64_t test_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * UINT64_C(2685821657736338717);
}

/* A size from 1 to max (> 0), log-uniform, as the benchmarks' random workload. */
static inline size_t test_rand_size(uint64_t *state, size_t max) {
  unsigned bits = 0;
  while (((size_t)1 << bits) < max && bits < 63) bits++;
  unsigned b = (unsigned)(test_rand(state) % (bits + 1u));
  size_t hi = (size_t)1 << b;
  size_t s = hi / 2 + (size_t)(test_rand(state) % (hi / 2 + 1));
  if (s == 0) s = 1;
  if (s > max) s = max;
  return s;
}

/* ---- several devices (check_multi, check_ipc, check_torch) ------------------------------ */

/* True when the test can have n devices: cudasim gets them; a GPU machine with fewer makes the
 * test print why it does nothing and pass. */
static inline bool test_need_devices(int n, const char *test) {
#ifdef SPOOL_TEST_SIM
  (void)test;
  cudasim_set_device_count(n);
  return true;
#else
  int have = test_device_count();
  if (have >= n) return true;
  printf("skipped %s: needs %d devices, %d visible\n", test, n, have);
  return false;
#endif
}
#define NEED_DEVICES(n)                                                                       \
  do {                                                                                        \
    if (!test_need_devices((n), __func__)) return;                                            \
  } while (0)

/* A non-blocking stream of device; the current device stays as it was. */
static inline cudaStream_t test_stream_on(int device) {
  int saved = 0;
  CK_CUDA(cudaGetDevice(&saved));
  CK_CUDA(cudaSetDevice(device));
  cudaStream_t s = test_stream_create();
  CK_CUDA(cudaSetDevice(saved));
  return s;
}

/* ---- fixture and main ------------------------------------------------------------------- */

static void test_setup(void) {
#ifdef SPOOL_TEST_SIM
  cudasim_reset();
#endif
}

static void test_teardown(void) {
  unsetenv("SPOOL_CONF"); /* a test that set it and failed midway must not leak it */
#ifndef SPOOL_TEST_SIM
  /* Leave the device as the next test expects it, whatever this one did. No asserts here. */
  (void)cudaSetDevice(0);
  (void)cudaDeviceSynchronize();
  (void)cudaGetLastError();
#endif
}

/* A test case with the fixture and the timeout every CUDA-facing test uses. */
static inline TCase *test_tcase(const char *name) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, test_setup, test_teardown);
  tcase_set_timeout(tc, TEST_TIMEOUT_S);
  return tc;
}

/* main() of every suite: returns 77 (skipped) when the gpu build finds no device it can open,
 * else runs the suite and returns 0 when every test passed. */
static inline int test_main(Suite *suite) {
  unsetenv("SPOOL_CONF"); /* the tests choose their settings themselves */
#ifndef SPOOL_TEST_SIM
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    printf("skipped: no CUDA device can be opened (cudaGetDeviceCount: %s, %d devices)\n",
           e == cudaSuccess ? "ok" : cudaGetErrorName(e), e == cudaSuccess ? n : 0);
    fflush(stdout);
    return 77;
  }
  e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaFree(NULL); /* opens the primary context */
  if (e != cudaSuccess) {
    printf("skipped: CUDA device 0 cannot be opened (%s)\n", cudaGetErrorName(e));
    fflush(stdout);
    return 77;
  }
#endif
  SRunner *sr = srunner_create(suite);
#ifndef SPOOL_TEST_SIM
  srunner_set_fork_status(sr, CK_NOFORK);
#endif
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif /* SPOOL_TEST_MAIN_H */
