/* Scopes: temporaries for work on one stream, freed together, in stream order, at the end.
 *
 * A scope takes chunks with spool_alloc on its stream (1 MiB, doubling to 64 MiB; a larger
 * request gets a chunk of its own size) and bump-allocates 256-aligned pieces from the newest
 * one, so most spool_scope_alloc calls move a pointer under the scope's lock and make no CUDA
 * call. At the
 * end the chunks go back with spool_free on the stream: into the stream's front and the heap,
 * where the next scope on that stream takes them again without a CUDA call; the heap's idle
 * return and spool_trim bound what stays reserved. Under capture spool_alloc bypasses the heap
 * by itself, so a scope begun
 * in a capture gets graph allocations that the graph frees at the scope's end.
 *
 * Every chunk keeps its first 256 bytes unused, so no piece is ever a chunk's start: a piece
 * passed to spool_free is an interior pointer, refused, and never frees a chunk behind the
 * scope's back.
 *
 * Scope objects belong to the pool and are never returned to malloc while it lives: an ended
 * scope waits in a FIFO until REUSE_AFTER others have ended, so that a second end (or an
 * allocation) through a stale pointer finds it marked ended rather than reading freed memory.
 *
 * Nesting: a scope begun by a thread on a stream where that thread has a scope open is its
 * child. A child must end before its parent: ending a parent with open children is refused
 * (rather than ending them too) because the children's owners still hold their pointers.
 *
 * Locks: the scopes' lock (begin, end, the open list) is never held while calling spool_alloc
 * or spool_free; a scope's own lock is, which is fine since nothing takes it from inside. */
#include "capture.h"
#include "trace_format.h"

#include <inttypes.h>
#include <stdlib.h>


#define SCOPE_LIVE 0x53636F70u /* "Scop" */
#define SCOPE_DEAD 0x44656164u /* "Dead" */
#define CHUNK_MIN ((size_t)1 << 20)
#define CHUNK_MAX ((size_t)64 << 20)
#define HEADER 256 /* unused start of every chunk: no piece is a chunk's start */
#define PIECE_ALIGN 256
#define REUSE_AFTER 64

typedef struct chunk {
  char *base;
  size_t size, used;
} chunk;

struct spool_scope {
  _Atomic uint32_t magic;
  pthread_mutex_t lock;       /* guards the chunks */
  spool_pool *pool;
  cudaStream_t stream;
  uint64_t thread;            /* the thread that began it: nesting is per thread and stream */
  bool capturing;             /* the stream was being captured at the begin */
  uint64_t number;            /* the pool's count of scopes begun, for messages */
  chunk *chunks;
  size_t nchunks, cap, next_size;
  /* under the scopes' lock */
  spool_scope *parent;
  unsigned open_children;
  spool_scope *open_next;     /* the pool's open scopes, newest first */
  spool_scope *free_next;     /* the FIFO of ended scopes */
  spool_scope *all_next;      /* every scope object, for the pool's destroy */
};

typedef struct spool__scopes {
  pthread_mutex_t lock;
  spool_scope *open, *all, *free_head, *free_tail;
  size_t nfree;
  uint64_t begun;
} spool__scopes;

/* ---- the pool's scope state ---------------------------------------------------------------- */

static spool__scopes *scopes_of(spool_pool *pool) {
  spool__scopes *ss = atomic_load(&pool->scopes);
  if (ss) return ss;
  pthread_mutex_lock(&pool->lock);
  ss = atomic_load(&pool->scopes);
  if (!ss && (ss = calloc(1, sizeof *ss)) != NULL) {
    pthread_mutex_init(&ss->lock, NULL);
    atomic_store(&pool->scopes, ss);
  }
  pthread_mutex_unlock(&pool->lock);
  return ss;
}

/* Under the scopes' lock: an ended scope once REUSE_AFTER others wait behind it, else a new
 * object (NULL without host memory). */
static spool_scope *take_object(spool__scopes *ss) {
  spool_scope *sc = NULL;
  if (ss->nfree > REUSE_AFTER) {
    sc = ss->free_head;
    ss->free_head = sc->free_next;
    if (!ss->free_head) ss->free_tail = NULL;
    ss->nfree--;
    return sc;
  }
  sc = calloc(1, sizeof *sc);
  if (!sc) return NULL;
  pthread_mutex_init(&sc->lock, NULL);
  atomic_init(&sc->magic, SCOPE_DEAD);
  sc->all_next = ss->all;
  ss->all = sc;
  return sc;
}

