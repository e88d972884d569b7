/* check_stats: spool_stats_get, spool_stats_reset_peaks, spool_trim, the release threshold at a
 * synchronize, and spool_report.
 *
 * Built twice: check_stats_sim (cudasim, SPOOL_TEST_SIM) and check_stats_gpu (real CUDA). Tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too: they assert only what CUDA
 * guarantees about reserved memory, never its exact rounding. */
#include "test_main.h"

/* ---- helpers ------------------------------------------------------------------------------- */

/* cache=off: these tests watch the pool's own release and high-water marks; the stream caches
 * keep freed blocks above them (check_cache). */
static spool_pool *pool_with_threshold(uint64_t threshold) {
  spool_config cfg = test_config();
  cfg.release_threshold = threshold;
  cfg.cache = false;
  return test_pool_create(&cfg);
}

/* The relations that hold whatever the pool's granularity. */
static void check_relations(const spool_stats *st) {
  ck_assert_uint_ge(st->bytes_reserved, st->bytes_used);
  ck_assert_uint_ge(st->bytes_used, st->bytes_in_use);
  ck_assert_uint_ge(st->bytes_reserved_peak, st->bytes_reserved);
  ck_assert_uint_ge(st->bytes_used_peak, st->bytes_used);
  ck_assert_uint_ge(st->bytes_in_use_peak, st->bytes_in_use);
  ck_assert_uint_ge(st->buffers_in_use_peak, st->buffers_in_use);
  ck_assert_uint_ge(st->allocs, st->frees);
  ck_assert_uint_eq(st->allocs - st->frees, st->buffers_in_use);
  ck_assert_uint_ge(st->bytes_allocated, st->bytes_in_use);
  ck_assert_uint_ge(st->alloc_failures, st->ooms);
  ck_assert_uint_eq(st->buffers_in_use == 0, st->bytes_in_use == 0);
}

/* Sizes as spool's messages and report write them: "1.50 GiB" (two decimals, rounded half up
 * from the third), "255 B", "max". */
static const char *fmt_size(uint64_t bytes, char out[32]) {
  static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes == UINT64_MAX) return strcpy(out, "max");
  if (bytes < 1024) {
    snprintf(out, 32, "%llu B", (unsigned long long)bytes);
    return out;
  }
  unsigned u = 0;
  while (u < 6 && (bytes >> (10 * (u + 1))) != 0) u++;
  unsigned shift = 10 * u;
  uint64_t mask = (UINT64_C(1) << shift) - 1, whole = bytes >> shift, rem = bytes & mask, th = 0;
  for (int i = 0; i < 3; i++) {
    rem *= 10;
    th = th * 10 + (rem >> shift);
    rem &= mask;
  }
  uint64_t hundredths = (th + 5) / 10;
  if (hundredths == 100) {
    whole++;
    hundredths = 0;
  }
  if (whole == 1024 && u < 6) {
    whole = 1;
    u++;
  }
  snprintf(out, 32, "%llu.%02llu %s", (unsigned long long)whole, (unsigned long long)hundredths,
           names[u]);
  return out;
}

/* spool_report into a string (caller frees). Checks the status and that out is not closed. */
static char *report_text(spool_pool *p) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_SPOOL(spool_report(p, f));
  long n = ftell(f); /* still open: ftell works */
  ck_assert_int_gt(n, 0);
  rewind(f);
  char *text = calloc((size_t)n + 1, 1);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return text;
}

#define CK_TEXT_HAS(text, word)                                                               \
  ck_assert_msg(strstr((text), (word)) != NULL, "report lacks \"%s\":\n%s", (word), (text))

/* ---- the struct and its arithmetic ----------------------------------------------------------- */

START_TEST(stats_fresh_pool) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  spool_stats st;
  memset(&st, 0xEE, sizeof st);
  CK_SPOOL(spool_stats_get(p, &st));
  ck_assert_uint_eq(st.size, sizeof(spool_stats));
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use_peak, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use_peak, 0);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  ck_assert_uint_eq(st.bytes_reserved_peak, 0);
  ck_assert_uint_eq(st.bytes_used, 0);
  ck_assert_uint_eq(st.bytes_used_peak, 0);
  ck_assert_uint_eq(st.allocs, 0);
  ck_assert_uint_eq(st.frees, 0);
  ck_assert_uint_eq(st.bytes_allocated, 0);
  ck_assert_uint_eq(st.alloc_failures, 0);
  ck_assert_uint_eq(st.ooms, 0);
  ck_assert_uint_eq(st.trims, 0);
  test_pool_destroy(p);
}
END_TEST

