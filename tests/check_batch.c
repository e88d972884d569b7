/* check_batch: batched buffers (src/batch.c): the layout and its alignment, one free for the
 * whole batch, sub-pointers refused with words that name the batch (cached path, uncached path,
 * past heap_max_block), the leak report, and the data in each sub-buffer.
 *
 * Built twice: check_batch_sim (cudasim) and check_batch_gpu (real CUDA). */
#include "test_main.h"

static uintptr_t off(void *const *ptrs, size_t i) {
  return (uintptr_t)ptrs[i] - (uintptr_t)ptrs[0];
}

/* ---- layout ---------------------------------------------------------------------------------- */

START_TEST(batch_layout_default_alignment) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {100, 1000, 0, 4096};
  void *ptrs[4] = {TEST_SENTINEL, TEST_SENTINEL, TEST_SENTINEL, TEST_SENTINEL};
  CK_SPOOL(spool_alloc_batch(p, s, 4, sizes, ptrs, 0));
  ck_assert_ptr_nonnull(ptrs[0]);
  ck_assert_uint_eq((uintptr_t)ptrs[0] % 256, 0);
  ck_assert_uint_eq(off(ptrs, 1), 256);
  ck_assert_uint_eq(off(ptrs, 2), 1280); /* no bytes: it may share the next one's address */
  ck_assert_uint_eq(off(ptrs, 3), 1280);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 1); /* one allocation */
  ck_assert_uint_eq(st.bytes_in_use, 1280 + 4096);
  ck_assert_uint_eq(st.allocs, 1);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A sub-buffer of no bytes at the end still points inside the batch: its free is named as a
 * member's, not as a stranger's pointer. */
START_TEST(batch_trailing_empty_member_is_a_member) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {256, 0};
  void *ptrs[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, ptrs, 0));
  ck_assert_uint_eq(off(ptrs, 1), 256);
  CK_STATUS(spool_free(p, ptrs[1], s), SPOOL_ERR_BATCH_MEMBER);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

START_TEST(batch_small_alignment) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {1, 17, 3};
  void *ptrs[3];
  CK_SPOOL(spool_alloc_batch(p, s, 3, sizes, ptrs, 16));
  ck_assert_uint_eq(off(ptrs, 1), 16);
  ck_assert_uint_eq(off(ptrs, 2), 48);
  ck_assert_uint_eq(test_stats(p).bytes_in_use, 51);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- alignment past the pool's 256 bytes ----------------------------------------------------- */

/* A batch aligned to align on the path cfg takes: a spacer first (in the chunk the batch goes
 * to), so that the allocation starts off the alignment and ptrs[0] lies past it; every member
 * is aligned, the batch counts the sizes plus align - 256 bytes, members are refused by the
 * first pointer's name, and one free of ptrs[0] gives everything back. */
static void aligned_batch(const char *cfg, size_t align, size_t each, size_t spacing) {
  spool_pool *p = test_pool_with(cfg);
  cudaStream_t s = test_stream_create();
  void *spacer = test_alloc_on(p, spacing, s);
  size_t sizes[] = {each, 100, each};
  void *ptrs[3];
  CK_SPOOL(SPOOL_ALLOC_BATCH(p, s, 3, sizes, ptrs, align));
  for (int i = 0; i < 3; i++)
    ck_assert_msg((uintptr_t)ptrs[i] % align == 0, "align %zu: ptrs[%d] = %p", align, i, ptrs[i]);
  size_t padded = (each + align - 1) / align * align;
  ck_assert_uint_eq(off(ptrs, 1), padded);
  ck_assert_uint_eq(off(ptrs, 2), padded + align);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.bytes_in_use, spacing + padded + align + each + (align - 256));
  CK_CUDA(cudaMemsetAsync(ptrs[0], 0x11, each, s));
  CK_CUDA(cudaMemsetAsync(ptrs[2], 0x22, each, s));
  unsigned char last = 0;
  CK_CUDA(cudaMemcpyAsync(&last, (char *)ptrs[2] + each - 1, 1, cudaMemcpyDeviceToHost, s));
  CK_CUDA(cudaStreamSynchronize(s));
  ck_assert_uint_eq(last, 0x22);
  CK_STATUS(spool_free(p, ptrs[2], s), SPOOL_ERR_BATCH_MEMBER);
  char first[32];
  snprintf(first, sizeof first, "first pointer %p", ptrs[0]);
  CK_LAST_ERROR_HAS(first);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.bytes_in_use, spacing);
  ck_assert_int_ne(spool_free(p, ptrs[0], s), SPOOL_OK); /* a second free finds no batch */
  CK_SPOOL(spool_free(p, spacer, s));
  ck_assert_uint_eq(test_stats(p).bytes_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}

START_TEST(batch_aligned_to_a_page_on_the_cached_path) { aligned_batch(NULL, 4096, 5000, 512); }
END_TEST

START_TEST(batch_aligned_to_64_KiB_on_the_cached_path) {
  aligned_batch(NULL, 64 * KiB, 1000, 512);
}
END_TEST

