/* Cross-stream hand-off: spool_record_stream, and the waits before a free (spool_free_after).
 *
 * A buffer used on streams other than the one that frees it must not be reused before their
 * work is done. The free of such a buffer goes to a pool-owned hand-off stream that first waits
 * (cudaStreamWaitEvent: on the device, the host never blocks) for an event recorded on every
 * recorded stream, for the caller's event (spool_free_after) and for an event recorded on the
 * freeing stream; then the heap's ordinary free runs on the hand-off stream (the hand-off never
 * frees by itself: heap.c calls begin, frees, and calls end). From there the memory is
 * reused only in the hand-off stream's order: the pool's reuse rules follow its event
 * dependencies, and a block the hand-off stream's cache holds goes to another stream only once
 * a fence recorded on the hand-off stream has completed (chunks.c).
 *
 * Why a stream and not a list of pending frees polled with cudaEventQuery (PyTorch's way):
 * nothing has to poll, no memory waits on the host's attention, and no event query runs where
 * another thread's global-mode capture would forbid it. Why not make the freeing stream wait:
 * that would serialize the caller's stream behind the others, which the hand-off exists to
 * avoid.
 *
 * The recorded streams live in a small table keyed by pointer; frees look there only while
 * some buffer has recorded streams (pool->handoff_any). One event serves every record: a wait
 * takes the event's state when it is called, so the event may be recorded again at once; the
 * hand-off lock keeps each record-and-wait pair together. */
#include "capture.h"
#include "trace_format.h"

#include <stdlib.h>
#include <string.h>

#define MAX_STREAMS 8 /* recorded streams per buffer */

typedef struct entry {
  uintptr_t ptr;
  unsigned n;
  cudaStream_t streams[MAX_STREAMS];
} entry;

typedef struct spool__handoff {
  pthread_mutex_t lock;   /* the entries, and each record-and-wait sequence */
  entry *entries;
  size_t n, cap;
  cudaStream_t stream;    /* the hand-off stream, made at the first deferred free */
  cudaEvent_t event;
} spool__handoff;

static spool__handoff *handoff_of(spool_pool *pool) {
  spool__handoff *h = atomic_load(&pool->handoff);
  if (h) return h;
  pthread_mutex_lock(&pool->lock);
  h = atomic_load(&pool->handoff);
  if (!h && (h = calloc(1, sizeof *h)) != NULL) {
    pthread_mutex_init(&h->lock, NULL);
    atomic_store(&pool->handoff, h);
  }
  pthread_mutex_unlock(&pool->lock);
  return h;
}

/* Under h's lock. */
static entry *find(spool__handoff *h, uintptr_t ptr) {
  for (size_t i = 0; i < h->n; i++)
    if (h->entries[i].ptr == ptr) return &h->entries[i];
  return NULL;
}

/* ---- record_stream --------------------------------------------------------------------------- */

/* The live buffer starting at ptr: the pool's table, else a stream cache's (a scan). */
static spool_status live_buffer(spool_pool *pool, void *ptr, spool__buffer *out, const char *ctx) {
  uintptr_t u = (uintptr_t)ptr;
  pthread_mutex_lock(&pool->lock);
  const spool__buffer *b = spool__table_find(&pool->live, u);
  if (b) *out = *b;
  pthread_mutex_unlock(&pool->lock);
  if (b) return SPOOL_OK;
  bool inside = false;
  pthread_mutex_lock(&pool->lock);
  b = spool__table_containing(&pool->live, u);
  if (b) *out = *b, inside = true;
  pthread_mutex_unlock(&pool->lock);
  if (!inside && pool->cfg.cache && spool__census_containing(pool, u, out)) {
    if (out->ptr == u) return SPOOL_OK;
    inside = true;
  }
  if (!inside)
    return spool__fail(SPOOL_ERR_UNKNOWN_POINTER, "%s: %p is not a live buffer of pool %p",
                       ctx, ptr, (void *)pool);
  char here[SPOOL__SITE_TEXT];
  snprintf(here, sizeof here, "%s", ctx);
  spool_status s = spool__batch_refusal(pool, ptr, out, here);
  if (s == SPOOL_OK) s = spool__scope_refusal(ptr, out, here);
  if (s != SPOOL_OK) return spool__prefix(s, ctx);
  return spool__fail(SPOOL_ERR_INTERIOR_POINTER, "%s: %p points inside buffer %p, not at its "
                     "start", ctx, ptr, (void *)out->ptr);
}

static spool_status not_captured(cudaStream_t stream, const char *ctx, const char *which) {
  bool capturing = false;
  spool_status s = spool__stream_capturing(stream, &capturing, ctx);
  if (s == SPOOL_OK && capturing)
    s = spool__fail(SPOOL_ERR_INVALID, "%s: %s %p is being captured into a graph: a hand-off "
                    "cannot be captured (order the streams in the graph with events instead)",
                    ctx, which, (void *)stream);
  return s;
}