/* Under the scopes' lock: the innermost open scope of this thread on stream. */
static spool_scope *innermost(spool__scopes *ss, cudaStream_t stream, uint64_t thread) {
  cudaStream_t key = stream == cudaStreamLegacy ? NULL : stream;
  for (spool_scope *o = ss->open; o; o = o->open_next) {
    cudaStream_t k = o->stream == cudaStreamLegacy ? NULL : o->stream;
    if (k == key && o->thread == thread) return o;
  }
  return NULL;
}

/* Its chunks' allocations and frees are in the trace already; these say where it began and
 * ended. */
static void trace_scope(const spool_scope *sc, int kind) {
  spool__trace_ev ev = {.kind = (uint8_t)kind, .ptr = sc, .stream = sc->stream,
                        .aux = (uint32_t)sc->number};
  spool__trace_event(sc->pool, &ev);
}

/* ---- begin --------------------------------------------------------------------------------- */

spool_status spool_scope_begin(spool_pool *pool, cudaStream_t stream, spool_scope **scope) {
  static const char ctx[] = "spool_scope_begin";
  if (scope) *scope = NULL;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!scope) return spool__fail(SPOOL_ERR_INVALID, "%s: scope is NULL", ctx);
  bool capturing = false;
  spool_status s = spool__stream_capturing(stream, &capturing, ctx);
  if (s != SPOOL_OK) return s;
  spool__scopes *ss = scopes_of(pool);
  if (!ss) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the pool's scopes", ctx);
  pthread_mutex_lock(&ss->lock);
  spool_scope *sc = take_object(ss);
  if (sc) {
    sc->pool = pool;
    sc->stream = stream;
    sc->thread = spool__thread_id();
    sc->capturing = capturing;
    sc->number = ++ss->begun;
    sc->nchunks = 0;
    sc->next_size = CHUNK_MIN;
    sc->open_children = 0;
    sc->parent = innermost(ss, stream, sc->thread);
    if (sc->parent) sc->parent->open_children++;
    sc->open_next = ss->open;
    ss->open = sc;
    atomic_store(&sc->magic, SCOPE_LIVE);
  }
  pthread_mutex_unlock(&ss->lock);
  if (!sc) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for a scope", ctx);
  *scope = sc;
  if (pool->trace) trace_scope(sc, SPOOL_TRACE_SCOPE_BEGIN);
  return SPOOL_OK;
}

/* ---- allocation ---------------------------------------------------------------------------- */

/* For a scope that is not open: ended (or never one, which cannot always be told). */
static spool_status not_open(const spool_scope *sc, const char *ctx) {
  if (atomic_load(&sc->magic) == SCOPE_DEAD)
    return spool__fail(SPOOL_ERR_SCOPE_ENDED, "%s: scope %p (scope #%" PRIu64 " of pool %p, "
                       "stream %p) was already ended", ctx, (const void *)sc, sc->number,
                       (void *)sc->pool, (void *)sc->stream);
  return spool__fail(SPOOL_ERR_INVALID, "%s: %p is not a scope from spool_scope_begin", ctx,
                     (const void *)sc);
}

/* Whether the stream's capture state is still the scope's; SPOOL_ERR_INVALID otherwise. */
static spool_status same_capture(const spool_scope *sc, const char *ctx, bool ending) {
  bool capturing = false;
  spool_status s = spool__stream_capturing(sc->stream, &capturing, ctx);
  if (s != SPOOL_OK || capturing == sc->capturing) return s;
  /* The capture it began in is over (ended, or abandoned): its chunks are graph allocations,
   * freed after the graph as any are (or found never to have been backed). */
  if (ending && sc->capturing) return SPOOL_OK;
  return spool__fail(SPOOL_ERR_INVALID, "%s: scope #%" PRIu64 " was begun %s a capture of stream "
                     "%p, which is %s now: a scope %s in the capture state it began in; %s",
                     ctx, sc->number, sc->capturing ? "inside" : "outside", (void *)sc->stream,
                     capturing ? "being captured" : "not being captured",
                     ending ? "ends" : "allocates",
                     ending ? "nothing was ended" : "nothing was allocated");
}

