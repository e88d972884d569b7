/* check_alloc: spool_alloc / spool_free, their counters and their failures.
 *
 * Built twice: check_alloc_sim (cudasim, SPOOL_TEST_SIM) and check_alloc_gpu (real CUDA). Tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too. */
#include "test_main.h"

#include <pthread.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static spool_pool *default_pool(void) {
  spool_config cfg = test_config();
  return test_pool_create(&cfg);
}

#ifdef SPOOL_TEST_SIM
/* One injected out-of-memory error is the whole story: no retries (check_oom tests those). */
static spool_pool *no_retry_pool(void) {
  spool_config cfg = test_config();
  cfg.oom_retries = 0;
  cfg.cache = false; /* every free reaches the driver, where the faults are injected */
  return test_pool_create(&cfg);
}
#endif

/* Fills the buffer with byte on s, then reads back its first and last few KiB: the memory is
 * real, writable device memory of at least size bytes. */
static void check_usable(void *ptr, size_t size, unsigned char byte, cudaStream_t s) {
  enum { PEEK = 4096 };
  static unsigned char host[PEEK];
  CK_CUDA(cudaMemsetAsync(ptr, byte, size, s));
  CK_CUDA(cudaStreamSynchronize(s));
  size_t n = size < PEEK ? size : PEEK;
  size_t offsets[2] = {0, size - n};
  for (int k = 0; k < 2; k++) {
    memset(host, (unsigned char)~byte, n);
    CK_CUDA(cudaMemcpy(host, (char *)ptr + offsets[k], n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(host[i] == byte, "byte %zu of %zu at %p is 0x%02x, not 0x%02x",
                    offsets[k] + i, size, ptr, host[i], byte);
  }
}

typedef struct span {
  uintptr_t at;
  size_t size;
} span;

static int by_address(const void *a, const void *b) {
  uintptr_t x = ((const span *)a)->at, y = ((const span *)b)->at;
  return (x > y) - (x < y);
}

/* No two live buffers overlap (and so all are distinct). */
static void check_disjoint(void *const *ptrs, const size_t *sizes, size_t n) {
  span *v = malloc(n * sizeof *v);
  ck_assert_ptr_nonnull(v);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (ptrs[i]) v[m++] = (span){(uintptr_t)ptrs[i], sizes[i]};
  qsort(v, m, sizeof *v, by_address);
  for (size_t i = 1; i < m; i++)
    ck_assert_msg(v[i - 1].at + v[i - 1].size <= v[i].at,
                  "buffers overlap: %#" PRIxPTR "+%zu and %#" PRIxPTR, v[i - 1].at,
                  v[i - 1].size, v[i].at);
  free(v);
}

static void check_counts(spool_pool *p, uint64_t in_use, uint64_t buffers, uint64_t allocs,
                         uint64_t frees) {
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, in_use);
  ck_assert_uint_eq(st.buffers_in_use, buffers);
  ck_assert_uint_eq(st.allocs, allocs);
  ck_assert_uint_eq(st.frees, frees);
}

/* ---- sizes ------------------------------------------------------------------------------------ */

START_TEST(alloc_size_zero) {
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
#ifdef SPOOL_TEST_SIM
  long mallocs = cudasim_calls("cudaMallocFromPoolAsync") + cudasim_calls("cudaMallocAsync");
  long attrs = cudasim_calls("cudaMemPoolGetAttribute");
#endif
  void *ptr = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &ptr, 0, s));
  ck_assert_ptr_null(ptr);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMallocFromPoolAsync") + cudasim_calls("cudaMallocAsync"),
                   mallocs);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolGetAttribute"), attrs);
