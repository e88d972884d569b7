/* The hot path: where an allocation comes from and where a free goes.
 *
 * A block freed on stream S may be handed out again on S at once: stream order makes the new
 * owner's work run after the old owner's. So each stream keeps its last freed blocks ready in
 * bins by size class (its front, front.h), and an allocation that finds one of its class there
 * makes no CUDA call (the capture check aside) and takes only that stream's lock. Threads find
 * their stream's front through a few thread-local slots, so the hit path touches no memory that
 * threads on other streams write.
 *
 * - A miss puts the stream's stale front blocks into the heap (chunks.c: pending on S, merged
 *   with their free neighbours) and takes a block of the size asked from the heap: the front
 *   holds only what a stream repeats, never a cover of every size it has seen. A free that
 *   would take the front past front_limit goes into the heap at the stream's next miss, which
 *   takes the pool's lock anyway (it waits in the front's outbox; the free that finds the
 *   outbox full puts it all in): a free takes no lock but its stream's. One block of the size
 *   asked last is kept in the front, until the stream's next miss.
 * - A brief stream (front.h: its buffers live through few of its allocations, few at once)
 *   keeps its working set in its front, up to its peak in use, and takes front blocks up to
 *   128 times the size asked: a stream of ever-changing sizes hits on every pair.
 * - Other streams reach S's memory only through the heap, after S's fence (chunks.c).
 * - Under stream capture the heap is bypassed: a reused pointer would be baked into the graph.
 *   Blocks allocated under capture go through the uncached path (cudaMallocFromPoolAsync, the
 *   pool's table); a heap buffer freed under capture is refused (CUDA would refuse it too, and
 *   break the capture).
 * - The legacy stream has two handles (NULL and cudaStreamLegacy): one front.
 *   cudaStreamPerThread is one handle for a different stream in every thread: one front per
 *   thread.
 * - Counters are per stream, summed for spool_stats (census.c). Each stream publishes its share
 *   of the pool-wide in-use totals at once when it grows past what it published or falls more
 *   than PUBLISH_SLACK below it: so the pool-wide peak is exact for one stream, and with
 *   several streams counts each at most 1 MiB high.
 *
 * A free goes, in order: to the hand-off (a buffer with recorded streams), the freeing
 * stream's front, the pool's table (the uncached path), another stream's front; else it is
 * refused, with the facts for refuse.c's words.
 *
 * Locks: the pool's lock may be held when a front's lock is taken; a thread holding a front
 * only tries the pool's lock (pthread_mutex_trylock), and gives the front up before it waits
 * for it. The heap is under the pool's lock. */
#include "capture.h"
#include "front.h"
#include "trace_format.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char ALLOC[] = "spool_alloc";
static const char FREE[] = "spool_free";

/* Whether spool_alloc/spool_free may use the heap for size bytes (asked on every allocation). */
static inline bool cacheable(const spool_pool *pool, size_t size) {
  return pool->cfg.cache && size <= pool->cfg.heap_max_block;
}

/* Where a stream's front leaves a free. DONE: taken, *s says how it went; PASS: not a block of
 * the stream's front, look further; CACHED: ptr is already freed and sits in a front (*dead is
 * its record). */
typedef enum { SPOOL__FREE_DONE, SPOOL__FREE_PASS, SPOOL__FREE_CACHED } spool__free_result;

#define POISON_NEW 0xA5  /* uninitialised reads show as 0xA5A5A5A5 */
#define POISON_FREED 0xDD /* reads after the free show as 0xDDDDDDDD */

/* ---- the heap's bookkeeping, inline: a miss and a free into the heap each make one --------- */

/* Every fence_every heap operations on own's stream, the fence decision (query the last fence,
 * record the next). Under the pool's lock. */
static inline void heap_stream_op(spool_pool *p, spool__pending *own, cudaStream_t stream) {
  if (++own->ops >= p->cfg.fence_every) spool__heap_fence_now(p, own, stream);
}

/* Every SPOOL__IDLE_SCAN heap allocations, a look for idle chunks to give back on stream. Under
 * the pool's lock. */
static inline void heap_idle(spool_pool *p, spool__pending *own, cudaStream_t stream) {
  if (p->heap.allocs - p->heap.idle_scan >= SPOOL__IDLE_SCAN)
    spool__heap_idle_scan(p, own, stream);
}

/* ---- counters (under the lock) ---------------------------------------------------------- */

static void count_alloc(spool_pool *p, uint64_t size, bool bytes_known) {
  spool__counters *c = &p->c;
  c->allocs++;
  c->bytes_allocated += size;
  if (bytes_known) c->bytes_in_use += size;
  c->buffers_in_use++;
  spool__totals_add(p, bytes_known ? (int64_t)size : 0, 1);
}

