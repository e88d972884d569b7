/* cudasim: streams and events.
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

/* ---- streams and events ---------------------------------------------------------------------- */

static struct CUstream_st *stream_new(int dev, unsigned flags, int prio, enum sim_stream_kind k) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->device = dev;
  s->flags = flags;
  s->priority = prio;
  s->kind = k;
  s->id = ++cudasim__last_stream_id;
  s->next = cudasim__g.streams;
  cudasim__g.streams = s;
  return s;
}

static int stream_known(cudaStream_t s) {
  for (struct CUstream_st *p = cudasim__g.streams; p; p = p->next)
    if (p == s)
      return 1;
  return 0;
}

/* Resolves a handle: NULL and cudaStreamLegacy are the current device's legacy stream,
 * cudaStreamPerThread this thread's stream on the current device (both made on first use). */
cudaError_t cudasim__stream_get(cudaStream_t h, struct CUstream_st **out) {
  int d;
  if (h != NULL && h != cudaStreamLegacy && h != cudaStreamPerThread) {
    if (!stream_known(h))
      return cudaErrorInvalidResourceHandle;
    *out = h;
    return cudaSuccess;
  }
  cudaError_t e = cudasim__cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  struct CUstream_st **slot =
      h == cudaStreamPerThread ? &cudasim__t.ptds[d] : &cudasim__g.dev[d].legacy;
  if (!*slot)
    *slot = stream_new(d, 0, 0, h == cudaStreamPerThread ? SIM_PER_THREAD : SIM_LEGACY);
  if (!*slot)
    return cudaErrorMemoryAllocation;
  *out = *slot;
  return cudaSuccess;
}

/* Drops the waits of s that are satisfied; whether any is left. */
int cudasim__stream_blocked(struct CUstream_st *s) {
  int n = 0;
  for (int i = 0; i < s->ndeps; i++)
    if (s->deps[i].on->completed < s->deps[i].ticket)
      s->deps[n++] = s->deps[i];
  s->ndeps = n;
  return n > 0;
}

/* Completes what waited for work that has completed since, until nothing changes. */
void cudasim__progress(void) {
  int changed = 1;
  while (changed) {
    changed = 0;
    for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next) {
      if (s->ndeps == 0 || cudasim__stream_blocked(s) || s->held || s->completed == s->ticket)
        continue;
      s->completed = s->ticket;
      changed = 1;
    }
  }
}

/* A synchronize of s: the work it waits for completes, then its own. */
void cudasim__stream_force(struct CUstream_st *s) {
  for (int i = 0; i < s->ndeps; i++)
    if (s->deps[i].on->completed < s->deps[i].ticket)
      s->deps[i].on->completed = s->deps[i].ticket;
  s->ndeps = 0;
  s->completed = s->ticket;
}

/* s waits for on's work up to ticket. */
static void stream_add_dep(struct CUstream_st *s, struct CUstream_st *on, uint64_t ticket) {
  for (int i = 0; i < s->ndeps; i++) {
    if (s->deps[i].on == on) {
      if (s->deps[i].ticket < ticket)
        s->deps[i].ticket = ticket;
      return;
    }
  }
  if (s->ndeps == SIM_MAX_DEPS) { /* the oldest wait is over at once */
    if (s->deps[0].on->completed < s->deps[0].ticket)
      s->deps[0].on->completed = s->deps[0].ticket;
    memmove(&s->deps[0], &s->deps[1], (SIM_MAX_DEPS - 1) * sizeof s->deps[0]);
    s->ndeps--;
  }
  s->deps[s->ndeps++] = (struct sim_dep){on, ticket};
}

uint64_t cudasim__enqueue(struct CUstream_st *s) {
  s->ticket++;
  if (!s->held && !cudasim__stream_blocked(s))
    s->completed = s->ticket;
  return s->ticket;
}

int cudasim__event_known(cudaEvent_t ev) {
  for (struct CUevent_st *p = cudasim__g.events; p; p = p->next)
    if (p == ev)
      return 1;
  return 0;
}

static int event_done(const struct CUevent_st *ev) {
  return !ev->recorded || !ev->stream || ev->stream->completed >= ev->ticket;
}

/* ---- streams --------------------------------------------------------------------------------- */

static cudaError_t stream_create(cudaStream_t *ps, unsigned flags, int prio) {
  int d;
  if (!ps || (flags & ~(unsigned)cudaStreamNonBlocking))
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  prio = prio > 0 ? 0 : prio < SIM_PRIO_GREATEST ? SIM_PRIO_GREATEST : prio; /* clamped */
  struct CUstream_st *s = stream_new(d, flags, prio, SIM_USER);
  if (!s)
    return cudaErrorMemoryAllocation;
  *ps = s;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream) {
  SIM_CALL(stream_create(pStream, cudaStreamDefault, 0));
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  SIM_CALL(stream_create(pStream, flags, 0));
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
  SIM_CALL(stream_create(pStream, flags, priority));
}

