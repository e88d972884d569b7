/* PyTorch's CUDA caching allocator as two of the harness's strategies, through its C++ API
 * (c10::cuda::CUDACachingAllocator in libc10_cuda): torch-native, as PyTorch ships it, and
 * torch-expandable, the same with expandable_segments:True. One process runs both: PyTorch reads
 * expandable_segments at every new segment, and after emptyCache() no segment of the other kind
 * is left, so each strategy's teardown checks that every segment it made was of its kind.
 *
 * torch_strategy.cpp implements this where spool_bench is configured with -DSPOOL_BENCH_TORCH=ON
 * and PyTorch's headers and libraries are found; torch_none.c everywhere else, where
 * bench_torch_built() is false and the strategies are left out of the run.
 *
 * The alloc and free functions are the strategies' alloc_fn and free_fn themselves (strategy.h),
 * so that a timed pair makes one indirect call into PyTorch, as the other strategies do into
 * their libraries. Everything else runs outside the timed loops. Every function catches what
 * PyTorch throws and reports it as a failed call (common.h): false, with one line. */
#ifndef SPOOL_BENCH_TORCH_STRATEGY_H
#define SPOOL_BENCH_TORCH_STRATEGY_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct allocator; /* strategy.h; not looked into here */

/* Whether this spool_bench has PyTorch's allocator. No CUDA or PyTorch call. */
bool bench_torch_built(void);

/* One line for the run's header: PyTorch's version, where its libraries are, the allocator it
 * chose for this process and PYTORCH_CUDA_ALLOC_CONF; false (out untouched) when not built. */
bool bench_torch_describe(char *out, size_t len);

/* Whether the strategies can run in this process: PyTorch picks its backend when libc10_cuda
 * loads, from PYTORCH_CUDA_ALLOC_CONF, and backend:cudaMallocAsync is not the caching allocator
 * these strategies name. If not, why not, into why. */
bool bench_torch_usable(char *why, size_t len);

/* Makes PyTorch's allocator ready on device (init), sets expandable_segments, empties its
 * cache and resets its peaks. The rest of PYTORCH_CUDA_ALLOC_CONF stays in force. */
bool bench_torch_setup(int device, bool expandable);

bool bench_torch_alloc(struct allocator *a, void **p, size_t n, cudaStream_t s);
/* raw_delete: the block goes back to the pool of the stream it was allocated on (s unused). */
bool bench_torch_free(struct allocator *a, void *p, cudaStream_t s);

bool bench_torch_reset_peaks(int device);

/* reserved_bytes and allocated_bytes peaks since the last reset (DeviceStats, aggregate). */
bool bench_torch_peaks(int device, uint64_t *reserved, uint64_t *allocated);

/* After a synchronize: checks that every segment on device is expandable exactly when
 * `expandable` (false, naming the count, if not), then empties the cache and checks that
 * nothing is left reserved. */
bool bench_torch_teardown(int device, bool expandable);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPOOL_BENCH_TORCH_STRATEGY_H */
