/* cudasim: a host-side simulation of the part of the CUDA runtime API that spool and its tests
 * call, so that the suites run without a GPU. Compiled against the real cuda_runtime_api.h: every
 * runtime function below has the declared signature, so the compiler checks it.
 *
 * How the model works
 *  - One global mutex guards all simulated state. Per-thread state (current device, last error,
 *    the per-thread default streams) is thread-local and tagged with a generation number that
 *    cudasim_reset() bumps, so a reset invalidates every thread's state at once.
 *  - Every runtime call is counted under its name (failed ones too), then an armed failure for
 *    it fires if its turn has come: the call returns that error, sets the last error and does
 *    nothing else. Then come the driver check (version 0: cudaErrorInsufficientDriver) and the
 *    device check (no devices: cudaErrorNoDevice).
 *  - Streams count enqueued operations (tickets) and completed ones. Work on a stream that is
 *    not held completes when it is enqueued; on a held stream it stays pending until
 *    cudasim_release() or a stream, event or device synchronize. Events record a stream's ticket;
 *    an event belongs to the device current at its creation, and recording it on a stream of
 *    another device is cudaErrorInvalidResourceHandle (the runtime: "event and stream must be on
 *    the same device"). Waiting for it from any device's stream is allowed.
 *  - Pools reserve memory in segments of CUDASIM_GRANULARITY (2 MiB) multiples, each a lazily
 *    committed anonymous mmap, so device pointers can be dereferenced on the host. Blocks are
 *    carved from segments at 512-byte granularity; a freed block is reusable once its free has
 *    completed, or at once by an allocation on the stream that freed it (stream order).
 *  - At every stream, event or device synchronize, each pool of that device whose reserved bytes
 *    exceed its release threshold gives back entirely free segments, newest first, one at a
 *    time while it is still above the threshold (it may end below it: segments are whole).
 *  - Stream capture: a capture sequence begun on a stream is joined by every stream that waits on
 *    an event recorded in it (a fork); work enqueued on a member stream (cudaMemsetAsync,
 *    cudaMemcpyAsync, cudaMallocAsync, cudaMallocFromPoolAsync, cudaFreeAsync, cudaEventRecord-
 *    WithFlags(External), cudaStreamWaitEvent(External)) becomes a node of the capture's graph
 *    instead of running. cudaStreamEndCapture on the origin stream ends it for all members.
 *  - The rules, after the CUDA programming guide (stream capture: "Prohibited and Unhandled
 *    Operations", "Invalidation") and cudaThreadExchangeStreamCaptureMode's documentation:
 *    . synchronizing or querying a member stream: cudaErrorStreamCaptureUnsupported; a captured
 *      event (last recorded in an open capture): cudaErrorCapturedEvent. Both invalidate;
 *    . cudaDeviceSynchronize while any member stream is on the current device:
 *      cudaErrorStreamCaptureUnsupported, invalidating those captures, whatever the modes;
 *    . any use of the legacy stream (NULL, cudaStreamLegacy, and the synchronous cudaMemcpy and
 *      cudaMemset) while a blocking stream (created without cudaStreamNonBlocking, or a
 *      per-thread stream) of its device is a member: cudaErrorStreamCaptureImplicit, invalidating;
 *      cudaStreamIsCapturing and cudaStreamGetCaptureInfo report it without invalidating;
 *    . "potentially unsafe" calls: cudaMalloc, cudaFree, cudaMemset, cudaMemcpy, cudaEventQuery,
 *      cudaEventSynchronize, and the pool administration calls cudaMemPoolCreate, Destroy,
 *      TrimTo, SetAttribute, GetAttribute, SetAccess, GetAccess (CCCL wraps pool attribute reads
 *      and writes in relaxed mode for this reason; ROCm checks all seven). Refused with
 *      cudaErrorStreamCaptureUnsupported, invalidating the captures that forbid them: the calling
 *      thread's own capture begun in global or thread-local mode, and, when the thread's mode
 *      (cudaThreadExchangeStreamCaptureMode, default global) is global, every capture begun in
 *      global mode by any thread. A thread in relaxed mode may make them;
 *    . once invalidated, enqueueing on a member stream, synchronizing it, or using its captured
 *      events gives cudaErrorStreamCaptureInvalidated; cudaStreamEndCapture then returns the
 *      same, with a NULL graph, and ends the capture;
 *    . waits: a capturing stream waiting on an event recorded outside any capture:
 *      cudaErrorStreamCaptureIsolation unless cudaEventWaitExternal (a wait node); on an event of
 *      another open capture: cudaErrorStreamCaptureMerge. A never-recorded event is a no-op;
 *    . cudaStreamEndCapture: not capturing: cudaErrorIllegalState; on a joined stream rather
 *      than the origin: cudaErrorStreamCaptureUnmatched (invalidates); from another thread than
 *      the one that began a non-relaxed capture: cudaErrorStreamCaptureWrongThread (the capture
 *      goes on); a joined stream with work after its last join: cudaErrorStreamCaptureUnjoined;
 *    . an operation that cannot be captured as asked (bad pointer, size 0, a free of memory
 *      that is not a graph allocation) fails and invalidates the capture.
 *  - Graph memory (CUDA programming guide, "Graph Memory Nodes"): a stream allocation under
 *    capture is an allocation node whose address is fixed at once (reserved address space, not
 *    charged) and whose memory belongs to the graph, not the pool (the pool's counters do not
 *    move). A launch that runs the node makes it live (charged to the device) until a free node,
 *    cudaFreeAsync or cudaFree; it outlives its graph and executable graph. Relaunching while an
 *    allocation of the graph is live fails with cudaErrorInvalidValue (unless instantiated with
 *    cudaGraphInstantiateFlagAutoFreeOnLaunch). Only graph allocations can be freed in a graph
 *    (cudaFreeAsync of other memory under capture is illegal), and one freed in its own graph
 *    cannot be freed anywhere else. A graph with memory nodes has one executable graph at a time.
 *  - cudaGraphLaunch checks the above and the device's capacity (at the graph's peak), then runs
 *    the nodes in capture order on the launch stream, one operation each.
 *  - Driver entry points: cudaGetDriverEntryPoint[ByVersion] knows "cuStreamIsCapturing" (since
 *    10000), "cuThreadExchangeStreamCaptureMode" (10010), "cuEventRecord" and "cuEventQuery"
 *    (2000): simulated functions over the same state (see cudasim.h), which need a current
 *    context for a special stream handle and leave the runtime's last error alone; with
 *    cudaEnablePerThreadDefaultStream, handle 0 means the per-thread stream. Other symbols:
 *    cudaSuccess, a NULL function and cudaDriverEntryPointSymbolNotFound, as documented.
 *
 * Simplifications (what the real runtime does and cudasim does not)
 *  - Data operations (cudaMemset*, cudaMemcpy*) happen at once, when they are called, even on a
 *    held stream; only their completion (cudaStreamQuery, events) is deferred. No kernels.
 *  - Dependencies between streams are only those of cudaStreamWaitEvent: a stream that waits
 *    for an event whose work is pending completes nothing until that work has completed
 *    (cudasim_release or a synchronize of the other stream; a synchronize of the waiting stream
 *    completes the work it waits for). The legacy stream does not synchronize with blocking
 *    streams, and the three reuse flags are stored and read back but do not change which blocks
 *    are reused (only the two rules above apply).
 *  - An allocation that does not fit reserves a new segment; it never trims its own or other
 *    pools first. Coalescing merges only neighbours whose frees have completed.
 *  - No sticky errors; priorities are clamped to [-5, 0] and otherwise ignored; elapsed times are
 *    0.
 *  - Capture: nodes form a chain in capture order; no dependency edges, so
 *    cudaStreamGetCaptureInfo reports a stream's last captured node as its only dependency, and
 *    a forked stream counts as joined once any other member waited on an event it recorded after
 *    its last node. No kernels, host nodes, child graphs (cudaGraphLaunch into a capturing stream
 *    returns cudaErrorStreamCaptureUnsupported without invalidating), or cudaStreamBeginCapture-
 *    ToGraph. The "potentially unsafe" list is cudasim's reading of the sources above; other
 *    calls (cudaMemGetInfo, cudaStreamCreate, cudaDeviceGetMemPool, synchronizing a stream that
 *    is not capturing, ...) are allowed.
 *  - Graph memory is charged to the device only while live (the real graph pool keeps what it
 *    mapped until cudaDeviceGraphMemTrim); a free node, or cudaFreeAsync of a graph allocation,
 *    frees at once rather than in stream order. A node that fails during a launch (a memset of
 *    memory freed since capture) ends the launch with its error; the nodes before it have run.
 *  - cudaMalloc reserves whole CUDASIM_GRANULARITY units from the device capacity. cudaFree of
 *    a cudaMalloc'd pointer completes all work of its device and runs the release, as the
 *    implicit synchronization of the real cudaFree does.
 *  - cudaMemset/cudaMemcpy on device memory that is not inside a live allocation fail with
 *    cudaErrorInvalidValue (the real runtime may silently succeed on freed pool memory).
 *  - Destroying a stream completes its work. A per-thread default stream lives until reset.
 *  - Handles are never reused: destroyed streams, events, pools, graphs and executable graphs
 *    stay allocated (see graveyard), so a stale handle reliably gives
 *    cudaErrorInvalidResourceHandle (cudaErrorInvalidValue for graph handles), unless a test
 *    asks for a destroyed stream's address with cudasim_stream_create_at.
 *  - Only the plain API names are defined: code built with per-thread default stream
 *    (nvcc --default-stream per-thread, CUDA_API_PER_THREAD_DEFAULT_STREAM) calls the _ptds/_ptsz
 *    variants, which cudasim does not provide.
 *
 * Error codes chosen where the real runtime is not documented
 *  - cudaMallocAsync/cudaMallocFromPoolAsync with size 0: cudaErrorInvalidValue.
 *  - cudaFreeAsync(NULL, s) and pointers that are not the start of a live pool block:
 *    cudaErrorInvalidValue. cudaFree(NULL): cudaSuccess.
 *  - cudaMemPoolCreate with handle types other than none / POSIX fd: cudaErrorNotSupported;
 *    on a device without pool support: cudaErrorNotSupported.
 *  - cudaStreamDestroy of NULL, cudaStreamLegacy or cudaStreamPerThread:
 *    cudaErrorInvalidResourceHandle.
 *  - cudaStreamDestroy of a capturing stream: cudaErrorStreamCaptureUnsupported; the stream stays
 *    and its capture is invalidated.
 *  - cudaStreamBeginCapture on the legacy stream: cudaErrorStreamCaptureUnsupported; on a stream
 *    already capturing: cudaErrorIllegalState (as ROCm's HIP, which follows CUDA, does).
 *  - An event last recorded in a capture that has ended (it stands for a node of that graph):
 *    cudaEventQuery, Synchronize, ElapsedTime and cudaStreamWaitEvent give cudaErrorInvalidValue
 *    until it is recorded again outside capture.
 *  - cudaGraphDestroy of a graph being captured into, unknown graph or exec handles:
 *    cudaErrorInvalidValue.
 *  - cudaErrorNotReady (from cudaStreamQuery, cudaEventQuery) is a status, not a failure: it is
 *    not stored as the thread's last error.
 */