/* Under h's lock: adds stream to ptr's entry. */
static spool_status add_stream(spool__handoff *h, uintptr_t ptr, cudaStream_t stream,
                               const char *ctx) {
  entry *e = find(h, ptr);
  if (!e && h->n == h->cap) {
    size_t cap;
    entry *grown = spool__grow_array(h->entries, h->cap, sizeof *grown, 16, &cap);
    if (!grown) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory", ctx);
    h->entries = grown;
    h->cap = cap;
  }
  if (!e) {
    e = &h->entries[h->n++];
    memset(e, 0, sizeof *e);
    e->ptr = ptr;
  }
  for (unsigned i = 0; i < e->n; i++)
    if (e->streams[i] == stream) return SPOOL_OK;
  if (e->n == MAX_STREAMS)
    return spool__fail(SPOOL_ERR_INVALID, "%s: %p has %d streams recorded already, the most "
                       "spool keeps", ctx, (void *)ptr, MAX_STREAMS);
  e->streams[e->n++] = stream;
  return SPOOL_OK;
}

spool_status spool_record_stream(spool_pool *pool, void *ptr, cudaStream_t other) {
  static const char ctx[] = "spool_record_stream";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", ctx);
  if (pool->cfg.track == SPOOL_TRACK_OFF)
    return spool__fail(SPOOL_ERR_INVALID, "%s: track=off: spool cannot tell %p is a live buffer "
                       "(set track=counts or full)", ctx, ptr);
  ptr = spool__aligned_start(pool, ptr); /* an aligned batch: its allocation's start */
  spool__buffer b;
  spool_status s = live_buffer(pool, ptr, &b, ctx);
  if (s == SPOOL_OK) s = not_captured(other, ctx, "stream");
  if (s != SPOOL_OK) return s;
  if (b.stream == other) return SPOOL_OK; /* its own stream: every free orders after it */
  spool__handoff *h = handoff_of(pool);
  if (!h) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory", ctx);
  pthread_mutex_lock(&h->lock);
  s = add_stream(h, (uintptr_t)ptr, other, ctx);
  if (s == SPOOL_OK) atomic_store(&pool->handoff_any, true);
  pthread_mutex_unlock(&h->lock);
  if (s == SPOOL_OK && pool->trace) {
    spool__trace_ev ev = {.kind = SPOOL_TRACE_RECORD_STREAM, .ptr = ptr, .stream = other};
    spool__trace_event(pool, &ev);
  }
  return s;
}

/* ---- the deferred free ----------------------------------------------------------------------- */

/* Under h's lock: the hand-off stream and its event, on the pool's device. */
static spool_status make_stream(spool_pool *pool, spool__handoff *h, const char *ctx) {
  if (h->stream) return SPOOL_OK;
  int saved = 0;
  spool_status s = spool__device_enter(pool->device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaError_t err = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    h->stream = NULL;
    s = spool__fail_cuda(err, "cudaStreamCreateWithFlags", "%s: the hand-off stream", ctx);
  } else if ((err = cudaEventCreateWithFlags(&h->event, cudaEventDisableTiming)) != cudaSuccess) {
    s = spool__fail_cuda(err, "cudaEventCreateWithFlags", "%s: the hand-off event", ctx);
    if (cudaStreamDestroy(h->stream) != cudaSuccess) spool__clear_cuda_error();
    h->stream = NULL;
  }
  return spool__device_leave(pool->device, saved, s, ctx);
}

/* The hand-off stream waits for ev, just recorded on stream (err: how the record went). */
static spool_status wait_recorded(spool__handoff *h, cudaEvent_t ev, cudaStream_t stream,
                                  cudaError_t err, const char *ctx) {
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaEventRecord", "%s: on stream %p (destroyed? a recorded "
                            "stream must live until the buffer's free); nothing was freed", ctx,
                            (void *)stream);
  err = cudaStreamWaitEvent(h->stream, ev, 0);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaStreamWaitEvent", "%s: the hand-off stream waiting for "
                            "stream %p; nothing was freed", ctx, (void *)stream);
  return SPOOL_OK;
}

/* An event is recorded only on streams of its own device (the hand-off event: the pool's), so
 * a stream of another device (a peer using the buffer; 0 or cudaStreamPerThread while another
 * device is current) gets an event of its device for the one wait. Destroying it at once is
 * fine: a wait already queued is not affected. */
