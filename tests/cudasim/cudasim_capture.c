/* cudasim: stream capture; driver entry points.
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

/* ---- stream capture: the rules ----------------------------------------------------------------
 * What a call may do while capture sequences are open. The errors follow the CUDA programming
 * guide ("Prohibited and Unhandled Operations", "Invalidation") and the documentation of
 * cudaThreadExchangeStreamCaptureMode; see the top of this file. */

static sim_capture *capture_by_id(unsigned long long id) {
  for (sim_capture *c = cudasim__g.captures; c; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

/* Once invalidated, a capture stays so until cudaStreamEndCapture, which then fails. */
void cudasim__capture_invalidate(sim_capture *c) { c->invalidated = 1; }

/* Streams that the legacy stream synchronizes with: blocking ones and per-thread streams. */
static int stream_blocking(const struct CUstream_st *s) {
  return s->kind == SIM_PER_THREAD || (s->kind == SIM_USER && !(s->flags & cudaStreamNonBlocking));
}

/* Any use of device d's legacy stream while a blocking stream of d is being captured would make
 * the legacy stream depend on captured work: cudaErrorStreamCaptureImplicit. Queries of the
 * capture status report it without invalidating anything. */
cudaError_t cudasim__legacy_implicit(int d, int invalidate) {
  cudaError_t e = cudaSuccess;
  for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next)
    if (s->cap && s->device == d && stream_blocking(s)) {
      e = cudaErrorStreamCaptureImplicit;
      if (invalidate)
        cudasim__capture_invalidate(s->cap);
    }
  return e;
}

/* Whether capture c forbids this thread the "potentially unsafe" calls. */
static int capture_restricts(const sim_capture *c) {
  if (c->invalidated || cudasim__t.mode == cudaStreamCaptureModeRelaxed)
    return 0;
  if (c->mode != cudaStreamCaptureModeRelaxed && pthread_equal(c->thread, pthread_self()))
    return 1; /* the thread's own capture, in global and thread-local mode alike */
  return cudasim__t.mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal;
}

/* Start of a "potentially unsafe" call (cudaMalloc, cudaFree, pool administration, event queries,
 * ...): refused, and every capture that forbids it invalidated. */
cudaError_t cudasim__capture_unsafe(void) {
  cudaError_t e = cudaSuccess;
  for (sim_capture *c = cudasim__g.captures; c; c = c->next)
    if (capture_restricts(c)) {
      cudasim__capture_invalidate(c);
      e = cudaErrorStreamCaptureUnsupported;
    }
  return e;
}

/* A device-wide synchronize encompasses every capture on the device, whatever the modes. */
cudaError_t cudasim__capture_on_device(int d) {
  cudaError_t e = cudaSuccess;
  for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next)
    if (s->cap && s->device == d) {
      cudasim__capture_invalidate(s->cap);
      e = cudaErrorStreamCaptureUnsupported;
    }
  return e;
}

/* Before work is enqueued on s (it is captured instead when s->cap is set). */
cudaError_t cudasim__stream_use(struct CUstream_st *s) {
  if (s->kind == SIM_LEGACY)
    return cudasim__legacy_implicit(s->device, 1);
  if (s->cap && s->cap->invalidated)
    return cudaErrorStreamCaptureInvalidated;
  return cudaSuccess;
}

/* Before s is synchronized or queried: a capturing stream has nothing to wait for. */
cudaError_t cudasim__stream_wait_check(struct CUstream_st *s) {
  cudaError_t e = cudasim__stream_use(s);
  if (e != cudaSuccess || !s->cap)
    return e;
  cudasim__capture_invalidate(s->cap);
  return cudaErrorStreamCaptureUnsupported;
}

/* Before ev is queried, synchronized, timed or waited on: an event last recorded in a capture
 * stands for a node of a graph, not for work the host could wait for. */
cudaError_t cudasim__event_capture_check(struct CUevent_st *ev) {
  if (!ev->cap_id)
    return cudaSuccess;
  sim_capture *c = capture_by_id(ev->cap_id);
  if (!c)
    return cudaErrorInvalidValue; /* that capture has ended: the event belongs to its graph */
  if (c->invalidated)
    return cudaErrorStreamCaptureInvalidated;
  cudasim__capture_invalidate(c);
  return cudaErrorCapturedEvent;
}

