/* Real kernels for the multi-device and IPC tests (see test_kernels.h). */
#include "test_kernels.h"

namespace {

unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return b > 4096 ? 4096u : (unsigned)b; /* grid-stride loops cover the rest */
}

__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = seed + (uint32_t)i;
}

__global__ void add(uint32_t *p, size_t n, uint32_t v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] += v;
}

__global__ void copy(uint32_t *dst, const uint32_t *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_then_count(const uint32_t *p, size_t n, uint32_t seed, unsigned ms,
                                unsigned *bad) {
  unsigned long long until = now_ns() + (unsigned long long)ms * 1000000ull;
  while (now_ns() < until) {
  }
  unsigned mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    mine += p[i] != seed + (uint32_t)i;
  if (mine) atomicAdd(bad, mine);
}

} // namespace

extern "C" cudaError_t test_kernel_fill(uint32_t *p, size_t n, uint32_t seed, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  fill<<<blocks_for(n), 256, 0, s>>>(p, n, seed);
  return cudaGetLastError();
}

extern "C" cudaError_t test_kernel_add(uint32_t *p, size_t n, uint32_t v, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  add<<<blocks_for(n), 256, 0, s>>>(p, n, v);
  return cudaGetLastError();
}

extern "C" cudaError_t test_kernel_copy(uint32_t *dst, const uint32_t *src, size_t n,
                                        cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  copy<<<blocks_for(n), 256, 0, s>>>(dst, src, n);
  return cudaGetLastError();
}

extern "C" cudaError_t test_kernel_hold_then_count(const uint32_t *p, size_t n, uint32_t seed,
                                                   unsigned ms, unsigned *bad, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  /* A few blocks only: the waiting blocks stay resident for ms, and a full grid (blocks_for(n)
   * fills most of an H200, all of a small GPU or MIG slice) would keep the other streams' work,
   * the writes this reader is meant to race with, off the device until the wait is over. */
  const unsigned blocks = blocks_for(n) < 16 ? blocks_for(n) : 16u;
  hold_then_count<<<blocks, 256, 0, s>>>(p, n, seed, ms, bad);
  return cudaGetLastError();
}

extern "C" int test_kernels_available(void) { return 1; }
