/* check_leaks: what tracking reports of the buffers still allocated: tags and call sites, the
 * report of spool_leaks (groups, counts, arguments) and the report at destroy (to the file the
 * config or the environment names).
 *
 * Built twice: check_leaks_sim (cudasim, SPOOL_TEST_SIM) and check_leaks_gpu (real CUDA). Tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too: they never hand the driver a
 * pointer it does not own and never read freed memory. */
#include "test_track.h"

/* ---- helpers ------------------------------------------------------------------------------- */

/* How often needle occurs in text. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) n++;
  return n;
}

/* Where needle first occurs in text; fails when it does not. */
static size_t position_of(const char *text, const char *needle) {
  const char *at = strstr(text, needle);
  ck_assert_msg(at != NULL, "\"%s\" lacks \"%s\"", text, needle);
  return (size_t)(at - text);
}

/* ---- tags ----------------------------------------------------------------------------------- */

START_TEST(tagged_allocations) {
  spool_pool *p = pool_with("track=full");
  cudaStream_t s = test_stream_create();
  void *w = NULL, *plain = NULL;
  CK_SPOOL(spool_alloc_tagged(p, &w, 2 * MiB, s, "weights"));
  CK_SPOOL(spool_alloc(p, &plain, 1 * MiB, s));

  char *report = leak_report(p);
  CK_TEXT_HAS(report, "2.00 MiB in 1 buffer at tag 'weights'");
  CK_TEXT_HAS(report, "1.00 MiB in 1 buffer at an unknown site");
  ck_assert_uint_lt(position_of(report, "tag 'weights'"), position_of(report, "unknown site"));
  free(report);

  /* Messages name the tag... */
  expect_refused(p, (char *)w + 4096, s, SPOOL_ERR_INTERIOR_POINTER);
  CK_LAST_ERROR_HAS("allocated at tag 'weights'");
  /* ... and say when a buffer was allocated without a site. */
  expect_refused(p, (char *)plain + 4096, s, SPOOL_ERR_INTERIOR_POINTER);
  CK_LAST_ERROR_HAS("allocated at an unknown site");

  CK_SPOOL(spool_free(p, w, s));
  expect_refused(p, w, s, SPOOL_ERR_DOUBLE_FREE);
  CK_LAST_ERROR_HAS("allocated at tag 'weights'");
  CK_SPOOL(spool_free(p, plain, s));
  test_stream_destroy(s);
  test_pool_destroy(p);

  /* track=counts keeps the site as well (a copy); only the age needs track=full. */
  p = pool_with("track=counts");
  s = test_stream_create();
  CK_SPOOL(spool_alloc_tagged(p, &w, 2 * MiB, s, "weights"));
  report = leak_report(p);
  CK_TEXT_HAS(report, "2.00 MiB in 1 buffer at tag 'weights'");
  CK_TEXT_LACKS(report, "age ");
  free(report);
  CK_SPOOL(spool_free(p, w, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- spool_leaks ---------------------------------------------------------------------------- */

START_TEST(leaks_report_groups) {
  spool_pool *p = pool_with("track=full");
  cudaStream_t s = test_stream_create(), s2 = test_stream_create();
  void *small[3] = {NULL, NULL, NULL}, *big = NULL;
  const int small_line = __LINE__; for (int i = 0; i < 3; i++) CK_SPOOL(SPOOL_ALLOC(p, &small[i], 1 * MiB, s));
  const int big_line = __LINE__; CK_SPOOL(SPOOL_ALLOC(p, &big, 8 * MiB, s2));

  char *report = leak_report(p);
  CK_TEXT_HAS(report, "leak report");
  CK_TEXT_HAS(report, ptr_text(p).s);
  CK_TEXT_HAS(report, "4 live buffers, 11.00 MiB");
  char big_group[400], small_group[400];
  snprintf(big_group, sizeof big_group, "8.00 MiB in 1 buffer at %s\n",
           site_of(__FILE__, big_line).s);
  snprintf(small_group, sizeof small_group, "3.00 MiB in 3 buffers at %s\n",
           site_of(__FILE__, small_line).s);
  size_t at_big = position_of(report, big_group), at_small = position_of(report, small_group);
  ck_assert_msg(at_big < at_small, "the 8 MiB group is not first:\n%s", report);
  /* Each buffer under its group, in allocation order, with size, stream, number and age. */
  size_t at_ptr = position_of(report, ptr_text(big).s);
  ck_assert_uint_gt(at_ptr, at_big);
  ck_assert_uint_lt(at_ptr, at_small);
  size_t last = at_small;
  for (int i = 0; i < 3; i++) {
    size_t at = position_of(report, ptr_text(small[i]).s);
    ck_assert_uint_gt(at, last);
    last = at;
    const char *line = report + at;
    const char *end = strchr(line, '\n');
    ck_assert_ptr_nonnull(end);
    char buffer_line[256];
    snprintf(buffer_line, sizeof buffer_line, "%.*s", (int)(end - line), line);
    CK_TEXT_HAS(buffer_line, "1.00 MiB");
    char want[400];
    snprintf(want, sizeof want, "stream %s", ptr_text(s).s);
    CK_TEXT_HAS(buffer_line, want);
    snprintf(want, sizeof want, "allocation #%d", i + 1);
    CK_TEXT_HAS(buffer_line, want);
    CK_TEXT_HAS(buffer_line, "age ");
  }
  char want[400];
  /* Streams take allocation numbers in batches: s2's is not 4, but it is in the report. */
  snprintf(want, sizeof want, "stream %s  allocation #", ptr_text(s2).s);
  CK_TEXT_HAS(report, want);
  ck_assert_int_eq(count_of(report, "age "), 4);
  free(report);

  /* spool_leaks changes nothing. */
  check_counts(p, 11 * MiB, 4, 4, 0, 0);

  /* Free the big one: now the small group leads alone. */
  CK_SPOOL(spool_free(p, big, s2));
  report = leak_report(p);
  CK_TEXT_HAS(report, "3 live buffers, 3.00 MiB");
  CK_TEXT_HAS(report, small_group);
  CK_TEXT_LACKS(report, big_group);
  free(report);

  for (int i = 0; i < 3; i++) CK_SPOOL(spool_free(p, small[i], s));
  report = leak_report(p);
  CK_TEXT_HAS(report, "no live buffers");
  free(report);
  test_stream_destroy(s);
  test_stream_destroy(s2);
  test_pool_destroy(p);
}
END_TEST

START_TEST(leaks_report_counts_no_age) {
  spool_pool *p = pool_with("track=counts");
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  const int line_a = __LINE__; CK_SPOOL(SPOOL_ALLOC(p, &a, 1 * MiB, s));
  CK_SPOOL(spool_alloc(p, &b, 3 * MiB, s));
  char *report = leak_report(p);
  /* Sites are kept, times are not: two groups, the bigger first; no age. */
  CK_TEXT_HAS(report, "2 live buffers, 4.00 MiB");
  CK_TEXT_HAS(report, "3.00 MiB in 1 buffer at an unknown site");
  CK_TEXT_HAS(report, site_of(__FILE__, line_a).s);
  ck_assert_uint_lt(position_of(report, "3.00 MiB in 1 buffer"),
                    position_of(report, "1.00 MiB in 1 buffer"));
  CK_TEXT_HAS(report, ptr_text(a).s);
  CK_TEXT_HAS(report, ptr_text(b).s);
  CK_TEXT_HAS(report, "allocation #1");
  CK_TEXT_HAS(report, "allocation #2");
  CK_TEXT_LACKS(report, "age ");
  free(report);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(leaks_arguments) {
  spool_pool *p = pool_with("track=counts");
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_STATUS(spool_leaks(NULL, f), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("NULL");
  CK_STATUS(spool_leaks(p, NULL), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("NULL");
  test_pool_destroy(p);

  p = pool_with("track=off");
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4096, s));
  CK_STATUS(spool_leaks(p, f), SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("track=off");
  CK_LAST_ERROR_HAS("1 live");
  char *text = slurp(f);
  ck_assert_str_eq(text, ""); /* nothing written */
  free(text);
  fclose(f);
  CK_SPOOL(spool_free(p, a, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- the report at destroy -------------------------------------------------------------------- */

START_TEST(destroy_report_to_config_file) {
  char path[64], text[400];
  temp_path(path);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("earlier contents\n", f);
  fclose(f);
  snprintf(text, sizeof text, "track=full, report=%s", path);
  cudaStream_t s = test_stream_create();

  spool_pool *p = pool_with(text);
  void *a = NULL, *b = NULL, *c = NULL;
  const int line_a = __LINE__; CK_SPOOL(SPOOL_ALLOC(p, &a, 3 * MiB, s));
  CK_SPOOL(spool_alloc_tagged(p, &b, 5000, s, "scratch"));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  CK_LAST_ERROR_HAS("2 buffers were still allocated");
  CK_LAST_ERROR_HAS("freed now");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif

  spool_pool *q = pool_with(text);
  CK_SPOOL(spool_alloc(q, &c, 777, s));
  CK_STATUS(spool_pool_destroy(q), SPOOL_ERR_LEAKS);
  CK_LAST_ERROR_HAS("1 buffer was still allocated");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif

  char *report = slurp_path(path);
  ck_assert_ptr_nonnull(report);
  /* Appended: what was there stays first, then both reports in order of destruction. */
  ck_assert_uint_eq(position_of(report, "earlier contents\n"), 0);
  ck_assert_int_eq(count_of(report, "leak report"), 2);
  /* The second pool may get the first one's freed host address: tell the reports apart by
   * their contents, the first's "2 live buffers" before the second's "1 live buffer". */
  size_t at_p = position_of(report, "2 live buffers"), at_q = position_of(report, "1 live buffer,");
  ck_assert_uint_lt(at_p, at_q);
  CK_TEXT_HAS(report, "2 live buffers");
  CK_TEXT_HAS(report, "1 live buffer, 777 B");
  CK_TEXT_HAS(report, site_of(__FILE__, line_a).s);
  CK_TEXT_HAS(report, "tag 'scratch'");
  CK_TEXT_HAS(report, ptr_text(a).s);
  CK_TEXT_HAS(report, ptr_text(b).s);
  /* c may have the address a had (the first pool's memory went back to the driver): look for
   * it in the second report only. */
  ck_assert_ptr_nonnull(strstr(report + at_q, ptr_text(c).s));
  /* Biggest first: the 3 MiB group before the 5000 B one. */
  ck_assert_uint_lt(position_of(report, site_of(__FILE__, line_a).s),
                    position_of(report, "tag 'scratch'"));
  free(report);

  /* A pool destroyed without leaks writes nothing. */
  p = pool_with(text);
  CK_SPOOL(spool_alloc(p, &a, 512, s));
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(p);
  report = slurp_path(path);
  ck_assert_int_eq(count_of(report, "leak report"), 2);
  free(report);

  unlink(path);
  test_stream_destroy(s);
}
END_TEST

START_TEST(destroy_report_to_env_file) {
  char env_path[64], cfg_path[64], text[400];
  temp_path(env_path);
  temp_path(cfg_path);
  cudaStream_t s = test_stream_create();
  ck_assert_int_eq(setenv("SPOOL_REPORT", env_path, 1), 0);

  /* report empty: SPOOL_REPORT names the file. */
  spool_pool *p = pool_with("track=counts, report=\"\"");
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 2 * MiB, s));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  char *report = slurp_path(env_path);
  ck_assert_ptr_nonnull(report);
  CK_TEXT_HAS(report, "leak report");
  CK_TEXT_HAS(report, "1 live buffer, 2.00 MiB");
  CK_TEXT_HAS(report, ptr_text(a).s);
  free(report);

  /* Appending there too. */
  p = pool_with("track=counts");
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, s));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  report = slurp_path(env_path);
  ck_assert_int_eq(count_of(report, "leak report"), 2);
  free(report);

  /* report= wins over SPOOL_REPORT. */
  snprintf(text, sizeof text, "track=counts, report=%s", cfg_path);
  p = pool_with(text);
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, s));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  report = slurp_path(env_path);
  ck_assert_int_eq(count_of(report, "leak report"), 2);
  free(report);
  report = slurp_path(cfg_path);
  ck_assert_int_eq(count_of(report, "leak report"), 1);
  free(report);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif

  ck_assert_int_eq(unsetenv("SPOOL_REPORT"), 0);
  unlink(env_path);
  unlink(cfg_path);
  test_stream_destroy(s);
}
END_TEST


/* ---- review fixes: grouping, destroy failures ---------------------------------------------- */

/* An empty tag and no site at all are two sites, each one group; groups of equal bytes and equal
 * counts print in the same order every time. */
START_TEST(leaks_empty_tag_and_untagged) {
  spool_pool *p = pool_with("track=counts");
  cudaStream_t s = test_stream_create();
  void *b[4] = {NULL, NULL, NULL, NULL};
  /* Interleaved, so that grouping must sort them. */
  CK_SPOOL(spool_alloc_tagged(p, &b[0], 1 * MiB, s, ""));
  CK_SPOOL(spool_alloc(p, &b[1], 1 * MiB, s));
  CK_SPOOL(spool_alloc_tagged(p, &b[2], 1 * MiB, s, ""));
  CK_SPOOL(spool_alloc(p, &b[3], 1 * MiB, s));

  char *first = leak_report(p);
  CK_TEXT_HAS(first, "4 live buffers, 4.00 MiB");
  ck_assert_msg(count_of(first, " buffers at ") == 2, "not 2 groups:\n%s", first);
  ck_assert_msg(count_of(first, " buffer at ") == 0, "a group of 1:\n%s", first);
  CK_TEXT_HAS(first, "2.00 MiB in 2 buffers at tag ''\n");
  CK_TEXT_HAS(first, "2.00 MiB in 2 buffers at an unknown site");
  /* Each buffer under its own group. */
  size_t at_tag = position_of(first, "at tag ''"), at_none = position_of(first, "unknown site");
  size_t lo = at_tag < at_none ? at_tag : at_none, hi = at_tag < at_none ? at_none : at_tag;
  for (int i = 0; i < 4; i++) {
    size_t at = position_of(first, ptr_text(b[i]).s);
    int tagged = i % 2 == 0;
    bool in_first_group = at > lo && at < hi;
    bool tag_first = at_tag < at_none;
    ck_assert_msg(at > lo && in_first_group == (tagged == tag_first),
                  "buffer %d (%s) under the wrong group:\n%s", i, tagged ? "tag ''" : "untagged",
                  first);
  }
  for (int k = 0; k < 2; k++) {
    char *again = leak_report(p);
    ck_assert_msg(strcmp(again, first) == 0, "report %d differs:\n%s\nfirst:\n%s", k + 2, again,
                  first);
    free(again);
  }
  free(first);
  for (int i = 0; i < 4; i++) CK_SPOOL(spool_free(p, b[i], s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* Destroy with leaks when the device synchronize before freeing them fails: SPOOL_ERR_CUDA, the
 * message counts the leaked buffers that stay allocated, and the report was written. */
START_TEST(sim_destroy_leaks_sync_fails) {
  char path[64], text[400];
  temp_path(path);
  snprintf(text, sizeof text, "track=counts, report=%s", path);
  spool_pool *p = pool_with(text);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, s));
  CK_SPOOL(spool_alloc_tagged(p, &b, 3000, s, "kept"));
  long frees = cudasim_calls("cudaFreeAsync");
  cudasim_fail("cudaDeviceSynchronize", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_CUDA);
  ck_assert_int_eq(cudasim_armed(), 0);
  CK_LAST_ERROR_HAS("cudaDeviceSynchronize");
  CK_LAST_ERROR_HAS("2 leaked buffers");
  CK_LAST_ERROR_HAS("stay allocated");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  /* Nothing was freed: both buffers, in the one heap chunk that holds them, are still the
   * driver's. */
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  char *report = slurp_path(path);
  ck_assert_ptr_nonnull(report);
  CK_TEXT_HAS(report, "leak report");
  CK_TEXT_HAS(report, "2 live buffers");
  CK_TEXT_HAS(report, ptr_text(a).s);
  CK_TEXT_HAS(report, ptr_text(b).s);
  CK_TEXT_HAS(report, "tag 'kept'");
  free(report);
  unlink(path);

  /* One leaked buffer: the singular. */
  p = pool_with("track=counts, report=/dev/null");
  void *c = NULL;
  CK_SPOOL(spool_alloc(p, &c, 4096, s));
  cudasim_fail("cudaDeviceSynchronize", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("1 leaked buffer ");
  CK_LAST_ERROR_HAS("stay allocated");

  /* CUDA lets the allocations outlive their pools: give back the heap chunks that hold them (a
   * and c sit at their starts, b inside a's). */
  CK_CUDA(cudaFreeAsync(a, s));
  CK_CUDA(cudaFreeAsync(c, s));
  test_stream_destroy(s);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
}
END_TEST

/* One leaked buffer of two cannot be given back: the message counts the one, and the other is
 * gone. */
START_TEST(sim_destroy_counts_the_leaks_that_stay) {
  spool_pool *p = pool_with("cache=off, report=/dev/null");
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, s));
  CK_SPOOL(spool_alloc(p, &b, 2 * MiB, s));
  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("1 of the 2 leaked buffers");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  /* the one that stayed (the table's order decides which) is the caller's to give back */
  if (cudaFreeAsync(a, s) != cudaSuccess) {
    (void)cudaGetLastError();
    CK_CUDA(cudaFreeAsync(b, s));
  }
  test_stream_destroy(s);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
}
END_TEST

/* Leaks, then the heap's chunk cannot be given back: the status is the CUDA failure's, whose
 * message also says there were leaks (status and words agree). */
START_TEST(sim_destroy_failure_after_leaks_is_the_status) {
  spool_pool *p = pool_with("report=/dev/null");
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1 * MiB, s));
  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaFreeAsync");
  CK_LAST_ERROR_HAS("chunk");
  CK_LAST_ERROR_HAS("leaked buffers");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  CK_CUDA(cudaFreeAsync(a, s)); /* a sits at its chunk's start: the chunk */
  test_stream_destroy(s);
}
END_TEST

#endif /* SPOOL_TEST_SIM */

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *leaks_suite(void) {
  Suite *s = suite_create("leaks");
  TCase *tc = test_tcase("leaks");
  tcase_add_test(tc, tagged_allocations);
  tcase_add_test(tc, leaks_report_groups);
  tcase_add_test(tc, leaks_report_counts_no_age);
  tcase_add_test(tc, leaks_arguments);
  tcase_add_test(tc, destroy_report_to_config_file);
  tcase_add_test(tc, destroy_report_to_env_file);
  tcase_add_test(tc, leaks_empty_tag_and_untagged);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_destroy_leaks_sync_fails);
  tcase_add_test(tc, sim_destroy_counts_the_leaks_that_stay);
  tcase_add_test(tc, sim_destroy_failure_after_leaks_is_the_status);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_main(leaks_suite()); }