/* ---- stream capture: recording ----------------------------------------------------------------
 * Work enqueued on a capturing stream becomes a node of the capture's graph instead of running.
 * An operation that cannot be captured as asked fails and invalidates the capture. */

cudaError_t cudasim__capture_refuse(struct CUstream_st *s, cudaError_t e) {
  cudasim__capture_invalidate(s->cap);
  return e;
}

/* A new node captured on s; NULL on host OOM. */
struct CUgraphNode_st *cudasim__capture_node(struct CUstream_st *s, enum sim_node_kind kind) {
  struct CUgraphNode_st *nd = cudasim__graph_add(s->cap->graph, kind);
  if (nd) {
    s->cap_ops++;
    s->cap_last = nd;
  }
  return nd;
}

cudaError_t cudasim__capture_memset(struct CUstream_st *s, void *ptr, int value, size_t n) {
  if (n > 0 && !cudasim__capture_range(ptr, n))
    return cudasim__capture_refuse(s, cudaErrorInvalidValue);
  struct CUgraphNode_st *nd = cudasim__capture_node(s, SIM_NODE_MEMSET);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->dst = ptr;
  nd->value = value;
  nd->n = n;
  return cudaSuccess;
}

cudaError_t cudasim__capture_memcpy(struct CUstream_st *s, void *dst, const void *src, size_t n,
                                  enum cudaMemcpyKind kind) {
  cudaError_t e = cudasim__memcpy_check(dst, src, n, kind, cudasim__capture_range);
  if (e != cudaSuccess)
    return cudasim__capture_refuse(s, e);
  struct CUgraphNode_st *nd = cudasim__capture_node(s, SIM_NODE_MEMCPY);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->dst = dst;
  nd->src = src;
  nd->n = n;
  nd->dir = kind;
  return cudaSuccess;
}

/* A stream allocation under capture is an allocation node: the graph owns the memory, not the
 * pool (whose counters do not move), and the address is fixed from now on. */
cudaError_t cudasim__capture_alloc(struct CUstream_st *s, int device, size_t size, void **out) {
  if (size == 0)
    return cudasim__capture_refuse(s, cudaErrorInvalidValue);
  sim_galloc *ga = cudasim__galloc_new(device, size);
  if (!ga)
    return cudaErrorMemoryAllocation;
  struct CUgraphNode_st *nd = cudasim__capture_node(s, SIM_NODE_ALLOC);
  if (!nd) {
    cudasim__galloc_reap(ga);
    return cudaErrorMemoryAllocation;
  }
  nd->ga = ga;
  ga->refs++;
  ga->owner = s->cap->graph;
  *out = ga->base;
  return cudaSuccess;
}

/* Only graph allocations can be freed in a graph: a free node names an allocation node's address
 * (cudaFreeAsync of memory from an uncaptured allocation is illegal during capture). One that
 * its own graph frees cannot be freed anywhere else. */
cudaError_t cudasim__capture_free(struct CUstream_st *s, void *ptr) {
  sim_galloc *ga = ptr ? cudasim__galloc_at(ptr) : NULL;
  if (!ga || ga->owner_frees)
    return cudasim__capture_refuse(s, cudaErrorInvalidValue);
  struct CUgraphNode_st *nd = cudasim__capture_node(s, SIM_NODE_FREE);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->ga = ga;
  ga->refs++;
  if (ga->owner == s->cap->graph)
    ga->owner_frees = 1;
  return cudaSuccess;
}

/* A record in capture marks a point to fork from or join at; only cudaEventRecordExternal makes
 * an event record node, which sets the event when the graph runs. */
cudaError_t cudasim__capture_record(struct CUstream_st *s, struct CUevent_st *ev, unsigned flags) {
  if (flags & cudaEventRecordExternal) {
    struct CUgraphNode_st *nd = cudasim__capture_node(s, SIM_NODE_EVENT);
    if (!nd)
      return cudaErrorMemoryAllocation;
    nd->ev = ev;
  }
  ev->cap_id = s->cap->id;
  ev->cap_stream = s;
  ev->cap_pos = s->cap_ops;
  ev->cap_node = s->cap_last;
  return cudaSuccess;
}

/* s waits on an event last recorded in a capture: s joins that capture (a fork) when it is not
 * capturing, marks the recording stream joined when it is part of the same capture. */