#include "cudasim_internal.h"

/* The shared state; what each part means and what guards it: cudasim_internal.h. */
pthread_mutex_t cudasim__g_lock = PTHREAD_MUTEX_INITIALIZER;
struct sim_graveyard cudasim__graveyard;
unsigned long long cudasim__last_stream_id, cudasim__last_capture_id;
struct sim_state cudasim__g;
_Thread_local struct sim_thread cudasim__t;

/* ---- state, locking, counting, fault injection ----------------------------------------------- */

void cudasim__sim_defaults(void) {
  cudasim__g.ndev = 1;
  cudasim__g.driver = 13000;
  for (int d = 0; d < SIM_MAX_DEV; d++) {
    cudasim__g.dev[d].capacity = CUDASIM_DEFAULT_CAPACITY;
    cudasim__g.dev[d].pools_supported = 1;
  }
  memset(cudasim__g.no_peer, 0, sizeof cudasim__g.no_peer);
  cudasim__g.pool_segment = CUDASIM_GRANULARITY;
  cudasim__g.gen++;
  cudasim__g.inited = 1;
}

void cudasim__tls_sync(void) {
  if (cudasim__t.gen != cudasim__g.gen) {
    memset(&cudasim__t, 0, sizeof cudasim__t);
    cudasim__t.gen = cudasim__g.gen;
  }
}

