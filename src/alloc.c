/* Where an allocation comes from and where a free goes: the stream-ordered paths over
 * cudaMallocFromPoolAsync / cudaFreeAsync, with tracking, poisoning, trim, and the words for a
 * free that must not reach the driver. */
#include "internal.h"
#include "trace_format.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char ALLOC[] = "spool_alloc";
static const char FREE[] = "spool_free";

#define POISON_NEW 0xA5  /* uninitialised reads show as 0xA5A5A5A5 */
#define POISON_FREED 0xDD /* reads after the free show as 0xDDDDDDDD */

/* ---- counters (under the lock) ---------------------------------------------------------- */

static void count_alloc(spool_pool *p, uint64_t size, bool bytes_known) {
  spool__counters *c = &p->c;
  c->allocs++;
  c->bytes_allocated += size;
  if (bytes_known) c->bytes_in_use += size;
  c->buffers_in_use++;
  spool__totals_add(p, bytes_known ? (int64_t)size : 0, 1);
}

static void count_free(spool_pool *p, uint64_t size) {
  spool__counters *c = &p->c;
  c->frees++;
  c->bytes_in_use -= size;
  /* track=off cannot tell a foreign pointer */
  int64_t buffers = c->buffers_in_use ? -1 : 0;
  c->buffers_in_use += (uint64_t)buffers;
  spool__totals_add(p, -(int64_t)size, buffers);
}

static void count_failure(spool_pool *p, spool_status s) {
  pthread_mutex_lock(&p->lock);
  p->c.alloc_failures++;
  if (s == SPOOL_ERR_OOM) p->c.ooms++;
  pthread_mutex_unlock(&p->lock);
}

/* ---- alloc ---------------------------------------------------------------------------------- */

spool_status spool__pool_alloc(spool_pool *p, void **out, size_t size, cudaStream_t stream) {
  return spool__pool_alloc_for(p, out, size, size, stream);
}

spool_status spool__pool_alloc_for(spool_pool *p, void **out, size_t size, size_t asked,
                                   cudaStream_t stream) {
  cudaError_t err = cudaMallocFromPoolAsync(out, size, p->handle, stream);
  if (err == cudaSuccess) return SPOOL_OK;
  if (err == cudaErrorMemoryAllocation) {
    spool__clear_cuda_error();
    return spool__alloc_after_oom(p, out, size, asked, stream);
  }
  char a[SPOOL__SIZE_TEXT];
  return spool__fail_cuda(err, "cudaMallocFromPoolAsync", "%s: %s on stream %p, device %d", ALLOC,
                          spool__format_size(size, a), (void *)stream, p->device);
}

/* Gives back a buffer the caller will never see (a later step failed). */
static void undo_alloc(void *ptr, cudaStream_t stream, spool_status s) {
  cudaError_t err = cudaFreeAsync(ptr, stream);
  if (err != cudaSuccess) spool__also_failed(s, err, "freeing the new buffer");
}

static spool_status poison(void *ptr, int value, size_t size, cudaStream_t stream,
                           const char *ctx) {
  if (size == 0) return SPOOL_OK;
  cudaError_t err = cudaMemsetAsync(ptr, value, size, stream);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemsetAsync", "%s: poisoning %p with 0x%02X", ctx, ptr,
                            (unsigned)value);
  return SPOOL_OK;
}

spool_status spool__poison_new(spool_pool *pool, void *ptr, size_t size, cudaStream_t stream) {
  return pool->cfg.poison ? poison(ptr, POISON_NEW, size, stream, ALLOC) : SPOOL_OK;
}

spool_status spool__poison_freed(spool_pool *pool, void *ptr, size_t size, cudaStream_t stream) {
  if (!pool->cfg.poison) return SPOOL_OK;
  spool_status s = poison(ptr, POISON_FREED, size, stream, FREE);
  return s == SPOOL_OK ? s : spool__append(s, "; %p stays allocated", ptr);
}

void spool__bury(spool_pool *pool, const spool__buffer *b, const spool__site *site) {
  spool__buffer dead = *b;
  dead.died = *site;
  pthread_mutex_lock(&pool->lock);
  spool__grave_bury(&pool->graves, &dead);
  pthread_mutex_unlock(&pool->lock);
}

