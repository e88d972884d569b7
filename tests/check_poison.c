/* check_poison: poisoning: new buffers filled with one byte and freed ones with another when it is
 * on, nothing written when it is off, and what happens when the poisoning itself fails.
 *
 * Built twice: check_poison_sim (cudasim, SPOOL_TEST_SIM) and check_poison_gpu (real CUDA). Tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too: they never hand the driver a
 * pointer it does not own, and read freed memory only where the heap still holds its chunk (the
 * quarantine test). */
#include "test_track.h"

/* ---- poisoning ---------------------------------------------------------------------------------- */

START_TEST(poison_new_and_freed) {
  static const size_t sizes[] = {1000, 64 * KiB, 3 * MiB + 7};
  spool_pool *p = pool_with("poison=on, quarantine=0, track=counts"); /* reuse at once */
  cudaStream_t s = test_stream_create();
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    void *a = NULL;
#ifdef SPOOL_TEST_SIM
    long sets = cudasim_calls("cudaMemsetAsync");
#endif
    CK_SPOOL(spool_alloc(p, &a, n, s));
#ifdef SPOOL_TEST_SIM
    ck_assert_int_eq(cudasim_calls("cudaMemsetAsync"), sets + 1);
#endif
    check_device_bytes(a, n, 0xA5, s);
    /* The user's data, then the free. */
    CK_CUDA(cudaMemsetAsync(a, 0x11, n, s));
    CK_CUDA(cudaStreamSynchronize(s));
#ifdef SPOOL_TEST_SIM
    sets = cudasim_calls("cudaMemsetAsync");
#endif
    CK_SPOOL(spool_free(p, a, s));
#ifdef SPOOL_TEST_SIM
    ck_assert_int_eq(cudasim_calls("cudaMemsetAsync"), sets + 1);
    /* cudasim's device memory is host memory that stays mapped in the pool: read it directly
     * (cudaMemcpy refuses freed memory). */
    const unsigned char *freed = a;
    size_t i = first_not(freed, n, 0xDD);
    ck_assert_msg(i == n, "freed byte %zu of %zu is 0x%02x", i, n, i < n ? freed[i] : 0);
#endif
    /* Reading freed memory is undefined on a device; a new buffer on the same stream, the same
     * memory or not, must read as freshly poisoned, not as the old data. */
    void *b = NULL;
    CK_SPOOL(spool_alloc(p, &b, n, s));
#ifdef SPOOL_TEST_SIM
    ck_assert_ptr_eq(b, a);
#endif
    check_device_bytes(b, n, 0xA5, s);
    CK_SPOOL(spool_free(p, b, s));
  }
  check_counts(p, 0, 0, 6, 6, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(poison_off_by_default) {
  spool_config cfg = test_config();
  ck_assert(!cfg.poison);
  ck_assert_int_eq(cfg.track, SPOOL_TRACK_COUNTS);
  spool_pool *p = pool_with("poison=off");
  cudaStream_t s = test_stream_create();
#ifdef SPOOL_TEST_SIM
  long sets = cudasim_calls("cudaMemsetAsync");
#endif
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4096, s));
  CK_SPOOL(spool_free(p, a, s));
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMemsetAsync"), sets);
#endif
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(sim_poison_failures) {
  spool_pool *p = pool_with("poison=on, cache=off"); /* the uncached path; check_cache: cached */
  cudaStream_t s = test_stream_create();

  /* At alloc: the new buffer is given back, the caller gets NULL and an error. */
  void *a = TEST_SENTINEL;
  cudasim_fail("cudaMemsetAsync", 1, cudaErrorInvalidValue);
  long frees = cudasim_calls("cudaFreeAsync");
  CK_STATUS(spool_alloc(p, &a, 4096, s), SPOOL_ERR_CUDA);
  ck_assert_ptr_null(a);
  CK_LAST_ERROR_HAS("cudaMemsetAsync");
  CK_LAST_ERROR_HAS("poisoning");
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees + 1);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.allocs, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  char *report = leak_report(p);
  CK_TEXT_HAS(report, "no live buffers");
  free(report);

  /* At free: nothing freed, the buffer stays live, and a second free works. */
  CK_SPOOL(spool_alloc(p, &a, 4096, s));
  cudasim_fail("cudaMemsetAsync", 1, cudaErrorInvalidValue);
  frees = cudasim_calls("cudaFreeAsync");
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaMemsetAsync");
  CK_LAST_ERROR_HAS("stays allocated");
  CK_LAST_ERROR_PTR(a);
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  check_counts(p, 4096, 1, 1, 0, 0);
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 0, 1, 1, 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  /* ... and it was not a double free: a third is. */
  expect_refused(p, a, s, SPOOL_ERR_DOUBLE_FREE);

  /* cudaFreeAsync refusing after the poison: the buffer stays live too. */
  CK_SPOOL(spool_alloc(p, &a, 4096, s));
  cudasim_fail("cudaFreeAsync", 1, cudaErrorInvalidValue);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("stays allocated");
  check_counts(p, 4096, 1, 2, 1, 1);
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 0, 2, 2, 1);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#endif /* SPOOL_TEST_SIM */


