/* The per-stream fronts of the heap (chunks.c), and the hot path through them.
 *
 * A block freed on stream S may be handed out again on S at once: stream order makes the new
 * owner's work run after the old owner's. So each stream keeps its last freed blocks ready in
 * bins by size class (its front), and an allocation that finds one of its class there makes no
 * CUDA call (the capture check aside) and takes only that stream's lock. Threads find their
 * stream's front through a few thread-local slots, so the hit path touches no memory that
 * threads on other streams write.
 *
 * - A miss puts the stream's whole front into the heap (pending on S, merged with its free
 *   neighbours) and takes a block of the size asked from the heap: the front holds only what a
 *   stream repeats, never a cover of every size it has seen. A free that would take the front
 *   past front_limit goes into the heap at once (one block is always kept).
 * - Other streams reach S's memory only through the heap, after S's fence (chunks.c).
 * - Under stream capture the heap is bypassed: a reused pointer would be baked into the graph.
 *   Blocks allocated under capture go through the uncached path; a heap buffer freed under
 *   capture is refused (CUDA would refuse it too, and break the capture).
 * - The legacy stream has two handles (NULL and cudaStreamLegacy): one front. cudaStreamPerThread
 *   is one handle for a different stream in every thread: one front per thread.
 * - Flushes (spool_trim, out of memory, destroy) synchronize the device, put every front into
 *   the heap, and give every all-free chunk back on the calling thread's per-thread stream;
 *   spool_stream_release gives back on the stream it is given.
 * - Counters are per stream, summed for spool_stats. Each stream publishes its share of the
 *   pool-wide in-use totals at once when it grows past what it published or falls more than
 *   PUBLISH_SLACK below it (its buffer count's falls every PUBLISH_EVERY operations): so the
 *   pool-wide peak is exact for one stream, and with several streams counts each at most 1 MiB
 *   high.
 *
 * Locks: the pool's lock may be held when a front's lock is taken, never the other way round.
 * The heap is under the pool's lock. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "internal.h"
#include "trace_format.h"

#include <inttypes.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

static const char ALLOC[] = "spool_alloc";
static const char FREE[] = "spool_free";

#define SEQ_BATCH 256     /* allocation numbers a cache takes from the pool at a time */
#define PUBLISH_EVERY 64  /* operations between publications of a cache's totals */
#define PUBLISH_SLACK ((uint64_t)1 << 20) /* a fall in use larger than this is published at once */
/* A front block the stream has not taken back within this many of its frees is not one it
 * repeats: the next miss puts it into the heap, where it can merge and serve any size. */
#define FRONT_AGE 64
#define SLOTS 8           /* thread-local lookup slots (a power of two) */

/* ---- the cache's lock ----------------------------------------------------------------------- */

/* A spin lock: held for a few dozen instructions on the hit path, by one thread per stream in
 * the common case. Spinning gives way to the scheduler so that a preempted holder can finish. */
static SPOOL__NOINLINE void lock_slow(spool__scache *c) {
  unsigned spins = 0;
  do {
    while (atomic_load_explicit(&c->lock, memory_order_relaxed))
      if (++spins >= 64) sched_yield();
  } while (atomic_exchange_explicit(&c->lock, 1, memory_order_acquire));
}

static uint64_t my_thread(void);

/* Takes the cache from its owner (see enter): no owner any more, then the process-wide barrier,
 * after which the owner either sees that it owns nothing or is seen inside, and is waited for.
 * Under c's lock. */