/* Enters the new buffer in the table (unless track=off) and the counters; graph: it was
 * allocated during a capture (issue 5). */
static spool_status record(spool_pool *p, void *ptr, size_t size, cudaStream_t stream,
                           const spool__site *site, bool graph) {
  spool_status s = SPOOL_OK;
  spool_track track = p->cfg.track;
  /* Keeping the caller's site costs a copy; only the age's clock read is left to track=full. */
  spool__buffer b = {.ptr = (uintptr_t)ptr, .size = size, .stream = stream, .born = *site,
                     .graph = graph};
  if (track == SPOOL_TRACK_FULL) b.born_ns = spool__now_ns();
  b.seq = atomic_fetch_add(&p->seq, 1) + 1;
  pthread_mutex_lock(&p->lock);
  if (track != SPOOL_TRACK_OFF) {
    s = spool__table_insert(&p->live, &b);
    if (s == SPOOL_OK) spool__grave_forget(&p->graves, b.ptr); /* the address is live again */
  }
  if (s == SPOOL_OK) count_alloc(p, size, track != SPOOL_TRACK_OFF);
  pthread_mutex_unlock(&p->lock);
  return s;
}

spool_status spool__record_alloc(spool_pool *p, void *ptr, size_t size, cudaStream_t stream,
                                 const spool__site *site) {
  return record(p, ptr, size, stream, site, false);
}

/* Forced inline: spool__alloc_site's untraced path runs it without a call of its own. */
static SPOOL__INLINE spool_status alloc_site(spool_pool *pool, void **ptr, size_t size,
                                             cudaStream_t stream, const spool__site *site) {
  if (ptr) *ptr = NULL;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ALLOC);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", ALLOC);
  if (size == 0) return SPOOL_OK;

  /* issue 6: an imported pool, or a shareable one under capture (a flag test for others). The
   * stream's device is checked by the cache once per stream, and below for the uncached path. */
  spool_status s = pool->imported || pool->cfg.ipc != SPOOL_IPC_NONE
                       ? spool__ipc_alloc_check(pool, stream)
                       : SPOOL_OK;
  void *p = NULL;
  bool capturing = false;
  if (s == SPOOL_OK && spool__cacheable(pool, size)) {
    if (spool__cache_alloc(pool, &p, size, stream, site, &s)) {
      if (s != SPOOL_OK) count_failure(pool, s);
      else *ptr = p;
      return s;
    }
    capturing = true; /* the cache passes on only allocations under capture */
  } else if (s == SPOOL_OK) {
    s = spool__stream_capturing(stream, &capturing, ALLOC);
  }
  /* cudaStreamGetDevice breaks a capture (as the H200 showed): the device is checked only
   * outside one; the cache checked this stream before. */
  if (s == SPOOL_OK && !capturing) s = spool__stream_device_check(pool, stream, ALLOC);
  if (s == SPOOL_OK) s = spool__pool_alloc(pool, &p, size, stream);
  if (s == SPOOL_OK && pool->cfg.poison) {
    s = poison(p, POISON_NEW, size, stream, ALLOC);
    if (s != SPOOL_OK) undo_alloc(p, stream, s);
  }
  if (s == SPOOL_OK) {
    s = record(pool, p, size, stream, site, capturing);
    /* Untracked memory could never be freed through spool: give it back now. */
    if (s != SPOOL_OK) undo_alloc(p, stream, s);
  }
  if (s != SPOOL_OK) {
    count_failure(pool, s);
    return s;
  }
  *ptr = p;
  return SPOOL_OK;
}

/* The allocation and its trace record (trace.c). The capture query costs a driver call, paid
 * only while tracing. */
static SPOOL__NOINLINE spool_status alloc_traced(spool_pool *pool, void **ptr, size_t size,
                                                 cudaStream_t stream, const spool__site *site) {
  spool_status s = alloc_site(pool, ptr, size, stream, site);
  if (!ptr || size == 0) return s;
  spool__trace_ev ev = {.kind = SPOOL_TRACE_ALLOC, .status = s, .ptr = *ptr, .size = size,
                        .stream = stream, .site = site, .aux = site->batch};
  if (spool__capturing_quiet(stream, false)) ev.flags = SPOOL_TRACE_CAPTURING;
  spool__trace_event(pool, &ev);
  return s;
}

