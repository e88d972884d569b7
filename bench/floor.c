/* Floors: see floor.h. Each is the best of a few runs of a tight loop. */
#include "floor.h"

#include "common.h"

#include <cuda.h>
#include <stdatomic.h>
#include <string.h>

enum { FLOOR_RUNS = 5, FLOOR_LOCKS = 10000000, FLOOR_CHECKS = 1000000 };

double floor_locks_ns(void) {
  static atomic_int lock;
  double best = 0;
  for (int r = 0; r < FLOOR_RUNS; ++r) {
    const double t0 = bench_now_ns();
    for (int i = 0; i < FLOOR_LOCKS; ++i) {
      for (int k = 0; k < 2; ++k) {
        while (atomic_exchange_explicit(&lock, 1, memory_order_acquire)) {
        }
        atomic_store_explicit(&lock, 0, memory_order_release);
      }
    }
    const double ns = (bench_now_ns() - t0) / FLOOR_LOCKS;
    if (r == 0 || ns < best) best = ns;
  }
  return best;
}

typedef CUresult (*is_capturing_fn)(CUstream, CUstreamCaptureStatus *);

double floor_capture_check_ns(cudaStream_t stream) {
  void *sym = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &sym, 10000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || sym == NULL) {
    (void)cudaGetLastError();
    return -1;
  }
  is_capturing_fn fn;
  memcpy(&fn, &sym, sizeof fn);
  double best = 0;
  for (int r = 0; r < FLOOR_RUNS; ++r) {
    CUstreamCaptureStatus st;
    const double t0 = bench_now_ns();
    for (int i = 0; i < FLOOR_CHECKS; ++i)
      if (fn((CUstream)stream, &st) != CUDA_SUCCESS) return -1;
    const double ns = (bench_now_ns() - t0) / FLOOR_CHECKS;
    if (r == 0 || ns < best) best = ns;
  }
  return best;
}
