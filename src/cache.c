/* The per-stream caches in front of the pool.
 *
 * A block freed on stream S may be handed out again on S at once: stream order makes the new
 * owner's work run after the old owner's. So each stream gets a cache of freed blocks in size
 * classes, and an allocation that finds a block of its class there makes no CUDA call (the
 * capture check aside) and takes only that stream's lock. Threads find their stream's cache
 * through a few thread-local slots, so the hit path touches no memory that threads on other
 * streams write.
 *
 * - Another stream may take a cached block only once an event recorded on S after the block was
 *   cached has completed (the fence). A stream that misses asks for one; S's own next free
 *   records it, since S is surely alive then; until it completes, the allocation goes to the
 *   pool. spool never calls CUDA on a stream a user did not just hand it: users destroy
 *   streams without telling spool.
 * - Under stream capture the cache is bypassed: a reused pointer would be baked into the graph.
 *   Blocks allocated under capture go through the uncached path and never enter a cache; a
 *   cached-path buffer freed under capture is refused (CUDA would refuse it too, and break
 *   the capture).
 * - The legacy stream has two handles (NULL and cudaStreamLegacy): one cache. cudaStreamPerThread
 *   is one handle for a different stream in every thread: one cache per thread.
 * - Flushes (spool_trim, out of memory, destroy) synchronize the device and free on the calling
 *   thread's per-thread stream; spool_stream_release frees on the stream it is given.
 * - Bounds: cache_max_block (larger blocks skip the cache) and cache_limit (bytes cached in all;
 *   a free that would pass it goes to the pool).
 * - Counters are per cache, summed for spool_stats. Each cache publishes its share of the
 *   pool-wide in-use and cached totals at once when its in-use grows past what it published,
 *   and otherwise every PUBLISH_EVERY operations: so the pool-wide peaks are exact for one
 *   stream, and with several streams may count a stream at its high of its last few operations.
 *
 * Locks: the pool's lock may be held when a cache's lock is taken, never the other way round. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "internal.h"

#include <inttypes.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

static const char ALLOC[] = "spool_alloc";
static const char FREE[] = "spool_free";

#define SEQ_BATCH 256     /* allocation numbers a cache takes from the pool at a time */
#define PUBLISH_EVERY 64  /* operations between publications of a cache's totals */
#define SLOTS 8           /* thread-local lookup slots (a power of two) */

/* ---- size classes ------------------------------------------------------------------------- */

static inline unsigned class_of(uint64_t n) {
  if (n <= 4096) return n == 0 ? 0 : (unsigned)((n - 1) >> 9);
  unsigned e = 63u - (unsigned)__builtin_clzll(n - 1); /* 2^e < n <= 2^(e+1) */
  return 8u + (e - 12u) * 8u + (unsigned)((n - 1 - ((uint64_t)1 << e)) >> (e - 3));
}

static uint64_t class_bytes(unsigned c) {
  if (c < 8) return (uint64_t)(c + 1) << 9;
  unsigned e = 12 + (c - 8) / 8, i = (c - 8) % 8;
  return ((uint64_t)1 << e) + ((uint64_t)(i + 1) << (e - 3));
}

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
  uint64_t b = atomic_fetch_add_explicit(&p->total_bytes, (uint64_t)bytes, memory_order_relaxed);
  uint64_t n =
      atomic_fetch_add_explicit(&p->total_buffers, (uint64_t)buffers, memory_order_relaxed);
  if (bytes > 0) atomic_max(&p->peak_bytes, b + (uint64_t)bytes);
  if (buffers > 0) atomic_max(&p->peak_buffers, n + (uint64_t)buffers);
}

/* Puts c's share of the pool-wide totals at its in-use high since the last publication (exact:
 * at its current in-use, for stats and peak resets), and its cached bytes. Under c's lock.
 * Differences of unsigned counters wrap to the signed change. */
