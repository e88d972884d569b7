/* A stream's front (see heap.c): its lock and ownership, how a thread finds it, its share of
 * the pool-wide totals, its bins of ready blocks and quarantine, and the ways a block leaves it
 * for the heap (chunks.c). The hot path's part of each is inline in front.h; what it reaches
 * rarely is here.
 *
 * Locks: the pool's lock may be held when a front's lock is taken; a thread holding a front
 * only tries the pool's lock (pthread_mutex_trylock), and gives the front up before it waits
 * for it. The heap is under the pool's lock. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "front.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the front's lock ---------------------------------------------------------------------- */

/* A spin lock: held for a few dozen instructions on the hit path, by one thread per stream in
 * the common case. Spinning gives way to the scheduler so that a preempted holder can finish. */
void spool__front_lock_slow(spool__scache *c) {
  unsigned spins = 0;
  do {
    while (atomic_load_explicit(&c->lock, memory_order_relaxed))
      if (++spins >= 64) sched_yield();
  } while (atomic_exchange_explicit(&c->lock, 1, memory_order_acquire));
}

/* Takes the cache from its owner (see enter): no owner any more, then the process-wide barrier,
 * after which the owner either sees that it owns nothing or is seen inside, and is waited for.
 * Under c's lock. */
void spool__front_revoke(spool__scache *c) {
  atomic_store_explicit(&c->owner, 0, memory_order_relaxed);
  if (c->revokes < 16) c->revokes++;
  if (!spool__barrier_all()) {
    /* Never seen after a successful registration; a pause lets any store in flight land. */
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  while (atomic_load_explicit(&c->inside, memory_order_acquire)) sched_yield();
}

/* ---- finding a stream's front ------------------------------------------------------------ */

_Thread_local spool__front_slot spool__front_slots[SPOOL__FRONT_SLOTS];
static _Thread_local unsigned slot_next; /* the slot the next new stream takes */

/* Under the pool's lock. */
spool__scache *spool__front_find(spool_pool *p, cudaStream_t key, uint64_t thread) {
  for (spool__scache *c = p->caches; c; c = c->next)
    if (c->stream == key && c->thread == thread) return c;
  return NULL;
}

/* Pools destroyed so far, and the ids of the last DEAD_RING of them. A thread's slots of a
 * destroyed pool would never match again (ids are not reused) but would keep a later pool's
 * streams off their own slots, so that each lookup probed past them: a thread clears them at its
 * next slow lookup. */
#define DEAD_RING 64
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t dead_count;
static uint64_t dead_ids[DEAD_RING]; /* guarded by dead_lock */
static _Thread_local uint64_t dead_seen; /* dead_count when this thread last cleared its slots */

void spool__front_pool_gone(uint64_t pool_id) {
  pthread_mutex_lock(&dead_lock);
  uint64_t n = atomic_load_explicit(&dead_count, memory_order_relaxed);
  dead_ids[n % DEAD_RING] = pool_id;
  atomic_store_explicit(&dead_count, n + 1, memory_order_relaxed);
  pthread_mutex_unlock(&dead_lock);
}

/* Empties this thread's slots of pools destroyed since it last looked; when more went than the
 * ring remembers, every slot (a live stream's slot is found again on its next slow lookup). */
static void clear_dead_slots(void) {
  if (atomic_load_explicit(&dead_count, memory_order_relaxed) == dead_seen) return;
  pthread_mutex_lock(&dead_lock);
  uint64_t n = atomic_load_explicit(&dead_count, memory_order_relaxed);
  bool all = n - dead_seen > DEAD_RING;
  for (unsigned i = 0; i < SPOOL__FRONT_SLOTS; i++) {
    spool__front_slot *slot = &spool__front_slots[i];
    bool dead = all;
    for (uint64_t k = dead_seen; !dead && k < n; k++) dead = dead_ids[k % DEAD_RING] == slot->pool;
    if (dead) *slot = (spool__front_slot){0, NULL, NULL};
  }
  dead_seen = n;
  pthread_mutex_unlock(&dead_lock);
}

/* The slot a new stream takes: the first empty one from its own (stream_slot), else the next
 * in a round robin. */
static unsigned free_slot(cudaStream_t key) {
  clear_dead_slots();
  unsigned i = stream_slot(key);
  for (unsigned n = 0; n < SPOOL__FRONT_SLOTS; n++, i = (i + 1) & (SPOOL__FRONT_SLOTS - 1))
    if (!spool__front_slots[i].cache) return i;
  return slot_next++ % SPOOL__FRONT_SLOTS;
}

/* Under the pool's lock: a new front takes the next share slot, while there is one. */
static void give_share(spool_pool *p, spool__scache *c) {
  unsigned n = atomic_load_explicit(&p->shares_used, memory_order_relaxed);
  if (n == SPOOL__SHARES) return;
  c->share = &p->shares[n];
  atomic_store_explicit(&p->shares_used, n + 1, memory_order_release);
}

/* The first use of a stream by this thread (or its first since SPOOL__FRONT_SLOTS other
 * streams took the slots): find or make its front under the pool's lock, and give it a slot. */
spool_status spool__front_of_slow(spool_pool *p, cudaStream_t key, spool__scache **out,
                                  const char *ctx) {
  uint64_t thread = thread_of(key);
  pthread_mutex_lock(&p->lock);
  spool__scache *c = spool__front_find(p, key, thread);
  if (!c && (c = spool__zalloc_aligned(sizeof *c)) != NULL) {
    c->stream = key;
    c->thread = thread;
    c->may_own = p->cfg.cache_owner && spool__barrier_available();
    if (c->may_own) atomic_store_explicit(&c->owner, spool__thread_id(), memory_order_relaxed);
    give_share(p, c);
    c->next = p->caches;
    p->caches = c;
  }
  pthread_mutex_unlock(&p->lock);
  if (!c)
    return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the cache of stream %p",
                       ctx, (void *)key);
  spool__front_slots[free_slot(key)] = (spool__front_slot){p->id, key, c};
  *out = c;
  return SPOOL_OK;
}