static void count_table_free(spool_pool *p, uint64_t size) {
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

static spool_status pool_alloc_for(spool_pool *p, void **out, size_t size, size_t asked,
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

static spool_status pool_alloc(spool_pool *p, void **out, size_t size, cudaStream_t stream) {
  return pool_alloc_for(p, out, size, size, stream);
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

static spool_status poison_new(spool_pool *pool, void *ptr, size_t size,
                               cudaStream_t stream) {
  return pool->cfg.poison ? poison(ptr, POISON_NEW, size, stream, ALLOC) : SPOOL_OK;
}

static spool_status poison_freed(spool_pool *pool, void *ptr, size_t size,
                                 cudaStream_t stream) {
  if (!pool->cfg.poison) return SPOOL_OK;
  spool_status s = poison(ptr, POISON_FREED, size, stream, FREE);
  return s == SPOOL_OK ? s : spool__append(s, "; %p stays allocated", ptr);
}

/* Enters the new buffer in the table (unless track=off) and the counters; graph: it was
 * allocated during a capture. */
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
  if (track != SPOOL_TRACK_OFF) s = spool__table_insert(&p->live, &b, NULL);
  if (s == SPOOL_OK) count_alloc(p, size, track != SPOOL_TRACK_OFF);
  pthread_mutex_unlock(&p->lock);
  return s;
}

spool_status spool__record_alloc(spool_pool *p, void *ptr, size_t size, cudaStream_t stream,
                                 const spool__site *site) {
  return record(p, ptr, size, stream, site, false);
}


/* ---- allocation ----------------------------------------------------------------------------- */

/* The memory tool's heap of b's chunk, NULL when the tool was not told of it. */
static inline const void *heap_of(const spool__buffer *b) {
  return b->blk ? b->blk->chunk->nvtx : NULL;
}

/* Under c's lock: b becomes the caller's buffer. */
static inline void make_live(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                             unsigned cls, cudaStream_t stream, const spool__site *site) {
  b->state = SPOOL__LIVE;
  b->size = size;
  b->cls = (uint16_t)cls; /* its front bin once freed */
  b->stream = stream;
  b->seq = next_seq(p, c);
  b->born = *site;
  b->born_ns = p->cfg.track == SPOOL_TRACK_FULL ? spool__now_ns() : 0;
  if (spool__nvtx_on(p)) spool__nvtx_region_slow(b->blk->chunk->nvtx, b->ptr, size);
  c->c.allocs++;
  b->born_at = c->c.allocs; /* its life is counted from here (count_life) */
  c->c.bytes_allocated += size;
  c->c.bytes_in_use += size;
  c->c.buffers_in_use++;
  if (c->c.bytes_in_use > c->high) c->high = c->c.bytes_in_use;
  if (c->c.buffers_in_use > c->high_buffers) c->high_buffers = c->c.buffers_in_use;
  after_alloc(p, c);
}

/* The first non-empty front bin in (cls, cls + span], or 0. */
static inline unsigned bin_above(const spool__scache *c, unsigned cls, unsigned span) {
  unsigned last = cls + span < SPOOL__CLASSES ? cls + span : SPOOL__CLASSES - 1;
  for (unsigned k = cls + 1; k <= last;) {
    uint64_t m = c->front_map[k / 64] >> (k % 64);
    if (m) {
      k += (unsigned)__builtin_ctzll(m);
      return k <= last ? k : 0;
    }
    k = (k / 64 + 1) * 64;
  }
  return 0;
}

/* pop's search past the exact bin. */
static SPOOL__NOINLINE spool__buffer *pop_above(const spool_pool *p, spool__scache *c,
                                               unsigned cls, unsigned *from) {
  bool wide = brief(p, c);
  unsigned k = bin_above(c, cls, wide ? SPOOL__BRIEF_FIT_CLASSES : SPOOL__FIT_CLASSES);
  if (!k) return NULL;
  if (wide) *from = k;
  return bin_pop(c, k);
}

/* The most recently freed front block of class cls if it holds size bytes (a class spans up to
 * 1/8 of its size), else of the nearest class above within FIT_CLASSES (BRIEF_FIT_CLASSES for
 * a brief stream); taken out of its bin, whose class *from is: the bin it goes back to once
 * freed. A stream files a block by the size it asked, so that a repeat of that size finds it; a
 * brief one, which takes blocks far larger, by the bin it came from, so that a larger request
 * still finds it. NULL when there is none. Under c's lock. */
static SPOOL__INLINE spool__buffer *pop(const spool_pool *p, spool__scache *c, unsigned cls,
                                        size_t size, unsigned *from) {
  const spool__bin *bin = &c->bins[cls];
  *from = cls;
  if (bin->count && ((spool__buffer *)bin->items[bin->count - 1])->bytes >= size)
    return bin_pop(c, cls);
  return pop_above(p, c, cls, from);
}

/* Under c's lock: the front block b becomes the caller's buffer. */
static inline void take_hit(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                            unsigned cls, cudaStream_t stream, const spool__site *site) {
  c->c.hits++;
  c->c.bytes_cached -= b->bytes;
  make_live(p, c, b, size, cls, stream, site);
}

/* A hit with poisoning: the memset runs without the lock, the block out of its bin meanwhile.
 * If the memset cannot be queued the block goes back to its bin, which it just left: the push
 * needs no new memory. */
static spool_status hit_poisoned(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                                 unsigned cls, cudaStream_t stream, const spool__site *site) {
  spool_status s = poison_new(p, (void *)b->ptr, size, stream);
  front_lock(c);
  if (s == SPOOL_OK) take_hit(p, c, b, size, cls, stream, site);
  else (void)bin_push(c, b->cls, b);
  front_unlock(c);
  return s;
}


/* A chunk from the pool for a block of need bytes: the band's chunk, or near a limit just the
 * block (a request that fits what the device or max_size allows never fails for rounding).
 * The out-of-memory policy runs on the second. On SPOOL_ERR_OOM the policy has flushed every
 * front into the heap, so the heap is asked once more: what an OOM handler freed is there. */
static spool_status new_chunk(spool_pool *p, spool__scache *c, const spool__need *n,
                              size_t size, cudaStream_t stream, spool__block **out) {
  uint64_t need = n->bytes, bytes = spool__chunk_size(need);
  void *u = NULL;
  bool malloced;
  spool_status s = spool__chunk_get(p, &u, bytes, stream, &malloced, ALLOC);
  if (s != SPOOL_OK && s != SPOOL_ERR_OOM) return s;
  if (s == SPOOL_ERR_OOM) {
    bytes = need;
    malloced = false;
    s = pool_alloc_for(p, &u, (size_t)need, size, stream);
  }
  pthread_mutex_lock(&p->lock);
  if (s == SPOOL_ERR_OOM) *out = spool__heap_fit(p, &c->pend, n, true);
  else if (s == SPOOL_OK)
    *out = spool__heap_add_chunk(p, &c->pend, (uintptr_t)u, bytes, need, malloced);
  pthread_mutex_unlock(&p->lock);
  if (s == SPOOL_ERR_OOM) return *out ? SPOOL_OK : s;
  if (s == SPOOL_OK && !*out) {
    s = spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the records of a new heap "
                    "chunk", ALLOC);
    const char *api;
    cudaError_t err = spool__chunk_put((uintptr_t)u, malloced, stream, &api);
    if (err != cudaSuccess) spool__also_failed(s, err, "giving the chunk back");
  }
  return s;
}

/* Enters the heap block blk in c's index as the caller's buffer (its record is the block's).
 * Under the pool's lock and c's; on failure the caller gives the block back (settle). */
static spool_status adopt_held(spool_pool *p, spool__scache *c, spool__block *blk, size_t size,
                               unsigned cls, cudaStream_t stream, const spool__site *site) {
  spool_status s = spool__index_insert(&c->blocks, blk->addr, blk);
  if (s == SPOOL_OK) {
    spool__buffer *b = &blk->buf; /* make_live and the free set the rest */
    b->ptr = blk->addr;
    b->bytes = blk->bytes;
    b->blk = blk;
    b->graph = false;
    c->c.misses++;
    make_live(p, c, b, size, cls, stream, site);
  }
  return s;
}

/* After adopt_held, under the pool's lock only: the block back into the heap if it failed (s),
 * else, with fence, the brief stream's fence. A brief stream (front.h) makes few heap
 * operations, so what it leaves pending in the heap (a new chunk's remainder, blocks out of its
 * front) would wait long for the fence every fence_every of them: its miss records the fence
 * now, and the other streams may take those ranges once it has passed. */
static void settle(spool_pool *p, spool__scache *c, spool__block *blk, cudaStream_t stream,
                   spool_status s, bool fence) {
  if (s != SPOOL_OK) spool__heap_release(p, &c->pend, blk);
  else if (fence) spool__heap_fence_now(p, &c->pend, stream);
}

/* The same for a block placed outside the locks (a new chunk, poisoning): takes it, or gives
 * the block back when poisoning failed (s). */
static spool_status adopt(spool_pool *p, spool__scache *c, spool__block *blk, size_t size,
                          unsigned cls, cudaStream_t stream, const spool__site *site,
                          spool_status s) {
  bool fence = false;
  pthread_mutex_lock(&p->lock);
  if (s == SPOOL_OK) {
    front_lock(c);
    fence = brief(p, c);
    s = adopt_held(p, c, blk, size, cls, stream, site);
    front_unlock(c);
  }
  settle(p, c, blk, stream, s, fence);
  pthread_mutex_unlock(&p->lock);
  return s;
}

/* A front miss: the front's stale blocks go into the heap, and the heap serves the request
 * (from the stream's own free ranges, the shared ones, those another stream's fence has just
 * made shared, the rest of the front merged in, or a new chunk). The front stays held from
 * the spill to the new block's record: the pool's lock, held throughout, keeps every other
 * thread that could want it (a free from another stream, a stats read) waiting anyway. */
static SPOOL__NOINLINE spool_status miss(spool_pool *p, spool__scache *c, void **ptr,
                                         size_t size, unsigned cls, cudaStream_t stream,
                                         const spool__site *site) {
  const spool__need need = spool__need_of(size, cls);
  spool__heap_fit_prefetch(p, &need);
  pthread_mutex_lock(&p->lock);
  spool__heap_fit_prefetch_ranges(p, &need); /* they load during the front's work below */
  held h = enter(c); /* after the pool's lock: a thread taking the front back waits outside */
  const bool brief_miss = brief(p, c); /* a spill leaves it as it is */
  c->pend.ops += spool__front_drain(p, c);
  spool__front_spill_due(p, c, brief_miss);
  spool__front_spill_below(p, c, cls, brief_miss);
  heap_stream_op(p, &c->pend, stream);
  spool__block *blk = spool__heap_fit(p, &c->pend, &need, false);
  if (!blk && spool__heap_publish_ready(p)) blk = spool__heap_fit(p, &c->pend, &need, false);
  if (!blk && brief_miss) blk = spool__heap_fit_leftover(p, &c->pend, &need);
  if (!blk && spool__front_spill_held(p, c, 0)) /* before a new chunk: the rest may merge */
    blk = spool__heap_fit(p, &c->pend, &need, false);
  heap_idle(p, &c->pend, stream);
  spool_status s = SPOOL_OK;
  bool taken = blk && !p->cfg.poison; /* the common case: one critical section */
  if (taken) s = adopt_held(p, c, blk, size, cls, stream, site);
  leave(c, h);
  if (taken) settle(p, c, blk, stream, s, brief_miss);
  pthread_mutex_unlock(&p->lock);
  if (!taken) {
    if (!blk) s = new_chunk(p, c, &need, size, stream, &blk);
    if (s != SPOOL_OK) return s;
    s = adopt(p, c, blk, size, cls, stream, site,
              poison_new(p, (void *)blk->addr, size, stream));
  }
  if (s == SPOOL_OK) *ptr = (void *)blk->addr;
  return s;
}

/* The stream must be of the pool's device: asked once per front for a created stream, whose
 * device never changes, and every time for the handles that mean "the current device's
 * stream". */
static inline spool_status device_ok(spool_pool *p, spool__scache *c, cudaStream_t stream) {
  bool special = spool__current_device_stream(stream);
  if (!special && atomic_load_explicit(&c->device_checked, memory_order_relaxed)) return SPOOL_OK;
  spool_status s = spool__stream_device_check(p, stream, ALLOC);
  if (s == SPOOL_OK && !special) atomic_store_explicit(&c->device_checked, true,
                                                       memory_order_relaxed);
  return s;
}

/* The front's allocation: true when it answered (*s), false for a capture, which it passes on.
 * Forced inline into alloc_site: a hit is one straight line from the API's entry to its return;
 * a miss, poisoning and a failed check leave it for functions of their own. */
static SPOOL__INLINE bool front_alloc(spool_pool *p, void **ptr, size_t size,
                                      cudaStream_t stream, const spool__site *site,
                                      spool_status *s) {
  spool__scache *c;
  *s = cache_of(p, stream, &c, ALLOC);
  if (SPOOL__UNLIKELY(*s != SPOOL_OK)) return true;
  held h = enter(c);
  unsigned cls = spool__class_of(size);
  if (p->cfg.capture_check) {
    /* The block a hit would take has a cold record: its load runs during the driver's query. */
    const spool__bin *top = &c->bins[cls];
    if (top->count) __builtin_prefetch(top->items[top->count - 1], 1);
    bool capturing = false;
    *s = spool__stream_capturing(stream, &capturing, ALLOC);
    if (SPOOL__UNLIKELY(*s != SPOOL_OK || capturing)) {
      leave(c, h);
      return *s != SPOOL_OK;
    }
  }
  *s = device_ok(p, c, stream); /* after the capture check: it would break a capture */
  if (SPOOL__UNLIKELY(*s != SPOOL_OK)) {
    leave(c, h);
    return true;
  }
  c->last_cls = cls;
  unsigned from;
  spool__buffer *b = pop(p, c, cls, size, &from);
  uintptr_t u = b ? b->ptr : 0; /* read under the lock */
  if (b && !p->cfg.poison) {
    take_hit(p, c, b, size, from, stream, site);
    leave(c, h);
    *ptr = (void *)u;
    return true;
  }
  leave(c, h);
  if (!b) {
    *s = miss(p, c, ptr, size, cls, stream, site);
    return true;
  }
  *s = hit_poisoned(p, c, b, size, from, stream, site);
  if (*s == SPOOL_OK) *ptr = (void *)u;
  return true;
}

/* Forced inline: spool__alloc_site's untraced path runs it without a call of its own. */
static SPOOL__INLINE spool_status alloc_site(spool_pool *pool, void **ptr, size_t size,
                                             cudaStream_t stream, const spool__site *site) {
  if (ptr) *ptr = NULL;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ALLOC);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", ALLOC);
  if (size == 0) return SPOOL_OK;

  /* an imported pool, or a shareable one under capture (a flag test for others). The
   * stream's device is checked by the cache once per stream, and below for the uncached path. */
  spool_status s = pool->imported || pool->cfg.ipc != SPOOL_IPC_NONE
                       ? spool__ipc_alloc_check(pool, stream)
                       : SPOOL_OK;
  void *p = NULL;
  bool capturing = false;
  if (s == SPOOL_OK && cacheable(pool, size)) {
    if (front_alloc(pool, &p, size, stream, site, &s)) {
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
  if (s == SPOOL_OK) s = pool_alloc(pool, &p, size, stream);
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


/* ---- free --------------------------------------------------------------------------------- */

/* Under c's lock: the live buffer b is freed, as the counters and memory tools see it. */
static SPOOL__INLINE void count_free(spool_pool *p, spool__scache *c, const spool__buffer *b) {
  if (spool__nvtx_on(p)) spool__nvtx_release_slow(p, c->stream, heap_of(b), b->ptr, b->size);
  c->c.frees++;
  c->c.bytes_in_use -= b->size;
  c->c.buffers_in_use--;
  after_free(p, c);
}

/* Under c's lock: the live block b is freed at site, wherever it goes next (front bin, outbox,
 * quarantine or heap): marked freed, its site kept, the counters moved. */
static SPOOL__INLINE void mark_freed(spool_pool *p, spool__scache *c, spool__buffer *b,
                                     const spool__site *site) {
  b->state = SPOOL__CACHED;
  b->died = *site;
  count_free(p, c, b);
}

/* Whether c's front takes one more block b: within its bound (front_bound), or, into an empty
 * front, a block of the size the stream allocated last (a loop of one size, however large,
 * stays on the hit path). A front past its bound goes back into the heap whole at the stream's
 * next miss: a stream of ever-changing sizes does not hold large blocks idle. */
static SPOOL__INLINE bool front_admits(const spool_pool *p, const spool__scache *c,
                                       const spool__buffer *b) {
  uint64_t bytes = c->c.bytes_cached + b->bytes;
  return bytes <= p->cfg.front_limit || /* the common case asks no brevity */
         bytes <= front_bound(p, c) || (c->front_blocks == 0 && b->cls == c->last_cls);
}

/* Under c's lock: the live block b, freed on c's stream, goes into the front bin of the size it
 * was asked for (a repeat of that size finds it). False when the bin cannot grow. */
static SPOOL__INLINE bool to_bin(spool_pool *p, spool__scache *c, spool__buffer *b,
                          const spool__site *site) {
  if (!bin_push(c, b->cls, b)) return false;
  b->freed_at = ++c->tick;
  c->c.bytes_cached += b->bytes;
  mark_freed(p, c, b, site);
  return true;
}

/* Under c's lock: the live block b, freed on c's stream past its front's bound, waits in the
 * outbox for the stream's next miss (there is room: the caller looked). */
static SPOOL__INLINE void to_outbox(spool_pool *p, spool__scache *c, spool__buffer *b,
                                    const spool__site *site) {
  mark_freed(p, c, b, site);
  c->outbox[c->outbox_count++] = b;
  c->outbox_bytes += b->bytes;
}

/* Whether the block b may wait in c's outbox: room, the pool's lock not held already (the free
 * might as well go into the heap), and not a block whose free records its fence at once. */
static SPOOL__INLINE bool outbox_admits(const spool_pool *p, const spool__scache *c,
                                        const spool__buffer *b, bool pool_locked) {
  return c->outbox_count < SPOOL__OUTBOX && !pool_locked &&
         !(p->cfg.fence_bytes && b->bytes >= p->cfg.fence_bytes);
}

/* Under c's lock, held as h (left here): the live block b goes into the heap, pending on c's
 * stream, and the outbox with it. With the pool's lock held (pool_locked) it is taken no second
 * time. Until it is in
 * the graveyard its record stays in c's index, freed: a concurrent free of the same pointer,
 * which looks in the fronts and then in the graveyard, finds it in one of them. */
static SPOOL__NOINLINE void to_heap(spool_pool *p, spool__scache *c, spool__buffer *b,
                                    cudaStream_t stream, const spool__site *site, held h,
                                    bool pool_locked) {
  mark_freed(p, c, b, site);
  /* A try keeps the front held when the pool's lock is free (the common case); a wait gives the
   * front up first (the order of the locks). */
  if (!pool_locked && pthread_mutex_trylock(&p->lock) != 0) {
    leave(c, h);
    pthread_mutex_lock(&p->lock);
    h = enter(c);
  }
  /* The neighbours the release may merge with are cold: they load during the index's work. */
  __builtin_prefetch(b->blk->prev);
  __builtin_prefetch(b->blk->next);
  spool__index_remove(&c->blocks, b->ptr);
  c->pend.ops += spool__front_drain(p, c); /* with the lock taken, the outbox goes too */
  leave(c, h);
  uint64_t bytes = b->bytes;
  spool__front_bury(p, c, b); /* b's record goes with its block */
  if (p->cfg.fence_bytes && bytes >= p->cfg.fence_bytes)
    spool__heap_fence_now(p, &c->pend, stream); /* the decision now, not in a few operations */
  else
    heap_stream_op(p, &c->pend, stream);
  if (!pool_locked) pthread_mutex_unlock(&p->lock);
}

/* ---- quarantine (poison=on) ---------------------------------------------------------------- */

#define QUAR_OUT_MAX 8 /* blocks one free lets out at most: bounded work per call */

/* Under c's lock, held as h (left here): the freed (and poisoned) block b waits in c's
 * quarantine; what is past its bounds, oldest first, goes into the heap. */
static void quarantine_in(spool_pool *p, spool__scache *c, spool__buffer *b, cudaStream_t stream,
                          const spool__site *site, held h, bool pool_locked) {
  if (c->quar_count == c->quar_cap && !spool__quar_grow(c)) {
    to_heap(p, c, b, stream, site, h, pool_locked); /* no host memory: no quarantine */
    return;
  }
  b->freed_at = ++c->tick;
  c->quar[(c->quar_head + c->quar_count++) % c->quar_cap] = b->ptr;
  c->quar_bytes += b->bytes;
  mark_freed(p, c, b, site);
  uintptr_t out[QUAR_OUT_MAX];
  unsigned n = 0;
  while (n < QUAR_OUT_MAX && c->quar_count &&
         (c->quar_count > p->cfg.quarantine || c->quar_bytes > SPOOL_QUARANTINE_BYTES))
    out[n++] = spool__quar_pop(c);
  leave(c, h);
  if (!n) return;
  if (!pool_locked) pthread_mutex_lock(&p->lock);
  front_lock(c);
  for (unsigned i = 0; i < n; i++) spool__quar_release(p, c, out[i]);
  heap_stream_op(p, &c->pend, stream);
  front_unlock(c);
  if (!pool_locked) pthread_mutex_unlock(&p->lock);
}

/* A free during a capture of memory the capture did not allocate. CUDA would refuse it
 * and invalidate the capture; spool refuses it first, and the capture goes on. */
static spool_status refuse_in_capture(void *ptr, cudaStream_t stream) {
  return spool__fail(SPOOL_ERR_INVALID,
                     "%s: %p was allocated outside the capture that stream %p is in; freeing "
                     "it inside would break the capture (a graph frees only what it "
                     "allocated): free it after cudaStreamEndCapture; nothing was freed", FREE,
                     ptr, (void *)stream);
}

/* free_live's rare cases: capture, poisoning. */
static SPOOL__NOINLINE spool_status free_live_slow(spool_pool *p, spool__scache *c,
                                                  spool__buffer *b, cudaStream_t stream,
                                                  const spool__site *site, bool capturing,
                                                  held h, bool pool_locked) {
  if (capturing) {
    /* CUDA refuses to free in a graph what the graph did not allocate, and the refusal breaks
     * the capture; the heap would hand the block out before the graph ever ran. */
    leave(c, h);
    return refuse_in_capture((void *)b->ptr, stream);
  }
  spool_status s = poison_freed(p, (void *)b->ptr, (size_t)b->size, stream);
  if (s != SPOOL_OK) {
    leave(c, h);
    return s;
  }
  if (p->cfg.poison && p->cfg.quarantine) {
    quarantine_in(p, c, b, stream, site, h, pool_locked);
    return SPOOL_OK;
  }
  if (front_admits(p, c, b) && to_bin(p, c, b, site)) {
    leave(c, h);
    return SPOOL_OK;
  }
  to_heap(p, c, b, stream, site, h, pool_locked);
  return SPOOL_OK;
}

/* Frees the live block b of c's table: into the front, or past its bound (or without host
 * memory for its bin) into the outbox, or when that is full into the heap. c is held as h;
 * leaves it. */
static SPOOL__INLINE spool_status free_live(spool_pool *p, spool__scache *c, spool__buffer *b,
                                     cudaStream_t stream, const spool__site *site,
                                     bool capturing, held h, bool pool_locked) {
  count_life(c, b); /* before freed_at takes born_at's place */
  if (SPOOL__UNLIKELY(capturing || p->cfg.poison))
    return free_live_slow(p, c, b, stream, site, capturing, h, pool_locked);
  if (front_admits(p, c, b) && to_bin(p, c, b, site)) {
    leave(c, h);
    return SPOOL_OK;
  }
  if (outbox_admits(p, c, b, pool_locked)) {
    to_outbox(p, c, b, site);
    leave(c, h);
    return SPOOL_OK;
  }
  to_heap(p, c, b, stream, site, h, pool_locked);
  return SPOOL_OK;
}

/* Capture state of the freeing stream (capture_check=on). Every block the heap holds was
 * allocated outside any capture (captures bypass the heap), so a heap buffer freed inside one
 * must be refused: taken into the front, it would be handed out again before the graph ever
 * ran, and each replay would write into its next owner's data. That costs a second driver call
 * per pair; capture_check=off drops both. */
static spool_status free_capturing(const spool_pool *p, cudaStream_t stream, bool *capturing) {
  *capturing = false;
  if (!p->cfg.capture_check) return SPOOL_OK;
  return spool__stream_capturing(stream, capturing, FREE);
}

/* The freeing stream's front takes ptr if it holds it live (SPOOL__FREE_DONE, *s), or tells
 * that it holds it freed (a copy of its record in *dead) or not at all. Forced inline into
 * free_plain, as front_alloc is. */
static SPOOL__INLINE spool__free_result front_free(spool_pool *p, void *ptr, cudaStream_t stream,
                                                   const spool__site *site, spool_status *s,
                                                   spool__buffer *dead) {
  spool__scache *c;
  bool capturing;
  *s = cache_of(p, stream, &c, FREE);
  if (*s != SPOOL_OK) return SPOOL__FREE_DONE;
  held h = enter(c);
  /* The index slot and the record are cold lines: their loads run during the capture query. */
  spool__buffer *b = front_rec(c, (uintptr_t)ptr);
  if (b && p->cfg.capture_check) __builtin_prefetch(b, 1);
  *s = free_capturing(p, stream, &capturing);
  if (*s != SPOOL_OK) {
    leave(c, h);
    return SPOOL__FREE_DONE;
  }
  if (!b || b->state == SPOOL__CACHED) {
    if (b) *dead = *b;
    leave(c, h);
    return b ? SPOOL__FREE_CACHED : SPOOL__FREE_PASS;
  }
  *s = free_live(p, c, b, stream, site, capturing, h, false);
  return SPOOL__FREE_DONE;
}

/* Takes ptr's live record out of whichever other front holds it (*taken), or copies its record
 * when it sits freed there (*out). Under the pool's lock. */
static spool__free_result take_from_other(spool_pool *p, const spool__scache *self, uintptr_t u,
                                          spool__buffer *out, spool__buffer **taken) {
  spool__free_result r = SPOOL__FREE_PASS;
  for (spool__scache *c = p->caches; c && r == SPOOL__FREE_PASS; c = c->next) {
    if (c == self) continue;
    front_lock(c);
    spool__buffer *b = front_rec(c, u);
    if (b && b->state == SPOOL__CACHED) {
      *out = *b;
      r = SPOOL__FREE_CACHED;
    } else if (b) {
      spool__index_remove(&c->blocks, u);
      *taken = b;
      c->c.bytes_in_use -= b->size; /* the freeing stream's front takes it over */
      c->c.buffers_in_use--;
      after_free(p, c);
      r = SPOOL__FREE_DONE;
    }
    front_unlock(c);
  }
  return r;
}

/* The move and the free happen under the pool's lock, so that a concurrent free of the same
 * pointer finds it either live in its first front or freed in the second (a double free), and
 * a stats snapshot never sees it in neither. */
static spool__free_result free_moved(spool_pool *p, void *ptr, cudaStream_t stream,
                                     const spool__site *site, spool_status *s,
                                     spool__buffer *dead) {
  spool__scache *c;
  bool capturing;
  *s = cache_of(p, stream, &c, FREE);
  if (*s == SPOOL_OK) *s = free_capturing(p, stream, &capturing);
  if (*s != SPOOL_OK) return SPOOL__FREE_DONE;
  spool__buffer *b = NULL;
  pthread_mutex_lock(&p->lock);
  spool__free_result r = take_from_other(p, c, (uintptr_t)ptr, dead, &b);
  if (r == SPOOL__FREE_DONE) {
    front_lock(c);
    c->c.bytes_in_use += b->size; /* the buffer is this front's now */
    c->c.buffers_in_use++;
    *s = spool__index_insert(&c->blocks, b->ptr, b->blk);
    if (*s == SPOOL_OK) {
      *s = free_live(p, c, b, stream, site, capturing, HELD_LOCK, true);
    } else {
      /* No host memory to index the block: it goes into the heap at once. */
      count_free(p, c, b);
      front_unlock(c);
      b->died = *site;
      spool__front_bury(p, c, b);
      *s = SPOOL_OK;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return r;
}

/* ---- a free that must not reach the driver ------------------------------------------------ */

/* Under the pool's lock: what its own table and graveyard know of the refused ptr, read in the
 * same critical section as the failed removal, so that another thread handed the same address
 * meanwhile cannot change the verdict. */
static void classify_own(spool_pool *p, uintptr_t ptr, spool__refusal *r) {
  p->c.bad_frees++;
  const spool__buffer *b = spool__table_containing(&p->live, ptr);
  if (b) r->inside = true, r->inside_buf = *b;
  b = spool__grave_find(&p->graves, ptr);
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
  count_table_free(p, 0);
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
  if (err != cudaSuccess && spool__graph_never_ran(b, err, stream)) {
    spool__clear_cuda_error(); /* no memory behind it: nothing to free */
    err = cudaSuccess;
  }
  if (err == cudaSuccess) {
    count_table_free(pool, b->size);
    b->died = *site;
    spool__grave_bury(&pool->graves, b);
  } else {
    (void)spool__table_insert(&pool->live, b, NULL); /* cannot fail: the removal left room */
  }
  return err;
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
    r->inside = spool__census_containing(pool, (uintptr_t)ptr, &r->inside_buf) &&
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
  /* a live buffer of another stream's cache, freed during a capture: never a graph
   * allocation (those bypass the caches), so refused as the table's are. Moved into this
   * stream's cache instead, it would be handed out again before the graph ever ran. */
  if (capturing && fr == SPOOL__FREE_PASS && pool->cfg.cache &&
      spool__census_containing(pool, (uintptr_t)ptr, &moved) && moved.ptr == (uintptr_t)ptr)
    return refuse_in_capture(ptr, stream);
  if (fr == SPOOL__FREE_PASS && pool->cfg.cache) {
    fr = free_moved(pool, ptr, stream, site, &s, &moved);
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
 * refused. With track=off the driver judges what no cache knows. Forced inline into the API's
 * entry, as front_free is into it: a hit makes no call of its own. */
static SPOOL__INLINE spool_status free_plain(spool_pool *pool, void *ptr, cudaStream_t stream,
                                             const spool__site *site) {
  spool_status s = SPOOL_OK;
  spool__buffer dead; /* filled only when ptr sits freed in a cache */
  spool__free_result fr = SPOOL__FREE_PASS;
  if (pool->cfg.cache) fr = front_free(pool, ptr, stream, site, &s, &dead);
  if (fr == SPOOL__FREE_DONE) return s;
  return free_slow(pool, ptr, stream, site, fr, &dead);
}

/* A buffer with recorded streams (or a free after an event): the free waits on the hand-off
 * stream for all of them, and runs there. */
static spool_status free_handed_off(spool_pool *pool, void *ptr, cudaStream_t stream,
                                    cudaEvent_t event, const spool__site *site,
                                    const char *ctx) {
  cudaStream_t on = NULL;
  spool_status s = spool__handoff_begin(pool, ptr, stream, event, ctx, &on);
  if (s != SPOOL_OK) return s;
  s = free_plain(pool, ptr, on, site);
  spool__handoff_end(pool, ptr, s);
  return s;
}

/* A free of ptr as the start of its allocation: the hand-off way for a free after an event or
 * a buffer with recorded streams, else the plain way. */
static inline spool_status free_start(spool_pool *pool, void *ptr, cudaStream_t stream,
                                      cudaEvent_t event, const spool__site *site,
                                      const char *ctx) {
  if (event || (atomic_load_explicit(&pool->handoff_any, memory_order_relaxed) &&
                spool__handoff_recorded(pool, ptr)))
    return free_handed_off(pool, ptr, stream, event, site, ctx);
  return free_plain(pool, ptr, stream, site);
}

/* A batch aligned past 256 bytes is freed by a pointer past its allocation's start. */
static SPOOL__NOINLINE spool_status free_aligned(spool_pool *pool, void *ptr, cudaStream_t stream,
                                                cudaEvent_t event, const spool__site *site,
                                                const char *ctx) {
  spool__buffer e;
  void *start = spool__aligned_take(pool, ptr, &e);
  spool_status s = free_start(pool, start, stream, event, site, ctx);
  if (s != SPOOL_OK) spool__aligned_undo(pool, &e);
  return s;
}

/* Every free: spool_free's, spool_free_after's (event), a scope's, a batch's. Forced inline, as
 * alloc_site is. */
static SPOOL__INLINE spool_status free_any(spool_pool *pool, void *ptr, cudaStream_t stream,
                                    cudaEvent_t event, const spool__site *site, const char *ctx) {
  if (atomic_load_explicit(&pool->aligned_live, memory_order_relaxed))
    return free_aligned(pool, ptr, stream, event, site, ctx);
  return free_start(pool, ptr, stream, event, site, ctx);
}

/* The free and its trace record, numbered before the free (see spool__trace_ev). */
static SPOOL__NOINLINE spool_status free_traced(spool_pool *pool, void *ptr, cudaStream_t stream,
                                                cudaEvent_t event, const spool__site *site,
                                                const char *ctx) {
  spool__trace_ev ev = {.kind = SPOOL_TRACE_FREE, .seq = spool__trace_seq(pool), .ptr = ptr,
                        .stream = stream, .site = site};
  if (event) ev.flags = SPOOL_TRACE_AFTER;
  else if (spool__capturing_quiet(stream, false)) ev.flags = SPOOL_TRACE_CAPTURING;
  ev.status = free_any(pool, ptr, stream, event, site, ctx);
  spool__trace_event(pool, &ev);
  return ev.status;
}

spool_status spool__free_site(spool_pool *pool, void *ptr, cudaStream_t stream,
                              const spool__site *site) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", FREE);
  if (!ptr) return SPOOL_OK;
  if (SPOOL__UNLIKELY(pool->trace)) return free_traced(pool, ptr, stream, NULL, site, FREE);
  return free_any(pool, ptr, stream, NULL, site, FREE);
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

spool_status spool_free_after(spool_pool *pool, void *ptr, cudaStream_t stream,
                              cudaEvent_t event) {
  static const char ctx[] = "spool_free_after";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!event) return spool__fail(SPOOL_ERR_INVALID, "%s: event is NULL", ctx);
  if (!ptr) return SPOOL_OK;
  static const spool__site site = {"spool_free_after", NULL, 0, 0};
  if (SPOOL__UNLIKELY(pool->trace)) return free_traced(pool, ptr, stream, event, &site, ctx);
  return free_any(pool, ptr, stream, event, &site, ctx);
}