static SPOOL__NOINLINE void publish(spool_pool *p, spool__scache *c, bool exact) {
  uint64_t bytes = exact ? c->c.bytes_in_use : c->win_bytes;
  uint64_t buffers = exact ? c->c.buffers_in_use : c->win_buffers;
  spool__totals_add(p, (int64_t)(bytes - c->pub_bytes), (int64_t)(buffers - c->pub_buffers));
  uint64_t delta = c->c.bytes_cached - c->pub_cached;
  c->seen_cached =
      atomic_fetch_add_explicit(&p->total_cached, delta, memory_order_relaxed) + delta;
  c->pub_bytes = bytes;
  c->pub_buffers = buffers;
  c->pub_cached = c->c.bytes_cached;
  c->win_bytes = c->c.bytes_in_use;
  c->win_buffers = c->c.buffers_in_use;
  c->ops = 0;
}

/* A new in-use high above c's published share is published at once (so one stream's peak is
 * exact); otherwise every PUBLISH_EVERY operations, at the high of that window: a stream whose
 * sizes vary (a random mix) then publishes only on new highs, not on every larger-than-last
 * allocation. */
static inline void after_op(spool_pool *p, spool__scache *c) {
  if (c->c.bytes_in_use > c->win_bytes) c->win_bytes = c->c.bytes_in_use;
  if (c->c.buffers_in_use > c->win_buffers) c->win_buffers = c->c.buffers_in_use;
  if (c->c.bytes_in_use > c->pub_bytes || c->c.buffers_in_use > c->pub_buffers ||
      ++c->ops >= PUBLISH_EVERY)
    publish(p, c, false);
}

/* Whether caching add more bytes in c would pass cache_limit, judged by the pool-wide total as
 * c saw it at its last publication and c's exact share: no read of a line other threads write,
 * so the check costs nothing on the hit path; other caches' changes since count late. */
static inline bool over_limit(const spool_pool *p, const spool__scache *c, uint64_t add) {
  uint64_t others = c->seen_cached - c->pub_cached;
  return others + c->c.bytes_cached + add > p->cfg.cache_limit;
}

static inline uint64_t next_seq(spool_pool *p, spool__scache *c) {
  if (c->seq_next == c->seq_end) {
    c->seq_next = atomic_fetch_add(&p->seq, SEQ_BATCH) + 1;
    c->seq_end = c->seq_next + SEQ_BATCH;
  }
  return c->seq_next++;
}

/* ---- bins ----------------------------------------------------------------------------------- */

static SPOOL__NOINLINE bool bin_grow(spool__bin *bin) {
  uint32_t cap = bin->cap ? bin->cap * 2 : 8;
  uintptr_t *ptrs = realloc(bin->ptrs, cap * sizeof *ptrs);
  if (!ptrs) return false;
  bin->ptrs = ptrs;
  bin->cap = cap;
  return true;
}

static inline bool bin_push(spool__bin *bin, uintptr_t u) {
  if (bin->count == bin->cap && !bin_grow(bin)) return false;
  bin->ptrs[bin->count++] = u;
  return true;
}