START_TEST(batch_aligned_to_2_MiB_on_the_cached_path) {
  aligned_batch(NULL, SPOOL_BATCH_ALIGN_MAX, MiB, MiB + 512);
}
END_TEST

START_TEST(batch_aligned_to_2_MiB_past_the_heap) {
  aligned_batch("heap_max_block=1MiB", SPOOL_BATCH_ALIGN_MAX, 3 * MiB, 512);
}
END_TEST

START_TEST(batch_aligned_to_a_page_uncached) { aligned_batch("cache=off", 4096, 10000, 512); }
END_TEST

/* The first pointer of an aligned batch is the batch for spool_record_stream and
 * spool_free_after as well. */
START_TEST(batch_aligned_handed_off_by_its_first_pointer) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create(), other = test_stream_create();
  void *spacer = test_alloc_on(p, 512, s);
  size_t sizes[] = {4096, 4096};
  void *a[2], *b[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, a, 4096));
  CK_SPOOL(spool_record_stream(p, a[0], other));
  CK_SPOOL(spool_free(p, a[0], s));
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, b, 8192));
  ck_assert_uint_eq((uintptr_t)b[0] % 8192, 0);
  cudaEvent_t ev;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK_CUDA(cudaEventRecord(ev, other));
  CK_SPOOL(spool_free_after(p, b[0], s, ev));
  CK_CUDA(cudaStreamSynchronize(other));
  CK_CUDA(cudaEventDestroy(ev));
  CK_SPOOL(spool_free(p, spacer, s));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(other);
  test_stream_destroy(s);
}
END_TEST

/* A leaked aligned batch is freed by destroy like any leak. */
START_TEST(batch_aligned_leak_freed_at_destroy) {
  spool_pool *p = test_pool_with("report=/dev/null");
  cudaStream_t s = test_stream_create();
  void *spacer = test_alloc_on(p, 512, s);
  size_t sizes[] = {4096};
  void *ptrs[1];
  CK_SPOOL(spool_alloc_batch(p, s, 1, sizes, ptrs, 4096));
  CK_SPOOL(spool_free(p, spacer, s));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
  test_stream_destroy(s);
}
END_TEST