/* ---- totals -------------------------------------------------------------------------------- */

static void atomic_max(atomic_uint_fast64_t *a, uint64_t v) {
  uint_fast64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (cur < v &&
         !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

/* The shares' sum of bytes (or of buffers): each share read once, as its stream last stored it.
 * A share written on another thread just now may be missed (the stores of two threads
 * publishing at once may each pass the other's loads): the peak then misses a rise that two
 * streams made at the same moment, not one that either made alone. */
static inline uint64_t shares_sum(spool_pool *p, bool bytes) {
  unsigned n = atomic_load_explicit(&p->shares_used, memory_order_acquire);
  uint64_t sum = atomic_load_explicit(bytes ? &p->total_bytes : &p->total_buffers,
                                      memory_order_relaxed);
  for (unsigned i = 0; i < n; i++)
    sum += atomic_load_explicit(bytes ? &p->shares[i].bytes : &p->shares[i].buffers,
                                memory_order_relaxed);
  return sum;
}

uint64_t spool__totals_bytes(spool_pool *p) { return shares_sum(p, true); }

uint64_t spool__totals_buffers(spool_pool *p) { return shares_sum(p, false); }

void spool__totals_add(spool_pool *p, int64_t bytes, int64_t buffers) {
  if (bytes) {
    atomic_fetch_add_explicit(&p->total_bytes, (uint64_t)bytes, memory_order_relaxed);
    if (bytes > 0) atomic_max(&p->peak_bytes, shares_sum(p, true));
  }
  if (buffers) {
    atomic_fetch_add_explicit(&p->total_buffers, (uint64_t)buffers, memory_order_relaxed);
    if (buffers > 0) atomic_max(&p->peak_buffers, shares_sum(p, false));
  }
}

/* One of c's two figures (its bytes or its buffers in use) published as it is now: a store
 * into its share, judging the peak on a rise, or without a share the change added to the
 * totals. Under c's lock. Differences of unsigned counters wrap to the signed change. */
static inline void publish_figure(spool_pool *p, spool__scache *c, bool bytes) {
  uint64_t *pub = bytes ? &c->pub_bytes : &c->pub_buffers;
  uint64_t now = bytes ? c->c.bytes_in_use : c->c.buffers_in_use;
  if (!c->share) {
    int64_t d = (int64_t)(now - *pub);
    spool__totals_add(p, bytes ? d : 0, bytes ? 0 : d);
  } else {
    atomic_store_explicit(bytes ? &c->share->bytes : &c->share->buffers, now,
                          memory_order_relaxed);
    if (now > *pub) atomic_max(bytes ? &p->peak_bytes : &p->peak_buffers, shares_sum(p, bytes));
  }
  *pub = now;
}

void spool__front_publish_bytes(spool_pool *p, spool__scache *c) { publish_figure(p, c, true); }

/* The buffer count's share (see after_alloc and after_free for when). */
void spool__front_publish_buffers(spool_pool *p, spool__scache *c) {
  publish_figure(p, c, false);
}

void spool__front_publish(spool_pool *p, spool__scache *c) {
  spool__front_publish_bytes(p, c);
  spool__front_publish_buffers(p, c);
}

/* ---- bins ---------------------------------------------------------------------------------- */

void spool__front_bury(spool_pool *p, spool__scache *c, const spool__buffer *b) {
  spool__grave_bury(&p->graves, b);
  spool__heap_release(p, &c->pend, b->blk);
}

/* Under c's lock and the pool's: the freed block b, which c still indexes, leaves it for the
 * heap (pending on c's stream) and the graveyard. Whatever else kept it is the caller's. */
static void leave_front(spool_pool *p, spool__scache *c, spool__buffer *b) {
  spool__index_remove(&c->blocks, b->ptr);
  spool__front_bury(p, c, b);
}

/* The same for a front block b (its bin entry is the caller's to drop). */
static void spill_one(spool_pool *p, spool__scache *c, spool__buffer *b) {
  c->c.bytes_cached -= b->bytes;
  leave_front(p, c, b);
}

/* Under c's lock and the pool's: the first (oldest) n blocks of bin cls go into the heap. */
static void spill_head(spool_pool *p, spool__scache *c, unsigned cls, uint32_t n) {
  spool__bin *bin = &c->bins[cls];
  for (uint32_t i = 0; i < n; i++) spill_one(p, c, bin->items[i]);
  memmove(bin->items, bin->items + n, (bin->count - n) * sizeof *bin->items);
  bin->count -= n;
  c->front_blocks -= n;
  if (!bin->count) c->front_map[cls / 64] &= ~((uint64_t)1 << (cls % 64));
}

uint32_t spool__front_drain(spool_pool *p, spool__scache *c) {
  uint32_t n = c->outbox_count;
  /* The neighbours each release may merge with are cold: their loads overlap. */
  for (uint32_t i = 0; i < n; i++) {
    __builtin_prefetch(c->outbox[i]->blk->prev);
    __builtin_prefetch(c->outbox[i]->blk->next);
  }
  for (uint32_t i = 0; i < n; i++) leave_front(p, c, c->outbox[i]);
  c->outbox_count = 0;
  c->outbox_bytes = 0;
  return n;
}

/* Within a bin the oldest lie first. */
uint32_t spool__front_spill_held(spool_pool *p, spool__scache *c, uint64_t age) {
  uint32_t spilled = spool__front_drain(p, c);
  uint64_t keep_from = c->tick > age ? c->tick - age : 0; /* with age > 0 */
  for (unsigned w = 0; w < SPOOL__BIN_WORDS; w++) {
    for (uint64_t m = c->front_map[w]; m; m &= m - 1) {
      unsigned cls = w * 64 + (unsigned)__builtin_ctzll(m);
      const spool__bin *bin = &c->bins[cls];
      uint32_t old = 0;
      while (old < bin->count &&
             (age == 0 || ((const spool__buffer *)bin->items[old])->freed_at < keep_from))
        old++;
      if (old) spill_head(p, c, cls, old);
      spilled += old;
    }
  }
  return spilled;
}

uint32_t spool__front_spill(spool_pool *p, spool__scache *c, uint64_t age) {
  front_lock(c);
  uint32_t spilled = spool__front_spill_held(p, c, age);
  front_unlock(c);
  return spilled;
}

void spool__front_spill_classes_below(spool_pool *p, spool__scache *c, unsigned cls) {
  unsigned lo = cls > SPOOL__FIT_CLASSES ? cls - SPOOL__FIT_CLASSES : 0;
  for (unsigned k = lo; k < cls; k++)
    if (c->bins[k].count) spill_head(p, c, k, c->bins[k].count);
}

/* ---- quarantine (poison=on) ---------------------------------------------------------------- */

/* The ring grows in place: the entries that wrapped round to its start move up past the old
 * end, so the ring reads in order from quar_head again. */
bool spool__quar_grow(spool__scache *c) {
  size_t cap;
  uint32_t old = c->quar_cap;
  uintptr_t *q = old < UINT32_MAX / 2 ? spool__grow_array(c->quar, old, sizeof *q, 16, &cap)
                                      : NULL;
  if (!q) return false;
  uint32_t wrapped = c->quar_head + c->quar_count > old ? c->quar_head + c->quar_count - old : 0;
  memcpy(q + old, q, wrapped * sizeof *q);
  c->quar = q;
  c->quar_cap = (uint32_t)cap;
  return true;
}

/* The oldest quarantined block, out of the ring (its record stays, freed, in c's table until it
 * goes into the heap). Under c's lock. */
uintptr_t spool__quar_pop(spool__scache *c) {
  uintptr_t u = c->quar[c->quar_head];
  c->quar_head = (c->quar_head + 1) % c->quar_cap;
  c->quar_count--;
  c->quar_bytes -= front_rec(c, u)->bytes;
  return u;
}

/* Under the pool's lock and c's: the quarantined block u goes into the heap. */
void spool__quar_release(spool_pool *p, spool__scache *c, uintptr_t u) {
  spool__block *k = spool__index_remove(&c->blocks, u);
  if (k) spool__front_bury(p, c, &k->buf);
}

/* Under the pool's lock: everything c keeps in quarantine goes into the heap. */
void spool__quar_drain(spool_pool *p, spool__scache *c) {
  front_lock(c);
  while (c->quar_count) spool__quar_release(p, c, spool__quar_pop(c));
  front_unlock(c);
}