static spool_status wait_across(spool__handoff *h, cudaStream_t stream, int device,
                                const char *ctx) {
  int saved = 0;
  spool_status s = spool__device_enter(device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaEvent_t ev = NULL;
  cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (err != cudaSuccess)
    s = spool__fail_cuda(err, "cudaEventCreateWithFlags", "%s: an event on device %d for stream "
                         "%p; nothing was freed", ctx, device, (void *)stream);
  if (s == SPOOL_OK) s = wait_recorded(h, ev, stream, cudaEventRecord(ev, stream), ctx);
  if (ev && cudaEventDestroy(ev) != cudaSuccess) spool__clear_cuda_error();
  return spool__device_leave(device, saved, s, ctx);
}

/* After the pool's event was refused as a foreign handle: the device of stream when it is not
 * the pool's (then the refusal was the device rule), else -1. */
static int foreign_device(const spool_pool *pool, cudaStream_t stream) {
  spool__clear_cuda_error();
  int device = spool__stream_device(stream);
  return device >= 0 && device != pool->device ? device : -1;
}

/* Under h's lock: the hand-off stream waits for the work queued on stream so far. The pool's
 * event is tried first, so that a stream of the pool's device costs no device query. */
static spool_status wait_for(spool_pool *pool, spool__handoff *h, cudaStream_t stream,
                             const char *ctx) {
  cudaError_t err = cudaEventRecord(h->event, stream);
  int device = err == cudaErrorInvalidResourceHandle ? foreign_device(pool, stream) : -1;
  if (device >= 0) return wait_across(h, stream, device, ctx);
  return wait_recorded(h, h->event, stream, err, ctx);
}

static spool_status wait_all(spool_pool *pool, spool__handoff *h, const entry *e,
                             cudaStream_t stream, cudaEvent_t event, const char *ctx) {
  spool_status s = SPOOL_OK;
  for (unsigned i = 0; e && i < e->n && s == SPOOL_OK; i++)
    s = wait_for(pool, h, e->streams[i], ctx);
  if (s == SPOOL_OK && event) {
    cudaError_t err = cudaStreamWaitEvent(h->stream, event, 0);
    if (err != cudaSuccess)
      s = spool__fail_cuda(err, "cudaStreamWaitEvent", "%s: the hand-off stream waiting for "
                           "event %p; nothing was freed", ctx, (void *)event);
  }
  if (s == SPOOL_OK) s = wait_for(pool, h, stream, ctx);
  return s;
}

static spool_status check_streams(const entry *e, cudaStream_t stream, const char *ctx) {
  spool_status s = not_captured(stream, ctx, "the freeing stream");
  for (unsigned i = 0; e && i < e->n && s == SPOOL_OK; i++)
    s = not_captured(e->streams[i], ctx, "recorded stream");
  return s;
}

spool_status spool__handoff_begin(spool_pool *pool, void *ptr, cudaStream_t stream,
                                  cudaEvent_t event, const char *ctx, cudaStream_t *on) {
  spool__handoff *h = handoff_of(pool);
  if (!h) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory", ctx);
  pthread_mutex_lock(&h->lock);
  entry copy, *e = find(h, (uintptr_t)ptr);
  if (e) copy = *e;
  spool_status s = check_streams(e ? &copy : NULL, stream, ctx);
  if (s == SPOOL_OK) s = make_stream(pool, h, ctx);
  if (s == SPOOL_OK) s = wait_all(pool, h, e ? &copy : NULL, stream, event, ctx);
  if (s == SPOOL_OK) {
    *on = h->stream;
    return SPOOL_OK; /* h's lock stays held until spool__handoff_end */
  }
  pthread_mutex_unlock(&h->lock);
  return s;
}

void spool__handoff_end(spool_pool *pool, void *ptr, spool_status s) {
  spool__handoff *h = atomic_load(&pool->handoff);
  entry *e;
  if (s == SPOOL_OK && (e = find(h, (uintptr_t)ptr)) != NULL) *e = h->entries[--h->n];
  /* No recorded streams left: frees skip the table again (record_stream sets the flag under
   * the same lock, so the two never disagree with the table for long). */
  if (h->n == 0) atomic_store_explicit(&pool->handoff_any, false, memory_order_relaxed);
  pthread_mutex_unlock(&h->lock);
}

bool spool__handoff_recorded(spool_pool *pool, void *ptr) {
  spool__handoff *h = atomic_load(&pool->handoff);
  if (!h) return false;
  pthread_mutex_lock(&h->lock);
  bool recorded = find(h, (uintptr_t)ptr) != NULL;
  pthread_mutex_unlock(&h->lock);
  return recorded;
}

spool_status spool__handoff_destroy(spool_pool *pool) {
  spool__handoff *h = atomic_load(&pool->handoff);
  if (!h) return SPOOL_OK;
  spool_status s = SPOOL_OK;
  if (h->event && cudaEventDestroy(h->event) != cudaSuccess) spool__clear_cuda_error();
  if (h->stream) {
    cudaError_t err = cudaStreamDestroy(h->stream);
    if (err != cudaSuccess)
      s = spool__fail_cuda(err, "cudaStreamDestroy", "spool_pool_destroy: the hand-off stream");
  }
  pthread_mutex_destroy(&h->lock);
  free(h->entries);
  free(h);
  atomic_store(&pool->handoff, NULL);
  return s;
}