static _Thread_local int inside; /* this thread holds the lock: it runs a simulated call */

void cudasim__lock(void) {
  pthread_mutex_lock(&cudasim__g_lock);
  inside++;
  if (!cudasim__g.inited)
    cudasim__sim_defaults();
  cudasim__tls_sync();
}

void cudasim__unlock(void) {
  inside--;
  pthread_mutex_unlock(&cudasim__g_lock);
}

int cudasim_inside(void) { return inside; }

static long count_call(const char *api) {
  for (size_t i = 0; i < cudasim__g.ncounts; i++)
    if (strcmp(cudasim__g.counts[i].name, api) == 0)
      return ++cudasim__g.counts[i].n;
  if (cudasim__g.ncounts == cudasim__g.capcounts) {
    size_t cap = cudasim__g.capcounts ? 2 * cudasim__g.capcounts : 64;
    sim_count *c = realloc(cudasim__g.counts, cap * sizeof *c);
    if (!c)
      return 0; /* host OOM: the call goes uncounted */
    cudasim__g.counts = c;
    cudasim__g.capcounts = cap;
  }
  cudasim__g.counts[cudasim__g.ncounts].name = api;
  cudasim__g.counts[cudasim__g.ncounts].n = 1;
  cudasim__g.ncounts++;
  return 1;
}

