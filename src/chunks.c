/* The stream-ordered heap under the per-stream fronts: chunks taken from the pool with
 * cudaMallocFromPoolAsync, and blocks placed in them by a segregated near best fit (FIT_WALK)
 * that splits on allocation and coalesces on free (boundary tags: each block knows its
 * neighbours). One index holds every free range, shared or pending on a stream (each marked
 * with its owner): a fit walks one set of lists, and a range its fence shares stays where it
 * is unless it merges.
 *
 * Why a heap and not size-class caches: a block that can be split and merged serves any later
 * size, so a stream keeps about what it uses instead of one block of every size it has seen,
 * and memory moves between streams and back to the pool as whole chunks.
 *
 * Stream order decides who may reuse a free range:
 * - A range freed on stream S is pending on S: S may reuse it at once (stream order puts the
 *   new owner's work after the old owner's); no other stream may.
 * - Every fence_every heap operations on S, an event is recorded on S (S is alive then: the
 *   caller just handed it over). Once it has completed, every range S freed before it is shared:
 *   any stream may take it, and it merges with its shared neighbours.
 * - A new chunk's remainder is pending on the stream it was allocated on: the pool may have
 *   handed out memory whose previous use on that stream is still queued.
 * - spool never calls CUDA on a stream it was not just handed; the fence events are its own,
 *   so querying them is safe after the stream is gone.
 *
 * Three bands keep small requests out of big chunks (a 512 B block left in a 32 MiB chunk would
 * pin it): up to 1 MiB in 2 MiB chunks, up to 32 MiB in 32 MiB chunks, larger ones in a chunk of
 * their own (rounded to 2 MiB). A chunk whose blocks are all free and shared goes back to the
 * pool once it has stayed so for chunk_idle heap allocations, and at trim, out of memory, stream
 * release and destroy. The pool stays the only source of device memory.
 *
 * Everything here runs under the pool's lock. */
#include "capture.h"
#include "trace_format.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SLAB 256       /* block records allocated at a time */

static const uint64_t BAND_MAX[SPOOL__BANDS] = {SPOOL__BAND0_MAX, SPOOL__BAND1_MAX, UINT64_MAX};
/* A band's chunk is the size of its largest request: the offline models and the sim put a
 * stream's footprint at about one chunk of its band, so a larger chunk is memory a stream
 * holds for nothing (64 MiB chunks: random on 4 streams 330 MiB against 204 MiB). */
static const uint64_t BAND_CHUNK[SPOOL__BANDS] = {(uint64_t)2 << 20, (uint64_t)32 << 20, 0};
#define GRANULE ((uint64_t)2 << 20) /* the pool's own rounding on current GPUs */

uint64_t spool__chunk_size(uint64_t need) {
  uint64_t chunk = BAND_CHUNK[spool__band_of(need)];
  if (chunk >= need) return chunk;
  return (need + GRANULE - 1) / GRANULE * GRANULE;
}

static bool has_used(const spool__chunk *c);

/* ---- block records ---------------------------------------------------------------------- */

typedef struct slab {
  struct slab *next;
  spool__block blocks[SLAB];
} slab;

static spool__block *record_new(spool__heap *h) {
  if (!h->spare) {
    slab *s = spool__zalloc_aligned(sizeof *s); /* its records are line-aligned */
    if (!s) return NULL;
    s->next = h->slabs;
    h->slabs = s;
    for (int i = 0; i < SLAB; i++) {
      s->blocks[i].next = h->spare;
      h->spare = &s->blocks[i];
    }
  }
  spool__block *b = h->spare;
  h->spare = b->next;
  return b; /* its callers set every field through block_init */
}

/* The heap's fields of a record; links and owner empty. The buffer's record inside it is the
 * front's (heap.c), written when the block is handed out: not zeroed here. */
static void block_init(spool__block *b, uintptr_t addr, uint64_t bytes, spool__chunk *c,
                       uint8_t band, uint8_t state) {
  b->addr = addr;
  b->band = band; /* c's, passed in: a carve need not read the chunk */
  b->bytes = bytes;
  b->prev = b->next = b->fprev = b->fnext = b->pprev = b->pnext = NULL;
  b->chunk = c;
  b->owner = NULL;
  b->tick = 0;
  b->bin = 0;
  b->state = state;
}

static void record_drop(spool__heap *h, spool__block *b) {
  b->next = h->spare;
  b->state = SPOOL__BLOCK_GONE;
  h->spare = b;
}