cudaError_t cudasim__capture_wait(struct CUstream_st *s, struct CUevent_st *ev) {
  sim_capture *c = capture_by_id(ev->cap_id);
  if (!c)
    return s->cap ? cudasim__capture_refuse(s, cudaErrorInvalidValue) : cudaErrorInvalidValue;
  if (c->invalidated)
    return cudaErrorStreamCaptureInvalidated;
  if (s->cap && s->cap != c) {
    cudasim__capture_invalidate(c);
    return cudasim__capture_refuse(s, cudaErrorStreamCaptureMerge);
  }
  if (!s->cap) {
    if (s->kind == SIM_LEGACY) { /* the legacy stream cannot be captured */
      cudasim__capture_invalidate(c);
      return cudaErrorStreamCaptureUnsupported;
    }
    s->cap = c;
    s->cap_ops = s->cap_joined = 0;
    s->cap_last = ev->cap_node;
    return cudaSuccess;
  }
  struct CUstream_st *from = ev->cap_stream;
  if (from != s && ev->cap_pos > from->cap_joined)
    from->cap_joined = ev->cap_pos;
  return cudaSuccess;
}

/* A stream that joined c has work after its last join. */
static int capture_unjoined(const sim_capture *c) {
  for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next)
    if (s->cap == c && s != c->origin && s->cap_ops > s->cap_joined)
      return 1;
  return 0;
}

/* Takes every member out of capture and forgets c (its graph stays). */
static void capture_end(sim_capture *c) {
  for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next)
    if (s->cap == c) {
      s->cap = NULL;
      s->cap_ops = s->cap_joined = 0;
      s->cap_last = NULL;
    }
  for (sim_capture **link = &cudasim__g.captures; *link; link = &(*link)->next)
    if (*link == c) {
      *link = c->next;
      break;
    }
  c->graph->capture = NULL;
  free(c);
}

/* ---- stream capture -------------------------------------------------------------------------- */

static int valid_capture_mode(enum cudaStreamCaptureMode mode) {
  return mode == cudaStreamCaptureModeGlobal || mode == cudaStreamCaptureModeThreadLocal ||
         mode == cudaStreamCaptureModeRelaxed;
}

static cudaError_t begin_capture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
  struct CUstream_st *s;
  if (!valid_capture_mode(mode))
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (s->kind == SIM_LEGACY)
    return cudaErrorStreamCaptureUnsupported;
  if (s->cap)
    return cudaErrorIllegalState;
  sim_capture *c = calloc(1, sizeof *c);
  struct CUgraph_st *gr = c ? cudasim__graph_new() : NULL;
  if (!gr) {
    free(c);
    return cudaErrorMemoryAllocation;
  }
  c->id = ++cudasim__last_capture_id;
  c->mode = mode;
  c->thread = pthread_self();
  c->origin = s;
  c->graph = gr;
  gr->capture = c;
  c->next = cudasim__g.captures;
  cudasim__g.captures = c;
  s->cap = c;
  s->cap_ops = s->cap_joined = 0;
  s->cap_last = NULL;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  SIM_CALL(begin_capture(stream, mode));
}

/* Ends the capture begun on h. A failed capture (invalidated, or with unjoined work) still ends:
 * its streams leave capture mode and *graph is NULL. */
static cudaError_t end_capture(cudaStream_t h, cudaGraph_t *graph) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (!graph)
    return cudaErrorInvalidValue;
  sim_capture *c = s->cap;
  if (!c)
    return cudaErrorIllegalState;
  if (c->origin != s) {
    cudasim__capture_invalidate(c);
    return cudaErrorStreamCaptureUnmatched;
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self()))
    return cudaErrorStreamCaptureWrongThread; /* the capture goes on */
  e = c->invalidated        ? cudaErrorStreamCaptureInvalidated
      : capture_unjoined(c) ? cudaErrorStreamCaptureUnjoined
                            : cudaSuccess;
  struct CUgraph_st *gr = c->graph;
  capture_end(c);
  if (e != cudaSuccess) {
    cudasim__graph_free(gr);
    gr = NULL;
  }
  *graph = gr;
  return e;
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  SIM_CALL(end_capture(stream, pGraph));
}

