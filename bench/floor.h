/* What bounds a cache hit on this host, measured next to the results: the two uncontended lock
 * round trips a hit pays (one at the allocation, one at the free) and the driver's capture
 * check. */
#ifndef BENCH_FLOOR_H
#define BENCH_FLOOR_H

#include <cuda_runtime_api.h>

/* ns per two (atomic exchange, release store) round trips on one line: a pair's lock cost. */
double floor_locks_ns(void);

/* ns per cuStreamIsCapturing call on stream, through the runtime's entry point; a negative
 * value when the entry point is not available. */
double floor_capture_check_ns(cudaStream_t stream);

#endif