/* Removes the entry at i, keeping the order (oldest first). */
static void bin_remove(spool__bin *bin, uint32_t i) {
  memmove(&bin->ptrs[i], &bin->ptrs[i + 1], (bin->count - i - 1) * sizeof *bin->ptrs);
  bin->count--;
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
 * stream that sees many sizes (a log-uniform mix) then needs a block per octave rather than
 * one per class, which keeps both the hit rate up and the memory held down. */
#define FIT_CLASSES 8

/* Pops the most recently cached block of class cls, or of the nearest class above it within
 * FIT_CLASSES; 0 when there is none. Under c's lock. */
static inline uintptr_t pop(spool__scache *c, unsigned cls) {
  unsigned last = cls + FIT_CLASSES < SPOOL__CLASSES ? cls + FIT_CLASSES : SPOOL__CLASSES - 1;
  for (unsigned k = cls; k <= last; k++) {
    spool__bin *bin = &c->bins[k];
    if (bin->count) return bin->ptrs[--bin->count];
  }
  return 0;
}

/* Under c's lock: the cached block b becomes the caller's buffer. */
static inline void take_hit(spool_pool *p, spool__scache *c, spool__buffer *b, size_t size,
                            cudaStream_t stream, const spool__site *site) {
  c->c.hits++;
  c->c.bytes_cached -= b->bytes;
  make_live(p, c, b, size, stream, site);
}

/* A hit with poisoning: the memset runs without the lock, the block out of its bin meanwhile. */
static spool_status hit_poisoned(spool_pool *p, spool__scache *c, uintptr_t u, size_t size,
                                 cudaStream_t stream, const spool__site *site) {
  spool_status s = spool__poison_new(p, (void *)u, size, stream);
  lock(c);
  spool__buffer *b = spool__table_lookup(&c->blocks, u);
  if (s == SPOOL_OK) {
    take_hit(p, c, b, size, stream, site);
  } else if (!bin_push(&c->bins[b->cls], u)) {
    /* Another thread filled the bin meanwhile and there is no host memory to grow it. */
    spool__buffer gone;
    c->c.bytes_cached -= b->bytes;
    spool__table_remove(&c->blocks, u, &gone);
    cudaError_t err = cudaFreeAsync((void *)u, stream);
    if (err != cudaSuccess) spool__also_failed(s, err, "giving the block back to the pool");
  }
  unlock(c);
  return s;
}

/* Takes the oldest block of class cls from c when c's fence says its stream is past the free;
 * otherwise asks c's owner for a newer fence. Under the pool's lock and c's. The event is the
 * pool's own, so querying it is safe even when c's stream is gone. */
static bool take_fenced(spool_pool *p, spool__scache *c, unsigned cls, spool__buffer *out) {
  spool__bin *bin = &c->bins[cls];
  if (bin->count == 0) return false;
  if (c->fence_pending) {
    /* An event query is "potentially unsafe" to CUDA: in relaxed mode it leaves another
     * thread's global-mode capture alone. */
    enum cudaStreamCaptureMode mode;
    bool relaxed = spool__relaxed_enter(&mode);
    cudaError_t err = cudaEventQuery(c->fence);
    spool__relaxed_leave(relaxed, mode);
    if (err == cudaSuccess) {
      c->safe_tick = c->fence_tick;
      c->fence_pending = false;
    } else {
      spool__clear_cuda_error(); /* not ready, or failed: not this time */
    }
  }
  spool__buffer *b = spool__table_lookup(&c->blocks, bin->ptrs[0]);
  if (b->tick > c->safe_tick) {
    c->fence_wanted = true;
    return false;
  }
  bin_remove(bin, 0);
  c->c.bytes_cached -= b->bytes;
  spool__table_remove(&c->blocks, b->ptr, out);
  after_op(p, c);
  return true;
}

/* At a free on c's own stream, which is surely alive then: records the fence another stream
 * asked for. A CUDA call on a free, only when another stream wants c's blocks. Under c's lock;
 * failures only mean no fence this time. */
static void record_fence(spool__scache *c, cudaStream_t stream) {
  c->fence_wanted = false;
  if (!c->fence && cudaEventCreateWithFlags(&c->fence, cudaEventDisableTiming) != cudaSuccess) {
    spool__clear_cuda_error();
    c->fence = NULL;
    return;
  }
  if (cudaEventRecord(c->fence, stream) != cudaSuccess) {
    spool__clear_cuda_error();
    return;
  }
  c->fence_tick = c->tick;
  c->fence_pending = true;
}

/* A block of class cls that another stream cached and is done with, or false. */
static bool steal(spool_pool *p, const spool__scache *self, unsigned cls, spool__buffer *out) {
  bool got = false;
  char message[SPOOL__MESSAGE];
  spool__save_error(message); /* the fence's failures are not the allocation's */
  pthread_mutex_lock(&p->lock);
  for (spool__scache *c = p->caches; c && !got; c = c->next) {
    if (c == self) continue;
    lock(c); /* take_fenced reads the bin under the lock: no peeking at another thread's bins */
    got = take_fenced(p, c, cls, out);
    unlock(c);
  }
  pthread_mutex_unlock(&p->lock);
  spool__restore_error(message);
  return got;
}

/* Enters a block new to c (from the pool or another stream) as the caller's buffer: a miss,
 * since the stream's own cache could not serve it. */
static spool_status adopt_live(spool_pool *p, spool__scache *c, const spool__buffer *from,
                               size_t size, cudaStream_t stream, const spool__site *site) {
  spool__buffer b = *from;
  lock(c);
  spool_status s = spool__table_insert(&c->blocks, &b);
  if (s == SPOOL_OK) {
    c->c.misses++;
    make_live(p, c, spool__table_lookup(&c->blocks, b.ptr), size, stream, site);
  }
  unlock(c);
  return s;
}

static spool_status miss(spool_pool *p, spool__scache *c, void **ptr, size_t size,
                         cudaStream_t stream, const spool__site *site) {
  unsigned cls = class_of(size);
  spool__buffer b = {.bytes = class_bytes(cls), .cls = (uint16_t)cls};
  bool stolen = steal(p, c, cls, &b);
  void *u = (void *)b.ptr;
  spool_status s = stolen ? SPOOL_OK : spool__pool_alloc(p, &u, (size_t)b.bytes, stream);
  if (s != SPOOL_OK) return s;
  b.ptr = (uintptr_t)u;
  s = spool__poison_new(p, u, size, stream);
  if (s == SPOOL_OK) s = adopt_live(p, c, &b, size, stream, site);
  if (s != SPOOL_OK) {
    cudaError_t err = cudaFreeAsync(u, stream); /* the caller never sees it */
    if (err != cudaSuccess) spool__also_failed(s, err, "giving the block back");
    return s;
  }
  if (!stolen) {
    pthread_mutex_lock(&p->lock); /* the address is live again */
    spool__grave_forget(&p->graves, b.ptr);
    pthread_mutex_unlock(&p->lock);
  }
  *ptr = u;
  return SPOOL_OK;
}

/* The stream must be of the pool's device (issue 6): asked once per cache for a created stream,
 * whose device never changes, and every time for the handles that mean "the current device's
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
  unsigned cls = class_of(size);
  held h = enter(c);
  uintptr_t u = pop(c, cls);
  if (u && !p->cfg.poison) take_hit(p, c, spool__table_lookup(&c->blocks, u), size, stream, site);
  leave(c, h);
  if (u && p->cfg.poison) *s = hit_poisoned(p, c, u, size, stream, site);
  else if (!u) *s = miss(p, c, ptr, size, stream, site);
  if (u && *s == SPOOL_OK) *ptr = (void *)u;
  return true;
}

/* ---- free --------------------------------------------------------------------------------- */

static inline void count_free(spool_pool *p, spool__scache *c, uint64_t size) {
  c->c.frees++;
  c->c.bytes_in_use -= size;
  c->c.buffers_in_use--;
  after_op(p, c);
}

/* Under c's lock: the live block b, freed on stream (c's), goes into c's bin. False when the
 * bin cannot grow. */
static inline bool to_bin(spool_pool *p, spool__scache *c, spool__buffer *b, cudaStream_t stream,
                   const spool__site *site) {
  if (!bin_push(&c->bins[b->cls], b->ptr)) return false;
  b->state = SPOOL__CACHED;
  b->died = *site;
  b->tick = ++c->tick;
  if (c->fence_wanted && !c->fence_pending) record_fence(c, stream);
  c->c.bytes_cached += b->bytes;
  count_free(p, c, b->size);
  return true;
}

/* Under c's lock, for a live block that does not simply go into the bin (poisoning, the limit,
 * no host memory): poisons it, then caches it or gives it to the pool. On success with the pool,
 * *gone is the record to bury once the lock is dropped. */
static spool_status release_slow(spool_pool *p, spool__scache *c, spool__buffer *b,
                                 cudaStream_t stream, const spool__site *site,
                                 spool__buffer *gone, bool *buried) {
  spool_status s = spool__poison_freed(p, (void *)b->ptr, (size_t)b->size, stream);
  if (s != SPOOL_OK) return s;
  if (!over_limit(p, c, b->bytes) && to_bin(p, c, b, stream, site)) return SPOOL_OK;
  cudaError_t err = cudaFreeAsync((void *)b->ptr, stream);
  if (err != cudaSuccess) {
    char size[SPOOL__SIZE_TEXT];
    return spool__fail_cuda(err, "cudaFreeAsync", "%s: %p (%s, allocation #%" PRIu64 ") on "
                            "stream %p; it stays allocated%s", FREE, (void *)b->ptr,
                            spool__format_size(b->size, size), b->seq, (void *)stream,
                            p->cfg.poison ? ", but its contents are already overwritten with "
                                            "0xDD" : "");
  }
  spool__table_remove(&c->blocks, b->ptr, gone);
  gone->died = *site;
  count_free(p, c, gone->size);
  *buried = true;
  return SPOOL_OK;
}

/* free_live's rare cases: capture, poisoning, the limit, no host memory. */
static SPOOL__NOINLINE spool_status free_live_slow(spool_pool *p, spool__scache *c,
                                                  spool__buffer *b, cudaStream_t stream,
                                                  const spool__site *site, bool capturing,
                                                  held h, bool pool_locked) {
  if (capturing) {
    /* CUDA refuses to free in a graph what the graph did not allocate, and the refusal breaks
     * the capture; a cache would hand the block out before the graph ever ran. */
    leave(c, h);
    return spool__fail(SPOOL_ERR_INVALID,
                       "%s: %p was allocated outside the capture that stream %p is in; freeing "
                       "it inside would break the capture (a graph frees only what it "
                       "allocated): free it after cudaStreamEndCapture; nothing was freed", FREE,
                       (void *)b->ptr, (void *)stream);
  }
  spool__buffer gone;
  bool buried = false;
  spool_status s = release_slow(p, c, b, stream, site, &gone, &buried);
  leave(c, h);
  if (buried && pool_locked) spool__grave_bury(&p->graves, &gone);
  else if (buried) spool__bury(p, &gone, site);
  return s;
}

/* Frees the live block b of c's table. c is held as h; leaves it. With the pool's lock held
 * (pool_locked), the record of a block given to the pool is buried at once. */
static inline spool_status free_live(spool_pool *p, spool__scache *c, spool__buffer *b,
                                     cudaStream_t stream, const spool__site *site,
                                     bool capturing, held h, bool pool_locked) {
  if (!capturing && !p->cfg.poison && !over_limit(p, c, b->bytes) &&
      to_bin(p, c, b, stream, site)) {
    leave(c, h);
    return SPOOL_OK;
  }
  return free_live_slow(p, c, b, stream, site, capturing, h, pool_locked);
}

/* Capture state of the freeing stream (capture_check=on). Every block a cache holds was
 * allocated outside any capture (captures bypass the caches), so a cached buffer freed inside
 * one must be refused: taken into the bin, it would be handed out again before the graph ever
 * ran, and each replay would write into its next owner's data. That costs a second driver call
 * per pair; capture_check=off drops both. */
static spool_status free_capturing(const spool_pool *p, cudaStream_t stream, bool *capturing) {
  *capturing = false;
  if (!p->cfg.capture_check) return SPOOL_OK;
  return spool__stream_capturing(stream, capturing, FREE);
}

/* The freeing stream's cache, and whether that stream is being captured. */
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

/* Takes ptr's live record out of whichever other cache holds it. Under the pool's lock. */
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
      c->c.bytes_in_use -= out->size; /* the freeing stream's cache takes it over */
      c->c.buffers_in_use--;
      after_op(p, c);
      r = SPOOL__FREE_DONE;
    }
    unlock(c);
  }
  return r;
}