START_TEST(stats_null_arguments) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  spool_stats st;
  memset(&st, 0xEE, sizeof st);
  CK_STATUS(spool_stats_get(NULL, &st), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(st.allocs, UINT64_C(0xEEEEEEEEEEEEEEEE)); /* not written on failure */
  CK_STATUS(spool_stats_get(p, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_stats_get(NULL, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_stats_reset_peaks(NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_trim(NULL, 0), SPOOL_ERR_INVALID);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_STATUS(spool_report(NULL, f), SPOOL_ERR_INVALID);
  CK_STATUS(spool_report(p, NULL), SPOOL_ERR_INVALID);
  ck_assert_int_eq(ftell(f), 0); /* nothing written */
  fclose(f);
  test_pool_destroy(p);
}
END_TEST

START_TEST(stats_arithmetic) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1000, s));
  CK_SPOOL(spool_alloc(p, &b, 5000, s));
  CK_SPOOL(spool_alloc(p, &c, 1 * MiB, s));
  const uint64_t abc = 1000 + 5000 + 1 * MiB;
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, abc);
  ck_assert_uint_eq(st.bytes_in_use_peak, abc);
  ck_assert_uint_eq(st.buffers_in_use, 3);
  ck_assert_uint_eq(st.buffers_in_use_peak, 3);
  ck_assert_uint_eq(st.allocs, 3);
  ck_assert_uint_eq(st.frees, 0);
  ck_assert_uint_eq(st.bytes_allocated, abc);
  ck_assert_uint_ge(st.bytes_used, abc);
  check_relations(&st);

  CK_SPOOL(spool_free(p, b, s));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, abc - 5000);
  ck_assert_uint_eq(st.bytes_in_use_peak, abc); /* peaks stay */
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.buffers_in_use_peak, 3);
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_eq(st.bytes_allocated, abc); /* a total: frees do not lower it */
  check_relations(&st);

  CK_SPOOL(spool_alloc(p, &d, 100, s)); /* below the peak */
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, abc - 5000 + 100);
  ck_assert_uint_eq(st.bytes_in_use_peak, abc);
  ck_assert_uint_eq(st.buffers_in_use_peak, 3);
  ck_assert_uint_eq(st.bytes_allocated, abc + 100);

  CK_SPOOL(spool_alloc(p, &e, 10 * MiB, s)); /* a new peak */
  st = test_stats(p);
  const uint64_t peak = abc - 5000 + 100 + 10 * MiB;
  ck_assert_uint_eq(st.bytes_in_use, peak);
  ck_assert_uint_eq(st.bytes_in_use_peak, peak);
  ck_assert_uint_eq(st.buffers_in_use, 4);
  ck_assert_uint_eq(st.buffers_in_use_peak, 4);
  ck_assert_uint_eq(st.allocs, 5);
  check_relations(&st);

  void *zero = NULL; /* size 0 and NULL frees count for nothing */
  CK_SPOOL(spool_alloc(p, &zero, 0, s));
  CK_SPOOL(spool_free(p, NULL, s));
  for (void **q = (void *[]){a, c, d, e, NULL}; *q; q++) CK_SPOOL(spool_free(p, *q, s));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use_peak, peak);
  ck_assert_uint_eq(st.buffers_in_use_peak, 4);
  ck_assert_uint_eq(st.allocs, 5);
  ck_assert_uint_eq(st.frees, 5);
  ck_assert_uint_eq(st.bytes_allocated, abc + 100 + 10 * MiB);
  ck_assert_uint_eq(st.alloc_failures, 0);
  ck_assert_uint_eq(st.trims, 0);
  check_relations(&st);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(stats_failure_counters) {
  /* A pool limited to 64 MiB runs out on any machine. */
  spool_config cfg = test_config();
  cfg.max_size = 64 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &a, 48 * MiB, s));
  for (int i = 1; i <= 3; i++) {
    CK_STATUS(spool_alloc(p, &b, 48 * MiB, s), SPOOL_ERR_OOM);
    ck_assert_ptr_null(b);
    spool_stats st = test_stats(p);
    ck_assert_uint_eq(st.alloc_failures, (uint64_t)i);
    ck_assert_uint_eq(st.ooms, (uint64_t)i);
    ck_assert_uint_eq(st.allocs, 1);
    ck_assert_uint_eq(st.bytes_allocated, 48 * MiB);
    ck_assert_uint_eq(st.bytes_in_use, 48 * MiB);
    ck_assert_uint_eq(st.buffers_in_use, 1);
    check_relations(&st);
  }
  CK_SPOOL(spool_free(p, a, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(stats_reset_peaks) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  void *big = NULL, *small = NULL;
  CK_SPOOL(spool_alloc(p, &big, 32 * MiB, s));
  CK_SPOOL(spool_alloc(p, &small, 1 * MiB, s));
  CK_SPOOL(spool_free(p, big, s));
  CK_CUDA(cudaStreamSynchronize(s));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 33 * MiB);
  ck_assert_uint_eq(st.buffers_in_use_peak, 2);
  ck_assert_uint_ge(st.bytes_used_peak, 33 * MiB);

  CK_SPOOL(spool_stats_reset_peaks(p));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, st.bytes_in_use);
  ck_assert_uint_eq(st.bytes_in_use_peak, 1 * MiB);
  ck_assert_uint_eq(st.buffers_in_use_peak, 1);
  ck_assert_uint_eq(st.bytes_reserved_peak, st.bytes_reserved);
  ck_assert_uint_eq(st.bytes_used_peak, st.bytes_used);
  ck_assert_uint_lt(st.bytes_used_peak, 33 * MiB);
  /* Totals are not peaks. */
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_eq(st.bytes_allocated, 33 * MiB);
  check_relations(&st);

  /* Peaks rise again from there. */
  void *c = NULL;
  CK_SPOOL(spool_alloc(p, &c, 2 * MiB, s));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 3 * MiB);
  ck_assert_uint_eq(st.buffers_in_use_peak, 2);
  check_relations(&st);
  CK_SPOOL(spool_free(p, c, s));
  CK_SPOOL(spool_free(p, small, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- trim and the release threshold ------------------------------------------------------------ */

/* Allocates n buffers of size together on s, fills them, frees them, synchronizes s. */
static void churn(spool_pool *p, cudaStream_t s, int n, size_t size) {
  void *ptrs[8];
  ck_assert_int_le(n, 8);
  for (int i = 0; i < n; i++) {
    CK_SPOOL(spool_alloc(p, &ptrs[i], size, s));
    CK_CUDA(cudaMemsetAsync(ptrs[i], i, size, s));
  }
  for (int i = 0; i < n; i++) CK_SPOOL(spool_free(p, ptrs[i], s));
  CK_CUDA(cudaStreamSynchronize(s));
}

START_TEST(trim_to_zero_and_keep) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  churn(p, s, 1, 64 * MiB);
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 64 * MiB); /* kept: threshold max */
  CK_SPOOL(spool_trim(p, 0));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  ck_assert_uint_eq(st.trims, 1);

  churn(p, s, 2, 64 * MiB);
  uint64_t before = test_stats(p).bytes_reserved;
  ck_assert_uint_ge(before, 128 * MiB);
  CK_SPOOL(spool_trim(p, 32 * MiB));
  st = test_stats(p);
  ck_assert_uint_ge(st.bytes_reserved, 32 * MiB); /* CUDA keeps at least keep_bytes */
  ck_assert_uint_le(st.bytes_reserved, before);
  ck_assert_uint_eq(st.trims, 2);
  /* keep more than is reserved: nothing to do, still a successful trim */
  uint64_t now = st.bytes_reserved;
  CK_SPOOL(spool_trim(p, (size_t)now + 1 * GiB));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_reserved, now);
  ck_assert_uint_eq(st.trims, 3);
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_uint_eq(test_stats(p).bytes_reserved, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(trim_keeps_live_memory) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  void *live = NULL;
  CK_SPOOL(spool_alloc(p, &live, 16 * MiB, s));
  churn(p, s, 2, 32 * MiB);
  CK_SPOOL(spool_trim(p, 0));
  spool_stats st = test_stats(p);
  ck_assert_uint_ge(st.bytes_reserved, 16 * MiB); /* memory in use cannot go back */
  ck_assert_uint_eq(st.bytes_in_use, 16 * MiB);
  check_relations(&st);
  /* The live buffer is intact. */
  CK_CUDA(cudaMemsetAsync(live, 0x5, 16 * MiB, s));
  unsigned char last = 0;
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaMemcpy(&last, (char *)live + 16 * MiB - 1, 1, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(last, 5);
  CK_SPOOL(spool_free(p, live, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_uint_eq(test_stats(p).bytes_reserved, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(release_threshold_zero) {
  /* As cudaMallocAsync's default pool ships: everything goes back at a synchronize. */
  spool_pool *p = pool_with_threshold(0);
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 64 * MiB, s));
  CK_CUDA(cudaMemsetAsync(a, 0, 64 * MiB, s));
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 64 * MiB);
  CK_SPOOL(spool_free(p, a, s));
  CK_CUDA(cudaStreamSynchronize(s));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  ck_assert_uint_ge(st.bytes_reserved_peak, 64 * MiB);
  ck_assert_uint_eq(st.trims, 0); /* not a trim */
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(release_threshold_max) {
  /* spool's default: the pool keeps what it reserved. */
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  churn(p, s, 1, 64 * MiB);
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 64 * MiB);
  CK_CUDA(cudaDeviceSynchronize());
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 64 * MiB);
  /* ... and the next allocation needs nothing new. */
  uint64_t reserved = test_stats(p).bytes_reserved;
  churn(p, s, 1, 64 * MiB);
  ck_assert_uint_eq(test_stats(p).bytes_reserved, reserved);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(release_threshold_between) {
  spool_pool *p = pool_with_threshold(32 * MiB);
  cudaStream_t s = test_stream_create();
  void *ptrs[3];
  for (int i = 0; i < 3; i++) CK_SPOOL(spool_alloc(p, &ptrs[i], 64 * MiB, s));
  uint64_t before = test_stats(p).bytes_reserved;
  ck_assert_uint_ge(before, 192 * MiB);
  for (int i = 0; i < 3; i++) CK_SPOOL(spool_free(p, ptrs[i], s));
  CK_CUDA(cudaStreamSynchronize(s));
  spool_stats st = test_stats(p);
  /* For the log: what the runtime really gives back at the synchronize. */
  fprintf(stderr,
          "release_threshold_between: threshold 32 MiB, reserved %" PRIu64 " B before the "
          "synchronize, %" PRIu64 " B after\n",
          before, st.bytes_reserved);
  /* The synchronize releases down to the threshold: on an H200 (CUDA 13, driver 580) 192 MiB
   * became exactly 32 MiB; cudasim releases whole free segments, down to 32 MiB or below. */
  ck_assert_uint_lt(st.bytes_reserved, before);
  ck_assert_uint_le(st.bytes_reserved, 32 * MiB);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- report ----------------------------------------------------------------------------------- */

START_TEST(report_content) {
  spool_pool *p = pool_with_threshold(256 * MiB);
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 3 * MiB, s));
  size_t free_b = 0, total_b = 0;
  CK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  char *text = report_text(p);
  CK_TEXT_HAS(text, "device 0");
  CK_TEXT_HAS(text, "in use");
  CK_TEXT_HAS(text, "reserved");
  CK_TEXT_HAS(text, "3.00 MiB");   /* in use */
  CK_TEXT_HAS(text, "256.00 MiB"); /* the threshold */
  CK_TEXT_HAS(text, "free");
  char total[32];
  CK_TEXT_HAS(text, fmt_size(total_b, total)); /* cudaMemGetInfo's total */
  free(text);
  CK_SPOOL(spool_free(p, a, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(report_write_fails) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  FILE *ro = fopen("/dev/null", "r"); /* writes to a read-only stream fail */
  ck_assert_ptr_nonnull(ro);
  CK_STATUS(spool_report(p, ro), SPOOL_ERR_IO);
  fclose(ro);
  test_pool_destroy(p);
}
END_TEST

/* ---- sim only: CUDA failing under the stats calls --------------------------------------------- */

#ifdef SPOOL_TEST_SIM
START_TEST(sim_stats_get_fails) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  for (int nth = 1; nth <= 4; nth++) { /* whichever of the four attribute reads fails */
    spool_stats st;
    memset(&st, 0xEE, sizeof st);
    cudasim_fail("cudaMemPoolGetAttribute", nth, cudaErrorUnknown);
    CK_STATUS(spool_stats_get(p, &st), SPOOL_ERR_CUDA);
    CK_LAST_ERROR_HAS("cudaErrorUnknown");
    ck_assert_uint_eq(st.size, (size_t)0xEEEEEEEEEEEEEEEEu); /* untouched on failure */
    test_stats(p); /* the call read every attribute up to the failing one: nothing armed */
  }
  test_stats(p);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_reset_peaks_fails) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4 * MiB, s));
  CK_SPOOL(spool_free(p, a, s));
  cudasim_fail("cudaMemPoolSetAttribute", 1, cudaErrorUnknown);
  CK_STATUS(spool_stats_reset_peaks(p), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 4 * MiB); /* nothing reset */
  ck_assert_uint_eq(st.buffers_in_use_peak, 1);
  CK_SPOOL(spool_stats_reset_peaks(p));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 0);
  ck_assert_uint_eq(st.buffers_in_use_peak, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_reset_peaks_second_fails) {
  /* The second high-water mark reset fails: SPOOL_ERR_CUDA, and the library's own peaks are
   * not reset (CUDA's first reset cannot be undone: spool.h says so). */
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4 * MiB, s));
  CK_SPOOL(spool_alloc(p, &b, 1 * MiB, s));
  CK_SPOOL(spool_free(p, a, s));
  long calls = cudasim_calls("cudaMemPoolSetAttribute");
  cudasim_fail("cudaMemPoolSetAttribute", 2, cudaErrorUnknown);
  CK_STATUS(spool_stats_reset_peaks(p), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAttribute") - calls, 2);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 5 * MiB);
  ck_assert_uint_eq(st.buffers_in_use_peak, 2);
  ck_assert_uint_eq(st.bytes_in_use, 1 * MiB);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  /* A later reset works. */
  CK_SPOOL(spool_stats_reset_peaks(p));
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 1 * MiB);
  ck_assert_uint_eq(st.buffers_in_use_peak, 1);
  CK_SPOOL(spool_free(p, b, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_trim_fails) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  churn(p, s, 1, 8 * MiB);
  spool_stats before = test_stats(p);
  cudasim_fail("cudaMemPoolTrimTo", 1, cudaErrorUnknown);
  CK_STATUS(spool_trim(p, 0), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.trims, before.trims);
  ck_assert_uint_eq(st.bytes_reserved, before.bytes_reserved);
  /* Usable afterwards. */
  churn(p, s, 2, 1 * MiB);
  CK_SPOOL(spool_trim(p, 0));
  st = test_stats(p);
  ck_assert_uint_eq(st.trims, 1);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_trim_pending_free) {
  /* Memory freed on a stream whose work is not done is still in use for trim. */
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  cudasim_hold(s);
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 8 * MiB, s));
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 8 * MiB);
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_uint_eq(test_stats(p).bytes_reserved, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_report_meminfo_fails) {
  /* The report still has value without cudaMemGetInfo: spool writes it and says what is
   * missing (a choice of the library that the header allows: it may also return
   * SPOOL_ERR_CUDA). The test pins the library's choice. */
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudasim_fail("cudaMemGetInfo", 1, cudaErrorUnknown);
  char *text = report_text(p);
  ck_assert_int_eq(cudasim_calls("cudaMemGetInfo"), 1);
  CK_TEXT_HAS(text, "in use");
  CK_TEXT_HAS(text, "reserved");
  CK_TEXT_HAS(text, "cudaMemGetInfo");
  CK_TEXT_HAS(text, "cudaErrorUnknown");
  free(text);
  test_pool_destroy(p);
}
END_TEST