spool_status spool__alloc_site(spool_pool *pool, void **ptr, size_t size, cudaStream_t stream,
                               const spool__site *site) {
  if (pool && SPOOL__UNLIKELY(pool->trace)) return alloc_traced(pool, ptr, size, stream, site);
  return alloc_site(pool, ptr, size, stream, site);
}

spool_status spool_alloc(spool_pool *pool, void **ptr, size_t size, cudaStream_t stream) {
  static const spool__site none = {NULL, NULL, 0, 0};
  return spool__alloc_site(pool, ptr, size, stream, &none);
}

spool_status spool_alloc_at(spool_pool *pool, void **ptr, size_t size, cudaStream_t stream,
                            const char *file, int line) {
  spool__site site = {file, NULL, line, 0};
  return spool__alloc_site(pool, ptr, size, stream, &site);
}

spool_status spool_alloc_tagged(spool_pool *pool, void **ptr, size_t size, cudaStream_t stream,
                                const char *tag) {
  spool__site site = {NULL, tag, 0, 0};
  return spool__alloc_site(pool, ptr, size, stream, &site);
}

/* ---- a free that must not reach the driver ------------------------------------------------ */

/* Under the pool's lock: what its own table and graveyard know of the refused ptr, read in the
 * same critical section as the failed removal, so that another thread handed the same address
 * meanwhile cannot change the verdict. */
static void classify_own(spool_pool *p, uintptr_t ptr, spool__refusal *r) {
  p->c.bad_frees++;
  const spool__buffer *b = spool__table_containing(&p->live, ptr);
  if (b) r->inside = true, r->inside_buf = *b;
  b = spool__table_find(&p->graves.freed, ptr);
  if (b) r->freed = true, r->freed_buf = *b;
}

/* ---- free ----------------------------------------------------------------------------------- */

/* track=off: no table to check against; the driver judges the pointer. */
static spool_status free_untracked(spool_pool *p, void *ptr, cudaStream_t stream) {
  cudaError_t err = cudaFreeAsync(ptr, stream);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaFreeAsync", "%s: %p on stream %p (track=off: spool did "
                            "not check the pointer)", FREE, ptr, (void *)stream);
  pthread_mutex_lock(&p->lock);
  count_free(p, 0);
  pthread_mutex_unlock(&p->lock);
  return SPOOL_OK;
}

/* Under the pool's lock: poisons and frees b; on success buries it, on failure puts it back.
 * The lock is held across the CUDA calls: once the driver has the memory back, another thread
 * may be handed the same address and must find its slot empty; and if the driver refuses, the
 * record goes back into the slot just vacated, which no other thread can take. */
static cudaError_t release_locked(spool_pool *pool, spool__buffer *b, cudaStream_t stream,
                                  const spool__site *site, const char **api) {
  cudaError_t err = cudaSuccess;
  if (pool->cfg.poison) {
    err = cudaMemsetAsync((void *)b->ptr, POISON_FREED, (size_t)b->size, stream);
    if (err != cudaSuccess) *api = "cudaMemsetAsync (poisoning the freed buffer)";
  }
  if (err == cudaSuccess) err = cudaFreeAsync((void *)b->ptr, stream);
  if (err == cudaSuccess) {
    count_free(pool, b->size);
    b->died = *site;
    spool__grave_bury(&pool->graves, b);
  } else {
    (void)spool__table_insert(&pool->live, b); /* cannot fail: the removal left room */
  }
  return err;
}

/* issue 5: a free during a capture of memory the capture did not allocate. CUDA would refuse it
 * and invalidate the capture; spool refuses it first, and the capture goes on. */
static spool_status refuse_in_capture(void *ptr, cudaStream_t stream) {
  return spool__fail(SPOOL_ERR_INVALID,
                     "%s: %p was allocated outside the capture that stream %p is in; freeing "
                     "it inside would break the capture (a graph frees only what it "
                     "allocated): free it after cudaStreamEndCapture; nothing was freed", FREE,
                     ptr, (void *)stream);
}