/* ---- bins: one list per size class, a bitmap of the non-empty ones -------------------------- */

/* Files b in its class c's list (c: spool__class_of(b->bytes)). */
static void bin_insert_in(spool__bins *x, spool__block *b, unsigned c) {
  b->bin = (uint16_t)c;
  b->fprev = NULL;
  b->fnext = x->head[c];
  if (b->fnext) b->fnext->fprev = b;
  x->head[c] = b;
  x->map[c / 64] |= (uint64_t)1 << (c % 64);
  x->bytes += b->bytes;
}

static void bin_insert(spool__bins *x, spool__block *b) {
  bin_insert_in(x, b, spool__class_of(b->bytes));
}

static void bin_remove(spool__bins *x, spool__block *b) {
  unsigned c = b->bin;
  if (b->fprev) b->fprev->fnext = b->fnext;
  else x->head[c] = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  if (!x->head[c]) x->map[c / 64] &= ~((uint64_t)1 << (c % 64));
  x->bytes -= b->bytes;
}

/* The first non-empty class at or above c, or SPOOL__CLASSES. */
static unsigned next_class(const spool__bins *x, unsigned c) {
  for (unsigned w = c / 64; w < SPOOL__BIN_WORDS; w++) {
    uint64_t m = x->map[w];
    if (w == c / 64) m &= ~(uint64_t)0 << (c % 64);
    if (m) return w * 64 + (unsigned)__builtin_ctzll(m);
  }
  return SPOOL__CLASSES;
}

/* Ranges of need's own class a fit looks at: each is a cold record, and a list can grow long
 * (small ranges in 2 MiB chunks). The sim's workloads place as well with 4 as with the whole
 * list (churn 1.12 against 1.13); with 1, churn took 1.15, and with none random 31x. A fit out
 * of memory looks at every range: a request that fits a free range is never refused. */
#define FIT_WALK 4

/* Whether own's stream may take the free range b: it is shared, or pending on own. */
static inline bool usable(const spool__block *b, const spool__pending *own) {
  return !b->owner || b->owner == own;
}

/* A small block of at least need bytes (of class c) that own may take, or NULL: the smallest of
 * those among the first `walk` ranges of class c (the class holds sizes on both sides of need),
 * else the smallest of the first class above that has one (all of its ranges fit). Ranges
 * pending on other streams sit in the same lists and are passed over. */
static spool__block *bins_fit(const spool__bins *x, const spool__pending *own, uint64_t need,
                              unsigned c, unsigned walk) {
  if (x->bytes < need) return NULL; /* no range that large */
  spool__block *best = NULL;
  unsigned walked = 0;
  for (spool__block *b = x->head[c]; b && walked < walk; b = b->fnext, walked++)
    if (b->bytes >= need && usable(b, own) && (!best || b->bytes < best->bytes)) best = b;
  if (best) return best;
  for (unsigned k = next_class(x, c + 1); k < SPOOL__CLASSES; k = next_class(x, k + 1)) {
    for (spool__block *b = x->head[k]; b; b = b->fnext)
      if (usable(b, own) && (!best || b->bytes < best->bytes ||
                             (b->bytes == best->bytes && b->addr < best->addr)))
        best = b;
    if (best) return best;
  }
  return NULL;
}

/* ---- which index a free range is in ----------------------------------------------------- */

static spool__bins *bins_of(spool__heap *h, const spool__block *b) { return &h->bins[b->band]; }

static void pending_append(spool__pending *o, spool__block *b) {
  b->pnext = NULL;
  b->pprev = o->tail;
  if (o->tail) o->tail->pnext = b;
  else o->head = b;
  o->tail = b;
}

static void pending_remove(spool__pending *o, spool__block *b) {
  if (b->pprev) b->pprev->pnext = b->pnext;
  else o->head = b->pnext;
  if (b->pnext) b->pnext->pprev = b->pprev;
  else o->tail = b->pprev;
  b->pprev = b->pnext = NULL;
}

/* Whether the block b is its chunk's only one. */
static bool whole(const spool__block *b) { return !b->prev && !b->next; }

/* Whether the chunk c is one free range: what the list of empty chunks holds. */
static bool one_free_range(const spool__chunk *c) {
  return whole(c->first) && c->first->state == SPOOL__BLOCK_FREE;
}

