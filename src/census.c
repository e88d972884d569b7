/* Whole-pool walks: who holds a pointer, the sums of the fronts' counters and their
 * publication, and what gives idle memory back (flushes, spool_stream_release, spool_trim,
 * the fronts and chunks at destroy).
 *
 * Flushes (spool_trim, out of memory, destroy) synchronize the device, put every front into
 * the heap, and give every all-free chunk back on the calling thread's per-thread stream;
 * spool_stream_release gives back on the stream it is given. The fronts' streams are never
 * touched: users destroy streams without telling spool.
 *
 * Locks: the pool's lock, then each front's. */
#include "capture.h"
#include "front.h"
#include "trace_format.h"

#include <stdlib.h>
#include <string.h>


/* ---- whole-pool walks ------------------------------------------------------------------------ */

bool spool__census_containing(spool_pool *p, uintptr_t u, spool__buffer *out) {
  bool found = false;
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c && !found; c = c->next) {
    front_lock(c);
    for (size_t i = 0; i < c->blocks.cap && !found; i++) {
      if (!c->blocks.slots[i].key) continue;
      const spool__buffer *b = &((const spool__block *)c->blocks.slots[i].val)->buf;
      if (b->state == SPOOL__LIVE && b->ptr <= u && u - b->ptr < b->size) {
        *out = *b;
        found = true;
      }
    }
    front_unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
  return found;
}

bool spool__census_find_live(spool_pool *p, uintptr_t u, spool__buffer *out) {
  bool found = false;
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c && !found; c = c->next) {
    front_lock(c);
    const spool__buffer *b = front_rec(c, u);
    if (b && b->state == SPOOL__LIVE) {
      *out = *b;
      found = true;
    }
    front_unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
  return found;
}

bool spool__census_carve(spool_pool *p, uintptr_t u) {
  spool__buffer b;
  if (!spool__nvtx_on(p) || !p->cfg.cache || !spool__census_find_live(p, u, &b)) return false;
  /* b's chunk stays while b is live: read outside the lock */
  return spool__nvtx_carve(p, b.blk->chunk->nvtx, u, b.size);
}

typedef struct live_walk {
  void (*fn)(const spool__buffer *, void *);
  void *arg;
} live_walk;

static void if_live(void *blk, void *arg) {
  const live_walk *w = arg;
  const spool__buffer *b = &((const spool__block *)blk)->buf;
  if (b->state == SPOOL__LIVE) w->fn(b, w->arg);
}

void spool__census_each_live(spool_pool *p, void (*fn)(const spool__buffer *, void *),
                             void *arg) {
  live_walk w = {fn, arg};
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    front_lock(c);
    spool__index_each(&c->blocks, if_live, &w);
    front_unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
}

void spool__census_sum(spool_pool *p, spool__cache_counters *cc) {
  memset(cc, 0, sizeof *cc);
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    front_lock(c);
    spool__front_publish(p, c);
    const spool__cache_counters *k = &c->c;
    cc->bytes_in_use += k->bytes_in_use;
    cc->buffers_in_use += k->buffers_in_use;
    cc->bytes_cached += k->bytes_cached;
    cc->bytes_front += k->bytes_cached;
    cc->bytes_cached += c->quar_bytes + c->outbox_bytes;
    cc->allocs += k->allocs;
    cc->frees += k->frees;
    cc->bytes_allocated += k->bytes_allocated;
    cc->hits += k->hits;
    cc->misses += k->misses;
    cc->flushes += k->flushes;
    if (c->high > cc->high) cc->high = c->high;
    if (c->high_buffers > cc->high_buffers) cc->high_buffers = c->high_buffers;
    front_unlock(c);
  }
  cc->bytes_cached += p->heap.free_bytes;
  pthread_mutex_unlock(&p->lock);
}

void spool__live_totals(spool_pool *p, uint64_t *bytes, uint64_t *buffers) {
  spool__cache_counters cc;
  spool__census_sum(p, &cc);
  pthread_mutex_lock(&p->lock);
  *bytes = p->c.bytes_in_use + cc.bytes_in_use;
  *buffers = p->c.buffers_in_use + cc.buffers_in_use;
  pthread_mutex_unlock(&p->lock);
}

void spool__census_reset_peaks(spool_pool *p) {
  spool__cache_counters ignored;
  spool__census_sum(p, &ignored); /* publishes every front */
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    front_lock(c);
    c->high = c->c.bytes_in_use;
    c->high_buffers = c->c.buffers_in_use;
    front_unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
  atomic_store(&p->peak_bytes, spool__totals_bytes(p));
  atomic_store(&p->peak_buffers, spool__totals_buffers(p));
}