/* The dependencies reported are the stream's last captured node only (no fork/join edges). */
static cudaError_t capture_info(cudaStream_t h, enum cudaStreamCaptureStatus *status,
                                unsigned long long *id, cudaGraph_t *graph,
                                const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                size_t *ndeps) {
  static const cudaGraphEdgeData no_edge_data[1];
  struct CUstream_st *s;
  if (edges && !deps)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_is_capturing(h, status);
  if (e != cudaSuccess || *status != cudaStreamCaptureStatusActive)
    return e;
  (void)cudasim__stream_get(h, &s); /* resolved already by stream_is_capturing */
  if (id)
    *id = s->cap->id;
  if (graph)
    *graph = s->cap->graph;
  if (deps)
    *deps = (const cudaGraphNode_t *)&s->cap_last;
  if (edges)
    *edges = no_edge_data;
  if (ndeps)
    *ndeps = s->cap_last ? 1 : 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
                                               enum cudaStreamCaptureStatus *captureStatus_out,
                                               unsigned long long *id_out, cudaGraph_t *graph_out,
                                               const cudaGraphNode_t **dependencies_out,
                                               const cudaGraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out) {
  SIM_CALL(capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out));
}

static cudaError_t exchange_capture_mode(enum cudaStreamCaptureMode *mode) {
  if (!mode || !valid_capture_mode(*mode))
    return cudaErrorInvalidValue;
  enum cudaStreamCaptureMode old = cudasim__t.mode;
  cudasim__t.mode = *mode;
  *mode = old;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  SIM_CALL(exchange_capture_mode(mode));
}

/* ---- driver entry points ----------------------------------------------------------------------
 * The driver functions spool asks for (cuStreamIsCapturing, cuThreadExchangeStreamCaptureMode,
 * cuEventRecord, cuEventQuery), simulated over the same state. */

/* A runtime error as the driver would return it: the same number where the driver has that code
 * (all codes the two APIs share have the same values), else CUDA_ERROR_UNKNOWN. */
static CUresult cu_result(cudaError_t e) {
  int v = (int)e;
  if (e == cudaErrorInsufficientDriver)
    return CUDA_ERROR_NOT_INITIALIZED;
  if ((v >= 0 && v <= 8) || v == 34 || v == 36 || v == 46 || (v >= 100 && v <= 102) ||
      (v >= 200 && v <= 202) || (v >= 205 && v <= 226) || (v >= 300 && v <= 304) ||
      (v >= 400 && v <= 402) || v == 500 || v == 600 || (v >= 700 && v <= 705) ||
      (v >= 708 && v <= 721) || (v >= 800 && v <= 812) || (v >= 900 && v <= 916))
    return (CUresult)v;
  return CUDA_ERROR_UNKNOWN;
}

/* ptsz: the per-thread-default-stream variant, where handle 0 is the per-thread stream. The
 * driver API leaves the runtime's last error alone. */
static CUresult cu_is_capturing(CUstream h, CUstreamCaptureStatus *status, int ptsz) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudasim__sim_enter("cuStreamIsCapturing", 1);
  if (e == cudaSuccess && !status)
    e = cudaErrorInvalidValue;
  /* The special handles name a stream of the current context: on a thread where no runtime
   * call has made one current, the driver fails (as an H200 showed for cudaStreamPerThread). A
   * created stream carries its own context. */
  int special = h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
  if (e == cudaSuccess && special && !cudasim__t.context)
    e = cudaErrorDeviceUninitialized; /* 201: CUDA_ERROR_INVALID_CONTEXT */
  if (e == cudaSuccess)
    e = cudasim__stream_is_capturing(h == NULL && ptsz ? cudaStreamPerThread : h, &st);
  if (e == cudaSuccess)
    *status = (CUstreamCaptureStatus)st;
  cudasim__unlock();
  return cu_result(e);
}

static CUresult CUDAAPI sim_cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status) {
  return cu_is_capturing(h, status, 0);
}

static CUresult CUDAAPI sim_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  cudaError_t e = cudasim__sim_enter("cuThreadExchangeStreamCaptureMode", 1);
  if (e == cudaSuccess)
    e = exchange_capture_mode((enum cudaStreamCaptureMode *)mode); /* the same values */
  cudasim__unlock();
  return cu_result(e);
}