static void empty_remove(spool__heap *h, spool__chunk *c) {
  if (!c->empty) return;
  if (c->eprev) c->eprev->enext = c->enext;
  else h->empty_head = c->enext;
  if (c->enext) c->enext->eprev = c->eprev;
  else h->empty_tail = c->eprev;
  c->eprev = c->enext = NULL;
  c->empty = false;
}

/* The chunk c became one free range just now (again, when its range was published: unlist
 * took it off the list first). */
static void empty_append(spool__heap *h, spool__chunk *c) {
  c->empty_since = h->allocs;
  c->eprev = h->empty_tail;
  if (h->empty_tail) h->empty_tail->enext = c;
  else h->empty_head = c;
  h->empty_tail = c;
  c->empty = true;
}

/* Takes the free range b out of its index. */
static void unlist(spool__heap *h, spool__block *b) {
  bin_remove(bins_of(h, b), b);
  if (b->owner) {
    pending_remove(b->owner, b);
    b->owner->bytes -= b->bytes;
  }
  h->free_bytes -= b->bytes;
  if (whole(b)) empty_remove(h, b->chunk);
}

/* Puts the free range b into the index its owner says. */
static void enlist(spool__heap *h, spool__block *b) {
  bin_insert(bins_of(h, b), b);
  if (b->owner) {
    pending_append(b->owner, b);
    b->owner->bytes += b->bytes;
  }
  h->free_bytes += b->bytes;
  if (whole(b)) empty_append(h, b->chunk);
}

/* Merges the free neighbour n into b (n follows b in the chunk); n's record goes. */
static void absorb_next(spool__heap *h, spool__block *b, spool__block *n) {
  b->bytes += n->bytes;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  else b->chunk->last = b;
  record_drop(h, n);
}

/* Whether the free neighbour n may merge into b's range: the same owner, or n is shared. A
 * shared neighbour taken into a pending range waits for b's owner's next fence before other
 * streams see it again (a few operations), but the owner gets one range instead of two. */
static bool joins(const spool__block *b, const spool__block *n) {
  return n && n->state == SPOOL__BLOCK_FREE && (n->owner == b->owner || !n->owner);
}

/* Merges b, which is not in any index, with the free neighbours it may join; returns the
 * merged range (still unlisted). A loop: a shared neighbour taken into a pending range may have
 * stood between it and another range pending on the same stream. */
static spool__block *coalesce(spool__heap *h, spool__block *b) {
  for (spool__block *n = b->next; joins(b, n); n = b->next) {
    unlist(h, n);
    absorb_next(h, b, n);
  }
  for (spool__block *p = b->prev; joins(b, p); p = b->prev) {
    unlist(h, p);
    p->owner = b->owner;
    p->tick = b->tick;
    absorb_next(h, p, b);
    b = p;
  }
  return b;
}

/* ---- allocation ------------------------------------------------------------------------- */

/* Cuts need bytes off the free range b (listed), from its start or, with top, its end, and
 * returns them as a used block; a remainder under SPOOL__MIN_BLOCK stays with the block. A small
 * block in a larger band's range goes at the top, out of the way of that band's blocks, which
 * grow from the range's start. NULL without host memory. */
static spool__block *carve(spool__heap *h, spool__block *b, uint64_t need, bool top) {
  if (b->bytes - need < SPOOL__MIN_BLOCK) {
    unlist(h, b);
    b->state = SPOOL__BLOCK_USED;
    b->owner = NULL;
    return b;
  }
  spool__block *u = record_new(h);
  if (!u) return NULL; /* the range, and its chunk's place among the empty ones, as they were */
  if (whole(b)) empty_remove(h, b->chunk); /* the chunk is used from here */
  block_init(u, top ? b->addr + b->bytes - need : b->addr, need, b->chunk, b->band,
             SPOOL__BLOCK_USED);
  spool__block *before = top ? b : b->prev, *after = top ? b->next : b;
  u->prev = before;
  u->next = after;
  if (before) before->next = u;
  else b->chunk->first = u;
  if (after) after->prev = u;
  else b->chunk->last = u;
  /* The remainder keeps its place in its owner's pending list (its tick is unchanged), and in
   * its bin's list while its class stays (a large range cut many times, the common case);
   * else it moves to the bin of its new size. */
  spool__bins *x = bins_of(h, b);
  unsigned c = spool__class_of(b->bytes - need);
  if (!top) b->addr += need;
  if (c == b->bin) {
    b->bytes -= need;
    x->bytes -= need;
  } else {
    bin_remove(x, b);
    b->bytes -= need;
    bin_insert_in(x, b, c);
  }
  if (b->owner) b->owner->bytes -= need;
  h->free_bytes -= need;
  return u;
}