START_TEST(batch_bad_arguments) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {64, 64};
  void *ptrs[2] = {TEST_SENTINEL, TEST_SENTINEL};
  CK_STATUS(spool_alloc_batch(NULL, s, 2, sizes, ptrs, 0), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(ptrs[0]);
  ck_assert_ptr_null(ptrs[1]);
  CK_STATUS(spool_alloc_batch(p, s, 2, NULL, ptrs, 0), SPOOL_ERR_INVALID);
  CK_STATUS(spool_alloc_batch(p, s, 2, sizes, NULL, 0), SPOOL_ERR_INVALID);
  CK_STATUS(spool_alloc_batch(p, s, 0, sizes, ptrs, 0), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("count is 0");
  CK_STATUS(spool_alloc_batch(p, s, 2, sizes, ptrs, 300), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("alignment 300");
  CK_STATUS(spool_alloc_batch(p, s, 2, sizes, ptrs, 2 * SPOOL_BATCH_ALIGN_MAX),
            SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("alignment 4194304 is not a power of two up to 2097152");
  size_t huge[] = {SIZE_MAX - 100, 1000};
  ptrs[0] = ptrs[1] = TEST_SENTINEL;
  CK_STATUS(spool_alloc_batch(p, s, 2, huge, ptrs, 0), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("overflow");
  ck_assert_ptr_null(ptrs[0]);
  ck_assert_ptr_null(ptrs[1]);
  /* sizes and ptrs in the same memory: refused, the caller's sizes untouched */
  union {
    size_t sizes[2];
    void *ptrs[2];
  } same = {.sizes = {64, 128}};
  CK_STATUS(spool_alloc_batch(p, s, 2, same.sizes, same.ptrs, 0), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("overlap");
  ck_assert_uint_eq(same.sizes[0], 64);
  ck_assert_uint_eq(same.sizes[1], 128);
  ck_assert_uint_eq(test_stats(p).allocs, 0);
  size_t zeros[] = {0, 0};
  ptrs[0] = ptrs[1] = TEST_SENTINEL;
  CK_SPOOL(spool_alloc_batch(p, s, 2, zeros, ptrs, 0)); /* nothing to allocate */
  ck_assert_ptr_null(ptrs[0]);
  ck_assert_ptr_null(ptrs[1]);
  ck_assert_uint_eq(test_stats(p).allocs, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- frees ----------------------------------------------------------------------------------- */

/* cfg: the path the batch takes (cached, uncached, too large for the cache). */
static void member_refused(const char *cfg, size_t each) {
  spool_pool *p = test_pool_with(cfg);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {each, each, each};
  void *ptrs[3];
  CK_SPOOL(SPOOL_ALLOC_BATCH(p, s, 3, sizes, ptrs, 0));
  CK_STATUS(spool_free(p, ptrs[2], s), SPOOL_ERR_BATCH_MEMBER);
  char first[32];
  snprintf(first, sizeof first, "%p", ptrs[0]);
  CK_LAST_ERROR_HAS("batch");
  CK_LAST_ERROR_HAS(first);
  CK_LAST_ERROR_HAS("3 sub-buffers");
  CK_LAST_ERROR_HAS("allocation #");
  CK_LAST_ERROR_HAS("check_batch.c");
  CK_LAST_ERROR_HAS("nothing was freed");
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  CK_STATUS(spool_free(p, ptrs[1], s), SPOOL_ERR_BATCH_MEMBER);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  CK_STATUS(spool_free(p, ptrs[0], s), SPOOL_ERR_DOUBLE_FREE);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}

START_TEST(batch_member_free_refused_cached) { member_refused(NULL, 4 * KiB); }
END_TEST

START_TEST(batch_member_free_refused_uncached) { member_refused("cache=off", 4 * KiB); }
END_TEST

START_TEST(batch_member_free_refused_large) {
  member_refused("heap_max_block=1MiB", MiB); /* 3 MiB: past the heap */
}
END_TEST

START_TEST(batch_member_known_to_pool_of) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {512, 512};
  void *ptrs[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, ptrs, 0));
  spool_pool *owner = NULL;
  CK_SPOOL(spool_pool_of(ptrs[1], &owner));
  ck_assert_ptr_eq(owner, p);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- leak report ----------------------------------------------------------------------------- */

START_TEST(batch_in_leak_report) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {256, 256, 256};
  void *ptrs[3];
  CK_SPOOL(SPOOL_ALLOC_BATCH(p, s, 3, sizes, ptrs, 0));
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_SPOOL(spool_leaks(p, f));
  rewind(f);
  char text[4096] = {0};
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  ck_assert_uint_gt(n, 0);
  ck_assert_msg(strstr(text, "batch of 3") != NULL, "report: %s", text);
  ck_assert_msg(strstr(text, "check_batch.c") != NULL, "report: %s", text);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- data ------------------------------------------------------------------------------------ */

/* Each sub-buffer is filled with its own byte; reading the whole batch back shows every byte
 * where it belongs, so no two sub-buffers overlap. */
START_TEST(batch_data_in_place) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  enum { N = 5 };
  size_t sizes[N] = {1000, 256, 3000, 1, 70000};
  void *ptrs[N];
  CK_SPOOL(spool_alloc_batch(p, s, N, sizes, ptrs, 0));
  size_t total = off(ptrs, N - 1) + sizes[N - 1];
  CK_CUDA(cudaMemsetAsync(ptrs[0], 0xEE, total, s)); /* the padding */
  for (size_t i = 0; i < N; i++) CK_CUDA(cudaMemsetAsync(ptrs[i], 0x10 + (int)i, sizes[i], s));
  unsigned char *host = malloc(total);
  ck_assert_ptr_nonnull(host);
  CK_CUDA(cudaMemcpyAsync(host, ptrs[0], total, cudaMemcpyDeviceToHost, s));
  CK_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < N; i++)
    for (size_t k = 0; k < sizes[i]; k++)
      ck_assert_msg(host[off(ptrs, i) + k] == 0x10 + i, "sub-buffer %zu byte %zu", i, k);
  free(host);
  CK_SPOOL(spool_free(p, ptrs[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A batch's memory goes back to the stream's cache and serves the next batch of the same
 * shape without a CUDA call. */
START_TEST(batch_reuses_cached_block) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {4 * KiB, 8 * KiB};
  void *a[2], *b[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, a, 0));
  CK_SPOOL(spool_free(p, a[0], s));
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, b, 0));
  ck_assert_ptr_eq(a[0], b[0]);
  ck_assert_uint_eq(test_stats(p).cache_hits, 1);
  /* The reused block is a batch again: its records were renewed by the hit. */
  CK_STATUS(spool_free(p, b[1], s), SPOOL_ERR_BATCH_MEMBER);
  CK_SPOOL(spool_free(p, b[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("batch");
  TCase *tc = test_tcase("batch");
  tcase_add_test(tc, batch_layout_default_alignment);
  tcase_add_test(tc, batch_small_alignment);
  tcase_add_test(tc, batch_trailing_empty_member_is_a_member);
  tcase_add_test(tc, batch_bad_arguments);
  tcase_add_test(tc, batch_aligned_to_a_page_on_the_cached_path);
  tcase_add_test(tc, batch_aligned_to_64_KiB_on_the_cached_path);
  tcase_add_test(tc, batch_aligned_to_2_MiB_on_the_cached_path);
  tcase_add_test(tc, batch_aligned_to_2_MiB_past_the_heap);
  tcase_add_test(tc, batch_aligned_to_a_page_uncached);
  tcase_add_test(tc, batch_aligned_handed_off_by_its_first_pointer);
  tcase_add_test(tc, batch_aligned_leak_freed_at_destroy);
  tcase_add_test(tc, batch_member_free_refused_cached);
  tcase_add_test(tc, batch_member_free_refused_uncached);
  tcase_add_test(tc, batch_member_free_refused_large);
  tcase_add_test(tc, batch_member_known_to_pool_of);
  tcase_add_test(tc, batch_in_leak_report);
  tcase_add_test(tc, batch_data_in_place);
  tcase_add_test(tc, batch_reuses_cached_block);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
