/* Is a stream being captured into a graph? Asked on every cached allocation and free, so it
 * must be cheap: the driver's cuStreamIsCapturing takes no shared lock (about 24 ns on an H200,
 * against 64 ns for cudaStreamIsCapturing). spool does not link libcuda: the runtime hands out
 * the driver's entry point. Where it cannot (an old runtime, a stub), cudaStreamIsCapturing
 * answers instead. */
#include "capture.h"

#include <cuda.h>
#include <string.h>

static spool__capture_fn driver_fn; /* what resolve found, NULL if nothing */
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* Set once resolve found the driver's function: the inline fast path calls it directly. */
_Atomic(spool__capture_fn) spool__capture_fast;

static void resolve(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err;
#if CUDART_VERSION >= 12050
  err = cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &fn, 10000, cudaEnableDefault,
                                         &found);
#else
  err = cudaGetDriverEntryPoint("cuStreamIsCapturing", &fn, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess) spool__clear_cuda_error();
  /* ISO C has no cast from void * to a function pointer; the bytes are the address. */
  if (err == cudaSuccess && found == cudaDriverEntryPointSuccess && fn)
    memcpy(&driver_fn, &fn, sizeof driver_fn);
  if (driver_fn) atomic_store_explicit(&spool__capture_fast, driver_fn, memory_order_release);
}

static spool_status fail_stream(cudaStream_t stream, const char *ctx, const char *api,
                                const char *reason) {
  return spool__fail(SPOOL_ERR_CUDA,
                     "%s: %s failed for stream %p (%s): is the stream destroyed? (a stream given "
                     "to spool must live until spool_stream_release)", ctx, api, (void *)stream,
                     reason);
}

/* The runtime's answer: slower, but it makes the device's context current on a thread that has
 * not used CUDA yet, where the driver's call finds no context. */
static spool_status runtime_capturing(cudaStream_t stream, bool *capturing, const char *ctx) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &st);
  if (err == cudaErrorStreamCaptureImplicit) st = cudaStreamCaptureStatusActive;
  else if (err != cudaSuccess) {
    spool__clear_cuda_error();
    return fail_stream(stream, ctx, "cudaStreamIsCapturing", cudaGetErrorName(err));
  }
  *capturing = st != cudaStreamCaptureStatusNone;
  return SPOOL_OK;
}

spool_status spool__stream_capturing_slow(cudaStream_t stream, bool *capturing,
                                          const char *ctx) {
  pthread_once(&resolve_once, resolve);
  if (!driver_fn) return runtime_capturing(stream, capturing, ctx);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = driver_fn((CUstream)stream, &st);
  /* The legacy stream, asked while a blocking stream is being captured: as good as captured. */
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  else if (r != CUDA_SUCCESS) return runtime_capturing(stream, capturing, ctx);
  *capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
  return SPOOL_OK;
}

/* ---- pool administration next to other threads' captures ------------------------- */

bool spool__relaxed_enter(enum cudaStreamCaptureMode *old) {
  *old = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(old) == cudaSuccess) return true;
  spool__clear_cuda_error(); /* the call goes ahead in the thread's own mode */
  return false;
}

void spool__relaxed_leave(bool entered, enum cudaStreamCaptureMode old) {
  if (entered && cudaThreadExchangeStreamCaptureMode(&old) != cudaSuccess)
    spool__clear_cuda_error();
}

bool spool__capturing_quiet(cudaStream_t stream, bool if_unknown) {
  char message[SPOOL__MESSAGE];
  spool__save_error(message); /* the caller's last error is not about this question */
  bool capturing = if_unknown;
  if (spool__stream_capturing(stream, &capturing, "spool") != SPOOL_OK) capturing = if_unknown;
  spool__restore_error(message);
  return capturing;
}

bool spool__graph_never_ran(const spool__buffer *b, cudaError_t err, cudaStream_t stream) {
  return b->graph && err == cudaErrorInvalidValue && !spool__capturing_quiet(stream, true);
}