spool__block *spool__heap_fit(spool_pool *p, spool__pending *own, const spool__need *need,
                              bool wide) {
  spool__heap *h = &p->heap;
  spool__block *b = NULL;
  unsigned band = need->band;
  unsigned walk = wide ? UINT_MAX : FIT_WALK;
  for (; !b && band < SPOOL__BANDS; band++) {
    b = bins_fit(&h->bins[band], own, need->bytes, need->cls, walk);
    if (!wide) break;
  }
  if (!b) return NULL;
  spool__block *u = carve(h, b, need->bytes, b->band != need->band);
  if (u) h->allocs++;
  return u;
}

static void bins_prefetch(const spool__bins *x, unsigned c) {
  __builtin_prefetch(&x->bytes);
  __builtin_prefetch(&x->head[c]);
}

void spool__heap_fit_prefetch(spool_pool *p, const spool__need *need) {
  bins_prefetch(&p->heap.bins[need->band], need->cls);
}

void spool__heap_fit_prefetch_ranges(spool_pool *p, const spool__need *need) {
  const spool__bins *x = &p->heap.bins[need->band];
  __builtin_prefetch(x->head[need->cls]);
  unsigned k = next_class(x, need->cls + 1);
  if (k < SPOOL__CLASSES) __builtin_prefetch(x->head[k]);
}

spool__block *spool__heap_fit_leftover(spool_pool *p, spool__pending *own,
                                      const spool__need *need) {
  spool__heap *h = &p->heap;
  for (spool__chunk *c = h->chunks; c; c = c->next) {
    if (c->creator != own || c->band <= need->band) continue;
    spool__block *b = c->last;
    if (b->state == SPOOL__BLOCK_FREE && usable(b, own) && b->bytes >= need->bytes &&
        b->bytes <= BAND_MAX[c->band - 1]) {
      spool__block *u = carve(h, b, need->bytes, true);
      if (u) h->allocs++;
      return u;
    }
  }
  return NULL;
}

spool_status spool__chunk_get(spool_pool *p, void **out, uint64_t bytes, cudaStream_t stream,
                              bool *malloced, const char *ctx) {
  *malloced = p->nvtx.malloc_chunks && spool__nvtx_on(p);
  int saved = 0;
  spool_status s = *malloced ? spool__device_enter(p->device, &saved, ctx) : SPOOL_OK;
  if (s != SPOOL_OK) return s;
  cudaError_t err = *malloced ? cudaMalloc(out, (size_t)bytes)
                              : cudaMallocFromPoolAsync(out, (size_t)bytes, p->handle, stream);
  if (err == cudaErrorMemoryAllocation) {
    spool__clear_cuda_error();
    s = SPOOL_ERR_OOM; /* the caller's to handle: no message */
  } else if (err != cudaSuccess) {
    char a[SPOOL__SIZE_TEXT];
    s = spool__fail_cuda(err, *malloced ? "cudaMalloc" : "cudaMallocFromPoolAsync",
                         "%s: a heap chunk of %s on stream %p, device %d", ctx,
                         spool__format_size(bytes, a), (void *)stream, p->device);
  }
  if (!*malloced) return s;
  spool_status back = spool__device_leave(p->device, saved, s, ctx);
  if (s == SPOOL_OK && back != SPOOL_OK && cudaFree(*out) != cudaSuccess)
    spool__clear_cuda_error(); /* the chunk goes: the caller sees the failed restore */
  return back;
}

cudaError_t spool__chunk_put(uintptr_t addr, bool malloced, cudaStream_t stream,
                             const char **api) {
  *api = malloced ? "cudaFree" : "cudaFreeAsync";
  return malloced ? cudaFree((void *)addr) : cudaFreeAsync((void *)addr, stream);
}

