/* cudasim's stand-ins for the test kernels (see test_kernels.h): the access check a GPU's MMU
 * would make, then the host does the work on the simulated device memory. */
#include "test_kernels.h"

#include "cudasim.h"

cudaError_t test_kernel_fill(uint32_t *p, size_t n, uint32_t seed, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = cudasim_kernel(s, p, n * sizeof *p, 1);
  for (size_t i = 0; e == cudaSuccess && i < n; i++) p[i] = seed + (uint32_t)i;
  return e;
}

cudaError_t test_kernel_add(uint32_t *p, size_t n, uint32_t add, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = cudasim_kernel(s, p, n * sizeof *p, 1);
  for (size_t i = 0; e == cudaSuccess && i < n; i++) p[i] += add;
  return e;
}

cudaError_t test_kernel_copy(uint32_t *dst, const uint32_t *src, size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t e = cudasim_kernel(s, src, n * sizeof *src, 0);
  if (e == cudaSuccess) e = cudasim_kernel(s, dst, n * sizeof *dst, 1);
  for (size_t i = 0; e == cudaSuccess && i < n; i++) dst[i] = src[i];
  return e;
}

cudaError_t test_kernel_hold_then_count(const uint32_t *p, size_t n, uint32_t seed, unsigned ms,
                                        unsigned *bad, cudaStream_t s) {
  (void)ms; /* no time passes in cudasim */
  if (n == 0) return cudaSuccess;
  cudaError_t e = cudasim_kernel(s, p, n * sizeof *p, 0);
  if (e == cudaSuccess) e = cudasim_kernel(s, bad, sizeof *bad, 1);
  for (size_t i = 0; e == cudaSuccess && i < n; i++) *bad += p[i] != seed + (uint32_t)i;
  return e;
}

int test_kernels_available(void) { return 1; }