/* Under the scope's lock: a new chunk with room for need bytes after its header. */
static spool_status new_chunk(spool_scope *sc, size_t need) {
  static const char ctx[] = "spool_scope_alloc";
  if (sc->nchunks == sc->cap) {
    size_t cap;
    chunk *c = spool__grow_array(sc->chunks, sc->cap, sizeof *c, 8, &cap);
    if (!c) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for a chunk list", ctx);
    sc->chunks = c;
    sc->cap = cap;
  }
  spool_status s = same_capture(sc, ctx, false);
  if (s != SPOOL_OK) return s;
  /* A request larger than the next chunk gets a chunk of its own, which neither doubles the
   * next size nor takes the top: later small pieces go on filling the current chunk. */
  bool own = need + HEADER > sc->next_size;
  size_t size = own ? need + HEADER : sc->next_size;
  static const spool__site site = {NULL, spool__scope_tag, 0, 0};
  void *base = NULL;
  s = spool__alloc_site(sc->pool, &base, size, sc->stream, &site);
  if (s != SPOOL_OK) return spool__prefix(s, ctx);
  sc->chunks[sc->nchunks++] = (chunk){base, size, HEADER};
  (void)spool__census_carve(sc->pool, (uintptr_t)base); /* memory tools see pieces, not chunks */
  if (!own && sc->next_size < CHUNK_MAX) sc->next_size *= 2;
  if (own && sc->nchunks > 1) { /* the new chunk below the current one */
    chunk top = sc->chunks[sc->nchunks - 2];
    sc->chunks[sc->nchunks - 2] = sc->chunks[sc->nchunks - 1];
    sc->chunks[sc->nchunks - 1] = top;
  }
  return SPOOL_OK;
}

spool_status spool_scope_alloc(spool_scope *sc, void **ptr, size_t size) {
  static const char ctx[] = "spool_scope_alloc";
  if (ptr) *ptr = NULL;
  if (!sc) return spool__fail(SPOOL_ERR_INVALID, "%s: scope is NULL", ctx);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", ctx);
  if (atomic_load(&sc->magic) != SCOPE_LIVE) return not_open(sc, ctx);
  if (size == 0) return SPOOL_OK;
  if (size > SIZE_MAX / 2)
    return spool__fail(SPOOL_ERR_INVALID, "%s: %zu bytes is too large", ctx, size);
  size_t need = (size + PIECE_ALIGN - 1) & ~(size_t)(PIECE_ALIGN - 1);
  /* A piece of a chunk from outside a capture, used in the graph, would be freed at the scope's
   * end (outside the capture) while the graph, launched later, still uses it; a graph's chunk
   * used outside its capture is memory that exists only while the graph runs. So every
   * allocation, not only one that takes a chunk, asks as the stream caches do (capture_check). */
  spool_status s = sc->pool->cfg.capture_check ? same_capture(sc, ctx, false) : SPOOL_OK;
  if (s != SPOOL_OK) return s;
  pthread_mutex_lock(&sc->lock);
  if (atomic_load(&sc->magic) != SCOPE_LIVE) s = not_open(sc, ctx); /* ended meanwhile */
  chunk *c = sc->nchunks ? &sc->chunks[sc->nchunks - 1] : NULL;
  if (s == SPOOL_OK && (!c || c->size - c->used < need)) {
    s = new_chunk(sc, need);
    /* the new chunk is on top, or just below it when it is the request's own */
    if (s == SPOOL_OK) c = &sc->chunks[sc->nchunks - 1];
    if (s == SPOOL_OK && c->size - c->used < need) c = &sc->chunks[sc->nchunks - 2];
  }
  if (s == SPOOL_OK) {
    *ptr = c->base + c->used;
    c->used += need;
    spool__nvtx_piece(sc->pool, (uintptr_t)c->base, (uintptr_t)*ptr, size);
  }
  pthread_mutex_unlock(&sc->lock);
  return s;
}

cudaStream_t spool_scope_stream(const spool_scope *sc) {
  return sc && atomic_load(&sc->magic) == SCOPE_LIVE ? sc->stream : NULL;
}