static SPOOL__NOINLINE void revoke(spool__scache *c) {
  atomic_store_explicit(&c->owner, 0, memory_order_relaxed);
  if (c->revokes < 16) c->revokes++;
  if (!spool__barrier_all()) {
    /* Never seen after a successful registration; a pause lets any store in flight land. */
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  while (atomic_load_explicit(&c->inside, memory_order_acquire)) sched_yield();
}

static inline void lock(spool__scache *c) {
  if (atomic_exchange_explicit(&c->lock, 1, memory_order_acquire)) lock_slow(c);
  uint64_t owner = atomic_load_explicit(&c->owner, memory_order_relaxed);
  if (owner != 0 && owner != my_thread()) revoke(c);
}

static inline void unlock(spool__scache *c) {
  atomic_store_explicit(&c->lock, 0, memory_order_release);
}

/* Hits and frees by one thread under the lock many times in a row make it the owner again (a
 * stats read or another thread's visit cost it the ownership). Each time a cache is taken back
 * the streak it needs doubles (up to 2^16 times), so that a cache that other threads keep
 * visiting (frees from other streams, a monitor polling stats) settles on its lock instead of a
 * barrier per visit. Under c's lock. */
#define OWNER_STREAK 64

static inline void count_streak(spool__scache *c) {
  uint64_t me = my_thread();
  if (c->streak_thread != me) {
    c->streak_thread = me;
    c->streak = 0;
  } else if (c->may_own && ++c->streak >= (uint64_t)OWNER_STREAK << c->revokes) {
    atomic_store_explicit(&c->owner, me, memory_order_relaxed);
    c->streak = 0;
  }
}

/* How a thread holds a cache: its lock, or as the cache's owner. */
typedef enum { HELD_LOCK, HELD_OWNER } held;

/* The owner's way in takes no atomic read-modify-write and no fence: it says it is inside, then
 * checks that it still owns the cache. A thread that takes ownership away (revoke) clears it and
 * runs a barrier on every CPU of the process before it looks at `inside`: whichever side of that
 * barrier the owner's check falls, either the owner sees it lost the cache, or its `inside` is
 * seen and waited for. */
static inline held enter(spool__scache *c) {
  uint64_t me = my_thread();
  if (atomic_load_explicit(&c->owner, memory_order_relaxed) == me) {
    atomic_store_explicit(&c->inside, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the compiler keeps the store before the load */
    if (atomic_load_explicit(&c->owner, memory_order_relaxed) == me) return HELD_OWNER;
    atomic_store_explicit(&c->inside, 0, memory_order_release);
  }
  lock(c);
  return HELD_LOCK;
}

static inline void leave(spool__scache *c, held h) {
  if (h == HELD_OWNER) {
    atomic_store_explicit(&c->inside, 0, memory_order_release);
  } else {
    count_streak(c);
    unlock(c);
  }
}

/* ---- finding a stream's cache ------------------------------------------------------------- */

typedef struct slot {
  uint64_t pool; /* pool id: ids are never reused, so a destroyed pool's slot never matches */
  cudaStream_t stream;
  spool__scache *cache;
} slot;

static _Thread_local slot slots[SLOTS];
static _Thread_local uint64_t thread_no;
static atomic_uint_fast64_t threads_seen;

static uint64_t my_thread(void) {
  if (thread_no == 0) thread_no = atomic_fetch_add(&threads_seen, 1) + 1;
  return thread_no;
}

static cudaStream_t key_of(cudaStream_t s) { return s == cudaStreamLegacy ? NULL : s; }

static _Thread_local unsigned slot_next; /* the slot the next new stream takes */

static uint64_t thread_of(cudaStream_t key) {
  return key == cudaStreamPerThread ? my_thread() : 0;
}

/* Under the pool's lock. */
static spool__scache *find_locked(spool_pool *p, cudaStream_t key, uint64_t thread) {
  for (spool__scache *c = p->caches; c; c = c->next)
    if (c->stream == key && c->thread == thread) return c;
  return NULL;
}

/* The first use of a stream by this thread (or its first since SLOTS other streams took the
 * slots): find or make its cache under the pool's lock, and give it a slot, round robin. */
static SPOOL__NOINLINE spool_status cache_of_slow(spool_pool *p, cudaStream_t key,
                                                  spool__scache **out, const char *ctx) {
  uint64_t thread = thread_of(key);
  pthread_mutex_lock(&p->lock);
  spool__scache *c = find_locked(p, key, thread);
  if (!c && (c = spool__zalloc_aligned(sizeof *c)) != NULL) {
    c->stream = key;
    c->thread = thread;
    c->may_own = p->cfg.cache_owner && spool__barrier_available();
    if (c->may_own) atomic_store_explicit(&c->owner, my_thread(), memory_order_relaxed);
    c->next = p->caches;
    p->caches = c;
  }
  pthread_mutex_unlock(&p->lock);
  if (!c)
    return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the cache of stream %p",
                       ctx, (void *)key);
  slots[slot_next++ % SLOTS] = (slot){p->id, key, c};
  *out = c;
  return SPOOL_OK;
}

/* A thread cycling over a few streams (4 in a round robin, say) finds each in the slots: a
 * scan of all of them costs less than one collision that sends it to the pool's lock. */
static inline spool_status cache_of(spool_pool *p, cudaStream_t stream, spool__scache **out,
                                    const char *ctx) {
  cudaStream_t key = key_of(stream);
  uint64_t id = p->id;
  for (unsigned i = 0; i < SLOTS; i++) {
    if (slots[i].stream == key && slots[i].pool == id) {
      *out = slots[i].cache;
      return SPOOL_OK;
    }
  }
  return cache_of_slow(p, key, out, ctx);
}

/* ---- totals -------------------------------------------------------------------------------- */

static void atomic_max(atomic_uint_fast64_t *a, uint64_t v) {
  uint_fast64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (cur < v &&
         !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

void spool__totals_add(spool_pool *p, int64_t bytes, int64_t buffers) {
  if (bytes) {
    uint64_t b =
        atomic_fetch_add_explicit(&p->total_bytes, (uint64_t)bytes, memory_order_relaxed);
    if (bytes > 0) atomic_max(&p->peak_bytes, b + (uint64_t)bytes);
  }
  if (buffers) {
    uint64_t n =
        atomic_fetch_add_explicit(&p->total_buffers, (uint64_t)buffers, memory_order_relaxed);
    if (buffers > 0) atomic_max(&p->peak_buffers, n + (uint64_t)buffers);
  }
}

/* Puts c's share of the pool-wide totals at its current in-use. Under c's lock. Differences of
 * unsigned counters wrap to the signed change. */
static SPOOL__NOINLINE void publish(spool_pool *p, spool__scache *c) {
  spool__totals_add(p, (int64_t)(c->c.bytes_in_use - c->pub_bytes),
                    (int64_t)(c->c.buffers_in_use - c->pub_buffers));
  c->pub_bytes = c->c.bytes_in_use;
  c->pub_buffers = c->c.buffers_in_use;
  c->ops = 0;
}

/* Every PUBLISH_EVERY operations: the buffer count's falls, which nothing else publishes. Bytes
 * stay as they are: a fall within PUBLISH_SLACK is the bound the peaks allow, and publishing it
 * would only make the next growth publish again. */
static SPOOL__NOINLINE void publish_buffers(spool_pool *p, spool__scache *c) {
  spool__totals_add(p, 0, (int64_t)(c->c.buffers_in_use - c->pub_buffers));
  c->pub_buffers = c->c.buffers_in_use;
  c->ops = 0;
}

/* Growth past the published share goes out at once (it may be a new peak); a fall of more than
 * PUBLISH_SLACK too (left out, it would count twice once another stream grows); a smaller fall
 * of bytes never by itself. A stream whose use moves within 1 MiB of its high publishes nothing
 * but its buffer count now and then: threads on their own streams then share no written line. */
static inline void after_op(spool_pool *p, spool__scache *c) {
  uint64_t bytes = c->c.bytes_in_use;
  if (bytes > c->pub_bytes || c->c.buffers_in_use > c->pub_buffers ||
      c->pub_bytes - bytes > PUBLISH_SLACK)
    publish(p, c);
  else if (++c->ops >= PUBLISH_EVERY && c->c.buffers_in_use != c->pub_buffers)
    publish_buffers(p, c);
}

static inline uint64_t next_seq(spool_pool *p, spool__scache *c) {
  if (c->seq_next == c->seq_end) {
    c->seq_next = atomic_fetch_add(&p->seq, SEQ_BATCH) + 1;
    c->seq_end = c->seq_next + SEQ_BATCH;
  }
  return c->seq_next++;
}

/* ---- front bins ------------------------------------------------------------------------------ */

static SPOOL__NOINLINE bool bin_grow(spool__bin *bin) {
  uint32_t cap = bin->cap ? bin->cap * 2 : 8;
  uintptr_t *ptrs = realloc(bin->ptrs, cap * sizeof *ptrs);
  if (!ptrs) return false;
  bin->ptrs = ptrs;
  bin->cap = cap;
  return true;
}

static inline bool bin_push(spool__scache *c, unsigned cls, uintptr_t u) {
  spool__bin *bin = &c->bins[cls];
  if (bin->count == bin->cap && !bin_grow(bin)) return false;
  bin->ptrs[bin->count++] = u;
  c->front_map[cls / 64] |= (uint64_t)1 << (cls % 64);
  c->front_blocks++;
  return true;
}

static inline uintptr_t bin_pop(spool__scache *c, unsigned cls) {
  spool__bin *bin = &c->bins[cls];
  uintptr_t u = bin->ptrs[--bin->count];
  if (!bin->count) c->front_map[cls / 64] &= ~((uint64_t)1 << (cls % 64));
  c->front_blocks--;
  return u;
}

/* ---- allocation ----------------------------------------------------------------------------- */

/* Under c's lock: b becomes the caller's buffer. */
static inline void make_live(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                             cudaStream_t stream, const spool__site *site) {
  b->state = SPOOL__LIVE;
  b->size = size;
  b->stream = stream;
  b->seq = next_seq(p, c);
  b->born = *site;
  b->born_ns = p->cfg.track == SPOOL_TRACK_FULL ? spool__now_ns() : 0;
  c->c.allocs++;
  c->c.bytes_allocated += size;
  c->c.bytes_in_use += size;
  c->c.buffers_in_use++;
  after_op(p, c);
}

/* Classes above a request a hit may take a block from: eight, so at most twice the size. A
 * stream that sees many sizes (a log-uniform mix) then finds a block within an octave rather
 * than one of its exact class. */
#define FIT_CLASSES 8

/* The first non-empty front bin in (cls, cls + FIT_CLASSES], or 0. */
static inline unsigned bin_above(const spool__scache *c, unsigned cls) {
  unsigned last = cls + FIT_CLASSES < SPOOL__CLASSES ? cls + FIT_CLASSES : SPOOL__CLASSES - 1;
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

/* The most recently freed front block of class cls if it holds size bytes (a class spans up to
 * 1/8 of its size), else of the nearest class above within FIT_CLASSES; taken out of its bin.
 * NULL when there is none. Under c's lock. */
static inline spool__buffer *pop(spool__scache *c, unsigned cls, size_t size) {
  spool__bin *bin = &c->bins[cls];
  if (bin->count) {
    spool__buffer *b = spool__table_lookup(&c->blocks, bin->ptrs[bin->count - 1]);
    if (b->bytes >= size) {
      bin_pop(c, cls);
      return b;
    }
  }
  unsigned k = bin_above(c, cls);
  if (!k) return NULL;
  return spool__table_lookup(&c->blocks, bin_pop(c, k));
}

/* Under c's lock: the front block b becomes the caller's buffer. */
static inline void take_hit(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                            cudaStream_t stream, const spool__site *site) {
  c->c.hits++;
  c->c.bytes_cached -= b->bytes;
  make_live(p, c, b, size, stream, site);
}

/* A hit with poisoning: the memset runs without the lock, the block out of its bin meanwhile.
 * If the memset cannot be queued the block goes back to its bin, which it just left: the push
 * needs no new memory. */
static spool_status hit_poisoned(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                                 cudaStream_t stream, const spool__site *site) {
  uintptr_t u = b->ptr;
  unsigned cls = b->cls;
  spool_status s = spool__poison_new(p, (void *)u, size, stream);
  lock(c);
  b = spool__table_lookup(&c->blocks, u);
  if (s == SPOOL_OK) take_hit(p, c, b, size, stream, site);
  else (void)bin_push(c, cls, u);
  unlock(c);
  return s;
}

/* Under the pool's lock: the record b of a freed block, out of every table, is remembered as
 * freed (for double-free messages) and its block goes into the heap, pending on c's stream:
 * every way a block leaves a stream's keeping ends here. */
static void bury_into_heap(spool_pool *p, spool__scache *c, const spool__buffer *b) {
  spool__grave_bury(&p->graves, b);
  spool__heap_release(p, &c->pend, b->blk);
}

/* Under c's lock and the pool's: the front block u (its bin entry is the caller's to drop) goes
 * into the heap, pending on c's stream, and is remembered as freed (for double-free messages). */
static void spill_one(spool_pool *p, spool__scache *c, uintptr_t u) {
  spool__buffer b;
  spool__table_remove(&c->blocks, u, &b);
  c->c.bytes_cached -= b.bytes;
  bury_into_heap(p, c, &b);
}

/* Under the pool's lock: the blocks of c's front that the stream has not taken back within its
 * last `age` frees go into the heap (age 0: all of them). Within a bin the oldest lie first.
 * With `due`, only when FRONT_AGE / 4 frees have passed since the last such look (a walk of the
 * front: not on every miss). Returns how many blocks went. */
static uint32_t front_spill(spool_pool *p, spool__scache *c, uint64_t age, bool due) {
  lock(c);
  uint32_t spilled = 0;
  if (due && c->tick - c->spilled_at < FRONT_AGE / 4) {
    unlock(c);
    return 0;
  }
  if (due) c->spilled_at = c->tick;
  uint64_t keep_from = c->tick > age ? c->tick - age : 0; /* with age > 0 */
  for (unsigned w = 0; w < SPOOL__BIN_WORDS; w++) {
    for (uint64_t m = c->front_map[w]; m; m &= m - 1) {
      unsigned cls = w * 64 + (unsigned)__builtin_ctzll(m);
      spool__bin *bin = &c->bins[cls];
      uint32_t old = 0;
      while (old < bin->count &&
             (age == 0 || spool__table_lookup(&c->blocks, bin->ptrs[old])->tick < keep_from))
        spill_one(p, c, bin->ptrs[old++]);
      if (!old) continue;
      memmove(bin->ptrs, bin->ptrs + old, (bin->count - old) * sizeof *bin->ptrs);
      bin->count -= old;
      c->front_blocks -= old;
      spilled += old;
      if (!bin->count) c->front_map[w] &= ~((uint64_t)1 << (cls % 64));
    }
  }
  unlock(c);
  return spilled;
}

/* A chunk from the pool for a block of need bytes: the band's chunk, or near a limit just the
 * block (a request that fits what the device or max_size allows never fails for rounding).
 * The out-of-memory policy runs on the second. On SPOOL_ERR_OOM the policy has flushed every
 * front into the heap, so the heap is asked once more: what an OOM handler freed is there. */
static spool_status new_chunk(spool_pool *p, spool__scache *c, uint64_t need, size_t size,
                              cudaStream_t stream, spool__block **out) {
  uint64_t bytes = spool__chunk_size(need);
  void *u = NULL;
  cudaError_t err = cudaMallocFromPoolAsync(&u, bytes, p->handle, stream);
  spool_status s = SPOOL_OK;
  if (err != cudaSuccess && err != cudaErrorMemoryAllocation) {
    char a[SPOOL__SIZE_TEXT];
    return spool__fail_cuda(err, "cudaMallocFromPoolAsync", "%s: a heap chunk of %s on stream "
                            "%p, device %d", ALLOC, spool__format_size(bytes, a),
                            (void *)stream, p->device);
  }
  if (err != cudaSuccess) {
    spool__clear_cuda_error();
    bytes = need;
    s = spool__pool_alloc_for(p, &u, (size_t)need, size, stream);
  }
  pthread_mutex_lock(&p->lock);
  if (s == SPOOL_ERR_OOM) *out = spool__heap_fit(p, &c->pend, need);
  else if (s == SPOOL_OK) *out = spool__heap_add_chunk(p, &c->pend, (uintptr_t)u, bytes, need);
  pthread_mutex_unlock(&p->lock);
  if (s == SPOOL_ERR_OOM) return *out ? SPOOL_OK : s;
  if (s == SPOOL_OK && !*out) {
    s = spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the records of a new heap "
                    "chunk", ALLOC);
    err = cudaFreeAsync(u, stream);
    if (err != cudaSuccess) spool__also_failed(s, err, "giving the chunk back");
  }
  return s;
}

/* Enters the heap block blk in c's table as the caller's buffer. Under the pool's lock; on
 * failure the block goes back into the heap. */
static spool_status adopt_locked(spool_pool *p, spool__scache *c, spool__block *blk, size_t size,
                                 cudaStream_t stream, const spool__site *site) {
  spool__buffer b = {.ptr = blk->addr, .bytes = blk->bytes, .blk = blk};
  spool__grave_forget(&p->graves, b.ptr); /* the address is live again */
  lock(c);
  spool_status s = spool__table_insert(&c->blocks, &b);
  if (s == SPOOL_OK) {
    c->c.misses++;
    make_live(p, c, spool__table_lookup(&c->blocks, b.ptr), size, stream, site);
  }
  unlock(c);
  if (s != SPOOL_OK) spool__heap_release(p, &c->pend, blk);
  return s;
}

/* The same for a block placed outside the lock (a new chunk, poisoning): takes it, or gives the
 * block back when poisoning failed (s). */
static spool_status adopt(spool_pool *p, spool__scache *c, spool__block *blk, size_t size,
                          cudaStream_t stream, const spool__site *site, spool_status s) {
  pthread_mutex_lock(&p->lock);
  if (s == SPOOL_OK) s = adopt_locked(p, c, blk, size, stream, site);
  else spool__heap_release(p, &c->pend, blk);
  pthread_mutex_unlock(&p->lock);
  return s;
}

/* A front miss: the front's stale blocks go into the heap, and the heap serves the request
 * (from the stream's own free ranges, the shared ones, those another stream's fence has just
 * made shared, the rest of the front merged in, or a new chunk). */
static SPOOL__NOINLINE spool_status miss(spool_pool *p, spool__scache *c, void **ptr,
                                         size_t size, cudaStream_t stream,
                                         const spool__site *site) {
  uint64_t need = ((uint64_t)size + SPOOL__MIN_BLOCK - 1) / SPOOL__MIN_BLOCK * SPOOL__MIN_BLOCK;
  pthread_mutex_lock(&p->lock);
  front_spill(p, c, FRONT_AGE, true);
  spool__heap_stream_op(p, &c->pend, stream);
  spool__block *blk = spool__heap_fit(p, &c->pend, need);
  if (!blk && spool__heap_publish_ready(p)) blk = spool__heap_fit(p, &c->pend, need);
  if (!blk && front_spill(p, c, 0, false)) /* before a new chunk: the rest may merge */
    blk = spool__heap_fit(p, &c->pend, need);
  spool__heap_idle(p, &c->pend, stream);
  spool_status s = SPOOL_OK;
  bool taken = blk && !p->cfg.poison; /* the common case: one critical section */
  if (taken) s = adopt_locked(p, c, blk, size, stream, site);
  pthread_mutex_unlock(&p->lock);
  if (!taken) {
    if (!blk) s = new_chunk(p, c, need, size, stream, &blk);
    if (s != SPOOL_OK) return s;
    s = adopt(p, c, blk, size, stream, site, spool__poison_new(p, (void *)blk->addr, size, stream));
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

bool spool__cache_alloc(spool_pool *p, void **ptr, size_t size, cudaStream_t stream,
                        const spool__site *site, spool_status *s) {
  spool__scache *c;
  *s = cache_of(p, stream, &c, ALLOC);
  if (*s != SPOOL_OK) return true;
  if (p->cfg.capture_check) {
    bool capturing = false;
    *s = spool__stream_capturing(stream, &capturing, ALLOC);
    if (*s != SPOOL_OK) return true;
    if (capturing) return false;
  }
  *s = device_ok(p, c, stream); /* after the capture check: it would break a capture */
  if (*s != SPOOL_OK) return true;
  held h = enter(c);
  unsigned cls = spool__class_of(size);
  c->last_cls = cls;
  spool__buffer *b = pop(c, cls, size);
  uintptr_t u = b ? b->ptr : 0;
  if (b && !p->cfg.poison) take_hit(p, c, b, size, stream, site);
  leave(c, h);
  if (b && p->cfg.poison) *s = hit_poisoned(p, c, b, size, stream, site);
  else if (!b) *s = miss(p, c, ptr, size, stream, site);
  if (b && *s == SPOOL_OK) *ptr = (void *)u;
  return true;
}

/* ---- free --------------------------------------------------------------------------------- */

static SPOOL__INLINE void count_free(spool_pool *p, spool__scache *c, uint64_t size) {
  c->c.frees++;
  c->c.bytes_in_use -= size;
  c->c.buffers_in_use--;
  after_op(p, c);
}

/* Whether c's front takes one more block b: within front_limit, or, into an empty front, a
 * block of the size the stream allocated last (a loop of one size, however large, stays on the
 * hit path; a stream of ever-changing sizes does not hold a large block idle). */
static SPOOL__INLINE bool front_admits(const spool_pool *p, const spool__scache *c,
                                       const spool__buffer *b) {
  return c->c.bytes_cached + b->bytes <= p->cfg.front_limit ||
         (c->front_blocks == 0 && spool__class_of(b->size) == c->last_cls);
}

/* Under c's lock: the live block b, freed on c's stream, goes into the front bin of the size it
 * was asked for (a repeat of that size finds it). False when the bin cannot grow. */
static SPOOL__INLINE bool to_bin(spool_pool *p, spool__scache *c, spool__buffer *b,
                          const spool__site *site) {
  unsigned cls = spool__class_of(b->size);
  if (!bin_push(c, cls, b->ptr)) return false;
  b->cls = (uint16_t)cls;
  b->state = SPOOL__CACHED;
  b->died = *site;
  b->tick = ++c->tick;
  c->c.bytes_cached += b->bytes;
  count_free(p, c, b->size);
  return true;
}

/* Under c's lock, held as h (left here): the live block b goes into the heap, pending on c's
 * stream. With the pool's lock held (pool_locked) it is taken no second time. Until it is in
 * the graveyard its record stays in c's table, freed: a concurrent free of the same pointer,
 * which looks in the fronts and then in the graveyard, finds it in one of them. */
static void to_heap(spool_pool *p, spool__scache *c, spool__buffer *b, cudaStream_t stream,
                    const spool__site *site, held h, bool pool_locked) {
  uintptr_t u = b->ptr;
  b->state = SPOOL__CACHED;
  b->died = *site;
  count_free(p, c, b->size);
  if (!pool_locked) {
    leave(c, h);
    pthread_mutex_lock(&p->lock);
    h = enter(c);
  }
  spool__buffer gone;
  spool__table_remove(&c->blocks, u, &gone);
  leave(c, h);
  bury_into_heap(p, c, &gone);
  spool__heap_stream_op(p, &c->pend, stream);
  if (!pool_locked) pthread_mutex_unlock(&p->lock);
}

/* ---- quarantine (poison=on) ---------------------------------------------------------------- */

static SPOOL__NOINLINE bool quar_grow(spool__scache *c) {
  uint32_t cap = c->quar_cap ? c->quar_cap * 2 : 16;
  uintptr_t *q = malloc(cap * sizeof *q);
  if (!q) return false;
  for (uint32_t i = 0; i < c->quar_count; i++) q[i] = c->quar[(c->quar_head + i) % c->quar_cap];
  free(c->quar);
  c->quar = q;
  c->quar_cap = cap;
  c->quar_head = 0;
  return true;
}

/* The oldest quarantined block, out of the ring (its record stays, freed, in c's table until it
 * goes into the heap). Under c's lock. */
static uintptr_t quar_pop(spool__scache *c) {
  uintptr_t u = c->quar[c->quar_head];
  c->quar_head = (c->quar_head + 1) % c->quar_cap;
  c->quar_count--;
  c->quar_bytes -= spool__table_lookup(&c->blocks, u)->bytes;
  return u;
}

/* Under the pool's lock and c's: the quarantined block u goes into the heap. */
static void quar_release_locked(spool_pool *p, spool__scache *c, uintptr_t u) {
  spool__buffer gone;
  if (spool__table_remove(&c->blocks, u, &gone)) bury_into_heap(p, c, &gone);
}

/* Under the pool's lock: everything c keeps in quarantine goes into the heap. */
static void quar_drain(spool_pool *p, spool__scache *c) {
  lock(c);
  while (c->quar_count) quar_release_locked(p, c, quar_pop(c));
  unlock(c);
}

#define QUAR_OUT_MAX 8 /* blocks one free lets out at most: bounded work per call */

/* Under c's lock, held as h (left here): the freed (and poisoned) block b waits in c's
 * quarantine; what is past its bounds, oldest first, goes into the heap. */
static void quarantine_in(spool_pool *p, spool__scache *c, spool__buffer *b, cudaStream_t stream,
                          const spool__site *site, held h, bool pool_locked) {
  if (c->quar_count == c->quar_cap && !quar_grow(c)) {
    to_heap(p, c, b, stream, site, h, pool_locked); /* no host memory: no quarantine */
    return;
  }
  b->state = SPOOL__CACHED;
  b->died = *site;
  b->tick = ++c->tick;
  c->quar[(c->quar_head + c->quar_count++) % c->quar_cap] = b->ptr;
  c->quar_bytes += b->bytes;
  count_free(p, c, b->size);
  uintptr_t out[QUAR_OUT_MAX];
  unsigned n = 0;
  while (n < QUAR_OUT_MAX && c->quar_count &&
         (c->quar_count > p->cfg.quarantine || c->quar_bytes > SPOOL_QUARANTINE_BYTES))
    out[n++] = quar_pop(c);
  leave(c, h);
  if (!n) return;
  if (!pool_locked) pthread_mutex_lock(&p->lock);
  lock(c);
  for (unsigned i = 0; i < n; i++) quar_release_locked(p, c, out[i]);
  spool__heap_stream_op(p, &c->pend, stream);
  unlock(c);
  if (!pool_locked) pthread_mutex_unlock(&p->lock);
}

/* free_live's rare cases: capture, poisoning, a full front, no host memory. */
static SPOOL__NOINLINE spool_status free_live_slow(spool_pool *p, spool__scache *c,
                                                  spool__buffer *b, cudaStream_t stream,
                                                  const spool__site *site, bool capturing,
                                                  held h, bool pool_locked) {
  if (capturing) {
    /* CUDA refuses to free in a graph what the graph did not allocate, and the refusal breaks
     * the capture; the heap would hand the block out before the graph ever ran. */
    leave(c, h);
    return spool__fail(SPOOL_ERR_INVALID,
                       "%s: %p was allocated outside the capture that stream %p is in; freeing "
                       "it inside would break the capture (a graph frees only what it "
                       "allocated): free it after cudaStreamEndCapture; nothing was freed", FREE,
                       (void *)b->ptr, (void *)stream);
  }
  spool_status s = spool__poison_freed(p, (void *)b->ptr, (size_t)b->size, stream);
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

/* Frees the live block b of c's table. c is held as h; leaves it. */
static SPOOL__INLINE spool_status free_live(spool_pool *p, spool__scache *c, spool__buffer *b,
                                     cudaStream_t stream, const spool__site *site,
                                     bool capturing, held h, bool pool_locked) {
  if (!capturing && !p->cfg.poison && front_admits(p, c, b) && to_bin(p, c, b, site)) {
    leave(c, h);
    return SPOOL_OK;
  }
  return free_live_slow(p, c, b, stream, site, capturing, h, pool_locked);
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

/* The freeing stream's front, and whether that stream is being captured. */
static inline spool_status freeing_cache(spool_pool *p, cudaStream_t stream, spool__scache **c,
                                         bool *capturing) {
  spool_status s = cache_of(p, stream, c, FREE);
  return s == SPOOL_OK ? free_capturing(p, stream, capturing) : s;
}

spool__free_result spool__cache_free(spool_pool *p, void *ptr, cudaStream_t stream,
                                     const spool__site *site, spool_status *s,
                                     spool__buffer *dead) {
  spool__scache *c;
  bool capturing;
  *s = freeing_cache(p, stream, &c, &capturing);
  if (*s != SPOOL_OK) return SPOOL__FREE_DONE;
  held h = enter(c);
  spool__buffer *b = spool__table_lookup(&c->blocks, (uintptr_t)ptr);
  if (!b || b->state == SPOOL__CACHED) {
    if (b) *dead = *b;
    leave(c, h);
    return b ? SPOOL__FREE_CACHED : SPOOL__FREE_PASS;
  }
  *s = free_live(p, c, b, stream, site, capturing, h, false);
  return SPOOL__FREE_DONE;
}

/* Takes ptr's live record out of whichever other front holds it. Under the pool's lock. */
static spool__free_result take_from_other(spool_pool *p, const spool__scache *self, uintptr_t u,
                                          spool__buffer *out) {
  spool__free_result r = SPOOL__FREE_PASS;
  for (spool__scache *c = p->caches; c && r == SPOOL__FREE_PASS; c = c->next) {
    if (c == self) continue;
    lock(c);
    spool__buffer *b = spool__table_lookup(&c->blocks, u);
    if (b && b->state == SPOOL__CACHED) {
      *out = *b;
      r = SPOOL__FREE_CACHED;
    } else if (b) {
      spool__table_remove(&c->blocks, u, out);
      c->c.bytes_in_use -= out->size; /* the freeing stream's front takes it over */
      c->c.buffers_in_use--;
      after_op(p, c);
      r = SPOOL__FREE_DONE;
    }
    unlock(c);
  }
  return r;
}

/* The move and the free happen under the pool's lock, so that a concurrent free of the same
 * pointer finds it either live in its first front or freed in the second (a double free), and
 * a stats snapshot never sees it in neither. */
spool__free_result spool__cache_free_moved(spool_pool *p, void *ptr, cudaStream_t stream,
                                           const spool__site *site, spool_status *s,
                                           spool__buffer *dead) {
  spool__scache *c;
  bool capturing;
  *s = freeing_cache(p, stream, &c, &capturing);
  if (*s != SPOOL_OK) return SPOOL__FREE_DONE;
  spool__buffer b;
  pthread_mutex_lock(&p->lock);
  spool__free_result r = take_from_other(p, c, (uintptr_t)ptr, &b);
  if (r == SPOOL__FREE_CACHED) *dead = b;
  if (r == SPOOL__FREE_DONE) {
    lock(c);
    *s = spool__table_insert(&c->blocks, &b);
    if (*s == SPOOL_OK) {
      c->c.bytes_in_use += b.size;
      c->c.buffers_in_use++;
      *s = free_live(p, c, spool__table_lookup(&c->blocks, b.ptr), stream, site, capturing,
                     HELD_LOCK, true);
    } else {
      /* No host memory to keep the record: the block goes into the heap without it. */
      c->c.frees++;
      unlock(c);
      b.died = *site;
      bury_into_heap(p, c, &b);
      *s = SPOOL_OK;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return r;
}

/* ---- whole-pool walks ------------------------------------------------------------------------ */

bool spool__cache_containing(spool_pool *p, uintptr_t u, spool__buffer *out) {
  bool found = false;
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c && !found; c = c->next) {
    lock(c);
    for (size_t i = 0; i < c->blocks.cap && !found; i++) {
      const spool__buffer *b = &c->blocks.slots[i];
      if (b->ptr && b->state == SPOOL__LIVE && b->ptr <= u && u - b->ptr < b->size) {
        *out = *b;
        found = true;
      }
    }
    unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
  return found;
}

bool spool__cache_find_live(spool_pool *p, uintptr_t u, spool__buffer *out) {
  bool found = false;
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c && !found; c = c->next) {
    lock(c);
    const spool__buffer *b = spool__table_lookup(&c->blocks, u);
    if (b && b->state == SPOOL__LIVE) {
      *out = *b;
      found = true;
    }
    unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
  return found;
}

typedef struct live_walk {
  void (*fn)(const spool__buffer *, void *);
  void *arg;
} live_walk;

static void if_live(const spool__buffer *b, void *arg) {
  const live_walk *w = arg;
  if (b->state == SPOOL__LIVE) w->fn(b, w->arg);
}

void spool__cache_each_live(spool_pool *p, void (*fn)(const spool__buffer *, void *),
                            void *arg) {
  live_walk w = {fn, arg};
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    lock(c);
    spool__table_each(&c->blocks, if_live, &w);
    unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
}

void spool__cache_sum(spool_pool *p, spool__cache_counters *cc) {
  memset(cc, 0, sizeof *cc);
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    lock(c);
    publish(p, c);
    const spool__cache_counters *k = &c->c;
    cc->bytes_in_use += k->bytes_in_use;
    cc->buffers_in_use += k->buffers_in_use;
    cc->bytes_cached += k->bytes_cached;
    cc->bytes_front += k->bytes_cached;
    cc->bytes_cached += c->quar_bytes;
    cc->allocs += k->allocs;
    cc->frees += k->frees;
    cc->bytes_allocated += k->bytes_allocated;
    cc->hits += k->hits;
    cc->misses += k->misses;
    cc->flushes += k->flushes;
    unlock(c);
  }
  cc->bytes_cached += p->heap.free_bytes;
  pthread_mutex_unlock(&p->lock);
}

void spool__live_totals(spool_pool *p, uint64_t *bytes, uint64_t *buffers) {
  spool__cache_counters cc;
  spool__cache_sum(p, &cc);
  pthread_mutex_lock(&p->lock);
  *bytes = p->c.bytes_in_use + cc.bytes_in_use;
  *buffers = p->c.buffers_in_use + cc.buffers_in_use;
  pthread_mutex_unlock(&p->lock);
}

void spool__cache_reset_peaks(spool_pool *p) {
  spool__cache_counters ignored;
  spool__cache_sum(p, &ignored); /* publishes every front */
  atomic_store(&p->peak_bytes, atomic_load(&p->total_bytes));
  atomic_store(&p->peak_buffers, atomic_load(&p->total_buffers));
}

void spool__cache_each_stream(spool_pool *p, void (*fn)(const spool__stream_idle *, void *),
                              void *arg) {
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c; c = c->next) {
    lock(c);
    spool__stream_idle idle = {c->stream, c->thread, c->c.bytes_cached,
                               spool__heap_pending_bytes(&c->pend), c->c.bytes_in_use};
    unlock(c);
    fn(&idle, arg);
  }
  pthread_mutex_unlock(&p->lock);
}

/* ---- flushes --------------------------------------------------------------------------------- */

/* Under the pool's lock: c's front into the heap, counted as a flush. */
static void flush_front(spool_pool *p, spool__scache *c) {
  quar_drain(p, c);
  if (!front_spill(p, c, 0, false)) return;
  lock(c);
  c->c.flushes++;
  unlock(c);
}

/* Whether a flush would give anything back: a front block, or a chunk with no used block. A
 * flush synchronizes the device, which invalidates any capture on it: never for nothing. */
static bool anything_held(spool_pool *p) {
  if (spool__heap_has_free_chunk(p)) return true;
  bool any = false;
  for (spool__scache *c = p->caches; c && !any; c = c->next) {
    lock(c);
    any = c->front_blocks > 0 || c->quar_count > 0;
    unlock(c);
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

spool_status spool__cache_flush_all(spool_pool *p, const char *ctx) {
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

static void destroy_one(spool__scache *c) {
  if (c->pend.fence && cudaEventDestroy(c->pend.fence) != cudaSuccess)
    spool__clear_cuda_error();
  spool__table_free(&c->blocks);
  for (unsigned i = 0; i < SPOOL__CLASSES; i++) free(c->bins[i].ptrs);
  free(c->quar);
  free(c);
}

/* Under the pool's lock, on its device: every chunk goes back, with any leaked buffer in it
 * (the leak report has named them), once the device is idle. */
static spool_status heap_destroy_locked(spool_pool *p, bool leaks_freed, const char *ctx) {
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    /* Work may still use any chunk: none goes back (an own pool's destroy takes them). */
    char size[SPOOL__SIZE_TEXT];
    spool__format_size(p->heap.chunk_bytes, size);
    (void)spool__heap_destroy(p, cudaStreamPerThread, SPOOL__GIVE_NONE, ctx);
    return spool__fail_cuda(err, "cudaDeviceSynchronize", "%s: before giving the heap's chunks "
                            "back; %s of them stay allocated", ctx, size);
  }
  spool_status s = spool__heap_destroy(p, cudaStreamPerThread,
                                       leaks_freed ? SPOOL__GIVE_ALL : SPOOL__GIVE_FREE, ctx);
  err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess && s == SPOOL_OK)
    s = spool__fail_cuda(err, "cudaStreamSynchronize", "%s: after giving the heap's chunks "
                         "back", ctx);
  return s;
}

spool_status spool__cache_destroy(spool_pool *p, bool leaks_freed) {
  static const char ctx[] = "spool_pool_destroy";
  spool_status s = SPOOL_OK;
  pthread_mutex_lock(&p->lock);
  /* No flush first: every chunk goes back below, after one device synchronize; the fronts'
   * blocks only need to be free so that their chunks count as free of leaks. */
  for (spool__scache *c = p->caches; c; c = c->next) {
    quar_drain(p, c);
    (void)front_spill(p, c, 0, false);
  }
  if (p->heap.chunks) {
    int saved = 0;
    spool_status hs = spool__device_enter(p->device, &saved, ctx);
    if (hs == SPOOL_OK)
      hs = spool__device_leave(p->device, saved, heap_destroy_locked(p, leaks_freed, ctx), ctx);
    s = hs;
  } else {
    (void)spool__heap_destroy(p, cudaStreamPerThread, SPOOL__GIVE_NONE, ctx); /* records */
  }
  while (p->caches) {
    spool__scache *c = p->caches;
    p->caches = c->next;
    destroy_one(c);
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
  spool__scache *c = find_locked(pool, key, thread_of(key));
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
