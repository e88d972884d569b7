/* The main of a cpu suite that needs none of test_main.h's CUDA helpers: runs the suite (Check
 * forks per test) and exits with its verdict. */
#ifndef SPOOL_TEST_CPU_H
#define SPOOL_TEST_CPU_H

#include <check.h>
#include <stdlib.h>

static inline int test_cpu_main(Suite *su) {
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
