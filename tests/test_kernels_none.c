/* The test kernels where nvcc is missing or the build is sanitized (see test_kernels.h). */
#include "test_kernels.h"

cudaError_t test_kernel_fill(uint32_t *p, size_t n, uint32_t seed, cudaStream_t s) {
  (void)p, (void)n, (void)seed, (void)s;
  return cudaErrorNotSupported;
}

cudaError_t test_kernel_add(uint32_t *p, size_t n, uint32_t add, cudaStream_t s) {
  (void)p, (void)n, (void)add, (void)s;
  return cudaErrorNotSupported;
}

cudaError_t test_kernel_copy(uint32_t *dst, const uint32_t *src, size_t n, cudaStream_t s) {
  (void)dst, (void)src, (void)n, (void)s;
  return cudaErrorNotSupported;
}

cudaError_t test_kernel_hold_then_count(const uint32_t *p, size_t n, uint32_t seed, unsigned ms,
                                        unsigned *bad, cudaStream_t s) {
  (void)p, (void)n, (void)seed, (void)ms, (void)bad, (void)s;
  return cudaErrorNotSupported;
}

int test_kernels_available(void) { return 0; }
