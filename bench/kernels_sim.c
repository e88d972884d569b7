/* Stand-ins for kernels.cu in spool_bench_sim, the harness built against cudasim (whose device
 * memory is host memory and which runs no kernels). touch does its two writes on the host, so a
 * buffer smaller than asked for still shows (under ASan, or as a crash); the pipeline's kernels
 * do nothing. The times such a build prints mean nothing: it checks the harness, not spool. */
#include "kernels.h"

#include <string.h>

#include "cudasim.h"

void bench_device_setup(void) { cudasim_set_pool_segment(CUDASIM_H200_POOL_SEGMENT); }

cudaError_t bench_touch(void *p, size_t n, cudaStream_t s) {
  (void)s;
  const uint32_t v = (uint32_t)n;
  memcpy(p, &v, sizeof v);
  memcpy((uint8_t *)p + (n - 4) / 4 * 4, &v, sizeof v);
  return cudaSuccess;
}

cudaError_t bench_synth(uint8_t *rgb, int w, int h, int frame, cudaStream_t s) {
  (void)rgb, (void)w, (void)h, (void)frame, (void)s;
  return cudaSuccess;
}

cudaError_t bench_luma(const uint8_t *rgb, float *lum, int w, int h, cudaStream_t s) {
  (void)rgb, (void)lum, (void)w, (void)h, (void)s;
  return cudaSuccess;
}

cudaError_t bench_blur_h(const float *src, float *dst, int w, int h, cudaStream_t s) {
  (void)src, (void)dst, (void)w, (void)h, (void)s;
  return cudaSuccess;
}

cudaError_t bench_blur_v(const float *src, float *dst, int w, int h, cudaStream_t s) {
  (void)src, (void)dst, (void)w, (void)h, (void)s;
  return cudaSuccess;
}

cudaError_t bench_sobel(const float *src, float *grad, unsigned *peak, int w, int h,
                        cudaStream_t s) {
  (void)src, (void)grad, (void)peak, (void)w, (void)h, (void)s;
  return cudaSuccess;
}

cudaError_t bench_normalise(const float *grad, const unsigned *peak, uint8_t *out,
                            unsigned long long *sum, int w, int h, cudaStream_t s) {
  (void)grad, (void)peak, (void)out, (void)sum, (void)w, (void)h, (void)s;
  return cudaSuccess;
}