#endif
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, 0); /* size 0 is not counted */
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_allocated, 0);
  ck_assert_uint_eq(st.alloc_failures, 0);
  CK_SPOOL(spool_free(p, ptr, s)); /* NULL */
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(alloc_sizes) {
  static const size_t sizes[] = {1, 255, 256, 257, 4096, 1000003, 3 * MiB + 1, 1 * GiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  void *ptrs[N];
  uint64_t total = 0;
  for (size_t i = 0; i < N; i++) {
    ptrs[i] = TEST_SENTINEL;
    CK_SPOOL(spool_alloc(p, &ptrs[i], sizes[i], s));
    ck_assert_ptr_nonnull(ptrs[i]);
    ck_assert_ptr_ne(ptrs[i], TEST_SENTINEL);
    ck_assert_msg(((uintptr_t)ptrs[i] & 255u) == 0, "%zu bytes at %p: not 256-aligned", sizes[i],
                  ptrs[i]);
    total += sizes[i];
  }
  check_disjoint(ptrs, sizes, N);
  for (size_t i = 0; i < N; i++) check_usable(ptrs[i], sizes[i], (unsigned char)(0x11 * (i + 1)), s);
  /* Filling one did not touch another: check all again in reverse order of writing. */
  for (size_t i = N; i-- > 0;) {
    unsigned char first = 0;
    CK_CUDA(cudaMemcpy(&first, ptrs[i], 1, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(first, (unsigned char)(0x11 * (i + 1)));
  }
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, total);
  ck_assert_uint_eq(st.buffers_in_use, N);
  ck_assert_uint_eq(st.allocs, N);
  ck_assert_uint_eq(st.bytes_allocated, total);
  ck_assert_uint_ge(st.bytes_reserved, total);
  for (size_t i = 0; i < N; i++) CK_SPOOL(spool_free(p, ptrs[i], s));
  check_counts(p, 0, 0, N, N);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- arguments ---------------------------------------------------------------------------------- */

START_TEST(alloc_free_null_arguments) {
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(NULL, &ptr, 16, s), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(ptr);
  CK_LAST_ERROR_HAS("NULL");
  CK_STATUS(spool_alloc(p, NULL, 16, s), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("NULL");
  CK_STATUS(spool_alloc(NULL, NULL, 16, s), SPOOL_ERR_INVALID);

  void *live = NULL;
  CK_SPOOL(spool_alloc(p, &live, 512, s));
  CK_STATUS(spool_free(NULL, live, s), SPOOL_ERR_INVALID);
  CK_STATUS(spool_free(NULL, NULL, s), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_free(p, NULL, s)); /* a no-op */
  check_counts(p, 512, 1, 1, 0);
  CK_SPOOL(spool_free(p, live, s));
  check_counts(p, 0, 0, 1, 1);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* The pointer is not a live buffer of p: the free is refused with want, nothing reaches the
 * driver, nothing but the refusal count changes. */
static void expect_refused(spool_pool *p, void *ptr, cudaStream_t s, spool_status want) {
  spool_stats before = test_stats(p);
#ifdef SPOOL_TEST_SIM
  long frees = cudasim_calls("cudaFreeAsync");
#endif
  spool_status got = spool_free(p, ptr, s);
  ck_assert_msg(got == want, "spool_free(%p) returned %s, expected %s: %s", ptr,
                spool_status_name(got), spool_status_name(want), spool_last_error());
  ck_assert_msg(spool_last_error()[0] != '\0', "no message");
  ck_assert_msg(strstr(spool_last_error(), "nothing was freed") != NULL, "message: %s",
                spool_last_error());
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees);
#endif
  spool_stats after = test_stats(p);
  ck_assert_uint_eq(after.buffers_in_use, before.buffers_in_use);
  ck_assert_uint_eq(after.bytes_in_use, before.bytes_in_use);
  ck_assert_uint_eq(after.frees, before.frees);
  ck_assert_uint_eq(after.bad_frees, before.bad_frees + 1);
}

START_TEST(free_unknown_pointer) {
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4096, s));
  int on_stack = 0;
  void *on_heap = malloc(64);
  ck_assert_ptr_nonnull(on_heap);
  expect_refused(p, &on_stack, s, SPOOL_ERR_UNKNOWN_POINTER);
  expect_refused(p, on_heap, s, SPOOL_ERR_UNKNOWN_POINTER);
  expect_refused(p, (char *)a + 1, s, SPOOL_ERR_INTERIOR_POINTER);   /* inside a live buffer */
  expect_refused(p, (char *)a + 256, s, SPOOL_ERR_INTERIOR_POINTER); /* aligned, still inside */
  expect_refused(p, (char *)a + 4095, s, SPOOL_ERR_INTERIOR_POINTER); /* its last byte */
  expect_refused(p, (char *)a + 4096, s, SPOOL_ERR_UNKNOWN_POINTER);  /* just past it */
  expect_refused(p, (void *)(uintptr_t)0x1000, s, SPOOL_ERR_UNKNOWN_POINTER);
  free(on_heap);
  /* The live buffer is intact and frees normally; a second free is refused. */
  check_usable(a, 4096, 0x5A, s);
  CK_SPOOL(spool_free(p, a, s));
  expect_refused(p, a, s, SPOOL_ERR_DOUBLE_FREE);
  check_counts(p, 0, 0, 1, 1);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(free_wrong_pool) {
  spool_pool *p = default_pool();
  spool_pool *q = default_pool();
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1000, s));
  spool_stats before = test_stats(q);
#ifdef SPOOL_TEST_SIM
  long frees = cudasim_calls("cudaFreeAsync");
#endif
  spool_status got = spool_free(q, a, s);
  ck_assert_msg(got == SPOOL_ERR_WRONG_POOL, "free in the wrong pool returned %s: %s",
                spool_status_name(got), spool_last_error());
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees);
#endif
  ck_assert_uint_eq(test_stats(q).frees, before.frees);
  check_counts(p, 1000, 1, 1, 0);
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 0, 1, 1);
  test_stream_destroy(s);
  test_pool_destroy(q);
  test_pool_destroy(p);
}
END_TEST

