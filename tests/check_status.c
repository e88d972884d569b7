/* Status names, strings and the thread-local last error (label cpu: no CUDA calls). */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

START_TEST(every_status_has_a_name_and_a_string) {
  static const char *const names[] = {
#define NAME(name, str) "SPOOL_" #name,
      SPOOL_STATUS_MAP(NAME)
#undef NAME
  };
  ck_assert_int_eq(SPOOL_OK, 0);
  ck_assert_int_eq((int)(sizeof names / sizeof names[0]), SPOOL_STATUS_COUNT);
  for (int s = 0; s < SPOOL_STATUS_COUNT; s++) {
    ck_assert_str_eq(spool_status_name((spool_status)s), names[s]);
    const char *str = spool_status_string((spool_status)s);
    ck_assert_ptr_nonnull(str);
    ck_assert_int_gt((int)strlen(str), 3);
    ck_assert_str_ne(str, "unknown status");
    for (int t = 0; t < s; t++) ck_assert_str_ne(str, spool_status_string((spool_status)t));
  }
}
END_TEST

START_TEST(contract_values_are_fixed) {
  /* Other code relies on these values: appending is allowed, reordering is not. */
  ck_assert_int_eq(SPOOL_ERR_INVALID, 1);
  ck_assert_int_eq(SPOOL_ERR_OOM, 2);
  ck_assert_int_eq(SPOOL_ERR_CUDA, 3);
  ck_assert_int_eq(SPOOL_ERR_NO_DEVICE, 4);
  ck_assert_int_eq(SPOOL_ERR_UNSUPPORTED, 5);
  ck_assert_int_eq(SPOOL_ERR_CONFIG, 6);
  ck_assert_int_eq(SPOOL_ERR_DOUBLE_FREE, 7);
  ck_assert_int_eq(SPOOL_ERR_UNKNOWN_POINTER, 8);
  ck_assert_int_eq(SPOOL_ERR_WRONG_POOL, 9);
  ck_assert_int_eq(SPOOL_ERR_LEAKS, 10);
  ck_assert_int_eq(SPOOL_ERR_HOST_OOM, 11);
  ck_assert_int_eq(SPOOL_ERR_IO, 12);
  ck_assert_int_eq(SPOOL_ERR_INTERIOR_POINTER, 13);
  ck_assert_int_eq(SPOOL_ERR_BATCH_MEMBER, 14);
  ck_assert_int_eq(SPOOL_ERR_SCOPE_ENDED, 15);
  ck_assert_str_eq(spool_status_string(SPOOL_OK), "success");
  ck_assert_str_eq(spool_status_string(SPOOL_ERR_OOM), "out of device memory");
}
END_TEST

START_TEST(unknown_values_get_a_name_too) {
  ck_assert_str_eq(spool_status_name((spool_status)42), "SPOOL_STATUS_42");
  ck_assert_str_eq(spool_status_name((spool_status)-1), "SPOOL_STATUS_-1");
  char count_name[32];
  snprintf(count_name, sizeof count_name, "SPOOL_STATUS_%d", (int)SPOOL_STATUS_COUNT);
  ck_assert_str_eq(spool_status_name(SPOOL_STATUS_COUNT), count_name);
  ck_assert_str_eq(spool_status_string((spool_status)42), "unknown status");
}
END_TEST

START_TEST(last_error_starts_empty_and_keeps_the_failure) {
  ck_assert_str_eq(spool_last_error(), "");
  ck_assert_int_eq(spool__fail(SPOOL_ERR_INVALID, "f: bad %d", 7), SPOOL_ERR_INVALID);
  ck_assert_str_eq(spool_last_error(), "f: bad 7");
  ck_assert_int_eq(spool__append(SPOOL_ERR_INVALID, "; and %s", "more"), SPOOL_ERR_INVALID);
  ck_assert_str_eq(spool_last_error(), "f: bad 7; and more");
}
END_TEST

START_TEST(long_messages_are_truncated_not_overrun) {
  char big[4096];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  spool__fail(SPOOL_ERR_CONFIG, "%s", big);
  size_t n = strlen(spool_last_error());
  ck_assert_uint_gt(n, 100);
  ck_assert_uint_lt(n, sizeof big - 1);
  spool__append(SPOOL_ERR_CONFIG, "%s", big); /* already full: must stay terminated */
  ck_assert_uint_eq(strlen(spool_last_error()), n);
}
END_TEST

static void *fail_in_thread(void *arg) {
  spool__fail(SPOOL_ERR_OOM, "thread %d", *(int *)arg);
  char *copy = malloc(strlen(spool_last_error()) + 1);
  if (copy) strcpy(copy, spool_last_error());
  return copy;
}

START_TEST(last_error_is_per_thread) {
  spool__fail(SPOOL_ERR_INVALID, "main thread");
  pthread_t th[4];
  int ids[4];
  for (int i = 0; i < 4; i++) {
    ids[i] = i;
    ck_assert_int_eq(pthread_create(&th[i], NULL, fail_in_thread, &ids[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *msg = NULL;
    char want[32];
    ck_assert_int_eq(pthread_join(th[i], &msg), 0);
    ck_assert_ptr_nonnull(msg);
    snprintf(want, sizeof want, "thread %d", i);
    ck_assert_str_eq(msg, want);
    free(msg);
  }
  ck_assert_str_eq(spool_last_error(), "main thread");
}
END_TEST

START_TEST(version_matches_the_header) {
  ck_assert_uint_eq(spool_version(), SPOOL_VERSION);
  ck_assert_str_eq(spool_version_string(), SPOOL_VERSION_STRING);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SPOOL_VERSION_MAJOR, SPOOL_VERSION_MINOR, SPOOL_VERSION_PATCH);
  ck_assert_str_eq(spool_version_string(), want);
}
END_TEST

START_TEST(cuda_errors_map_to_statuses) {
  ck_assert_int_eq(spool__status_of_cuda(cudaSuccess), SPOOL_OK);
  ck_assert_int_eq(spool__status_of_cuda(cudaErrorMemoryAllocation), SPOOL_ERR_OOM);
  ck_assert_int_eq(spool__status_of_cuda(cudaErrorNoDevice), SPOOL_ERR_NO_DEVICE);
  ck_assert_int_eq(spool__status_of_cuda(cudaErrorInsufficientDriver), SPOOL_ERR_NO_DEVICE);
  ck_assert_int_eq(spool__status_of_cuda(cudaErrorNotSupported), SPOOL_ERR_UNSUPPORTED);
  ck_assert_int_eq(spool__status_of_cuda(cudaErrorInvalidValue), SPOOL_ERR_CUDA);
  ck_assert_int_eq(spool__status_of_cuda(cudaErrorLaunchFailure), SPOOL_ERR_CUDA);
}
END_TEST

int main(void) {
  Suite *s = suite_create("status");
  TCase *tc = tcase_create("status");
  tcase_add_test(tc, every_status_has_a_name_and_a_string);
  tcase_add_test(tc, contract_values_are_fixed);
  tcase_add_test(tc, unknown_values_get_a_name_too);
  tcase_add_test(tc, last_error_starts_empty_and_keeps_the_failure);
  tcase_add_test(tc, long_messages_are_truncated_not_overrun);
  tcase_add_test(tc, last_error_is_per_thread);
  tcase_add_test(tc, version_matches_the_header);
  tcase_add_test(tc, cuda_errors_map_to_statuses);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