/* The move and the free happen under the pool's lock, so that a concurrent free of the same
 * pointer finds it either live in its first cache or freed in the second (a double free), and
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
      unlock(c);
      /* No host memory to keep the record: the block goes to the pool, unrecorded. */
      cudaError_t err = cudaFreeAsync(ptr, stream);
      if (err != cudaSuccess) spool__also_failed(*s, err, "freeing it uncached");
      else *s = SPOOL_OK;
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
    publish(p, c, true);
    const spool__cache_counters *k = &c->c;
    cc->bytes_in_use += k->bytes_in_use;
    cc->buffers_in_use += k->buffers_in_use;
    cc->bytes_cached += k->bytes_cached;
    cc->allocs += k->allocs;
    cc->frees += k->frees;
    cc->bytes_allocated += k->bytes_allocated;
    cc->hits += k->hits;
    cc->misses += k->misses;
    cc->flushes += k->flushes;
    unlock(c);
  }
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
  spool__cache_sum(p, &ignored); /* publishes every cache */
  atomic_store(&p->peak_bytes, atomic_load(&p->total_bytes));
  atomic_store(&p->peak_buffers, atomic_load(&p->total_buffers));
}

/* ---- flushes --------------------------------------------------------------------------------- */

/* Gives c's cached blocks back to the pool on stream fs. Under the pool's lock (it buries
 * them). Stops at the first failure, which leaves that block cached. */
