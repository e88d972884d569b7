/* A stream's front, the hot path's part: inline for heap.c (the hot path) and census.c (the
 * whole-pool walks). The rest is in front.c. Private to those files. */
#ifndef SPOOL_FRONT_H
#define SPOOL_FRONT_H

#include "internal.h"

#define SPOOL__SEQ_BATCH 256     /* allocation numbers a front takes from the pool at a time */
#define SPOOL__PUBLISH_SLACK ((uint64_t)1 << 20) /* a move of bytes beyond it: published */
/* and a move of the buffer count beyond this either way: a stream holding hundreds of buffers
 * publishes every few dozen of its operations, not on each (its own high, c->high_buffers, is
 * exact: one stream's peak of buffers is) */
#define SPOOL__PUBLISH_SLACK_BUFFERS 8
/* A front block the stream has not taken back within this many of its frees is not one it
 * repeats: the next miss puts it into the heap, where it can merge and serve any size. */
#define SPOOL__FRONT_AGE 64
#define SPOOL__FRONT_SLOTS 8    /* thread-local lookup slots (a power of two) */
/* A stream whose buffers live through fewer than BRIEF_LIFE of its allocations on average
 * (scratch for the next kernel or two) holds each block briefly, so a block larger than it
 * asked costs memory only for that while: see brief(). */
#define SPOOL__BRIEF_LIFE 4
#define SPOOL__BRIEF_LIVE 4 /* buffers a brief stream holds at most, bounding what it can pin */
#define SPOOL__LIFE_CAP 255 /* a buffer's life counts up to this many allocations */
/* Classes above a request a hit may take a block from: eight, so at most twice the size (a
 * stream that sees many sizes then finds a block within an octave rather than one of its exact
 * class); for a brief stream 56, 128 times the size: a front of a few blocks then serves
 * every size, while a block far larger than the stream now asks is left alone, to age out. */
#define SPOOL__FIT_CLASSES 8
#define SPOOL__BRIEF_FIT_CLASSES 56

void spool__front_lock_slow(spool__scache *c);
void spool__front_revoke(spool__scache *c);

/* ---- the front's lock ---------------------------------------------------------------------- */

static inline void front_lock(spool__scache *c) {
  if (atomic_exchange_explicit(&c->lock, 1, memory_order_acquire)) spool__front_lock_slow(c);
  uint64_t owner = atomic_load_explicit(&c->owner, memory_order_relaxed);
  if (owner != 0 && owner != spool__thread_id()) spool__front_revoke(c);
}

static inline void front_unlock(spool__scache *c) {
  atomic_store_explicit(&c->lock, 0, memory_order_release);
}

/* Hits and frees by one thread under the lock many times in a row make it the owner again (a
 * stats read or another thread's visit cost it the ownership). Each time a cache is taken back
 * the streak it needs doubles (up to 2^16 times), so that a cache that other threads keep
 * visiting (frees from other streams, a monitor polling stats) settles on its lock instead of a
 * barrier per visit. Under c's lock. */
#define OWNER_STREAK 64