/* The same through a pool with track=off and no heap, which keeps no table of its own: the
 * other pool's buffer is still named and kept, and the owner reports no false leak. */
START_TEST(free_wrong_pool_untracked) {
  spool_pool *p = default_pool();
  spool_pool *q = test_pool_with("track=off, cache=off");
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1000, s));
  CK_SPOOL(spool_alloc(p, &b, 4 * MiB, s));
  CK_STATUS(spool_free(q, a, s), SPOOL_ERR_WRONG_POOL);
  CK_STATUS(spool_free(q, b, s), SPOOL_ERR_WRONG_POOL);
  CK_LAST_ERROR_HAS("belongs to another pool");
  check_counts(p, 1000 + 4 * MiB, 2, 2, 0);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  test_stream_destroy(s);
  test_pool_destroy(q);
  test_pool_destroy(p); /* SPOOL_OK: no leak */
}
END_TEST

START_TEST(free_foreign_pool_memory) {
  /* Memory from cudaMallocAsync (the default pool): not spool's. */
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  void *foreign = NULL;
  CK_CUDA(cudaMallocAsync(&foreign, 1 * MiB, s));
  expect_refused(p, foreign, s, SPOOL_ERR_UNKNOWN_POINTER);
  CK_CUDA(cudaFreeAsync(foreign, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- stream order -------------------------------------------------------------------------------- */

START_TEST(same_stream_reuse) {
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 8 * MiB, s));
  CK_CUDA(cudaMemsetAsync(a, 1, 8 * MiB, s));
  uint64_t reserved = test_stats(p).bytes_reserved;
  ck_assert_uint_ge(reserved, 8 * MiB);
  CK_SPOOL(spool_free(p, a, s));
  /* No synchronize: the same stream may reuse the memory at once. */
  for (int i = 0; i < 10; i++) {
    CK_SPOOL(spool_alloc(p, &b, 8 * MiB, s));
    CK_CUDA(cudaMemsetAsync(b, 2, 8 * MiB, s));
    CK_SPOOL(spool_free(p, b, s));
    ck_assert_uint_eq(test_stats(p).bytes_reserved, reserved);
  }
  check_counts(p, 0, 0, 11, 11);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(free_on_other_stream) {
  spool_pool *p = default_pool();
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  cudaEvent_t ev = NULL;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 2 * MiB, s1));
  CK_CUDA(cudaMemsetAsync(a, 0x42, 2 * MiB, s1));
  /* s2 waits for s1's work on a, then frees it. */
  CK_CUDA(cudaEventRecord(ev, s1));
  CK_CUDA(cudaStreamWaitEvent(s2, ev, 0));
  CK_SPOOL(spool_free(p, a, s2));
  check_counts(p, 0, 0, 1, 1);
  CK_CUDA(cudaStreamSynchronize(s2));
  /* The memory is free again: s1 can allocate it after s2's free completed. */
  void *b = NULL;
  CK_SPOOL(spool_alloc(p, &b, 2 * MiB, s1));
  check_usable(b, 2 * MiB, 0x24, s1);
  CK_SPOOL(spool_free(p, b, s1));
  CK_CUDA(cudaEventDestroy(ev));
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  test_pool_destroy(p);
}
END_TEST