void spool__census_each_stream(spool_pool *p, void (*fn)(const spool__stream_idle *, void *),
                               void *arg) {
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    front_lock(c);
    /* the outbox's blocks are on their way to pending in the heap */
    spool__stream_idle idle = {c->stream, c->thread, c->c.bytes_cached,
                               spool__heap_pending_bytes(&c->pend) + c->outbox_bytes,
                               c->c.bytes_in_use};
    front_unlock(c);
    fn(&idle, arg);
  }
  pthread_mutex_unlock(&p->lock);
}

/* ---- flushes --------------------------------------------------------------------------------- */

/* Under the pool's lock: c's front into the heap, counted as a flush. */
static void flush_front(spool_pool *p, spool__scache *c) {
  spool__quar_drain(p, c);
  if (!spool__front_spill(p, c, 0)) return;
  front_lock(c);
  c->c.flushes++;
  front_unlock(c);
}

/* Whether a flush would give anything back: a front block, or a chunk with no used block. A
 * flush synchronizes the device, which invalidates any capture on it: never for nothing. */
static bool anything_held(spool_pool *p) {
  if (spool__heap_has_free_chunk(p)) return true;
  bool any = false;
  for (spool__scache *c = p->caches; c && !any; c = c->next) {
    front_lock(c);
    any = c->front_blocks > 0 || c->quar_count > 0 || c->outbox_count > 0;
    front_unlock(c);
  }
  return any;
}

/* Under the pool's lock, on its device. The fronts' streams are never touched: users destroy
 * streams without telling spool. Once the device is idle no stream's work can still use a free
 * block, every pending range is shared, and this thread's per-thread stream may give every
 * all-free chunk back; waiting for it makes the memory the pool's again before the caller
 * trims. */
static spool_status flush_locked(spool_pool *p, const char *ctx) {
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaDeviceSynchronize", "%s: before giving the heap's free "
                            "chunks back (they stay in the heap)", ctx);
  for (spool__scache *c = p->caches; c; c = c->next) flush_front(p, c);
  spool__heap_publish_all(p);
  spool_status s = spool__heap_free_empty(p, NULL, cudaStreamPerThread, 0, ctx);
  err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess && s == SPOOL_OK)
    s = spool__fail_cuda(err, "cudaStreamSynchronize", "%s: after giving the heap's free "
                         "chunks back", ctx);
  return s;
}

spool_status spool__census_flush_all(spool_pool *p, const char *ctx) {
  pthread_mutex_lock(&p->lock);
  spool_status s = SPOOL_OK;
  if (anything_held(p)) {
    int saved = 0;
    s = spool__device_enter(p->device, &saved, ctx);
    if (s == SPOOL_OK) s = spool__device_leave(p->device, saved, flush_locked(p, ctx), ctx);
  }
  pthread_mutex_unlock(&p->lock);
  return s;
}

static void spool__front_destroy(spool__scache *c) {
  if (c->pend.fence && cudaEventDestroy(c->pend.fence) != cudaSuccess)
    spool__clear_cuda_error();
  spool__index_free(&c->blocks); /* the records are the heap's blocks */
  for (unsigned i = 0; i < SPOOL__CLASSES; i++) free(c->bins[i].items);
  free(c->quar);
  free(c);
}

/* Without the device idle, work may still use any chunk: none goes back. CUDA keeps them
 * allocated even once the pool is destroyed (until freed), so the message says how much stays. */
static spool_status heap_abandon_locked(spool_pool *p, spool_status s, const char *ctx) {
  char size[SPOOL__SIZE_TEXT];
  spool__format_size(p->heap.chunk_bytes, size);
  (void)spool__heap_destroy(p, cudaStreamPerThread, SPOOL__GIVE_NONE, ctx);
  return spool__append(s, "; the heap's chunks (%s) stay allocated", size);
}

/* Under the pool's lock, on its device: every chunk goes back, with any leaked buffer in it
 * (the leak report has named them), once the device is idle. */
static spool_status heap_destroy_locked(spool_pool *p, bool leaks_freed, const char *ctx) {
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess)
    return heap_abandon_locked(p, spool__fail_cuda(err, "cudaDeviceSynchronize", "%s: before "
                               "giving the heap's chunks back", ctx), ctx);
  spool_status s = spool__heap_destroy(p, cudaStreamPerThread,
                                       leaks_freed ? SPOOL__GIVE_ALL : SPOOL__GIVE_FREE, ctx);
  err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess && s == SPOOL_OK)
    s = spool__fail_cuda(err, "cudaStreamSynchronize", "%s: after giving the heap's chunks "
                         "back", ctx);
  return s;
}