long cudasim__calls_of(const char *api) {
  for (size_t i = 0; i < cudasim__g.ncounts; i++)
    if (strcmp(cudasim__g.counts[i].name, api) == 0)
      return cudasim__g.counts[i].n;
  return 0;
}

/* The error armed for call number n of api, if any; fired entries are removed. */
static cudaError_t take_armed(const char *api, long n) {
  cudaError_t err = cudaSuccess;
  for (size_t i = 0; i < cudasim__g.narmed;) {
    if (cudasim__g.armed[i].at == n && strcmp(cudasim__g.armed[i].name, api) == 0) {
      if (err == cudaSuccess)
        err = cudasim__g.armed[i].err;
      free(cudasim__g.armed[i].name);
      cudasim__g.armed[i] = cudasim__g.armed[--cudasim__g.narmed];
    } else {
      i++;
    }
  }
  return err;
}

/* Start of every runtime call: lock, count, injected failure, driver and device checks. The
 * lock stays held; sim_leave releases it. */
cudaError_t cudasim__sim_enter(const char *api, int needs_device) {
  cudasim__lock();
  cudaError_t e = take_armed(api, count_call(api));
  if (e != cudaSuccess || !needs_device)
    return e;
  if (cudasim__g.driver == 0)
    return cudaErrorInsufficientDriver;
  if (cudasim__g.ndev == 0)
    return cudaErrorNoDevice;
  /* The runtime makes the primary context current on a thread's first call that needs the
   * device; the driver API does not (see cu_is_capturing). */
  if (strncmp(api, "cuda", 4) == 0)
    cudasim__t.context = 1;
  return cudaSuccess;
}

cudaError_t cudasim__sim_leave(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady)
    cudasim__t.last = e;
  cudasim__unlock();
  return e;
}

int cudasim__valid_dev(int d) { return d >= 0 && d < cudasim__g.ndev; }

cudaError_t cudasim__cur_dev(int *d) {
  if (!cudasim__valid_dev(cudasim__t.device))
    return cudaErrorInvalidDevice; /* the device count shrank under this thread */
  *d = cudasim__t.device;
  return cudaSuccess;
}