START_TEST(legacy_and_per_thread_streams) {
  spool_pool *p = default_pool();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, cudaStreamLegacy));
  CK_SPOOL(spool_alloc(p, &b, 1 * MiB, cudaStreamPerThread));
  CK_SPOOL(spool_free(p, a, cudaStreamLegacy));
  CK_SPOOL(spool_free(p, b, cudaStreamPerThread));
  CK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  CK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
  check_counts(p, 0, 0, 2, 2);
  test_pool_destroy(p);
}
END_TEST

/* ---- many buffers, many threads ---------------------------------------------------------------- */

START_TEST(many_buffers) {
  enum { N = 1000 };
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  static void *ptrs[N];
  static size_t sizes[N];
  uint64_t rng = 0x9E3779B97F4A7C15u, total = 0;
  for (size_t i = 0; i < N; i++) {
    sizes[i] = test_rand_size(&rng, 1 * MiB);
    CK_SPOOL(spool_alloc(p, &ptrs[i], sizes[i], s));
    ck_assert_ptr_nonnull(ptrs[i]);
    ck_assert_uint_eq((uintptr_t)ptrs[i] & 255u, 0);
    total += sizes[i];
  }
  check_disjoint(ptrs, sizes, N);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, total);
  ck_assert_uint_eq(st.bytes_in_use_peak, total);
  ck_assert_uint_eq(st.buffers_in_use, N);
  ck_assert_uint_eq(st.buffers_in_use_peak, N);
  ck_assert_uint_eq(st.bytes_allocated, total);
  ck_assert_uint_ge(st.bytes_used, total);
  ck_assert_uint_ge(st.bytes_reserved, st.bytes_used);
  /* Free every other one, in a scrambled order, then the rest. */
  uint64_t left = total, live = N, frees = 0;
  for (size_t k = 0; k < N; k++) {
    size_t i = (k * 389) % N; /* 389 is prime to 1000: a permutation */
    if (i % 2) continue;
    CK_SPOOL(spool_free(p, ptrs[i], s));
    ptrs[i] = NULL;
    left -= sizes[i];
    live--;
    frees++;
  }
  check_counts(p, left, live, N, frees);
  /* Refill the holes: counters and disjointness still exact. */
  for (size_t i = 0; i < N; i += 2) {
    CK_SPOOL(spool_alloc(p, &ptrs[i], sizes[i], s));
    left += sizes[i];
    live++;
  }
  check_disjoint(ptrs, sizes, N);
  check_counts(p, left, live, N + N / 2, frees);
  for (size_t i = 0; i < N; i++) CK_SPOOL(spool_free(p, ptrs[i], s));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.allocs, N + N / 2);
  ck_assert_uint_eq(st.frees, N + N / 2);
  ck_assert_uint_eq(st.buffers_in_use_peak, N);
  ck_assert_uint_eq(st.bytes_in_use_peak, total);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

enum { THREADS = 4, ROUNDS = 300, KEEP = 8 };

typedef struct worker {
  spool_pool *pool;
  uint64_t seed;
  uint64_t allocs, bytes; /* what this thread allocated */
  char error[256];        /* first failure; ck_assert only on the main thread */
} worker;