/* The pool's own table (buffers of the uncached path), under its lock. 1 when ptr was there.
 * *capturing: whether stream is being captured (capture_check=on), for the caller too. */
static int free_tracked(spool_pool *pool, void *ptr, cudaStream_t stream, const spool__site *site,
                        spool_status *s, bool *capturing) {
  spool__buffer b;
  cudaError_t err = cudaSuccess;
  const char *api = "cudaFreeAsync";
  if (pool->cfg.capture_check) { /* about 20 ns, against the microsecond of cudaFreeAsync */
    *s = spool__stream_capturing(stream, capturing, FREE);
    if (*s != SPOOL_OK) return 1;
  }
  pthread_mutex_lock(&pool->lock);
  const spool__buffer *rec = *capturing ? spool__table_find(&pool->live, (uintptr_t)ptr) : NULL;
  if (rec && !rec->graph) {
    pthread_mutex_unlock(&pool->lock);
    *s = refuse_in_capture(ptr, stream);
    return 1;
  }
  int found = spool__table_remove(&pool->live, (uintptr_t)ptr, &b);
  if (found) err = release_locked(pool, &b, stream, site, &api);
  pthread_mutex_unlock(&pool->lock);
  if (!found || err == cudaSuccess) return found;
  char text[512];
  /* A poisoning memset already queued cannot be taken back: say what the buffer holds now. */
  bool poisoned = pool->cfg.poison && strcmp(api, "cudaFreeAsync") == 0;
  *s = spool__fail_cuda(err, api, "%s: %s on stream %p; it stays allocated%s", FREE,
                        spool__buffer_text(&b, text, sizeof text), (void *)stream,
                        poisoned ? ", but its contents are already overwritten with 0xDD" : "");
  return 1;
}

/* Says why ptr is refused: the facts from the pool's table, its fronts and the other pools,
 * then the words (refuse.c). */
static spool_status refuse(spool_pool *pool, void *ptr, const spool__site *site,
                           spool__refusal *r) {
  pthread_mutex_lock(&pool->lock);
  if (r->freed) pool->c.bad_frees++;
  else classify_own(pool, (uintptr_t)ptr, r);
  pthread_mutex_unlock(&pool->lock);
  if (!r->inside && pool->cfg.cache)
    r->inside = spool__cache_containing(pool, (uintptr_t)ptr, &r->inside_buf) &&
                r->inside_buf.ptr != (uintptr_t)ptr; /* at the start: another thread's, just now */
  if (!r->inside) r->other = spool__registry_owner(pool, (uintptr_t)ptr, &r->owner);
  return spool__refuse_free(pool, ptr, site, r);
}

/* Everything a free does that its stream's cache did not settle. Kept out of line so that the
 * hot path's frame stays small (this one holds messages and records). */
static SPOOL__NOINLINE spool_status free_slow(spool_pool *pool, void *ptr, cudaStream_t stream,
                                              const spool__site *site, spool__free_result fr,
                                              const spool__buffer *dead) {
  spool_status s = SPOOL_OK;
  spool__buffer moved;
  bool capturing = false;
  if (fr == SPOOL__FREE_PASS && pool->cfg.track != SPOOL_TRACK_OFF &&
      free_tracked(pool, ptr, stream, site, &s, &capturing))
    return s;
  /* issue 5: a live buffer of another stream's cache, freed during a capture: never a graph
   * allocation (those bypass the caches), so refused as the table's are. Moved into this
   * stream's cache instead, it would be handed out again before the graph ever ran. */
  if (capturing && fr == SPOOL__FREE_PASS && pool->cfg.cache &&
      spool__cache_containing(pool, (uintptr_t)ptr, &moved) && moved.ptr == (uintptr_t)ptr)
    return refuse_in_capture(ptr, stream);
  if (fr == SPOOL__FREE_PASS && pool->cfg.cache) {
    fr = spool__cache_free_moved(pool, ptr, stream, site, &s, &moved);
    dead = &moved;
  }
  if (fr == SPOOL__FREE_DONE) return s;
  /* track=off keeps no table, but another pool's may know the pointer: handed to the driver
   * through this pool, the owner would report a leak of a buffer already gone. */
  spool__owner owner;
  if (fr == SPOOL__FREE_PASS && pool->cfg.track == SPOOL_TRACK_OFF &&
      !spool__registry_owner_of_start(pool, (uintptr_t)ptr, &owner))
    return free_untracked(pool, ptr, stream);
  spool__refusal r = {0};
  r.freed = fr == SPOOL__FREE_CACHED;
  if (r.freed) r.freed_buf = *dead;
  return refuse(pool, ptr, site, &r);
}

