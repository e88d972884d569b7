/* Kernels for the multi-device and IPC tests (check_multi, check_ipc, ipc_child).
 *
 *  - gpu builds with nvcc: real kernels (test_kernels.cu);
 *  - sim builds: cudasim_kernel checks the access such a kernel needs (the stream's device must
 *    be allowed to read or write the memory), then the host does the loads and stores, since
 *    simulated device memory is host memory (test_kernels_sim.c);
 *  - gpu builds without nvcc, or sanitizer builds: every call returns cudaErrorNotSupported and
 *    the tests that need a kernel say so and skip that part (test_kernels_none.c).
 * A kernel that touches memory its device may not access fails: on a GPU at the next
 * synchronize (and the error sticks to the device's context), in cudasim at the launch. */
#ifndef SPOOL_TEST_KERNELS_H
#define SPOOL_TEST_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* p[i] = seed + i for i < n, on stream s. */
cudaError_t test_kernel_fill(uint32_t *p, size_t n, uint32_t seed, cudaStream_t s);

/* p[i] += add for i < n, on stream s: reads and writes. */
cudaError_t test_kernel_add(uint32_t *p, size_t n, uint32_t add, cudaStream_t s);

/* dst[i] = src[i] for i < n, on stream s: a kernel's loads from src and stores to dst. */
cudaError_t test_kernel_copy(uint32_t *dst, const uint32_t *src, size_t n, cudaStream_t s);

/* For check_handoff: waits ms milliseconds on the device, then adds to *bad the number of
 * i < n with p[i] != seed + i: a long reader whose memory must not change under it. cudasim's
 * stand-in counts at once (its kernels take no time). */
cudaError_t test_kernel_hold_then_count(const uint32_t *p, size_t n, uint32_t seed, unsigned ms,
                                        unsigned *bad, cudaStream_t s);

/* 1 when the calls above run kernels (or cudasim's stand-ins), 0 when they are stubs. */
int test_kernels_available(void);

#ifdef __cplusplus
}
#endif

#endif /* SPOOL_TEST_KERNELS_H */