spool__block *spool__heap_add_chunk(spool_pool *p, spool__pending *own, uintptr_t addr,
                                    uint64_t bytes, uint64_t need, bool malloced) {
  spool__heap *h = &p->heap;
  spool__chunk *c = calloc(1, sizeof *c);
  spool__block *b = c ? record_new(h) : NULL;
  if (!b) {
    free(c);
    return NULL;
  }
  *c = (spool__chunk){.addr = addr, .bytes = bytes, .band = (uint8_t)spool__band_of(need),
                      .first = b, .last = b, .next = h->chunks, .malloced = malloced,
                      .creator = own, .seq = h->chunk_allocs,
                      .nvtx = malloced ? spool__nvtx_heap(p, addr, bytes) : NULL};
  if (h->chunks) h->chunks->prev = c;
  h->chunks = c;
  h->chunk_bytes += bytes;
  if (malloced) h->malloc_bytes += bytes;
  h->chunk_allocs++;
  if (SPOOL__UNLIKELY(p->trace)) spool__trace_chunk(p, SPOOL_TRACE_CHUNK_ALLOC, addr, bytes, NULL);
  /* The whole chunk is a range freed on own's stream just now; the caller's block is cut off. */
  block_init(b, addr, bytes, c, c->band, SPOOL__BLOCK_FREE);
  b->owner = own;
  b->tick = ++own->tick;
  enlist(h, b);
  spool__block *u = carve(h, b, need, false);
  if (u) h->allocs++;
  return u;
}

/* ---- free ------------------------------------------------------------------------------- */

void spool__heap_release(spool_pool *p, spool__pending *own, spool__block *b) {
  spool__heap *h = &p->heap;
  b->state = SPOOL__BLOCK_FREE;
  b->owner = own;
  b->tick = ++own->tick;
  enlist(h, coalesce(h, b));
}

/* Whether n is a free shared range (one a range just shared merges with). */
static bool free_shared(const spool__block *n) {
  return n && n->state == SPOOL__BLOCK_FREE && !n->owner;
}

/* Every range own freed up to tick (inclusive) becomes shared. One with no shared neighbour
 * stays where it is in the index, which is the same for every owner; one that merges, or a
 * whole chunk (its idle wait starts now), is listed anew. */
static void publish(spool__heap *h, spool__pending *own, uint64_t tick) {
  while (own->head && own->head->tick <= tick) {
    spool__block *b = own->head;
    if (whole(b) || free_shared(b->prev) || free_shared(b->next)) {
      unlist(h, b);
      b->owner = NULL;
      enlist(h, coalesce(h, b));
      continue;
    }
    pending_remove(own, b);
    own->bytes -= b->bytes;
    b->owner = NULL;
  }
}

/* Whether own's fence has completed; if so, publishes what it covers. */
static bool fence_done(spool__heap *h, spool__pending *own) {
  if (!own->fence_pending || !spool__event_done_quiet(own->fence)) return false;
  own->fence_pending = false;
  publish(h, own, own->fence_tick);
  return true;
}

/* Records own's fence on stream, covering every range it has freed so far. Failures only mean
 * no fence this time. */
static void fence_record(spool__heap *h, spool__pending *own, cudaStream_t stream) {
  if (!own->fence &&
      cudaEventCreateWithFlags(&own->fence, cudaEventDisableTiming) != cudaSuccess) {
    spool__clear_cuda_error();
    own->fence = NULL;
    return;
  }
  if (!spool__event_record_quiet(own->fence, stream)) return;
  own->fence_tick = own->tick;
  own->fence_pending = true;
  h->fences++;
}

void spool__heap_fence_now(spool_pool *p, spool__pending *own, cudaStream_t stream) {
  spool__heap *h = &p->heap;
  own->ops = 0;
  if (own->fence_pending) fence_done(h, own);
  if (!own->fence_pending && own->head) fence_record(h, own, stream);
}

bool spool__heap_has_free_chunk(const spool_pool *p) {
  for (const spool__chunk *c = p->heap.chunks; c; c = c->next)
    if (!has_used(c)) return true;
  return false;
}

bool spool__heap_publish_ready(spool_pool *p) {
  bool any = false;
  for (spool__scache *c = p->caches; c; c = c->next) any |= fence_done(&p->heap, &c->pend);
  return any;
}

void spool__heap_publish_all(spool_pool *p) {
  for (spool__scache *c = p->caches; c; c = c->next) spool__heap_publish_own(p, &c->pend);
}

void spool__heap_publish_own(spool_pool *p, spool__pending *own) {
  own->fence_pending = false;
  publish(&p->heap, own, UINT64_MAX);
}

/* ---- giving chunks back ----------------------------------------------------------------- */

static void chunk_drop(spool_pool *p, spool__chunk *c) {
  spool__heap *h = &p->heap;
  spool__nvtx_heap_drop(p, c->nvtx);
  empty_remove(h, c);
  if (c->prev) c->prev->next = c->next;
  else h->chunks = c->next;
  if (c->next) c->next->prev = c->prev;
  h->chunk_bytes -= c->bytes;
  if (c->malloced) h->malloc_bytes -= c->bytes;
  h->chunk_frees++;
  free(c);
}