/* The device's name cannot be read: the report says so, succeeds, and leaves the runtime's last
 * error clear for the caller's own checks. */
START_TEST(sim_report_without_device_name_leaves_no_cuda_error) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  cudasim_fail("cudaGetDeviceProperties", 1, cudaErrorUnknown);
  char *text = report_text(p);
  CK_TEXT_HAS(text, "name unavailable");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  free(text);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_report_meminfo_fails_keeps_last_error) {
  /* spool_report succeeds without cudaMemGetInfo: the thread's last failure stays as it was. */
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(NULL, &ptr, 1000, NULL), SPOOL_ERR_INVALID);
  char kept[1024];
  snprintf(kept, sizeof kept, "%s", spool_last_error());
  ck_assert_msg(kept[0] != '\0', "no message for the failed alloc");
  cudasim_fail("cudaMemGetInfo", 1, cudaErrorUnknown);
  char *text = report_text(p); /* asserts SPOOL_OK */
  ck_assert_int_eq(cudasim_armed(), 0);
  CK_TEXT_HAS(text, "cudaErrorUnknown"); /* the failure is in the report ... */
  free(text);
  ck_assert_msg(strcmp(spool_last_error(), kept) == 0, /* ... not in the last error */
                "last error changed by a successful report: \"%s\", was \"%s\"",
                spool_last_error(), kept);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_report_attribute_fails) {
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  cudasim_fail("cudaMemPoolGetAttribute", 1, cudaErrorUnknown);
  CK_STATUS(spool_report(p, f), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  fclose(f);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_report_capacity) {
  /* cudaMemGetInfo's figures: a 2 GiB device with 1 GiB reserved by another pool. */
  cudasim_set_capacity(0, 2 * GiB);
  spool_pool *other = pool_with_threshold(UINT64_MAX);
  cudaStream_t s = test_stream_create();
  churn(other, s, 1, 1 * GiB);
  spool_pool *p = pool_with_threshold(UINT64_MAX);
  char *text = report_text(p);
  CK_TEXT_HAS(text, "1.00 GiB free of 2.00 GiB");
  free(text);
  test_stream_destroy(s);
  test_pool_destroy(p);
  test_pool_destroy(other);
}
END_TEST
#endif /* SPOOL_TEST_SIM */

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *stats_suite(void) {
  Suite *s = suite_create("stats");
  TCase *tc = test_tcase("counters");
  tcase_add_test(tc, stats_fresh_pool);
  tcase_add_test(tc, stats_null_arguments);
  tcase_add_test(tc, stats_arithmetic);
  tcase_add_test(tc, stats_failure_counters);
  tcase_add_test(tc, stats_reset_peaks);
  suite_add_tcase(s, tc);

  tc = test_tcase("release");
  tcase_add_test(tc, trim_to_zero_and_keep);
  tcase_add_test(tc, trim_keeps_live_memory);
  tcase_add_test(tc, release_threshold_zero);
  tcase_add_test(tc, release_threshold_max);
  tcase_add_test(tc, release_threshold_between);
  suite_add_tcase(s, tc);

  tc = test_tcase("report");
  tcase_add_test(tc, report_content);
  tcase_add_test(tc, report_write_fails);
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim_failures");
  tcase_add_test(tc, sim_stats_get_fails);
  tcase_add_test(tc, sim_reset_peaks_fails);
  tcase_add_test(tc, sim_reset_peaks_second_fails);
  tcase_add_test(tc, sim_trim_fails);
  tcase_add_test(tc, sim_trim_pending_free);
  tcase_add_test(tc, sim_report_meminfo_fails);
  tcase_add_test(tc, sim_report_without_device_name_leaves_no_cuda_error);
  tcase_add_test(tc, sim_report_meminfo_fails_keeps_last_error);
  tcase_add_test(tc, sim_report_attribute_fails);
  tcase_add_test(tc, sim_report_capacity);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(stats_suite()); }