static spool_status flush_on(spool_pool *p, spool__scache *c, cudaStream_t fs, const char *ctx) {
  spool_status s = SPOOL_OK;
  uint64_t given = 0;
  lock(c);
  for (unsigned cls = 0; cls < SPOOL__CLASSES && s == SPOOL_OK; cls++) {
    spool__bin *bin = &c->bins[cls];
    while (bin->count && s == SPOOL_OK) {
      uintptr_t u = bin->ptrs[bin->count - 1];
      cudaError_t err = cudaFreeAsync((void *)u, fs);
      if (err != cudaSuccess) {
        s = spool__fail_cuda(err, "cudaFreeAsync", "%s: giving back the blocks cached for "
                             "stream %p", ctx, (void *)c->stream);
        break;
      }
      bin->count--;
      spool__buffer b;
      spool__table_remove(&c->blocks, u, &b);
      c->c.bytes_cached -= b.bytes;
      spool__grave_bury(&p->graves, &b);
      given++;
    }
  }
  if (given) c->c.flushes++;
  publish(p, c, false);
  unlock(c);
  return s;
}

static bool anything_cached(spool_pool *p) {
  bool any = false;
  for (spool__scache *c = p->caches; c && !any; c = c->next) {
    lock(c);
    any = c->c.bytes_cached > 0;
    unlock(c);
  }
  return any;
}