spool_status spool__census_destroy(spool_pool *p, bool leaks_freed) {
  static const char ctx[] = "spool_pool_destroy";
  spool_status s = SPOOL_OK;
  pthread_mutex_lock(&p->lock);
  /* No flush first: every chunk goes back below, after one device synchronize; the fronts'
   * blocks only need to be free so that their chunks count as free of leaks. */
  for (spool__scache *c = p->caches; c; c = c->next) {
    spool__quar_drain(p, c);
    (void)spool__front_spill(p, c, 0);
  }
  if (p->heap.chunks) {
    int saved = 0;
    spool_status hs = spool__device_enter(p->device, &saved, ctx);
    if (hs == SPOOL_OK)
      hs = spool__device_leave(p->device, saved, heap_destroy_locked(p, leaks_freed, ctx), ctx);
    else
      hs = heap_abandon_locked(p, hs, ctx);
    s = hs;
  } else {
    (void)spool__heap_destroy(p, cudaStreamPerThread, SPOOL__GIVE_NONE, ctx); /* records */
  }
  while (p->caches) {
    spool__scache *c = p->caches;
    p->caches = c->next;
    spool__front_destroy(c);
  }
  pthread_mutex_unlock(&p->lock);
  return s;
}

/* ---- stream release -------------------------------------------------------------------------- */

spool_status spool_stream_release(spool_pool *pool, cudaStream_t stream) {
  static const char ctx[] = "spool_stream_release";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  cudaStream_t key = key_of(stream);
  spool_status s = SPOOL_OK;
  pthread_mutex_lock(&pool->lock);
  spool__scache *c = spool__front_find(pool, key, thread_of(key));
  bool capturing = false;
  if (c) s = spool__stream_capturing(stream, &capturing, ctx);
  if (c && s == SPOOL_OK && capturing)
    s = spool__fail(SPOOL_ERR_INVALID, "%s: stream %p is being captured into a graph; release "
                    "it after the capture ends", ctx, (void *)stream);
  if (c && s == SPOOL_OK) {
    /* The caller is done with the stream: once its work is done, what it freed is every
     * stream's, and every all-free chunk goes back on it now. */
    flush_front(pool, c);
    cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
      s = spool__fail_cuda(err, "cudaStreamSynchronize", "%s: stream %p (what it freed stays "
                           "its own in the heap)", ctx, (void *)stream);
    } else {
      spool__heap_publish_own(pool, &c->pend);
      s = spool__heap_free_empty(pool, NULL, stream, 0, ctx);
    }
  }
  pthread_mutex_unlock(&pool->lock);
  if (SPOOL__UNLIKELY(pool->trace))
    spool__trace_point(pool, SPOOL_TRACE_STREAM_RELEASE, s, 0, stream);
  return s;
}

/* ---- trim ----------------------------------------------------------------------------------- */

spool_status spool_trim(spool_pool *pool, size_t keep_bytes) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "spool_trim: pool is NULL");
  spool_status s = spool__ipc_trim_check(pool); /* IPC pools never shrink */
  /* Cached blocks are in use as far as the pool knows: they go back first. */
  if (s == SPOOL_OK) s = spool__census_flush_all(pool, "spool_trim");
  if (s != SPOOL_OK) return s;
  enum cudaStreamCaptureMode mode;
  bool relaxed = spool__relaxed_enter(&mode); /* other threads' captures */
  cudaError_t err = cudaMemPoolTrimTo(pool->handle, keep_bytes);
  spool__relaxed_leave(relaxed, mode);
  if (err != cudaSuccess) {
    char keep[SPOOL__SIZE_TEXT];
    return spool__fail_cuda(err, "cudaMemPoolTrimTo", "spool_trim: keep %s on device %d",
                            spool__format_size(keep_bytes, keep), pool->device);
  }
  pthread_mutex_lock(&pool->lock);
  pool->c.trims++;
  pthread_mutex_unlock(&pool->lock);
  if (SPOOL__UNLIKELY(pool->trace))
    spool__trace_point(pool, SPOOL_TRACE_TRIM, SPOOL_OK, keep_bytes, NULL);
  return SPOOL_OK;
}