/* Where a free goes: the stream's cache, the pool's table, another stream's cache; else it is
 * refused. With track=off the driver judges what no cache knows. Inline in spool_free, whose
 * cache hit must cost no more than it did before the hand-off check came in front of it. */
static inline spool_status free_plain(spool_pool *pool, void *ptr, cudaStream_t stream,
                                      const spool__site *site) {
  spool_status s = SPOOL_OK;
  spool__buffer dead; /* filled only when ptr sits freed in a cache */
  spool__free_result fr = SPOOL__FREE_PASS;
  if (pool->cfg.cache) fr = spool__cache_free(pool, ptr, stream, site, &s, &dead);
  if (fr == SPOOL__FREE_DONE) return s;
  return free_slow(pool, ptr, stream, site, fr, &dead);
}

spool_status spool__free_plain(spool_pool *pool, void *ptr, cudaStream_t stream,
                               const spool__site *site) {
  return free_plain(pool, ptr, stream, site);
}

/* After the arguments were checked: a buffer with recorded streams (spool_record_stream) goes
 * the hand-off way, the rest the plain way. Forced inline, as alloc_site is. */
static SPOOL__INLINE spool_status free_site(spool_pool *pool, void *ptr, cudaStream_t stream,
                                            const spool__site *site) {
  spool_status s;
  if (atomic_load_explicit(&pool->handoff_any, memory_order_relaxed) &&
      spool__handoff_free(pool, ptr, stream, site, &s))
    return s;
  return free_plain(pool, ptr, stream, site);
}

/* The free and its trace record, numbered before the free (see spool__trace_ev). */
static SPOOL__NOINLINE spool_status free_traced(spool_pool *pool, void *ptr, cudaStream_t stream,
                                                const spool__site *site) {
  spool__trace_ev ev = {.kind = SPOOL_TRACE_FREE, .seq = spool__trace_seq(pool), .ptr = ptr,
                        .stream = stream, .site = site};
  if (spool__capturing_quiet(stream, false)) ev.flags = SPOOL_TRACE_CAPTURING;
  ev.status = free_site(pool, ptr, stream, site);
  spool__trace_event(pool, &ev);
  return ev.status;
}

spool_status spool__free_site(spool_pool *pool, void *ptr, cudaStream_t stream,
                              const spool__site *site) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", FREE);
  if (!ptr) return SPOOL_OK;
  if (SPOOL__UNLIKELY(pool->trace)) return free_traced(pool, ptr, stream, site);
  return free_site(pool, ptr, stream, site);
}

spool_status spool_free(spool_pool *pool, void *ptr, cudaStream_t stream) {
  static const spool__site none = {NULL, NULL, 0, 0};
  return spool__free_site(pool, ptr, stream, &none);
}

spool_status spool_free_at(spool_pool *pool, void *ptr, cudaStream_t stream, const char *file,
                           int line) {
  spool__site site = {file, NULL, line, 0};
  return spool__free_site(pool, ptr, stream, &site);
}

/* ---- trim ----------------------------------------------------------------------------------- */

spool_status spool_trim(spool_pool *pool, size_t keep_bytes) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "spool_trim: pool is NULL");
  spool_status s = spool__ipc_trim_check(pool); /* issue 6: IPC pools never shrink */
  /* Cached blocks are in use as far as the pool knows: they go back first. */
  if (s == SPOOL_OK) s = spool__cache_flush_all(pool, "spool_trim");
  if (s != SPOOL_OK) return s;
  enum cudaStreamCaptureMode mode;
  bool relaxed = spool__relaxed_enter(&mode); /* issue 5: other threads' captures */
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