/* A memory tool loses a heap before its memory goes (after cudaFree it is no heap to drop); a
 * chunk that then stays is plain memory to the tool. */
static void unregister_heap(spool_pool *p, spool__chunk *c) {
  spool__nvtx_heap_drop(p, c->nvtx);
  c->nvtx = NULL;
}

/* Whether the empty chunk c may go back: empty for idle heap allocations, not pending on
 * another stream, and with idle not a cudaMalloc chunk, whose cudaFree would stall every stream
 * (it waits for trim or destroy). */
static bool may_go(const spool__heap *h, const spool__chunk *c, const spool__pending *own,
                   uint64_t idle) {
  const spool__block *b = c->first;
  return h->allocs - c->empty_since >= idle && usable(b, own) &&
         !(c->malloced && idle);
}

/* Gives the empty chunk c back on stream; on failure it stays in the heap. */
static spool_status chunk_give(spool_pool *p, spool__chunk *c, cudaStream_t stream,
                               const char *ctx) {
  spool__block *b = c->first;
  const char *api;
  unregister_heap(p, c);
  cudaError_t err = spool__chunk_put(c->addr, c->malloced, stream, &api);
  if (err != cudaSuccess) {
    char size[SPOOL__SIZE_TEXT];
    return spool__fail_cuda(err, api, "%s: giving a free chunk of %s at %p back to the pool on "
                            "stream %p (it stays in the heap)", ctx,
                            spool__format_size(c->bytes, size), (void *)c->addr,
                            (void *)stream);
  }
  if (SPOOL__UNLIKELY(p->trace))
    spool__trace_chunk(p, SPOOL_TRACE_CHUNK_FREE, c->addr, c->bytes, stream);
  unlist(&p->heap, b);
  record_drop(&p->heap, b);
  chunk_drop(p, c);
  return SPOOL_OK;
}

#define GIVE_BATCH 16 /* chunks one look gives back in order without walking every chunk */

spool_status spool__heap_free_empty(spool_pool *p, spool__pending *own, cudaStream_t stream,
                                    uint64_t idle, const char *ctx) {
  spool__heap *h = &p->heap;
  /* They go newest first (the heap's chunk order), as the GPU measurements of the pool's
   * reserved memory were taken: the order of cudaFreeAsync calls decides where the pool puts
   * later chunks, so it is kept. A few come off the empty list, sorted; more walk every chunk. */
  spool__chunk *go[GIVE_BATCH];
  unsigned n = 0;
  bool many = false;
  for (spool__chunk *c = h->empty_head; c && h->allocs - c->empty_since >= idle; c = c->enext) {
    if (!may_go(h, c, own, idle)) continue;
    if (n == GIVE_BATCH) {
      many = true;
      break;
    }
    unsigned i = n++;
    for (; i > 0 && go[i - 1]->seq < c->seq; i--) go[i] = go[i - 1];
    go[i] = c;
  }
  spool_status s = SPOOL_OK;
  if (!many) {
    for (unsigned i = 0; i < n && s == SPOOL_OK; i++) s = chunk_give(p, go[i], stream, ctx);
    return s;
  }
  spool__chunk *next;
  for (spool__chunk *c = h->chunks; c && s == SPOOL_OK; c = next) {
    next = c->next;
    if (c->empty && may_go(h, c, own, idle)) s = chunk_give(p, c, stream, ctx);
  }
  return s;
}

void spool__heap_idle_scan(spool_pool *p, spool__pending *own, cudaStream_t stream) {
  spool__heap *h = &p->heap;
  h->idle_scan = h->allocs;
  char message[SPOOL__MESSAGE];
  spool__save_error(message); /* a chunk that cannot go back now stays: not the caller's error */
  if (spool__heap_free_empty(p, own, stream, p->cfg.chunk_idle, "spool_alloc") != SPOOL_OK)
    spool__clear_cuda_error();
  spool__restore_error(message);
}

static bool has_used(const spool__chunk *c) {
  for (const spool__block *b = c->first; b; b = b->next)
    if (b->state == SPOOL__BLOCK_USED) return true;
  return false;
}