size_t cudasim__round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* ---- errors ---------------------------------------------------------------------------------- */

#define SIM_ERRORS(X)                                                                             \
  X(cudaSuccess, "no error")                                                                      \
  X(cudaErrorInvalidValue, "invalid argument")                                                    \
  X(cudaErrorMemoryAllocation, "out of memory")                                                   \
  X(cudaErrorInitializationError, "initialization error")                                         \
  X(cudaErrorCudartUnloading, "driver shutting down")                                             \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                              \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                         \
  X(cudaErrorInvalidSymbol, "invalid device symbol")                                              \
  X(cudaErrorInvalidHostPointer, "invalid host pointer")                                          \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                      \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                         \
  X(cudaErrorStubLibrary, "CUDA driver is a stub library")                                        \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")  \
  X(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver")   \
  X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable")             \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                                    \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                      \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                             \
  X(cudaErrorStartupFailure, "device init failed")                                                \
  X(cudaErrorInvalidKernelImage, "device kernel image is invalid")                                \
  X(cudaErrorDeviceUninitialized, "invalid device context")                                       \
  X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device")  \
  X(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered")                             \
  X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")     \
  X(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS")             \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                    \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")              \
  X(cudaErrorSymbolNotFound, "named symbol not found")                                            \
  X(cudaErrorNotReady, "device not ready")                                                        \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                          \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                     \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                            \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                          \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                            \
  X(cudaErrorContextIsDestroyed, "context is destroyed")                                          \
  X(cudaErrorAssert, "device-side assert triggered")                                              \
  X(cudaErrorTooManyPeers, "peer mapping resources exhausted")                                    \
  X(cudaErrorHardwareStackError, "hardware stack error")                                          \
  X(cudaErrorIllegalInstruction, "an illegal instruction was encountered")                        \
  X(cudaErrorMisalignedAddress, "misaligned address")                                             \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                         \
  X(cudaErrorNotPermitted, "operation not permitted")                                             \
  X(cudaErrorNotSupported, "operation not supported")                                             \
  X(cudaErrorSystemNotReady, "system not yet initialized")                                        \
  X(cudaErrorSystemDriverMismatch,                                                                \
    "system has unsupported display driver / cuda driver combination")                            \
  X(cudaErrorCompatNotSupportedOnDevice,                                                          \
    "forward compatibility was attempted on non supported HW")                                    \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")        \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
  X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences")\
  X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")      \
  X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                         \
  X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")   \
  X(cudaErrorStreamCaptureImplicit,                                                               \
    "operation would make the legacy stream depend on a capturing blocking stream")               \
  X(cudaErrorCapturedEvent,                                                                       \
    "operation not permitted on an event last recorded in a capturing stream")                    \
  X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence "   \
                                       "from another thread")                                     \
  X(cudaErrorTimeout, "wait operation timed out")                                                 \
  X(cudaErrorUnknown, "unknown error")

static const char *error_text(cudaError_t e, int name) {
  switch (e) {
#define SIM_ERROR_CASE(code, str)                                                                 \
  case code: return name ? #code : str;
    SIM_ERRORS(SIM_ERROR_CASE)
#undef SIM_ERROR_CASE
  default: return "unrecognized error code";
  }
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error) {
  cudasim__lock();
  count_call(__func__);
  cudasim__unlock();
  return error_text(error, 1);
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error) {
  cudasim__lock();
  count_call(__func__);
  cudasim__unlock();
  return error_text(error, 0);
}

cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t e = cudasim__sim_enter(__func__, 0);
  if (e != cudaSuccess)
    return cudasim__sim_leave(e);
  e = cudasim__t.last;
  cudasim__t.last = cudaSuccess;
  cudasim__unlock();
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  cudaError_t e = cudasim__sim_enter(__func__, 0);
  if (e != cudaSuccess)
    return cudasim__sim_leave(e);
  e = cudasim__t.last;
  cudasim__unlock();
  return e;
}