/* As cu_is_capturing: a special handle needs a current context. */
static CUresult cu_event_record(CUevent ev, CUstream h, int ptsz) {
  cudaError_t e = cudasim__sim_enter("cuEventRecord", 1);
  int special = h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
  if (e == cudaSuccess && special && !cudasim__t.context)
    e = cudaErrorDeviceUninitialized;
  if (e == cudaSuccess)
    e = cudasim__event_record((cudaEvent_t)ev, h == NULL && ptsz ? cudaStreamPerThread : h,
                              cudaEventRecordDefault);
  cudasim__unlock();
  return cu_result(e);
}

static CUresult CUDAAPI sim_cuEventRecord(CUevent ev, CUstream h) {
  return cu_event_record(ev, h, 0);
}

static CUresult CUDAAPI sim_cuEventRecord_ptsz(CUevent ev, CUstream h) {
  return cu_event_record(ev, h, 1);
}

static CUresult CUDAAPI sim_cuEventQuery(CUevent ev) {
  cudaError_t e = cudasim__sim_enter("cuEventQuery", 1);
  if (e == cudaSuccess)
    e = cudasim__event_query((cudaEvent_t)ev);
  cudasim__unlock();
  return cu_result(e);
}

static CUresult CUDAAPI sim_cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *status) {
  return cu_is_capturing(h, status, 1);
}

/* The compiler checks the simulated functions against the driver's own typedefs. */
static const PFN_cuStreamIsCapturing_v10000 sim_is_capturing_fn = sim_cuStreamIsCapturing;
static const PFN_cuStreamIsCapturing_v10000_ptsz sim_is_capturing_ptsz_fn =
    sim_cuStreamIsCapturing_ptsz;
static const PFN_cuThreadExchangeStreamCaptureMode_v10010 sim_exchange_mode_fn =
    sim_cuThreadExchangeStreamCaptureMode;
static const PFN_cuEventRecord_v2000 sim_event_record_fn = sim_cuEventRecord;
static const PFN_cuEventRecord_v7000_ptsz sim_event_record_ptsz_fn = sim_cuEventRecord_ptsz;
static const PFN_cuEventQuery_v2000 sim_event_query_fn = sim_cuEventQuery;

/* A known symbol: whether version is enough, and the function (ptsz: the per-thread variant,
 * where there is one). */
static enum cudaDriverEntryPointQueryResult known_symbol(const char *symbol, unsigned version,
                                                         int ptsz, void **fn) {
  static const struct {
    const char *name;
    unsigned since;
    const void *plain, *per_thread;
  } table[] = {
      {"cuStreamIsCapturing", 10000, &sim_is_capturing_fn, &sim_is_capturing_ptsz_fn},
      {"cuThreadExchangeStreamCaptureMode", 10010, &sim_exchange_mode_fn, &sim_exchange_mode_fn},
      {"cuEventRecord", 2000, &sim_event_record_fn, &sim_event_record_ptsz_fn},
      {"cuEventQuery", 2000, &sim_event_query_fn, &sim_event_query_fn},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(symbol, table[i].name) != 0)
      continue;
    if (version < table[i].since)
      return cudaDriverEntryPointVersionNotSufficent;
    memcpy(fn, ptsz ? table[i].per_thread : table[i].plain, sizeof *fn); /* no fn-to-void* cast */
    return cudaDriverEntryPointSuccess;
  }
  return cudaDriverEntryPointSymbolNotFound;
}

/* Not found is a success with a NULL function and a status that says so, as documented.
 * version_checked: cudaGetDriverEntryPointByVersion refuses a version above the driver's. */
static cudaError_t entry_point(const char *symbol, void **fn, unsigned version,
                               int version_checked, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status) {
  unsigned long long known = cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream;
  if (!symbol || !fn || (flags & ~known))
    return cudaErrorInvalidValue;
  if (version_checked && version > (unsigned)cudasim__g.driver)
    return cudaErrorInvalidValue;
  *fn = NULL;
  enum cudaDriverEntryPointQueryResult found =
      known_symbol(symbol, version, (flags & cudaEnablePerThreadDefaultStream) != 0, fn);
  if (status)
    *status = found;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  SIM_CALL(entry_point(symbol, funcPtr, cudaVersion, 1, flags, driverStatus));
}

/* Deprecated since CUDA 12.5: the version asked for is the runtime's own. */
cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *driverStatus) {
  SIM_CALL(entry_point(symbol, funcPtr, CUDART_VERSION, 0, flags, driverStatus));
}