/* ---- review fixes: failed frees ------------------------------------------------------------- */

#ifdef SPOOL_TEST_SIM
/* poison=on and cudaFreeAsync fails after the poisoning memset: the buffer stays allocated and
 * live, the message says its contents are 0xDD now, and they are. */
START_TEST(sim_poisoned_free_fails) {
  spool_pool *p = pool_with("poison=on, track=counts, cache=off");
  cudaStream_t s = test_stream_create();
  enum { N = 4096 };
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, N, s));
  CK_CUDA(cudaMemsetAsync(a, 0x11, N, s));
  CK_CUDA(cudaStreamSynchronize(s));
  long frees = cudasim_calls("cudaFreeAsync");
  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees + 1);
  CK_LAST_ERROR_HAS("cudaFreeAsync");
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  CK_LAST_ERROR_HAS("stays allocated");
  CK_LAST_ERROR_HAS("overwritten with 0xDD");
  CK_LAST_ERROR_PTR(a);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  /* cudasim's memory is host memory: the poison is there already. */
  const unsigned char *bytes = a;
  size_t i = first_not(bytes, N, 0xDD);
  ck_assert_msg(i == N, "byte %zu of %d is 0x%02x, not 0xDD", i, (int)N, i < N ? bytes[i] : 0);
  /* Still live: in the pool's table, in the driver, and usable. */
  check_counts(p, N, 1, 1, 0, 0);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  expect_refused(p, (char *)a + 8, s, SPOOL_ERR_INTERIOR_POINTER);
  CK_CUDA(cudaMemsetAsync(a, 0x22, N, s));
  check_device_bytes(a, N, 0x22, s);
  /* The second free works (and poisons again), and a third is a double free. */
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 0, 1, 1, 1);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  i = first_not(bytes, N, 0xDD);
  ck_assert_msg(i == N, "freed byte %zu is 0x%02x", i, i < N ? bytes[i] : 0);
  expect_refused(p, a, s, SPOOL_ERR_DOUBLE_FREE);

  /* When the poisoning memset itself fails, nothing was overwritten, and the message says no
   * such thing. */
  CK_SPOOL(spool_alloc(p, &a, N, s));
  cudasim_fail("cudaMemsetAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("stays allocated");
  CK_TEXT_LACKS(spool_last_error(), "0xDD");
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 0, 2, 2, 2);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#endif /* SPOOL_TEST_SIM */

/* ---- quarantine ----------------------------------------------------------------------------- */

/* With poisoning, a freed heap block stays out of reuse for the stream's next `quarantine` frees:
 * a read after the free meets 0xDD, not the next owner's data (the block's chunk stays mapped,
 * so reading it is a plain copy). A second free of it is a double free. */
START_TEST(poison_quarantine_keeps_freed_memory_poisoned) {
  spool_pool *p = pool_with("poison=on, quarantine=8");
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4 * KiB, s));
  CK_CUDA(cudaMemsetAsync(a, 0x11, 4 * KiB, s));
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_alloc(p, &b, 4 * KiB, s)); /* the next owner of 4 KiB: elsewhere */
  ck_assert_ptr_ne(a, b);
  CK_CUDA(cudaMemsetAsync(b, 0x22, 4 * KiB, s));
  check_device_bytes(a, 4 * KiB, 0xDD, s); /* the stale read sees the poison */
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_DOUBLE_FREE);
  ck_assert_uint_ge(test_stats(p).bytes_cached, 4 * KiB); /* idle, not in use */
  CK_SPOOL(spool_free(p, b, s));
  /* bounded: after 8 more frees on the stream a is the heap's again */
  bool reused = false;
  for (int i = 0; i < 12 && !reused; i++) {
    void *c = NULL;
    CK_SPOOL(spool_alloc(p, &c, 4 * KiB, s));
    reused = c == a;
    CK_SPOOL(spool_free(p, c, s));
  }
  ck_assert(reused);
  CK_SPOOL(spool_trim(p, 0)); /* the quarantine goes back with the rest */
  ck_assert_uint_eq(test_stats(p).bytes_heap, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *poison_suite(void) {
  Suite *s = suite_create("poison");
  TCase *tc = test_tcase("poison");
  tcase_add_test(tc, poison_new_and_freed);
  tcase_add_test(tc, poison_off_by_default);
  tcase_add_test(tc, poison_quarantine_keeps_freed_memory_poisoned);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_poison_failures);
  tcase_add_test(tc, sim_poisoned_free_fails);
#endif
  suite_add_tcase(s, tc);

  return s;
}

int main(void) { return test_main(poison_suite()); }
