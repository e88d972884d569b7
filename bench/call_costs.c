/* call_costs: host nanoseconds per CUDA call for the calls spool's frequent paths make, each
 * through the runtime and through the driver's entry point (what src/capture.c resolves once):
 * the capture query, a capture-mode round trip, the heap's fence (an event record and query),
 * a chunk taken from a pool and given back, and the calls that follow a failure. It tells
 * which of them is worth routing through the driver, and what a fence costs against a pair.
 *
 * Method: one non-blocking stream with no work queued, an own cudaMemPool with release
 * threshold max (warmed with one 64 MiB allocation), N calls in a row per row, timed with
 * CLOCK_MONOTONIC; the table is printed twice, and the second is the one to read (the first
 * pays lazy loading). Every call's result is checked: a failure stops the program.
 *
 * Usage: call_costs [N]   (default 20000 calls per row)
 * Exit status: 0 ok, 1 a CUDA call failed, 2 bad usage, 77 no CUDA device. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The driver's functions at the versions find asks. */
static struct {
  PFN_cuStreamIsCapturing_v10000 is_capturing;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_mode;
  PFN_cuEventRecord_v2000 event_record;
  PFN_cuEventQuery_v2000 event_query;
} drv;

static cudaStream_t stream;
static cudaEvent_t event;
static cudaMemPool_t pool;
static long calls = 20000;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static bool rt_ok(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return true;
  fprintf(stderr, "call_costs: %s: %s\n", what, cudaGetErrorString(err));
  return false;
}

static bool drv_ok(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return true;
  fprintf(stderr, "call_costs: %s: CUresult %d\n", what, (int)r);
  return false;
}

static bool find(const char *symbol, unsigned version, void *out) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault,
                                                     &found);
#else
  (void)version;
  cudaError_t err = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
  if (!rt_ok(err, symbol)) return false;
  if (found != cudaDriverEntryPointSuccess || !fn) {
    fprintf(stderr, "call_costs: the driver has no %s\n", symbol);
    return false;
  }
  memcpy(out, &fn, sizeof fn); /* ISO C has no cast from void * to a function pointer */
  return true;
}

/* ---- one call of each row, checked -------------------------------------------------------- */

static bool rt_capturing(void) {
  enum cudaStreamCaptureStatus st;
  return rt_ok(cudaStreamIsCapturing(stream, &st), "cudaStreamIsCapturing");
}

static bool drv_capturing(void) {
  CUstreamCaptureStatus st;
  return drv_ok(drv.is_capturing((CUstream)stream, &st), "cuStreamIsCapturing");
}

static bool rt_mode(void) {
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  return rt_ok(cudaThreadExchangeStreamCaptureMode(&m), "cudaThreadExchangeStreamCaptureMode") &&
         rt_ok(cudaThreadExchangeStreamCaptureMode(&m), "cudaThreadExchangeStreamCaptureMode");
}

static bool drv_mode(void) {
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  return drv_ok(drv.exchange_mode(&m), "cuThreadExchangeStreamCaptureMode") &&
         drv_ok(drv.exchange_mode(&m), "cuThreadExchangeStreamCaptureMode");
}

static bool rt_record(void) { return rt_ok(cudaEventRecord(event, stream), "cudaEventRecord"); }

static bool drv_record(void) {
  return drv_ok(drv.event_record((CUevent)event, (CUstream)stream), "cuEventRecord");
}

/* The stream has no work: the event is complete, or a moment later. */
static bool rt_query(void) {
  cudaError_t err = cudaEventQuery(event);
  if (err == cudaErrorNotReady) return rt_ok(cudaGetLastError(), "cudaGetLastError");
  return rt_ok(err, "cudaEventQuery");
}

static bool drv_query(void) {
  CUresult r = drv.event_query((CUevent)event);
  return r == CUDA_ERROR_NOT_READY || drv_ok(r, "cuEventQuery");
}