/* Work on s is complete and s goes away: frees and events that pointed at it are complete. */
static void stream_forget(struct CUstream_st *s) {
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      for (sim_block *b = sg->blocks; b; b = b->next)
        if (b->free_stream == s)
          b->free_stream = NULL;
  for (struct CUevent_st *ev = cudasim__g.events; ev; ev = ev->next)
    if (ev->stream == s)
      ev->stream = NULL;
  for (struct CUstream_st *o = cudasim__g.streams; o; o = o->next) /* waits for s are over */
    for (int i = 0; i < o->ndeps; i++)
      if (o->deps[i].on == s)
        o->deps[i].ticket = 0;
  for (struct CUstream_st **link = &cudasim__g.streams; *link; link = &(*link)->next)
    if (*link == s) {
      *link = s->next;
      break;
    }
  s->next = cudasim__graveyard.streams;
  cudasim__graveyard.streams = s;
  cudasim__progress(); /* what waited for s completes */
}

static cudaError_t stream_destroy(cudaStream_t h) {
  if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread || !stream_known(h))
    return cudaErrorInvalidResourceHandle;
  if (h->kind != SIM_USER)
    return cudaErrorInvalidResourceHandle;
  if (h->cap) { /* cudasim's choice: the stream stays, its capture is invalidated */
    cudasim__capture_invalidate(h->cap);
    return cudaErrorStreamCaptureUnsupported;
  }
  stream_forget(h);
  cudasim__reap_all();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) { SIM_CALL(stream_destroy(stream)); }

static cudaError_t stream_synchronize(cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_wait_check(s);
  if (e != cudaSuccess)
    return e;
  cudasim__stream_force(s);
  cudasim__progress();
  cudasim__device_release(s->device);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  SIM_CALL(stream_synchronize(stream));
}

static cudaError_t stream_query(cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_wait_check(s);
  if (e != cudaSuccess)
    return e;
  return s->completed < s->ticket ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) { SIM_CALL(stream_query(stream)); }

static cudaError_t stream_get_flags(cudaStream_t h, unsigned *flags) {
  struct CUstream_st *s;
  if (!flags)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    *flags = s->flags;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  SIM_CALL(stream_get_flags(hStream, flags));
}

static cudaError_t stream_get_priority(cudaStream_t h, int *prio) {
  struct CUstream_st *s;
  if (!prio)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    *prio = s->priority;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t hStream, int *priority) {
  SIM_CALL(stream_get_priority(hStream, priority));
}

/* Outside capture a wait orders nothing in cudasim (no dependencies between streams); in capture
 * it forks, joins, or crosses the capture's boundary, which only cudaEventWaitExternal may. */
static cudaError_t stream_wait_event(cudaStream_t h, cudaEvent_t ev, unsigned flags) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (!cudasim__event_known(ev))
    return cudaErrorInvalidResourceHandle;
  if (flags & ~(unsigned)cudaEventWaitExternal)
    return cudaErrorInvalidValue;
  e = cudasim__stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (ev->cap_id)
    return cudasim__capture_wait(s, ev);
  if (!s->cap && ev->recorded && ev->stream && !event_done(ev))
    stream_add_dep(s, ev->stream, ev->ticket); /* its later work waits for ev's */
  if (!s->cap || !ev->recorded) /* waiting on a never recorded event is a no-op */
    return cudaSuccess;
  if (!(flags & cudaEventWaitExternal))
    return cudasim__capture_refuse(s, cudaErrorStreamCaptureIsolation);
  struct CUgraphNode_st *nd = cudasim__capture_node(s, SIM_NODE_WAIT);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->ev = ev;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  SIM_CALL(stream_wait_event(stream, event, flags));
}

enum cudaStreamCaptureStatus cudasim__capture_status(const struct CUstream_st *s) {
  if (!s->cap)
    return cudaStreamCaptureStatusNone;
  return s->cap->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
}

/* The status query shared by cudaStreamIsCapturing and the simulated cuStreamIsCapturing. */
cudaError_t cudasim__stream_is_capturing(cudaStream_t h, enum cudaStreamCaptureStatus *status) {
  struct CUstream_st *s;
  if (!status)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess && s->kind == SIM_LEGACY)
    e = cudasim__legacy_implicit(s->device, 0);
  if (e != cudaSuccess)
    return e;
  *status = cudasim__capture_status(s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus *pCaptureStatus) {
  SIM_CALL(cudasim__stream_is_capturing(stream, pCaptureStatus));
}

/* ---- events ---------------------------------------------------------------------------------- */