static inline void count_streak(spool__scache *c) {
  uint64_t me = spool__thread_id();
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
 * checks that it still owns the front. A thread that takes ownership away (revoke) clears it and
 * runs a barrier on every CPU of the process before it looks at `inside`: whichever side of that
 * barrier the owner's check falls, either the owner sees it lost the cache, or its `inside` is
 * seen and waited for. */
static inline held enter(spool__scache *c) {
  uint64_t me = spool__thread_id();
  if (atomic_load_explicit(&c->owner, memory_order_relaxed) == me) {
    atomic_store_explicit(&c->inside, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the compiler keeps the store before the load */
    if (atomic_load_explicit(&c->owner, memory_order_relaxed) == me) return HELD_OWNER;
    atomic_store_explicit(&c->inside, 0, memory_order_release);
  }
  front_lock(c);
  return HELD_LOCK;
}

static inline void leave(spool__scache *c, held h) {
  if (h == HELD_OWNER) {
    atomic_store_explicit(&c->inside, 0, memory_order_release);
  } else {
    count_streak(c);
    front_unlock(c);
  }
}

/* ---- finding a stream's front ------------------------------------------------------------ */

typedef struct spool__front_slot {
  uint64_t pool; /* pool id: ids are never reused, so a destroyed pool's slot never matches */
  cudaStream_t stream;
  spool__scache *cache;
} spool__front_slot;


extern _Thread_local spool__front_slot spool__front_slots[SPOOL__FRONT_SLOTS];

static inline cudaStream_t key_of(cudaStream_t s) { return s == cudaStreamLegacy ? NULL : s; }


static inline uint64_t thread_of(cudaStream_t key) {
  return key == cudaStreamPerThread ? spool__thread_id() : 0;
}

/* Under the pool's lock: the front of stream key used by thread (0: any thread), or NULL. */
spool__scache *spool__front_find(spool_pool *p, cudaStream_t key, uint64_t thread);
/* The first use of a stream by this thread (or its first since the slots were taken): finds or
 * makes its front under the pool's lock and gives it a slot. */
spool_status spool__front_of_slow(spool_pool *p, cudaStream_t key, spool__scache **out,
                                  const char *ctx);

/* The slot a stream's front is looked for first (and put in, when free): a thread cycling over a
 * few streams (4 in a round robin, say) finds each at its first probe, and a full scan of the
 * slots, at worst, costs less than one miss that sends it to the pool's lock. */
static inline unsigned stream_slot(cudaStream_t key) {
  return (unsigned)(((uintptr_t)key * UINT64_C(0x9E3779B97F4A7C15)) >> 61) &
         (SPOOL__FRONT_SLOTS - 1);
}

static inline spool_status cache_of(spool_pool *p, cudaStream_t stream, spool__scache **out,
                                    const char *ctx) {
  cudaStream_t key = key_of(stream);
  uint64_t id = p->id;
  unsigned i = stream_slot(key);
  for (unsigned n = 0; n < SPOOL__FRONT_SLOTS; n++, i = (i + 1) & (SPOOL__FRONT_SLOTS - 1)) {
    const spool__front_slot *slot = &spool__front_slots[i];
    if (slot->stream == key && slot->pool == id) {
      *out = slot->cache;
      return SPOOL_OK;
    }
  }
  return spool__front_of_slow(p, key, out, ctx);
}

/* ---- totals -------------------------------------------------------------------------------- */

/* Under c's lock: c's share of the pool-wide totals set to its in-use now (all of it, or the
 * bytes or the buffer count only). */
void spool__front_publish(spool_pool *p, spool__scache *c);
void spool__front_publish_bytes(spool_pool *p, spool__scache *c);
void spool__front_publish_buffers(spool_pool *p, spool__scache *c);

/* A move of the stream's bytes in use of more than PUBLISH_SLACK either way from its published
 * share goes out at once, a smaller one never by itself; so does a move of its buffer count of
 * more than PUBLISH_SLACK_BUFFERS (a stats read publishes everything). So the pool-wide totals
 * are each stream's use within 1 MiB and 8 buffers, the pool-wide peaks are exact within that
 * per other stream, and the stream's own highs (c->high and c->high_buffers, kept exact by
 * make_live, the one place its use grows) are floors for them: one stream's peaks are exact.
 * A stream whose use moves within 1 MiB and 8 buffers (a few buffers live at a time) publishes
 * nothing after its first allocation, so threads on their own streams share no written line;
 * one that moves by more (a 64 MiB pair) publishes its bytes only: a store into its share per
 * operation, and on a rise a read of every share (front.c). After an allocation, the rise: */
static inline void after_alloc(spool_pool *p, spool__scache *c) {
  if (c->c.bytes_in_use > c->pub_bytes + SPOOL__PUBLISH_SLACK) spool__front_publish_bytes(p, c);
  if (c->c.buffers_in_use > c->pub_buffers + SPOOL__PUBLISH_SLACK_BUFFERS)
    spool__front_publish_buffers(p, c);
}

/* The other way: a fall of a stream's use, by a free of its own or a move of its buffer to
 * another front. */
static inline void after_free(spool_pool *p, spool__scache *c) {
  if (c->pub_bytes > c->c.bytes_in_use + SPOOL__PUBLISH_SLACK) spool__front_publish_bytes(p, c);
  if (c->pub_buffers > c->c.buffers_in_use + SPOOL__PUBLISH_SLACK_BUFFERS)
    spool__front_publish_buffers(p, c);
}

/* ---- lifetimes ------------------------------------------------------------------------------ */

/* Whether c's stream frees its buffers soon after it allocates them, and holds few (at most
 * BRIEF_LIVE) now. Such a stream may take a front block up to 128 times the size it asks
 * (BRIEF_FIT_CLASSES), and its front may keep, beyond front_limit, up to the stream's own peak
 * of bytes in use (since the peaks were last reset): a stream of ever-changing sizes with one
 * or two buffers live then keeps about one block of its largest size and hits on every size
 * below it, where it would miss into the heap on most pairs. A stream that holds buffers long
 * keeps to front_limit and to blocks within FIT_CLASSES of the size: a long-held small buffer
 * would pin a large block. A new front counts as brief until its frees show otherwise (few live
 * at once bounds what that can pin). front_brief=off, or front_limit=0 (a front of at most one
 * block), turns it off. Under c's lock. */
static inline bool brief(const spool_pool *p, const spool__scache *c) {
  return c->life16 < SPOOL__BRIEF_LIFE * 16 && c->c.buffers_in_use <= SPOOL__BRIEF_LIVE &&
         p->cfg.front_brief && p->cfg.front_limit;
}

/* The bytes c's front may keep: front_limit, and for a brief stream (is_brief: brief(p, c)) its
 * own peak of bytes in use beyond it (its working set, whatever its sizes). Under c's lock. */
static inline uint64_t front_bound_if(const spool_pool *p, const spool__scache *c,
                                      bool is_brief) {
  return is_brief ? p->cfg.front_limit + c->high : p->cfg.front_limit;
}

static inline uint64_t front_bound(const spool_pool *p, const spool__scache *c) {
  return front_bound_if(p, c, brief(p, c));
}

/* Under c's lock: the live buffer b is being freed; its life (since born_at, the stream's
 * allocation count when it was handed out) moves the stream's mean by 1/16. A buffer handed
 * over from another stream's front counts its life on that stream's clock: at worst one
 * sample off, and wrapped differences count as the cap. */
static inline void count_life(spool__scache *c, const spool__buffer *b) {
  uint64_t life = c->c.allocs - b->born_at;
  if (life > SPOOL__LIFE_CAP) life = SPOOL__LIFE_CAP;
  c->life16 = c->life16 - (c->life16 >> 4) + (uint32_t)life;
}

static inline uint64_t next_seq(spool_pool *p, spool__scache *c) {
  if (c->seq_next == c->seq_end) {
    c->seq_next = atomic_fetch_add(&p->seq, SPOOL__SEQ_BATCH) + 1;
    c->seq_end = c->seq_next + SPOOL__SEQ_BATCH;
  }
  return c->seq_next++;
}
/* ---- bins ---------------------------------------------------------------------------------- */

static inline bool bin_push(spool__scache *c, unsigned cls, spool__buffer *b) {
  spool__bin *bin = &c->bins[cls];
  if (bin->count == bin->cap && !spool__bin_grow(bin)) return false;
  bin->items[bin->count++] = b;
  c->front_map[cls / 64] |= (uint64_t)1 << (cls % 64);
  c->front_blocks++;
  return true;
}

static inline spool__buffer *bin_pop(spool__scache *c, unsigned cls) {
  spool__bin *bin = &c->bins[cls];
  spool__buffer *b = bin->items[--bin->count];
  if (!bin->count) c->front_map[cls / 64] &= ~((uint64_t)1 << (cls % 64));
  c->front_blocks--;
  return b;
}

/* ---- the front's records ------------------------------------------------------------------- */

/* The record of the block at u that c holds (live or in a front bin), or NULL. Under c's lock. */
static inline spool__buffer *front_rec(const spool__scache *c, uintptr_t u) {
  spool__block *k = spool__index_find(&c->blocks, u);
  return k ? &k->buf : NULL;
}

/* ---- leaving the front ---------------------------------------------------------------------- */

/* Under the pool's lock: the record b of a freed block, out of every index, is remembered as
 * freed (for double-free messages) and its block goes into the heap, pending on c's stream
 * (the record goes with it): every way a block leaves a stream's keeping ends here. */
void spool__front_bury(spool_pool *p, spool__scache *c, const spool__buffer *b);
/* Under the pool's lock and c's: the blocks of c's outbox go into the heap, pending on c's
 * stream. Returns how many went (heap operations of the stream's, for its fence). */
uint32_t spool__front_drain(spool_pool *p, spool__scache *c);
/* Under the pool's lock: the blocks of c's outbox, and those of its front that the stream has
 * not taken back within its last `age` frees, go into the heap (age 0: all of them). Returns
 * how many went. */
uint32_t spool__front_spill(spool_pool *p, spool__scache *c, uint64_t age);
/* The same under c's lock too. */
uint32_t spool__front_spill_held(spool_pool *p, spool__scache *c, uint64_t age);

/* A miss's look at c's front, under the pool's lock and c's (is_brief: brief(p, c), which a
 * spill leaves as it is): its blocks not taken back within FRONT_AGE frees go into the heap,
 * but only once FRONT_AGE / 4 frees have passed since the last look (a walk of the front: not
 * on every miss, so the test is inline). A front past its bound holds only the block of the
 * size the stream asked last (front_admits), and a miss asks another size: that block is no
 * repeat, and goes at once, to merge back into its chunk (which may serve this very miss). */
static inline void spool__front_spill_due(spool_pool *p, spool__scache *c, bool is_brief) {
  if (c->c.bytes_cached > front_bound_if(p, c, is_brief)) {
    (void)spool__front_spill_held(p, c, 0);
    return;
  }
  if (c->tick - c->spilled_at < SPOOL__FRONT_AGE / 4) return;
  c->spilled_at = c->tick;
  (void)spool__front_spill_held(p, c, SPOOL__FRONT_AGE);
}

/* Under the pool's lock and c's: c's front blocks within FIT_CLASSES below class cls go into
 * the heap (spool__front_spill_below says when). */
void spool__front_spill_classes_below(spool_pool *p, spool__scache *c, unsigned cls);

/* c's stream misses a block for class cls, under the pool's lock and c's: if it is brief
 * (is_brief), its front blocks within FIT_CLASSES below cls go into the heap, where they may
 * merge into what is asked: the new block serves their sizes from now on (a stream's largest
 * block grows with its requests instead of the front holding each step). */
static inline void spool__front_spill_below(spool_pool *p, spool__scache *c, unsigned cls,
                                            bool is_brief) {
  if (is_brief) spool__front_spill_classes_below(p, c, cls);
}

/* poison=on: the ring of c's freed blocks kept out of reuse. Under c's lock, except drain,
 * which takes it under the pool's. */
bool spool__quar_grow(spool__scache *c);
uintptr_t spool__quar_pop(spool__scache *c);
void spool__quar_release(spool_pool *p, spool__scache *c, uintptr_t u);
void spool__quar_drain(spool_pool *p, spool__scache *c);

#endif