static bool rt_fence(void) { return rt_query() && rt_record(); }
static bool drv_fence(void) { return drv_mode() && drv_query() && drv_record(); }
static bool rt_fence_relaxed(void) { return rt_mode() && rt_query() && rt_record(); }

static bool chunk(size_t bytes) {
  void *p = NULL;
  return rt_ok(cudaMallocFromPoolAsync(&p, bytes, pool, stream), "cudaMallocFromPoolAsync") &&
         rt_ok(cudaFreeAsync(p, stream), "cudaFreeAsync");
}

static bool chunk_2mib(void) { return chunk((size_t)2 << 20); }
static bool chunk_32mib(void) { return chunk((size_t)32 << 20); }

static bool last_error(void) { return rt_ok(cudaGetLastError(), "cudaGetLastError"); }

static bool stream_sync(void) {
  return rt_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

typedef struct row {
  const char *name;
  bool (*call)(void);
} row;

static const row ROWS[] = {
    {"cudaStreamIsCapturing", rt_capturing},
    {"cuStreamIsCapturing (driver)", drv_capturing},
    {"capture mode round trip, runtime", rt_mode},
    {"capture mode round trip, driver", drv_mode},
    {"cudaEventRecord", rt_record},
    {"cuEventRecord (driver)", drv_record},
    {"cudaEventQuery", rt_query},
    {"cuEventQuery (driver)", drv_query},
    {"fence, runtime (relaxed, query, record)", rt_fence_relaxed},
    {"fence, runtime without the mode", rt_fence},
    {"fence, driver (relaxed, query, record)", drv_fence},
    {"chunk of 2 MiB from the pool and back", chunk_2mib},
    {"chunk of 32 MiB from the pool and back", chunk_32mib},
    {"cudaGetLastError", last_error},
    {"cudaStreamSynchronize, idle stream", stream_sync},
};

static bool table(void) {
  printf("%-42s %10s\n", "call", "ns/call");
  for (size_t r = 0; r < sizeof ROWS / sizeof ROWS[0]; r++) {
    if (!stream_sync()) return false;
    double t0 = now_ns();
    for (long i = 0; i < calls; i++)
      if (!ROWS[r].call()) return false;
    printf("%-42s %10.1f\n", ROWS[r].name, (now_ns() - t0) / (double)calls);
  }
  return stream_sync();
}

static bool setup(void) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  unsigned long long threshold = ~0ull;
  void *p = NULL;
  return rt_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") &&
         rt_ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate") &&
         rt_ok(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate") &&
         rt_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
               "cudaMemPoolSetAttribute") &&
         rt_ok(cudaMallocFromPoolAsync(&p, (size_t)64 << 20, pool, stream), "warm-up alloc") &&
         rt_ok(cudaFreeAsync(p, stream), "warm-up free") && stream_sync() &&
         find("cuStreamIsCapturing", 10000, &drv.is_capturing) &&
         find("cuThreadExchangeStreamCaptureMode", 10010, &drv.exchange_mode) &&
         find("cuEventRecord", 2000, &drv.event_record) &&
         find("cuEventQuery", 2000, &drv.event_query);
}

static bool teardown(void) {
  return rt_ok(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy") &&
         rt_ok(cudaEventDestroy(event), "cudaEventDestroy") &&
         rt_ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

int main(int argc, char **argv) {
  if (argc > 2 || (argc == 2 && (calls = strtol(argv[1], NULL, 10)) <= 0)) {
    fprintf(stderr, "usage: call_costs [calls per row, > 0]\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "call_costs: no CUDA device\n");
    return 77;
  }
  if (!setup()) return 1;
  for (int round = 1; round <= 2; round++) {
    printf("round %d (%ld calls per row)%s\n", round, calls, round == 1 ? ", lazy loading" : "");
    if (!table()) return 1;
  }
  return teardown() ? 0 : 1;
}
