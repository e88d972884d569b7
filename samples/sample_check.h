// What the samples check every call with (scoped_streams, graph_replay, config_tuning): an
// unchecked failure becomes a crash far from its cause, so each CUDA and spool call goes through
// one of these, which name the call and give CUDA's or spool's reason. Copy it along with a
// sample. Define SAMPLE_NAME (the program's name, for messages) before including it.
#ifndef SPOOL_SAMPLE_CHECK_H
#define SPOOL_SAMPLE_CHECK_H

#include <spool/spool.h>

#include <cuda_runtime.h>

#include <cstdio>

#ifndef SAMPLE_NAME
#error "define SAMPLE_NAME before including sample_check.h"
#endif

static inline bool cuda_ok(cudaError_t err, const char *call, int line) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, SAMPLE_NAME ": line %d: %s failed: %s: %s\n", line, call,
               cudaGetErrorName(err), cudaGetErrorString(err));
  return false;
}

static inline bool spool_ok(spool_status st, const char *call, int line) {
  if (st == SPOOL_OK) return true;
  std::fprintf(stderr, SAMPLE_NAME ": line %d: %s failed: %s: %s\n", line, call,
               spool_status_name(st), spool_last_error());
  return false;
}

// In functions that return bool: on failure, say so and return false.
#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    if (!cuda_ok((call), #call, __LINE__)) return false;                                           \
  } while (0)
#define SPOOL_CHECK(call)                                                                          \
  do {                                                                                             \
    if (!spool_ok((call), #call, __LINE__)) return false;                                          \
  } while (0)

// No device, no driver, or a driver too old for this runtime: one line, and true, so that main
// returns 77, which CTest reports as skipped rather than failed.
static inline bool sample_no_device(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  if (err == cudaSuccess) return false;
  std::fprintf(stderr, SAMPLE_NAME ": no CUDA device: %s: %s\n", cudaGetErrorName(err),
               cudaGetErrorString(err));
  return true;
}

#endif // SPOOL_SAMPLE_CHECK_H