/* Under the pool's lock, on its device. The caches' streams are never touched: users destroy
 * streams without telling spool. Once the device is idle no stream's work can still use a
 * cached block, and this thread's per-thread stream may free them all; waiting for it makes
 * the memory the pool's again before the caller trims. */
static spool_status flush_locked(spool_pool *p, const char *ctx) {
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaDeviceSynchronize", "%s: before giving the cached blocks "
                            "back (they stay cached)", ctx);
  spool_status s = SPOOL_OK;
  for (spool__scache *c = p->caches; c && s == SPOOL_OK; c = c->next)
    s = flush_on(p, c, cudaStreamPerThread, ctx);
  err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess && s == SPOOL_OK)
    s = spool__fail_cuda(err, "cudaStreamSynchronize", "%s: after giving the cached blocks back",
                         ctx);
  return s;
}

spool_status spool__cache_flush_all(spool_pool *p, const char *ctx) {
  pthread_mutex_lock(&p->lock);
  spool_status s = SPOOL_OK;
  if (anything_cached(p)) {
    int saved = 0;
    s = spool__device_enter(p->device, &saved, ctx);
    if (s == SPOOL_OK) s = spool__device_leave(p->device, saved, flush_locked(p, ctx), ctx);
  }
  pthread_mutex_unlock(&p->lock);
  return s;
}

static void destroy_one(spool__scache *c) {
  if (c->fence && cudaEventDestroy(c->fence) != cudaSuccess) spool__clear_cuda_error();
  spool__table_free(&c->blocks);
  for (unsigned i = 0; i < SPOOL__CLASSES; i++) free(c->bins[i].ptrs);
  free(c);
}

spool_status spool__cache_destroy(spool_pool *p) {
  spool_status s = spool__cache_flush_all(p, "spool_pool_destroy");
  while (p->caches) {
    spool__scache *c = p->caches;
    p->caches = c->next;
    destroy_one(c);
  }
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
  if (c && s == SPOOL_OK) s = flush_on(pool, c, stream, ctx);
  if (c && s == SPOOL_OK) {
    lock(c);
    cudaEvent_t fence = c->fence;
    c->fence = NULL;
    c->fence_pending = false;
    unlock(c);
    cudaError_t err = fence ? cudaEventDestroy(fence) : cudaSuccess;
    if (err != cudaSuccess)
      s = spool__fail_cuda(err, "cudaEventDestroy", "%s: the fence of stream %p", ctx,
                           (void *)stream);
  }
  pthread_mutex_unlock(&pool->lock);
  return s;
}