/* ---- end ----------------------------------------------------------------------------------- */

/* Under the scope's lock: gives the chunks back, newest first. On a failure the chunks not yet
 * freed stay with the scope. */
static spool_status free_chunks(spool_scope *sc) {
  static const spool__site site = {"spool_scope_end", NULL, 0, 0};
  while (sc->nchunks) {
    chunk *c = &sc->chunks[sc->nchunks - 1];
    spool_status s = spool__free_site(sc->pool, c->base, sc->stream, &site);
    if (s != SPOOL_OK)
      return spool__append(spool__prefix(s, "spool_scope_end"), "; the scope stays open with "
                           "%zu chunk%s", sc->nchunks, sc->nchunks == 1 ? "" : "s");
    sc->nchunks--;
  }
  return SPOOL_OK;
}

/* Under the scopes' lock: takes sc off the open list and queues its object for reuse. A child
 * begun by another thread's call between the end's check of the children and this point (a
 * scope ended from a thread other than its own) loses its parent here, so that its own end
 * never counts down an object that may belong to a new scope by then. */
static void retire(spool__scopes *ss, spool_scope *sc) {
  for (spool_scope **at = &ss->open; *at;) {
    if (*at == sc) {
      *at = sc->open_next;
      continue;
    }
    if ((*at)->parent == sc) (*at)->parent = NULL;
    at = &(*at)->open_next;
  }
  if (sc->parent) sc->parent->open_children--;
  sc->parent = NULL;
  sc->free_next = NULL;
  if (ss->free_tail) ss->free_tail->free_next = sc;
  else ss->free_head = sc;
  ss->free_tail = sc;
  ss->nfree++;
}

static spool_status check_children(spool__scopes *ss, const spool_scope *sc, const char *ctx) {
  pthread_mutex_lock(&ss->lock);
  unsigned n = sc->open_children;
  pthread_mutex_unlock(&ss->lock);
  if (n == 0) return SPOOL_OK;
  return spool__fail(SPOOL_ERR_INVALID, "%s: scope #%" PRIu64 " (stream %p) has %u open child "
                     "scope%s: end them first (a child ends before its parent); nothing was "
                     "ended", ctx, sc->number, (void *)sc->stream, n, n == 1 ? "" : "s");
}

spool_status spool_scope_end(spool_scope *sc) {
  static const char ctx[] = "spool_scope_end";
  if (!sc) return spool__fail(SPOOL_ERR_INVALID, "%s: scope is NULL", ctx);
  if (atomic_load(&sc->magic) != SCOPE_LIVE) return not_open(sc, ctx);
  spool__scopes *ss = atomic_load(&sc->pool->scopes);
  spool_status s = check_children(ss, sc, ctx);
  if (s == SPOOL_OK) s = same_capture(sc, ctx, true);
  if (s != SPOOL_OK) return s;
  pthread_mutex_lock(&sc->lock);
  if (atomic_load(&sc->magic) != SCOPE_LIVE) s = not_open(sc, ctx); /* ended meanwhile */
  if (s == SPOOL_OK) s = free_chunks(sc);
  if (s == SPOOL_OK) {
    sc->next_size = CHUNK_MIN;
    atomic_store(&sc->magic, SCOPE_DEAD);
  }
  pthread_mutex_unlock(&sc->lock);
  if (s != SPOOL_OK) return s;
  if (sc->pool->trace) trace_scope(sc, SPOOL_TRACE_SCOPE_END);
  pthread_mutex_lock(&ss->lock);
  retire(ss, sc);
  pthread_mutex_unlock(&ss->lock);
  return SPOOL_OK;
}

/* ---- for the rest of the library --------------------------------------------------------- */

void spool__scopes_destroy(spool_pool *pool) {
  spool__scopes *ss = atomic_load(&pool->scopes);
  if (!ss) return;
  for (spool_scope *sc = ss->all, *next; sc; sc = next) {
    next = sc->all_next;
    pthread_mutex_destroy(&sc->lock);
    free(sc->chunks);
    free(sc);
  }
  pthread_mutex_destroy(&ss->lock);
  free(ss);
  atomic_store(&pool->scopes, NULL);
}