spool_status spool__heap_destroy(spool_pool *p, cudaStream_t stream, spool__give give,
                                 const char *ctx) {
  spool__heap *h = &p->heap;
  spool_status s = SPOOL_OK;
  uint64_t kept = 0, kept_chunks = 0;
  /* Every chunk is tried: one that fails does not keep the others from going back. */
  while (h->chunks) {
    spool__chunk *c = h->chunks;
    if (give == SPOOL__GIVE_NONE || (give == SPOOL__GIVE_FREE && has_used(c))) {
      chunk_drop(p, c); /* stays allocated: its work may still run, or a leak could not go */
      continue;
    }
    const char *api;
    unregister_heap(p, c);
    cudaError_t err = spool__chunk_put(c->addr, c->malloced, stream, &api);
    if (err != cudaSuccess && s == SPOOL_OK) {
      char size[SPOOL__SIZE_TEXT];
      s = spool__fail_cuda(err, api, "%s: giving the heap's chunk of %s at %p back",
                           ctx, spool__format_size(c->bytes, size), (void *)c->addr);
    } else if (err != cudaSuccess) {
      spool__clear_cuda_error();
    }
    if (err != cudaSuccess) kept += c->bytes, kept_chunks++;
    chunk_drop(p, c);
  }
  if (s != SPOOL_OK) {
    char size[SPOOL__SIZE_TEXT];
    spool__append(s, "; %llu chunk%s, %s in all, stay allocated in the pool",
                  (unsigned long long)kept_chunks, kept_chunks == 1 ? "" : "s",
                  spool__format_size(kept, size));
  }
  while (h->slabs) {
    slab *first = h->slabs;
    h->slabs = first->next;
    free(first);
  }
  h->spare = NULL;
  return s;
}

/* ---- figures ------------------------------------------------------------------------------ */

/* The largest range of x: in its highest non-empty class, found by the bitmap. */
static uint64_t bins_largest(const spool__bins *x) {
  for (unsigned w = SPOOL__BIN_WORDS; w-- > 0;) {
    if (!x->map[w]) continue;
    unsigned c = w * 64 + 63u - (unsigned)__builtin_clzll(x->map[w]);
    uint64_t most = 0;
    for (const spool__block *b = x->head[c]; b; b = b->fnext)
      if (b->bytes > most) most = b->bytes;
    return most;
  }
  return 0;
}

uint64_t spool__heap_largest_free(const spool_pool *p) {
  uint64_t most = 0;
  for (unsigned band = 0; band < SPOOL__BANDS; band++) {
    uint64_t n = bins_largest(&p->heap.bins[band]);
    most = n > most ? n : most;
  }
  return most;
}

uint64_t spool__heap_pending_bytes(const spool__pending *own) {
  return own->bytes;
}

/* ---- invariants ------------------------------------------------------------------------- */

/* Every rule the heap keeps, checked by walking it (tests, under the pool's lock): blocks tile
 * their chunk in address order with consistent links; a free range sits in the bin of its size;
 * no two neighbouring free ranges that should have merged (both shared, or pending on the same
 * stream); each stream's pending list holds its ranges in the order it freed them; the byte
 * counts agree with the walk. */
static bool check_chunk(const spool__chunk *c, uint64_t *free_bytes, uint64_t *pending_bytes,
                        char *why, size_t len) {
  uintptr_t at = c->addr;
  const spool__block *prev = NULL;
  for (const spool__block *b = c->first; b; prev = b, b = b->next) {
    const char *bad = NULL;
    if (b->addr != at) bad = "a gap or an overlap between neighbours";
    else if (b->prev != prev) bad = "a broken prev link";
    else if (b->chunk != c) bad = "a block naming another chunk";
    else if (b->state != SPOOL__BLOCK_USED && b->state != SPOOL__BLOCK_FREE) bad = "a dead record";
    else if (b->state == SPOOL__BLOCK_FREE && b->bin != spool__class_of(b->bytes))
      bad = "a free range in the wrong bin";
    else if (b->state == SPOOL__BLOCK_FREE && prev && prev->state == SPOOL__BLOCK_FREE &&
             prev->owner == b->owner)
      bad = "two free neighbours left unmerged";
    if (bad) {
      snprintf(why, len, "chunk %p: block %p (%llu bytes): %s", (void *)c->addr,
               (void *)b->addr, (unsigned long long)b->bytes, bad);
      return false;
    }
    if (b->state == SPOOL__BLOCK_FREE) *free_bytes += b->bytes;
    if (b->state == SPOOL__BLOCK_FREE && b->owner) *pending_bytes += b->bytes;
    at += b->bytes;
  }
  if (prev != c->last) {
    snprintf(why, len, "chunk %p: its last block is not the last in the walk", (void *)c->addr);
    return false;
  }
  if (at != c->addr + c->bytes) {
    snprintf(why, len, "chunk %p: blocks cover %llu of %llu bytes", (void *)c->addr,
             (unsigned long long)(at - c->addr), (unsigned long long)c->bytes);
    return false;
  }
  return true;
}

