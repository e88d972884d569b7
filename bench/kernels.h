/* The harness's kernels, launched from C: the touch kernel of the "+k" workloads and the five
 * kernels of the image pipeline (the same kernels as samples/pipeline.cu, which scripts/demo
 * runs). Each launcher queues one kernel on s and returns cudaGetLastError(), which reports a
 * bad launch at once; faults inside a kernel show up at the next synchronize, which is checked. */
#ifndef SPOOL_BENCH_KERNELS_H
#define SPOOL_BENCH_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One warp writes the first and the last 4 bytes of p (n >= 4): the kernel does as little as a
 * kernel can while still using the buffer, so that the figure is launch and allocator cost, not
 * memory bandwidth. */
cudaError_t bench_touch(void *p, size_t n, cudaStream_t s);

/* The device's setup before any measurement: nothing on a GPU; on cudasim, pools reserve in an
 * H200's 32 MiB segments, so that memory figures read as the H200's. */
void bench_device_setup(void);

/* The pipeline (see pipeline.h for the frame's order). w x h pixels. */
cudaError_t bench_synth(uint8_t *rgb, int w, int h, int frame, cudaStream_t s);
cudaError_t bench_luma(const uint8_t *rgb, float *lum, int w, int h, cudaStream_t s);
cudaError_t bench_blur_h(const float *src, float *dst, int w, int h, cudaStream_t s);
cudaError_t bench_blur_v(const float *src, float *dst, int w, int h, cudaStream_t s);
cudaError_t bench_sobel(const float *src, float *grad, unsigned *peak, int w, int h,
                        cudaStream_t s);
cudaError_t bench_normalise(const float *grad, const unsigned *peak, uint8_t *out,
                            unsigned long long *sum, int w, int h, cudaStream_t s);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPOOL_BENCH_KERNELS_H */
