/* The capture query (capture.c), with its inline fast path: for the files that ask it. */
#ifndef SPOOL_CAPTURE_H
#define SPOOL_CAPTURE_H

#include "internal.h"

#include <cuda.h>

/* Whether stream is being captured into a graph (active or invalidated): the driver's
 * cuStreamIsCapturing, found once through the runtime (no libcuda link), else
 * cudaStreamIsCapturing. SPOOL_OK with *capturing set, or SPOOL_ERR_CUDA for a stream CUDA does
 * not know (destroyed?), with the message naming ctx and the stream. Asked twice per pair: once
 * the driver's function is found it is called inline; anything but a plain answer (not found
 * yet, an error, the legacy stream's implicit capture) takes the out-of-line way. */
typedef CUresult (CUDAAPI *spool__capture_fn)(CUstream, CUstreamCaptureStatus *);
extern _Atomic(spool__capture_fn) spool__capture_fast;
spool_status spool__stream_capturing_slow(cudaStream_t stream, bool *capturing, const char *ctx);
static inline spool_status spool__stream_capturing(cudaStream_t stream, bool *capturing,
                                                   const char *ctx) {
  spool__capture_fn fn = atomic_load_explicit(&spool__capture_fast, memory_order_acquire);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (fn && fn((CUstream)stream, &st) == CUDA_SUCCESS) {
    *capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
    return SPOOL_OK;
  }
  return spool__stream_capturing_slow(stream, capturing, ctx);
}
/* The same for paths that need only a yes or no: if_unknown when CUDA cannot tell; this
 * thread's last error is left as it was. */
bool spool__capturing_quiet(cudaStream_t stream, bool if_unknown);

/* Pool attribute reads and writes and trims are "potentially unsafe" calls: made while
 * another thread captures in global mode, from a thread in global mode (the default), they
 * invalidate that capture. Between enter and leave the calling thread is in relaxed mode (as
 * CCCL does for pool attributes), which leaves other threads' captures alone. enter returns
 * whether the mode was changed; leave puts it back. A synchronize is not covered: it
 * invalidates captures on its device whatever the mode. */
bool spool__relaxed_enter(enum cudaStreamCaptureMode *old);
void spool__relaxed_leave(bool entered, enum cudaStreamCaptureMode old);

/* The heap's fence events (chunks.c), through the driver where it can: the record of event on
 * stream, and whether event has completed (asked in relaxed mode: an event query is
 * "potentially unsafe"). Both leave this thread's last error as it was; a failure only means no
 * fence this time (false). */
bool spool__event_record_quiet(cudaEvent_t event, cudaStream_t stream);
bool spool__event_done_quiet(cudaEvent_t event);

/* Whether err, from freeing (or poisoning) the graph allocation b on stream outside a capture,
 * says that its graph never ran: destroyed before a launch, or its capture abandoned (an end
 * that failed). CUDA then knows no memory at the address (cudaErrorInvalidValue) and there is
 * nothing to free: the record goes as if freed. */
bool spool__graph_never_ran(const spool__buffer *b, cudaError_t err, cudaStream_t stream);

#endif
