/* Helpers of the multi-device and IPC suites (check_multi, check_ipc), on top of test_main.h. */
#ifndef SPOOL_TEST_MULTI_H
#define SPOOL_TEST_MULTI_H

#include "test_main.h"

#include "ipc_proto.h"
#include "test_kernels.h"

#ifndef SPOOL_TEST_CHILD
#error "SPOOL_TEST_CHILD must name the ipc_child program (tests/CMakeLists.txt sets it)"
#endif

/* Tests whose point is a kernel say so and skip where the kernels are stubs. */
#define NEED_KERNELS()                                                                        \
  do {                                                                                        \
    if (!test_kernels_available()) {                                                          \
      printf("skipped %s: built without test kernels (no nvcc, or a sanitizer build)\n",      \
             __func__);                                                                       \
      return;                                                                                 \
    }                                                                                         \
  } while (0)

static inline spool_pool *test_pool_on(int device) {
  spool_config cfg = test_config();
  cfg.device = device;
  return test_pool_create(&cfg);
}

static inline void *test_alloc(spool_pool *p, size_t bytes, cudaStream_t s) {
  void *ptr = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &ptr, bytes, s));
  ck_assert_ptr_nonnull(ptr);
  ck_assert_ptr_ne(ptr, TEST_SENTINEL);
  return ptr;
}

/* The n uint32_t values at dev (device memory, read on stream s) are first, first + 1, ... */
static inline void test_expect_values(const void *dev, size_t n, uint32_t first, cudaStream_t s) {
  uint32_t *host = (uint32_t *)malloc(n * sizeof *host);
  ck_assert_ptr_nonnull(host);
  /* From the stream's device: pool memory is mapped only where the pool grants access, and the
   * H200 refused a copy from device 1's pool with device 0 current (cudaErrorInvalidValue). */
  int current = 0, device = 0;
  CK_CUDA(cudaGetDevice(&current));
  CK_CUDA(cudaStreamGetDevice(s, &device));
  CK_CUDA(cudaSetDevice(device));
  CK_CUDA(cudaMemcpyAsync(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaSetDevice(current));
  for (size_t i = 0; i < n; i++) {
    if (host[i] != first + (uint32_t)i) {
      uint32_t got = host[i];
      free(host);
      ck_abort_msg("value %zu is %" PRIu32 ", expected %" PRIu32, i, got, first + (uint32_t)i);
    }
  }
  free(host);
}

static inline char *test_report_text(spool_pool *p) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_SPOOL(spool_report(p, f));
  long n = ftell(f);
  ck_assert_int_gt(n, 0);
  rewind(f);
  char *text = (char *)calloc((size_t)n + 1, 1);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return text;
}

#define CK_TEXT_HAS(text, word)                                                               \
  ck_assert_msg(strstr((text), (word)) != NULL, "text lacks \"%s\":\n%s", (word), (text))

/* Runs ipc_child with the given mode and argument and returns its exit status (-1: killed after
 * IPC_TIMEOUT_MS). */
static inline int test_run_child(const char *mode, const char *arg) {
  char *argv[] = {(char *)SPOOL_TEST_CHILD, (char *)(uintptr_t)mode, (char *)(uintptr_t)arg,
                  NULL};
  fflush(stdout);
  fflush(stderr);
  pid_t pid = ipc_child_start(argv);
  ck_assert_int_gt(pid, 0);
  return ipc_child_wait(pid, IPC_TIMEOUT_MS);
}

#endif /* SPOOL_TEST_MULTI_H */