static void *work(void *arg) {
  worker *w = arg;
  void *live[KEEP] = {0};
  cudaStream_t s = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    snprintf(w->error, sizeof w->error, "cudaStreamCreateWithFlags: %s", cudaGetErrorName(e));
    return NULL;
  }
  for (int r = 0; r < ROUNDS && !w->error[0]; r++) {
    int slot = r % KEEP;
    spool_status st = spool_free(w->pool, live[slot], s);
    live[slot] = NULL;
    size_t size = test_rand_size(&w->seed, 256 * KiB);
    if (st == SPOOL_OK) st = spool_alloc(w->pool, &live[slot], size, s);
    if (st != SPOOL_OK) {
      snprintf(w->error, sizeof w->error, "round %d: %s: %s", r, spool_status_name(st),
               spool_last_error());
      break;
    }
    if (((uintptr_t)live[slot] & 255u) != 0) {
      snprintf(w->error, sizeof w->error, "round %d: %p not aligned", r, live[slot]);
      break;
    }
    w->allocs++;
    w->bytes += size;
    e = cudaMemsetAsync(live[slot], r & 0xff, size, s);
    if (e != cudaSuccess) snprintf(w->error, sizeof w->error, "cudaMemsetAsync: %s", cudaGetErrorName(e));
  }
  for (int i = 0; i < KEEP; i++) {
    spool_status st = spool_free(w->pool, live[i], s);
    if (st != SPOOL_OK && !w->error[0])
      snprintf(w->error, sizeof w->error, "final free: %s", spool_status_name(st));
  }
  e = cudaStreamSynchronize(s);
  if (e == cudaSuccess) e = cudaStreamDestroy(s);
  if (e != cudaSuccess && !w->error[0])
    snprintf(w->error, sizeof w->error, "stream: %s", cudaGetErrorName(e));
  return NULL;
}

START_TEST(threads) {
  spool_pool *p = default_pool();
  pthread_t tid[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].pool = p;
    w[i].seed = 0x1234567u + (uint64_t)i * 7919u;
    ck_assert_int_eq(pthread_create(&tid[i], NULL, work, &w[i]), 0);
  }
  uint64_t allocs = 0, bytes = 0;
  for (int i = 0; i < THREADS; i++) {
    ck_assert_int_eq(pthread_join(tid[i], NULL), 0);
    ck_assert_msg(w[i].error[0] == '\0', "thread %d: %s", i, w[i].error);
    allocs += w[i].allocs;
    bytes += w[i].bytes;
  }
  ck_assert_uint_eq(allocs, (uint64_t)THREADS * ROUNDS);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, allocs);
  ck_assert_uint_eq(st.frees, allocs);
  ck_assert_uint_eq(st.bytes_allocated, bytes);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_le(st.buffers_in_use_peak, THREADS * KEEP);
  ck_assert_uint_ge(st.buffers_in_use_peak, KEEP);
  ck_assert_uint_eq(st.alloc_failures, 0);
  test_pool_destroy(p);
}
END_TEST

/* ---- the runtime's last error after a failure ------------------------------------------------ */

