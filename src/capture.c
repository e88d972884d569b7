/* The driver calls of spool's frequent paths: is a stream being captured into a graph (every
 * cached allocation and free), the thread's capture mode, and the heap's fence events. Through
 * the driver they cost a fraction of the runtime's (H200: cuStreamIsCapturing 15 ns against 64
 * for cudaStreamIsCapturing; a capture mode round trip 25 ns against 100-160; an event record
 * and query 640-720 ns against 780-860) and leave the runtime's last error alone, so a failure
 * costs no cudaGetLastError. spool does not link libcuda: the runtime hands out the driver's
 * entry points. Where it cannot (an old runtime, a stub), or the driver's call fails (a thread
 * with no current context), the runtime's call answers instead. */
#include "capture.h"

#include <cuda.h>
#include <cudaTypedefs.h> /* the driver functions' types, by the versions resolve asks */
#include <string.h>

static struct {
  spool__capture_fn is_capturing;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_mode;
  PFN_cuEventRecord_v2000 event_record;
  PFN_cuEventQuery_v2000 event_query;
} driver; /* what resolve found; NULL for what it did not */
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* Set once resolve found the driver's function: the inline fast path calls it directly. */
_Atomic(spool__capture_fn) spool__capture_fast;

/* The driver's symbol at the given version into *out (a function pointer), or NULL. */
static void find(const char *symbol, unsigned version, void *out) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err;
#if CUDART_VERSION >= 12050
  err = cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found);
#else
  (void)version;
  err = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess) spool__clear_cuda_error();
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) fn = NULL;
  /* ISO C has no cast from void * to a function pointer; the bytes are the address. */
  memcpy(out, &fn, sizeof fn);
}

static void resolve(void) {
  find("cuStreamIsCapturing", 10000, &driver.is_capturing);
  find("cuThreadExchangeStreamCaptureMode", 10010, &driver.exchange_mode);
  find("cuEventRecord", 2000, &driver.event_record);
  find("cuEventQuery", 2000, &driver.event_query);
  if (driver.is_capturing)
    atomic_store_explicit(&spool__capture_fast, driver.is_capturing, memory_order_release);
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
  if (!driver.is_capturing) return runtime_capturing(stream, capturing, ctx);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = driver.is_capturing((CUstream)stream, &st);
  /* The legacy stream, asked while a blocking stream is being captured: as good as captured. */
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  else if (r != CUDA_SUCCESS) return runtime_capturing(stream, capturing, ctx);
  *capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
  return SPOOL_OK;
}

/* ---- pool administration next to other threads' captures ------------------------- */

/* The runtime's and the driver's modes have the same values. */
static bool exchange_mode(enum cudaStreamCaptureMode *mode) {
  pthread_once(&resolve_once, resolve);
  if (driver.exchange_mode) {
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    if (driver.exchange_mode(&m) == CUDA_SUCCESS) {
      *mode = (enum cudaStreamCaptureMode)m;
      return true;
    }
  }
  if (cudaThreadExchangeStreamCaptureMode(mode) == cudaSuccess) return true;
  spool__clear_cuda_error();
  return false;
}

bool spool__relaxed_enter(enum cudaStreamCaptureMode *old) {
  *old = cudaStreamCaptureModeRelaxed;
  return exchange_mode(old); /* false: the call goes ahead in the thread's own mode */
}

void spool__relaxed_leave(bool entered, enum cudaStreamCaptureMode old) {
  if (entered) (void)exchange_mode(&old);
}

/* ---- the heap's fence events ------------------------------------------------------------ */

bool spool__event_record_quiet(cudaEvent_t event, cudaStream_t stream) {
  pthread_once(&resolve_once, resolve);
  if (driver.event_record && driver.event_record((CUevent)event, (CUstream)stream) == CUDA_SUCCESS)
    return true;
  if (cudaEventRecord(event, stream) == cudaSuccess) return true;
  spool__clear_cuda_error();
  return false;
}

bool spool__event_done_quiet(cudaEvent_t event) {
  enum cudaStreamCaptureMode mode;
  bool relaxed = spool__relaxed_enter(&mode); /* resolves the driver's functions first */
  CUresult r = driver.event_query ? driver.event_query((CUevent)event) : CUDA_ERROR_UNKNOWN;
  bool done = r == CUDA_SUCCESS;
  if (!done && r != CUDA_ERROR_NOT_READY) { /* no driver function, or it failed: the runtime */
    cudaError_t err = cudaEventQuery(event);
    done = err == cudaSuccess;
    if (!done) spool__clear_cuda_error();
  }
  spool__relaxed_leave(relaxed, mode);
  return done;
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