static cudaError_t event_create(cudaEvent_t *pev, unsigned flags) {
  unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!pev || (flags & ~known))
    return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;
  int d;
  cudaError_t e = cudasim__cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev)
    return cudaErrorMemoryAllocation;
  ev->device = d;
  ev->flags = flags;
  ev->next = cudasim__g.events;
  cudasim__g.events = ev;
  *pev = ev;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event) {
  SIM_CALL(event_create(event, cudaEventDefault));
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  SIM_CALL(event_create(event, flags));
}

static cudaError_t event_destroy(cudaEvent_t ev) {
  for (struct CUevent_st **link = &cudasim__g.events; *link; link = &(*link)->next)
    if (*link == ev) {
      *link = ev->next;
      ev->next = cudasim__graveyard.events;
      cudasim__graveyard.events = ev;
      return cudaSuccess;
    }
  return cudaErrorInvalidResourceHandle;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) { SIM_CALL(event_destroy(event)); }

void cudasim__event_set(struct CUevent_st *ev, struct CUstream_st *s) {
  ev->stream = s;
  ev->ticket = cudasim__enqueue(s);
  ev->recorded = 1;
  ev->cap_id = 0;
}

cudaError_t cudasim__event_record(cudaEvent_t ev, cudaStream_t h, unsigned flags) {
  struct CUstream_st *s;
  if (!cudasim__event_known(ev))
    return cudaErrorInvalidResourceHandle;
  if (flags & ~(unsigned)cudaEventRecordExternal)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess && s->device != ev->device)
    e = cudaErrorInvalidResourceHandle; /* "event and stream must be on the same device" */
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (s->cap)
    return cudasim__capture_record(s, ev, flags);
  cudasim__event_set(ev, s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIM_CALL(cudasim__event_record(event, stream, cudaEventRecordDefault));
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  SIM_CALL(cudasim__event_record(event, stream, flags));
}

/* Querying or waiting for an event: refused for a captured event, and potentially unsafe. */
static cudaError_t event_wait_check(cudaEvent_t ev) {
  if (!cudasim__event_known(ev))
    return cudaErrorInvalidResourceHandle;
  cudaError_t e = cudasim__event_capture_check(ev);
  return e != cudaSuccess ? e : cudasim__capture_unsafe();
}

cudaError_t cudasim__event_query(cudaEvent_t ev) {
  cudaError_t e = event_wait_check(ev);
  if (e != cudaSuccess)
    return e;
  return event_done(ev) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) { SIM_CALL(cudasim__event_query(event)); }

static cudaError_t event_synchronize(cudaEvent_t ev) {
  cudaError_t e = event_wait_check(ev);
  if (e != cudaSuccess)
    return e;
  if (!ev->recorded || !ev->stream)
    return cudaSuccess;
  if (ev->stream->ndeps)
    cudasim__stream_force(ev->stream);
  if (ev->stream->completed < ev->ticket)
    ev->stream->completed = ev->ticket;
  cudasim__progress();
  cudasim__device_release(ev->stream->device);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  SIM_CALL(event_synchronize(event));
}

static cudaError_t event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms)
    return cudaErrorInvalidValue;
  if (!cudasim__event_known(start) || !cudasim__event_known(end))
    return cudaErrorInvalidResourceHandle;
  cudaError_t e = cudasim__event_capture_check(start);
  if (e == cudaSuccess)
    e = cudasim__event_capture_check(end);
  if (e != cudaSuccess)
    return e;
  if (!start->recorded || !end->recorded || ((start->flags | end->flags) & cudaEventDisableTiming))
    return cudaErrorInvalidResourceHandle;
  if (!event_done(start) || !event_done(end))
    return cudaErrorNotReady;
  *ms = 0.0f;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  SIM_CALL(event_elapsed(ms, start, end));
}

/* ---- stream identity ------------------------------------------------------------------------- */

static cudaError_t stream_get_id(cudaStream_t h, unsigned long long *id) {
  struct CUstream_st *s;
  if (!id)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    *id = s->id;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId) {
  SIM_CALL(stream_get_id(hStream, streamId));
}

static cudaError_t stream_get_device(cudaStream_t h, int *device) {
  struct CUstream_st *s;
  if (!device)
    return cudaErrorInvalidValue;
  cudaError_t e =
      cudasim__stream_get(h, &s); /* the built-in streams resolve on the current device */
  /* Asked of a stream being captured, the H200 invalidated the capture (relaxed mode too). */
  if (e == cudaSuccess && s->cap) {
    cudasim__capture_invalidate(s->cap);
    return cudaErrorStreamCaptureUnsupported;
  }
  if (e == cudaSuccess)
    *device = s->device;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device) {
  SIM_CALL(stream_get_device(hStream, device));
}