static uint64_t bins_bytes(const spool__bins *x) {
  uint64_t n = 0;
  for (unsigned k = 0; k < SPOOL__CLASSES; k++)
    for (const spool__block *b = x->head[k]; b; b = b->fnext) n += b->bytes;
  return n;
}

/* The list of empty chunks holds exactly the chunks that are one free range (empty of the
 * walk), each marked, in the order they became so. */
static bool check_empty_list(const spool__heap *h, uint64_t empty, char *why, size_t len) {
  uint64_t n = 0;
  const spool__chunk *prev = NULL;
  for (const spool__chunk *c = h->empty_head; c; prev = c, c = c->enext, n++) {
    const char *bad = NULL;
    if (!c->empty || c->eprev != prev) bad = "a broken link";
    else if (!one_free_range(c)) bad = "a used chunk";
    else if (prev && prev->empty_since > c->empty_since) bad = "out of order";
    if (bad) {
      snprintf(why, len, "empty chunk list: chunk %p: %s", (void *)c->addr, bad);
      return false;
    }
  }
  if (prev != h->empty_tail || n != empty) {
    snprintf(why, len, "empty chunk list: %llu listed, %llu chunks are one free range",
             (unsigned long long)n, (unsigned long long)empty);
    return false;
  }
  return true;
}

/* A stream's list of pending ranges: each free and its own, in the order it freed them, their
 * bytes its count. Adds them to *listed. */
static bool check_pending(const spool__pending *own, uint64_t *listed, char *why, size_t len) {
  uint64_t n = 0, tick = 0;
  const spool__block *prev = NULL;
  for (const spool__block *b = own->head; b; prev = b, b = b->pnext) {
    const char *bad = NULL;
    if (b->state != SPOOL__BLOCK_FREE || b->owner != own) bad = "a range it does not own";
    else if (b->pprev != prev) bad = "a broken link";
    else if (b->tick < tick) bad = "out of order";
    if (bad) {
      snprintf(why, len, "pending list: range %p (%llu bytes): %s", (void *)b->addr,
               (unsigned long long)b->bytes, bad);
      return false;
    }
    tick = b->tick;
    n += b->bytes;
  }
  if (prev != own->tail || n != own->bytes) {
    snprintf(why, len, "pending list: %llu bytes listed, %llu counted", (unsigned long long)n,
             (unsigned long long)own->bytes);
    return false;
  }
  *listed += n;
  return true;
}

bool spool__heap_check(spool_pool *p, char *why, size_t len) {
  pthread_mutex_lock(&p->lock);
  const spool__heap *h = &p->heap;
  uint64_t free_bytes = 0, pending = 0, chunk_bytes = 0, listed = 0, listed_pending = 0;
  uint64_t empty = 0;
  bool ok = true;
  for (const spool__chunk *c = h->chunks; c && ok; c = c->next) {
    chunk_bytes += c->bytes;
    ok = check_chunk(c, &free_bytes, &pending, why, len);
    empty += one_free_range(c);
  }
  if (ok) ok = check_empty_list(h, empty, why, len);
  for (const spool__scache *c = p->caches; c && ok; c = c->next)
    ok = check_pending(&c->pend, &listed_pending, why, len);
  if (ok && listed_pending != pending) {
    snprintf(why, len, "pending bytes: %llu walked, %llu in the streams' lists",
             (unsigned long long)pending, (unsigned long long)listed_pending);
    ok = false;
  }
  for (unsigned b = 0; b < SPOOL__BANDS; b++) listed += bins_bytes(&h->bins[b]);
  if (ok && (free_bytes != h->free_bytes || listed != h->free_bytes ||
             chunk_bytes != h->chunk_bytes)) {
    snprintf(why, len, "free bytes: %llu walked, %llu in the bins, %llu counted; chunk bytes "
             "%llu walked, %llu counted", (unsigned long long)free_bytes,
             (unsigned long long)listed, (unsigned long long)h->free_bytes,
             (unsigned long long)chunk_bytes, (unsigned long long)h->chunk_bytes);
    ok = false;
  }
  pthread_mutex_unlock(&p->lock);
  return ok;
}