START_TEST(oom_clears_last_error) {
  /* An out-of-memory from a limited pool (64 MiB; CUDA rounds limits to its own granularity,
   * 32 MiB on an H200) is reported by spool; the thread's CUDA error state stays clean. */
  spool_config cfg = test_config();
  cfg.max_size = 64 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  cudaStream_t s = test_stream_create();
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p, &ptr, 1 * GiB, s), SPOOL_ERR_OOM);
  ck_assert_ptr_null(ptr);
  CK_LAST_ERROR_HAS("1.00 GiB");
  cudaError_t last = cudaGetLastError();
  ck_assert_msg(last == cudaSuccess, "cudaGetLastError() after the OOM: %s",
                cudaGetErrorName(last));
  /* The pool and the stream still work. */
  CK_SPOOL(spool_alloc(p, &ptr, 1 * MiB, s));
  CK_CUDA(cudaMemsetAsync(ptr, 0x11, 1 * MiB, s));
  CK_SPOOL(spool_free(p, ptr, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- sim only: failures the driver cannot be made to produce on demand ------------------------- */

#ifdef SPOOL_TEST_SIM
/* Every field but the two failure counters is as before. */
static void check_unchanged_but_failures(const spool_stats *a, spool_stats now,
                                         uint64_t failures, uint64_t ooms) {
  const spool_stats *b = &now;
  ck_assert_uint_eq(b->bytes_in_use, a->bytes_in_use);
  ck_assert_uint_eq(b->bytes_in_use_peak, a->bytes_in_use_peak);
  ck_assert_uint_eq(b->buffers_in_use, a->buffers_in_use);
  ck_assert_uint_eq(b->buffers_in_use_peak, a->buffers_in_use_peak);
  ck_assert_uint_eq(b->bytes_reserved, a->bytes_reserved);
  ck_assert_uint_eq(b->allocs, a->allocs);
  ck_assert_uint_eq(b->frees, a->frees);
  ck_assert_uint_eq(b->bytes_used, a->bytes_used);
  ck_assert_uint_eq(b->bytes_allocated, a->bytes_allocated);
  ck_assert_uint_eq(b->trims, a->trims);
  ck_assert_uint_eq(b->alloc_failures, a->alloc_failures + failures);
  ck_assert_uint_eq(b->ooms, a->ooms + ooms);
}

START_TEST(sim_alloc_injected_oom) {
  spool_pool *p = no_retry_pool();
  cudaStream_t s = test_stream_create();
  void *keep = NULL;
  CK_SPOOL(spool_alloc(p, &keep, 5000, s));
  spool_stats before = test_stats(p);
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p, &ptr, 3 * MiB, s), SPOOL_ERR_OOM);
  ck_assert_ptr_null(ptr);
  CK_LAST_ERROR_HAS("asked");
  CK_LAST_ERROR_HAS("3.00 MiB");
  CK_LAST_ERROR_HAS("device 0");
  check_unchanged_but_failures(&before, test_stats(p), 1, 1);
  /* Not sticky: the pool works, the thread's CUDA error state is clean. */
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  CK_SPOOL(spool_alloc(p, &ptr, 3 * MiB, s));
  check_usable(ptr, 3 * MiB, 0x77, s);
  CK_SPOOL(spool_free(p, ptr, s));
  CK_SPOOL(spool_free(p, keep, s));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 1);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_alloc_injected_cuda_errors) {
  static const cudaError_t errs[] = {cudaErrorUnknown, cudaErrorInvalidResourceHandle,
                                     cudaErrorInvalidValue, cudaErrorLaunchFailure};
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
    spool_stats before = test_stats(p);
    cudasim_fail("cudaMallocFromPoolAsync", 1, errs[i]);
    void *ptr = TEST_SENTINEL;
    CK_STATUS(spool_alloc(p, &ptr, 1000, s), SPOOL_ERR_CUDA);
    ck_assert_ptr_null(ptr);
    CK_LAST_ERROR_HAS(cudaGetErrorName(errs[i]));
    check_unchanged_but_failures(&before, test_stats(p), 1, 0);
  }
  void *ptr = NULL;
  CK_SPOOL(spool_alloc(p, &ptr, 1000, s));
  CK_SPOOL(spool_free(p, ptr, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_alloc_destroyed_stream) {
  /* "an invalid stream" (header): a destroyed one. Real CUDA makes this undefined. */
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  test_stream_destroy(s);
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p, &ptr, 1000, s), SPOOL_ERR_CUDA);
  ck_assert_ptr_null(ptr);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_free_injected_failure) {
  spool_pool *p = no_retry_pool();
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 7777, s));
  spool_stats before = test_stats(p);
  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, before.buffers_in_use);
  ck_assert_uint_eq(st.bytes_in_use, before.bytes_in_use);
  ck_assert_uint_eq(st.frees, before.frees);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  /* Still live: usable, and a second free succeeds. */
  check_usable(a, 7777, 0x99, s);
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 0, 1, 1);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_failures_clear_last_error) {
  /* After every CUDA failure spool reports, cudaGetLastError() speaks only of the caller's own
   * calls: spool clears the runtime's last error. */
  spool_pool *p = no_retry_pool();
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, s));

  cudasim_fail("cudaMemPoolTrimTo", 1, cudaErrorUnknown);
  CK_STATUS(spool_trim(p, 0), SPOOL_ERR_CUDA);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudaPeekAtLastError(), cudaSuccess);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);

  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);

  void *b = TEST_SENTINEL;
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_alloc(p, &b, 1000, s), SPOOL_ERR_CUDA);
  ck_assert_ptr_null(b);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);

  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  CK_STATUS(spool_alloc(p, &b, 1000, s), SPOOL_ERR_OOM);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);

  /* A failure of the caller's own still shows: spool clears only after its own failures. */
  ck_assert_int_ne(cudaFreeAsync(TEST_SENTINEL, s), cudaSuccess);
  CK_SPOOL(spool_alloc(p, &b, 1000, s));
  ck_assert_int_ne(cudaGetLastError(), cudaSuccess);

  CK_SPOOL(spool_free(p, b, s));
  CK_SPOOL(spool_free(p, a, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_capacity_exhausted) {
  cudasim_set_capacity(0, 64 * MiB);
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &a, 48 * MiB, s));
  spool_stats before = test_stats(p);
  CK_STATUS(spool_alloc(p, &b, 48 * MiB, s), SPOOL_ERR_OOM);
  ck_assert_ptr_null(b);
  /* The numbers: asked, in use, the device's total. */
  CK_LAST_ERROR_HAS("asked 48.00 MiB");
  CK_LAST_ERROR_HAS("64.00 MiB");
  check_unchanged_but_failures(&before, test_stats(p), 1, 1);
  /* What is left still fits a smaller buffer; after a free the big one fits again. */
  void *c = NULL;
  CK_SPOOL(spool_alloc(p, &c, 8 * MiB, s));
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_alloc(p, &b, 48 * MiB, s));
  CK_SPOOL(spool_free(p, b, s));
  CK_SPOOL(spool_free(p, c, s));
  check_counts(p, 0, 0, 3, 3);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_held_stream_reuse) {
  /* Work on s does not complete, yet its own later allocations reuse what it freed. */
  spool_pool *p = default_pool();
  cudaStream_t s = test_stream_create();
  cudasim_hold(s);
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 6 * MiB, s));
  uint64_t reserved = test_stats(p).bytes_reserved;
  CK_SPOOL(spool_free(p, a, s));
  ck_assert_int_gt(cudasim_pending(s), 0);
  CK_SPOOL(spool_alloc(p, &b, 6 * MiB, s));
  ck_assert_uint_eq(test_stats(p).bytes_reserved, reserved);
  CK_SPOOL(spool_free(p, b, s));
  cudasim_release(s);
  ck_assert_int_eq(cudasim_pending(s), 0);
  check_counts(p, 0, 0, 2, 2);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#endif /* SPOOL_TEST_SIM */

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *alloc_suite(void) {
  Suite *s = suite_create("alloc");
  TCase *tc = test_tcase("sizes");
  tcase_add_test(tc, alloc_size_zero);
  tcase_add_test(tc, alloc_sizes);
  suite_add_tcase(s, tc);

  tc = test_tcase("arguments");
  tcase_add_test(tc, alloc_free_null_arguments);
  tcase_add_test(tc, free_unknown_pointer);
  tcase_add_test(tc, free_wrong_pool);
  tcase_add_test(tc, free_wrong_pool_untracked);
  tcase_add_test(tc, free_foreign_pool_memory);
  suite_add_tcase(s, tc);

  tc = test_tcase("streams");
  tcase_add_test(tc, same_stream_reuse);
  tcase_add_test(tc, free_on_other_stream);
  tcase_add_test(tc, legacy_and_per_thread_streams);
  suite_add_tcase(s, tc);

  tc = test_tcase("load");
  tcase_add_test(tc, many_buffers);
  tcase_add_test(tc, threads);
  suite_add_tcase(s, tc);

  tc = test_tcase("last_error");
  tcase_add_test(tc, oom_clears_last_error);
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim_failures");
  tcase_add_test(tc, sim_alloc_injected_oom);
  tcase_add_test(tc, sim_alloc_injected_cuda_errors);
  tcase_add_test(tc, sim_alloc_destroyed_stream);
  tcase_add_test(tc, sim_free_injected_failure);
  tcase_add_test(tc, sim_failures_clear_last_error);
  tcase_add_test(tc, sim_capacity_exhausted);
  tcase_add_test(tc, sim_held_stream_reuse);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(alloc_suite()); }
