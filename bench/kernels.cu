// The harness's kernels (see kernels.h): the touch kernel, and launchers for the pipeline kernels
// of samples/pipeline_kernels.cuh, so that the pipeline here is the one the demo runs.

#include "kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

// ---- touch --------------------------------------------------------------------------------------

__global__ void touch(uint32_t *first, uint32_t *last, uint32_t v) {
  if (threadIdx.x == 0) *first = v;
  if (threadIdx.x == 1) *last = v;
}

extern "C" void bench_device_setup(void) {}

extern "C" cudaError_t bench_touch(void *p, size_t n, cudaStream_t s) {
  uint8_t *b = static_cast<uint8_t *>(p);
  touch<<<1, 32, 0, s>>>(reinterpret_cast<uint32_t *>(b),
                         reinterpret_cast<uint32_t *>(b + (n - 4) / 4 * 4), (uint32_t)n);
  return cudaGetLastError();
}

// ---- the five-kernel image pipeline (samples/pipeline_kernels.cuh) ------------------------------

#include "pipeline_kernels.cuh"  // samples/: the kernels the demo runs

namespace {

const dim3 kBlock(32, 8);  // 256 threads, a multiple of 32 as block_reduce needs

dim3 grid_for(int w, int h) { return dim3((unsigned)((w + 31) / 32), (unsigned)((h + 7) / 8)); }

}  // namespace

extern "C" cudaError_t bench_synth(uint8_t *rgb, int w, int h, int frame, cudaStream_t s) {
  const double a = 0.05 * frame;  // the disc's orbit, on the host so that the kernel is integer
  const int cx = (int)(w * (0.5 + 0.3 * std::cos(a))), cy = (int)(h * (0.5 + 0.3 * std::sin(a)));
  synth_frame<<<grid_for(w, h), kBlock, 0, s>>>(rgb, w, h, frame, cx, cy,
                                                std::max(1, std::min(w, h) / 8));
  return cudaGetLastError();
}

extern "C" cudaError_t bench_luma(const uint8_t *rgb, float *lum, int w, int h, cudaStream_t s) {
  luma<<<grid_for(w, h), kBlock, 0, s>>>(rgb, lum, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_blur_h(const float *src, float *dst, int w, int h, cudaStream_t s) {
  blur_h<<<grid_for(w, h), kBlock, 0, s>>>(src, dst, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_blur_v(const float *src, float *dst, int w, int h, cudaStream_t s) {
  blur_v<<<grid_for(w, h), kBlock, 0, s>>>(src, dst, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_sobel(const float *src, float *grad, unsigned *peak, int w, int h,
                                   cudaStream_t s) {
  sobel<<<grid_for(w, h), kBlock, 0, s>>>(src, grad, peak, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_normalise(const float *grad, const unsigned *peak, uint8_t *out,
                                       unsigned long long *sum, int w, int h, cudaStream_t s) {
  normalise<<<grid_for(w, h), kBlock, 0, s>>>(grad, peak, out, sum, w, h);
  return cudaGetLastError();
}
