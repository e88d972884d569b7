/* What the files of src/ share. Never installed. Internal names start with spool__. */
#ifndef SPOOL_INTERNAL_H
#define SPOOL_INTERNAL_H

#include <spool/spool.h>


#include <pthread.h>
#include <stdarg.h>
#include <stdalign.h>
#include <stdatomic.h>

#if defined(__GNUC__)
#define SPOOL__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define SPOOL__NOINLINE __attribute__((noinline))
#define SPOOL__INLINE inline __attribute__((always_inline))
#define SPOOL__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SPOOL__UNLIKELY(x) (x)
#define SPOOL__INLINE inline
#define SPOOL__PRINTF(f, a)
#define SPOOL__NOINLINE
#endif

/* ---- status.c: this thread's last error ------------------------------------------------- */

/* Size of this thread's message buffer, NUL included. */
#define SPOOL__MESSAGE 1024

/* Copies this thread's message out and back, around work whose failures the caller must not
 * see (spool_report succeeds even when one of its lines is unavailable). */
void spool__save_error(char out[SPOOL__MESSAGE]);
void spool__restore_error(const char saved[SPOOL__MESSAGE]);

/* Sets this thread's message to the formatted text and returns s, so that a failure reads
 * `return spool__fail(SPOOL_ERR_INVALID, "spool_alloc: ptr is NULL");`. */
spool_status spool__fail(spool_status s, const char *fmt, ...) SPOOL__PRINTF(2, 3);

/* For a failed CUDA call: the message is "<context>: <api> failed: <cudaErrorName> (<string>)".
 * Maps err to a status: cudaErrorMemoryAllocation -> SPOOL_ERR_OOM, no device or no driver ->
 * SPOOL_ERR_NO_DEVICE, cudaErrorNotSupported -> SPOOL_ERR_UNSUPPORTED, else SPOOL_ERR_CUDA. */
spool_status spool__fail_cuda(cudaError_t err, const char *api, const char *fmt, ...)
    SPOOL__PRINTF(3, 4);

/* Appends to this thread's message (e.g. a cleanup that failed too) and returns s. */
spool_status spool__append(spool_status s, const char *fmt, ...) SPOOL__PRINTF(2, 3);

/* For a second CUDA failure on a path that is already failing: appends "; <what> also failed:
 * <cudaErrorName>" to the first failure's message, clears the runtime's last error, returns s. */
spool_status spool__also_failed(spool_status s, cudaError_t err, const char *what);

/* Puts "<context>: " in front of this thread's message and returns s. */
spool_status spool__prefix(spool_status s, const char *context);

/* Clears the CUDA runtime's last error after a failure spool reports through its status, so
 * that the caller's next cudaGetLastError speaks only of the caller's own calls.
 * spool__fail_cuda calls it. */
void spool__clear_cuda_error(void);

/* The status spool__fail_cuda would return for err. */
spool_status spool__status_of_cuda(cudaError_t err);

/* ---- units.c: sizes in text ------------------------------------------------------------- */

/* Largest text spool__format_size writes, NUL included. */
#define SPOOL__SIZE_TEXT 32

/* Writes bytes for people: "0 B", "255 B", "1.00 KiB", "1.50 GiB", "max" for UINT64_MAX. */
const char *spool__format_size(uint64_t bytes, char out[SPOOL__SIZE_TEXT]);

/* Parses a config size ("512", "4KiB", "1.5G", "2MB", "max"), case-insensitive units, spaces
 * between number and unit allowed. Returns 0 and sets *out, or -1 with a short reason in
 * why[0..why_len) ("unknown unit 'Gx'", "too large", "not a whole number of bytes"). */
int spool__parse_size(const char *text, size_t len, uint64_t *out, char *why, size_t why_len);

/* ---- track.c: what the pool knows of its buffers ------------------------------------------- */

/* Where a buffer was allocated or freed: a file and line (SPOOL_ALLOC, SPOOL_FREE) or a tag
 * (spool_alloc_tagged); all NULL/0 when unknown. The strings are the caller's, kept by pointer. */
typedef struct spool__site {
  const char *file;
  const char *tag;
  int line;
  uint32_t batch; /* a batch's sub-buffer count (batch.c); 0 for a plain buffer. It
                     rides in the site, which every path copies into the record as it is. */
} spool__site;

/* Writes a site for people: "a.c:10", "tag 'scratch'", or that it is unknown. */
#define SPOOL__SITE_TEXT 320
const char *spool__site_text(const spool__site *s, char *out, size_t len);

/* A buffer's record. What a hit and a free in the front read comes first (one cache line in a
 * heap block's record); the sites and clocks they only write follow. */
typedef struct spool__buffer {
  uintptr_t ptr;        /* 0 marks an empty slot */
  uint64_t size;        /* bytes asked for */
  cudaStream_t stream;  /* stream it was allocated on */
  uint64_t bytes;       /* heap buffers: the block's size */
  union {               /* heap buffers, by state: */
    uint64_t born_at;   /* live: the stream's allocation count when it was handed out */
    uint64_t freed_at;  /* in a front bin: the front's free count when it went there */
  };
  struct spool__block *blk; /* the heap's block (chunks.c); NULL on the uncached path */
  uint16_t cls;         /* heap buffers: the size class of size, its front bin once freed */
  uint8_t state;        /* heap buffers: SPOOL__LIVE, or SPOOL__CACHED in a front bin */
  uint8_t graph;        /* allocated during a stream capture: a graph allocation, which
                           only a free in the graph (or after its launch) may free */
  uint64_t seq;         /* allocation number, from 1 */
  spool__site born;     /* where it was allocated (track=full) */
  spool__site died;     /* where it was freed (graveyard records, track=full) */
  uint64_t born_ns;     /* CLOCK_MONOTONIC at allocation (track=full), for the age */
} spool__buffer;

enum { SPOOL__LIVE = 0, SPOOL__CACHED = 1 };

/* A map from a device address to a record of the caller's: open addressing, linear probing,
 * backward-shift deletion (no tombstones, no allocation once it has grown to the working set).
 * Slots hold the key beside the record's pointer, so a probe reads no record; the records stay
 * where their owner put them. Not thread safe: its owner's lock guards it. */
typedef struct spool__index_slot {
  uintptr_t key; /* 0 marks an empty slot */
  void *val;
} spool__index_slot;

typedef struct spool__index {
  spool__index_slot *slots;
  size_t cap;   /* power of two, or 0 before the first insert */
  size_t count;
} spool__index;

/* Adds key -> val (key must not be in x). SPOOL_OK or SPOOL_ERR_HOST_OOM (x unchanged). */
spool_status spool__index_insert(spool__index *x, uintptr_t key, void *val);
/* Removes key; returns its record, or NULL when key was not there. */
void *spool__index_remove(spool__index *x, uintptr_t key);
/* Calls fn for every record, in no particular order. */
void spool__index_each(const spool__index *x, void (*fn)(void *val, void *arg), void *arg);
void spool__index_free(spool__index *x);

/* Where key's probe run starts. Pool pointers are 256-aligned: drop the zero bits, then
 * Fibonacci hashing spreads them. */
static inline size_t spool__index_home(const spool__index *x, uintptr_t key) {
  uint64_t h = (uint64_t)(key >> 8) * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 32) & (x->cap - 1);
}

/* The slot that holds key, else the empty slot that ends key's probe run (x->cap > 0): the one
 * walk that lookups, inserts and removals share. */
static inline size_t spool__index_probe(const spool__index *x, uintptr_t key) {
  size_t i = spool__index_home(x, key);
  while (x->slots[i].key != key && x->slots[i].key != 0) i = (i + 1) & (x->cap - 1);
  return i;
}

/* key's record, or NULL. Inline: every cached free looks its block up. */
static inline void *spool__index_find(const spool__index *x, uintptr_t key) {
  if (x->cap == 0 || key == 0) return NULL;
  const spool__index_slot *s = &x->slots[spool__index_probe(x, key)];
  return s->key == key ? s->val : NULL;
}

/* Buffer records by pointer (the uncached path's live buffers, aligned batches): an index whose
 * records the table allocates one by one, so they keep their address until removed. A removed
 * record is kept for the next insert: an insert right after a removal (putting a record back
 * when the driver refused its free) needs no memory and cannot fail. */
typedef struct spool__table {
  spool__index index;
  union spool__buffer_spare *spare; /* removed records, for reuse */
} spool__table;

/* Adds a copy of b (b->ptr must not be in t); *at (at may be NULL) is where the copy lies,
 * valid until it is removed. Returns SPOOL_OK or SPOOL_ERR_HOST_OOM (t unchanged). */
spool_status spool__table_insert(spool__table *t, const spool__buffer *b, spool__buffer **at);
/* Removes ptr and copies its record to *out (out may be NULL). Returns 1 when found, else 0. */
int spool__table_remove(spool__table *t, uintptr_t ptr, spool__buffer *out);
/* The record of ptr, or NULL. Valid until it is removed. */
static inline const spool__buffer *spool__table_find(const spool__table *t, uintptr_t ptr) {
  return spool__index_find(&t->index, ptr);
}
/* The live buffer that ptr points inside of (not at its start), or NULL. A scan: error paths
 * only. */
const spool__buffer *spool__table_containing(const spool__table *t, uintptr_t ptr);
/* Calls fn for every record, in no particular order. */
void spool__table_each(const spool__table *t, void (*fn)(const spool__buffer *, void *), void *arg);
void spool__table_free(spool__table *t);

/* Recent frees, so that a second free of the same pointer is told from a pointer never seen:
 * the records of the last SPOOL__GRAVE_CAP frees, in a ring (burying is a copy, no lookup; a
 * refused free, an error path, scans it newest first). An address handed out again needs no
 * forgetting: a free of a live buffer is never refused, and once freed again its newer record
 * is found first. Guarded by the pool's lock. */
#define SPOOL__GRAVE_CAP 4096
typedef struct spool__graveyard {
  spool__buffer *ring; /* SPOOL__GRAVE_CAP records, oldest at head; NULL before the first */
  size_t head, count;
} spool__graveyard;

/* Remembers b as freed. Best effort: without host memory the free is simply not remembered. */
void spool__grave_bury(spool__graveyard *g, const spool__buffer *b);
/* The newest remembered free of ptr, or NULL. A scan: error paths only. */
const spool__buffer *spool__grave_find(const spool__graveyard *g, uintptr_t ptr);
void spool__grave_free(spool__graveyard *g);

/* ---- registry.c: every live pool ------------------------------------------------------------ */

/* Every live pool, so that a free given to the wrong pool can name the right one. */
void spool__registry_add(spool_pool *pool);
/* false when pool was not registered (destroyed already): compares addresses only. */
bool spool__registry_remove(spool_pool *pool);
/* The pool a pointer belongs to, as it was when asked: the pool's address is for messages
 * only (it may be destroyed by the time it is read). */
typedef struct spool__owner {
  const void *pool;
  int device;
  spool__buffer buffer;
} spool__owner;

/* Looks for ptr (at the start of or inside a live buffer) in every pool but self. Returns 1 and
 * fills *out when found, else 0. Takes the registry lock and each pool's lock in turn: the
 * caller must hold no pool lock. */
int spool__registry_owner(const spool_pool *self, uintptr_t ptr, spool__owner *out);
/* The same for ptr at a live buffer's start only: a hash lookup per pool and stream, cheap
 * enough for every free that no table of self knows (track=off). */
int spool__registry_owner_of_start(const spool_pool *self, uintptr_t ptr, spool__owner *out);
/* Trims every registered pool on self's device but self to what it uses (out-of-memory path).
 * Takes the registry lock only; CUDA's pool calls are thread safe. */
void spool__registry_trim_device(const spool_pool *self);

/* ---- the pool ----------------------------------------------------------------------------- */

typedef struct spool__counters {
  uint64_t bytes_in_use, buffers_in_use; /* peaks: the pool's peak_* totals */
  uint64_t allocs, frees, bytes_allocated;
  uint64_t alloc_failures, ooms, trims;
  uint64_t oom_retries, oom_recoveries, oom_handler_calls, bad_frees;
} spool__counters;

/* ---- size classes (chunks.c and heap.c) -------------------------------------------------- */

#define SPOOL__CACHE_LINE 64 /* x86-64 and most ARM servers; 128 where pairs are prefetched */

/* Size classes: 512 B steps up to 4 KiB, then eight per doubling, up to 1 TiB. A class spans at
 * most 1/8 of its size, so a search of one class's list is short. */
#define SPOOL__CLASSES 232
#define SPOOL__BIN_WORDS ((SPOOL__CLASSES + 63) / 64)

static inline unsigned spool__class_of(uint64_t n) {
  if (n <= 4096) return n == 0 ? 0 : (unsigned)((n - 1) >> 9);
  unsigned e = 63u - (unsigned)__builtin_clzll(n - 1); /* 2^e < n <= 2^(e+1) */
  unsigned c = 8u + (e - 12u) * 8u + (unsigned)((n - 1 - ((uint64_t)1 << e)) >> (e - 3));
  return c < SPOOL__CLASSES ? c : SPOOL__CLASSES - 1;
}

/* ---- chunks.c: the stream-ordered heap of chunks and blocks -------------------------------- */

/* Blocks are placed at this granularity (the pool's own alignment of a new allocation is 512 B
 * on the H200); a free remainder smaller than this stays with its block. */
#define SPOOL__MIN_BLOCK 512
#define SPOOL__BANDS 3

enum { SPOOL__BLOCK_USED = 1, SPOOL__BLOCK_FREE = 2, SPOOL__BLOCK_GONE = 3 };

struct spool__pending;
struct spool__chunk;

/* One block of a chunk: used (a live buffer or one in a front bin) or a free range. Records sit
 * in slabs, line-aligned, and keep their address while the block exists; the fit and the merges
 * read a record's first cache line only: its range, neighbours, bin links, owner, state and
 * band. */
typedef struct spool__block {
  alignas(SPOOL__CACHE_LINE) uintptr_t addr;
  uint64_t bytes;
  struct spool__block *prev, *next;   /* neighbours in the chunk, by address */
  struct spool__block *fprev, *fnext; /* free: its bin's list */
  struct spool__pending *owner; /* free: the stream it is pending on; NULL once shared */
  uint16_t bin;
  uint8_t state;
  uint8_t band;                 /* its chunk's band (chunk->band, read without the chunk) */
  spool__buffer buf; /* used: the buffer's record, in its stream's front (heap.c); from the
                        second line, so that its first fields share one */
  struct spool__block *pprev, *pnext; /* free and pending: its stream's list, oldest first */
  struct spool__chunk *chunk;
  uint64_t tick;                /* free and pending: the owner's release count at the free */
} spool__block;

typedef struct spool__chunk {
  uintptr_t addr;
  uint64_t bytes;
  uint64_t empty_since; /* the heap's allocation count when it last became all free */
  uint64_t seq;         /* chunks taken before it: the heap's list runs newest first */
  spool__block *first, *last; /* its blocks in address order, from both ends */
  struct spool__chunk *prev, *next;
  struct spool__chunk *eprev, *enext; /* the heap's list of empty chunks, while it is one */
  bool empty;  /* one free range: in that list */
  void *nvtx;  /* its heap for memory tools (nvtx.c), NULL when none is attached */
  uint8_t band;
  bool malloced; /* cudaMalloc memory (spool__chunk_get), not the pool's */
  const struct spool__pending *creator; /* the stream it was taken for (compared, never read) */
} spool__chunk;

/* An index of free ranges: a list per size class and a bitmap of the classes in use. */
typedef struct spool__bins {
  uint64_t bytes; /* first, beside the map: a fit reads no list head of bins too small */
  uint64_t map[SPOOL__BIN_WORDS];
  spool__block *head[SPOOL__CLASSES];
} spool__bins;

/* What the heap keeps per stream: the ranges freed on it that other streams may not take yet
 * (in the heap's one index, marked with their owner), and the fence that will make them
 * shared. Guarded by the pool's lock. */
typedef struct spool__pending {
  uint64_t bytes;            /* in its pending ranges */
  spool__block *head, *tail; /* pending ranges, oldest first */
  uint64_t tick;             /* ranges released so far */
  uint64_t fence_tick;       /* the last tick the recorded fence covers */
  cudaEvent_t fence;
  bool fence_pending;
  uint32_t ops;              /* heap operations since the last fence decision */
} spool__pending;

/* The pool-wide part. Guarded by the pool's lock. */
typedef struct spool__heap {
  spool__bins bins[SPOOL__BANDS]; /* every free range, shared or pending, by band */
  spool__chunk *chunks;
  /* The chunks that are one free range, in the order they became so: their empty_since rises
   * along the list, so the look for idle chunks reads the oldest only, not every chunk. */
  spool__chunk *empty_head, *empty_tail;
  spool__block *spare;  /* unused records */
  void *slabs;
  uint64_t allocs;      /* blocks carved so far: the clock idle chunks are judged by */
  uint64_t idle_scan;   /* allocs at the last look for idle chunks */
  uint64_t free_bytes;  /* in free ranges, shared or pending */
  uint64_t chunk_bytes; /* in chunks */
  uint64_t malloc_bytes; /* of those, in cudaMalloc chunks: outside the pool's attributes */
  uint64_t chunk_allocs, chunk_frees, fences;
} spool__heap;

/* The bands' largest requests (chunks.c says why three). */
#define SPOOL__BAND0_MAX ((uint64_t)1 << 20)
#define SPOOL__BAND1_MAX ((uint64_t)32 << 20)

/* The band of a request of need bytes. Inline: a miss asks it of every request. */
static inline unsigned spool__band_of(uint64_t need) {
  return (unsigned)(need > SPOOL__BAND0_MAX) + (unsigned)(need > SPOOL__BAND1_MAX);
}

/* The chunk a miss of need bytes takes from the pool. */
uint64_t spool__chunk_size(uint64_t need);

/* A request as the heap places it: its bytes rounded up to SPOOL__MIN_BLOCK, their size class
 * (that of the bytes asked: class bounds are multiples of SPOOL__MIN_BLOCK, so the rounding
 * never crosses one) and their band, worked out once per miss. */
typedef struct spool__need {
  uint64_t bytes;
  unsigned cls, band;
} spool__need;

static inline spool__need spool__need_of(uint64_t size, unsigned cls) {
  uint64_t bytes = (size + SPOOL__MIN_BLOCK - 1) / SPOOL__MIN_BLOCK * SPOOL__MIN_BLOCK;
  return (spool__need){bytes, cls, spool__band_of(bytes)};
}

/* A used block of need bytes for own's stream, from the free ranges of need's band it may take
 * (shared, or pending on own), or with `wide` (out of memory) of the first band from there up
 * that has one, or NULL. A fit looks at the first few ranges of need's own size class, with
 * `wide` at all of them. A small block in a large chunk would pin it while it lives: only
 * when no chunk can be had. NULL also without host memory for a record. */
spool__block *spool__heap_fit(spool_pool *pool, spool__pending *own, const spool__need *need,
                              bool wide);
/* Starts the loads of the lines a fit of need bytes will read first (its band's bytes and map,
 * and the list head of need's class), so that they arrive while the caller takes the pool's
 * lock and spills its front. Reads nothing itself: safe without the lock. */
void spool__heap_fit_prefetch(spool_pool *pool, const spool__need *need);
/* Then, under the pool's lock, the loads of the first ranges the fit will look at (the heads of
 * need's class and of the next class that has ranges), each a cold record. */
void spool__heap_fit_prefetch_ranges(spool_pool *pool, const spool__need *need);
/* A used block of need bytes from the top of a chunk own's stream took for a larger band, out
 * of the free range that ends it, when that range is own's or shared and too small for any
 * request of the chunk's band (no block of that band could use it), or NULL. For a brief
 * stream's small request: the pool reserves 32 MiB segments, so a chunk of the small band for
 * a few bytes would cost a segment, and a brief block leaves soon. */
spool__block *spool__heap_fit_leftover(spool_pool *pool, spool__pending *own,
                                      const spool__need *need);
/* Enters a chunk just allocated on own's stream and cuts need bytes off it; NULL without host
 * memory (the caller gives the chunk back). */
spool__block *spool__heap_add_chunk(spool_pool *pool, spool__pending *own, uintptr_t addr,
                                    uint64_t bytes, uint64_t need, bool malloced);
/* Memory for a chunk of bytes, for stream: from the pool in stream order, or from cudaMalloc
 * (on the pool's device) when the memory tool attached takes heaps only over that (*malloced
 * says which). SPOOL_ERR_OOM without a message when the device is out of memory (the caller
 * tries less); another failure with its message. Giving a chunk back: cudaFreeAsync on
 * stream, or cudaFree, which waits for the whole device; *api names the call. */
spool_status spool__chunk_get(spool_pool *pool, void **out, uint64_t bytes, cudaStream_t stream,
                              bool *malloced, const char *ctx);
cudaError_t spool__chunk_put(uintptr_t addr, bool malloced, cudaStream_t stream, const char **api);
/* The used block b, freed on own's stream, becomes a range pending on it. */
void spool__heap_release(spool_pool *pool, spool__pending *own, spool__block *b);
/* The fence decision: query own's last fence; if none is pending, record one on stream covering
 * what own has freed. Made every fence_every operations, or at once for a large free. */
void spool__heap_fence_now(spool_pool *pool, spool__pending *own, cudaStream_t stream);
/* The look for idle chunks to give back on stream, made every SPOOL__IDLE_SCAN heap
 * allocations (heap.c tests the count inline). */
void spool__heap_idle_scan(spool_pool *pool, spool__pending *own, cudaStream_t stream);
#define SPOOL__IDLE_SCAN 64 /* heap allocations between looks for idle chunks */
/* Publishes the ranges of every stream whose fence has completed; true if any did. */
bool spool__heap_publish_ready(spool_pool *pool);
/* Publishes every pending range: only once the device is idle; the same for one stream's,
 * once that stream is idle. */
void spool__heap_publish_all(spool_pool *pool);
void spool__heap_publish_own(spool_pool *pool, spool__pending *own);
/* Whether some chunk holds no used block (a flush would give it back). */
bool spool__heap_has_free_chunk(const spool_pool *pool);
/* Gives back on stream every chunk that is all free (shared, or pending on own) and has been so
 * for at least idle heap allocations. SPOOL_OK or the first failure (that chunk stays). */
spool_status spool__heap_free_empty(spool_pool *pool, spool__pending *own, cudaStream_t stream,
                                    uint64_t idle, const char *ctx);
/* At destroy, the device idle: gives chunks back on stream (none; those with no used block; all,
 * leaked buffers' too) and frees every record. Tries every chunk; the message says how many
 * stay allocated. */
typedef enum { SPOOL__GIVE_NONE, SPOOL__GIVE_FREE, SPOOL__GIVE_ALL } spool__give;
spool_status spool__heap_destroy(spool_pool *pool, cudaStream_t stream, spool__give give,
                                 const char *ctx);
/* Walks the heap and checks every rule it keeps (for tests); false with the first broken one
 * in why. Takes the pool's lock. */
bool spool__heap_check(spool_pool *pool, char *why, size_t len);
/* The largest free range, and the bytes pending on one stream. */
uint64_t spool__heap_largest_free(const spool_pool *pool);
uint64_t spool__heap_pending_bytes(const spool__pending *own);

/* ---- front.c: the per-stream fronts of the heap --------------------------------------------- */

/* A growing array of pointers: a front bin (block records, most recently freed last), or the
 * list of a carved buffer's pieces (nvtx.c: their addresses). */
typedef struct spool__bin {
  void **items;
  uint32_t count, cap;
} spool__bin;

/* Room for one more item in bin (its capacity doubled when full, from 8); false without host
 * memory, bin unchanged. (track.c) */
bool spool__bin_grow(spool__bin *bin);

/* Tells the fronts that the pool of this id is gone: every thread's lookup slots of it become
 * free at that thread's next first use of a stream. Thread safe; no CUDA calls. */
void spool__front_pool_gone(uint64_t pool_id);

#define SPOOL__OUTBOX 8 /* frees past a front's bound that wait for its stream's next miss */

/* What one stream cache has counted; summed over the caches for spool_stats. bytes_cached: in
 * the front bins. */
typedef struct spool__cache_counters {
  uint64_t bytes_in_use, buffers_in_use, bytes_cached, bytes_front;
  uint64_t allocs, frees, bytes_allocated, hits, misses, flushes;
  uint64_t high; /* the highest of the streams' highs (spool__scache.high), not a sum */
  uint64_t high_buffers; /* the same for their buffer counts */
} spool__cache_counters;

/* What one front's stream has in use, as it last published it: written by that stream's holder
 * alone, with a plain store, so that a publication takes no atomic read-modify-write (a full
 * barrier on x86, on every pair of large buffers); summed with the pool's totals by whoever
 * judges the peak. A line of its own: each is written by another thread. */
#define SPOOL__SHARES 32
typedef struct spool__share {
  alignas(SPOOL__CACHE_LINE) atomic_uint_fast64_t bytes;
  atomic_uint_fast64_t buffers;
} spool__share;

/* One stream's cache. Only the threads using that stream take its lock, so threads on different
 * streams never wait for each other on a hit. Never freed before the pool: threads keep
 * pointers to it in their lookup slots. */
typedef struct spool__scache {
  alignas(SPOOL__CACHE_LINE) atomic_int lock; /* a line of its own: caches sit side by side */
  /* The owning thread (cache_bias): it works on the cache without the lock while `owner` names
   * it, flagging itself in `inside`; any other thread takes the lock, clears `owner`, runs a
   * process-wide barrier and waits for `inside` to drop (front.h, barrier.c). 0: no owner. */
  atomic_uint_fast64_t owner;
  atomic_int inside;
  uint64_t streak_thread; /* the thread that took the lock last on a hit or free, and how many */
  uint64_t streak;        /* times in a row: a long streak makes it the owner again */
  uint32_t revokes;       /* times the cache was taken back (up to 16): the streak needed grows */
  bool may_own;           /* cache_owner=on and the barrier works here */
  cudaStream_t stream;     /* the handle it is for; the legacy stream is always NULL */
  uint64_t thread;         /* cudaStreamPerThread: the owning thread's number; else 0 */
  spool__index blocks;     /* every block the stream holds, live or cached: address -> block */
  spool__bin bins[SPOOL__CLASSES]; /* the front: freed blocks by the class of their size */
  uint64_t front_map[SPOOL__BIN_WORDS]; /* its non-empty bins */
  spool__cache_counters c;
  uint64_t seq_next, seq_end; /* allocation numbers taken from the pool in batches */
  uint64_t pub_bytes, pub_buffers; /* what the pool's totals hold of this stream */
  struct spool__share *share; /* where it publishes them (NULL: into the pool's totals) */
  uint64_t high;           /* bytes in use at their highest since the peaks were reset */
  uint64_t high_buffers;   /* and buffers in use */
  uint64_t tick;           /* blocks put in the front so far */
  uint32_t front_blocks;   /* blocks in the front bins */
  uint64_t spilled_at;     /* tick at the last look for stale front blocks */
  unsigned last_cls;       /* the size class of the stream's last allocation */
  /* 16 times the mean number of allocations on the stream during a buffer's life (a moving
   * mean over its frees, each counted up to 255): what front.h's brief() judges; 0 in a new
   * front, which counts as brief until its frees show otherwise */
  uint32_t life16;
  /* poison=on: freed blocks kept out of reuse, oldest first (a ring), so that a stale read
   * meets the poison rather than the next owner's data */
  uintptr_t *quar;
  uint32_t quar_head, quar_count, quar_cap;
  uint64_t quar_bytes;
  /* Blocks freed past the front's bound, on their way into the heap at the stream's next miss,
   * which holds the pool's lock anyway (or at the free that finds it full, or a flush): a free
   * into the heap takes no lock of the pool's. Freed, in the index until they go. */
  struct spool__buffer *outbox[SPOOL__OUTBOX];
  uint32_t outbox_count;
  uint64_t outbox_bytes;
  spool__pending pend;     /* the heap's part, under the pool's lock */
  atomic_bool device_checked; /* the stream is of the pool's device (created streams) */
  struct spool__scache *next; /* the pool's list, under the pool's lock */
} spool__scache;

/* ---- nvtx.c: spool's memory as memory tools see it (NVTX memory API) ---------------------- */

#define SPOOL__NVTX_BUCKETS 64

typedef struct spool__nvtx {
  atomic_bool on;        /* cfg.nvtx and a tool attached that takes spool's heaps (probe) */
  bool malloc_chunks;    /* chunks come from cudaMalloc: the heaps the tool takes */
  pthread_mutex_t lock;  /* guards carved */
  struct spool__carved *carved[SPOOL__NVTX_BUCKETS]; /* buffers handed out in pieces */
} spool__nvtx;

struct spool_pool {
  cudaMemPool_t handle;
  int device;
  bool owned;            /* created by spool: destroyed by spool */
  struct spool__trace *trace; /* recording (trace.c); NULL: off, the hot path's one test */
  spool_config cfg;
  pthread_mutex_t lock;  /* guards live, graves, counters and the oom handler */
  spool__table live;
  spool__graveyard graves;
  spool__counters c;
  spool_oom_fn oom_fn;
  void *oom_user;
  spool_pool *registry_next; /* guarded by the registry's lock */
  uint64_t id;               /* unique in the process: the key of threads' lookup slots */
  spool__scache *caches;     /* every stream cache, under the lock; freed at destroy */
  spool__heap heap;          /* under the lock */
  /* Written by every thread from time to time: a cache line of its own, so that the fields
   * above, read on every allocation, never bounce between cores. */
  alignas(SPOOL__CACHE_LINE) atomic_uint_fast64_t seq; /* the last allocation number */
  /* Pool-wide totals (see front.h): the uncached path's and those of fronts past the share
   * slots, added as they change; the peaks they and the shares are judged against. */
  atomic_uint_fast64_t total_bytes, total_buffers;
  atomic_uint_fast64_t peak_bytes, peak_buffers;
  atomic_uint shares_used; /* slots of shares[] given to fronts, in order; never given back */
  spool__share shares[SPOOL__SHARES];
  char pad_end[SPOOL__CACHE_LINE]; /* nor with whatever malloc puts after the pool */
  /* ipc.c */
  bool imported;         /* made by spool_pool_import: CUDA allows no allocations from it; set
                            before the pool is handed out, read without the lock */
  uint64_t ipc_exports;  /* successful spool_pool_export calls; guarded by lock */
  uint64_t ipc_pointers; /* pointers exported (exporter) or imported (importer); guarded by lock */
  /* scope.c, handoff.c: made on first use under the lock, freed at destroy */
  _Atomic(struct spool__scopes *) scopes;
  _Atomic(struct spool__handoff *) handoff;
  atomic_bool handoff_any; /* some buffer has recorded streams: frees look them up */
  spool__nvtx nvtx;
  spool__table aligned;              /* aligned.c: aligned batches' first pointers; under lock */
  atomic_uint_fast64_t aligned_live; /* entries in it: frees look them up */
};

/* Whether memory tools are told of the pool's buffers: one relaxed load, on the hot path. */
static inline bool spool__nvtx_on(const spool_pool *p) {
  return atomic_load_explicit(&p->nvtx.on, memory_order_relaxed);
}
void spool__nvtx_init(spool_pool *p);
void spool__nvtx_fini(spool_pool *p);
/* At pool creation, on the pool's device: whether a tool is attached, and whether it takes a
 * heap over cudaMalloc memory (compute-sanitizer takes none over pool memory). Without such a
 * tool the switch goes off; with one, the pool's chunks come from cudaMalloc. Never fails: a
 * failed look leaves the switch off and the caller's error as it was. */
void spool__nvtx_probe(spool_pool *p);
/* A new cudaMalloc heap chunk as a tool's sub-allocator heap: its handle, NULL when the tool
 * refuses it (the pool's switch is then turned off). Dropping it unregisters it with every
 * region in it. */
void *spool__nvtx_heap(spool_pool *p, uintptr_t addr, uint64_t bytes);
void spool__nvtx_heap_drop(spool_pool *p, void *heap);
/* A buffer of the chunk whose heap is `heap` handed out, or freed on stream: its region of size
 * bytes. Callers test spool__nvtx_on first (the slow halves are out of line). The free waits
 * for stream's work first: the tool sees the region go when the stream gets there, not when
 * the host calls (a kernel queued before the free still uses it). */
void spool__nvtx_region_slow(void *heap, uintptr_t ptr, uint64_t size);
void spool__nvtx_release_slow(spool_pool *p, cudaStream_t stream, const void *heap, uintptr_t ptr,
                              uint64_t size);
/* A live heap buffer of size bytes at base is handed out in pieces: its one region goes and
 * each piece gets its own; its free unregisters them. False when nothing was carved (no tool,
 * not a heap buffer, or no host memory), and the buffer stays one region. */
bool spool__nvtx_carve(spool_pool *p, void *heap, uintptr_t base, uint64_t size);
void spool__nvtx_piece(spool_pool *p, uintptr_t base, uintptr_t ptr, uint64_t size);

/* ---- device.c: device selection and memory ------------------------------------------------ */

/* Runs the support checks for device: driver >= 11.2, the ordinal exists, memory pools are
 * supported. Returns SPOOL_OK or the failure with its message (context names the caller). */
spool_status spool__device_check(int device, const char *context);

/* Makes device current for the calling thread, remembering the old one in *saved; leave puts
 * it back and returns s, or its own failure when s is SPOOL_OK (a failure of its own on a path
 * that already failed is added to that message). No-ops when device already is the current one.
 */
spool_status spool__device_enter(int device, int *saved, const char *context);
spool_status spool__device_leave(int device, int saved, spool_status s, const char *context);

/* cudaMemGetInfo for device, keeping the calling thread's current device. */
spool_status spool__device_meminfo(int device, size_t *free_bytes, size_t *total_bytes);

/* The same for figures that are nice to have (reports, messages): true when they were read;
 * a failure leaves this thread's message as it was. */
bool spool__device_meminfo_quiet(int device, size_t *free_bytes, size_t *total_bytes);

/* ---- oom.c: what an allocation does when the device is out of memory ------------------------ */

/* Called after cudaMallocFromPoolAsync failed with cudaErrorMemoryAllocation: gives back what
 * the pools can, retries (cfg.oom_retries), then asks the handler. Returns SPOOL_OK with *out
 * set, or the failure with its message (SPOOL_ERR_OOM with the numbers). Takes no lock while
 * calling CUDA or the handler. */
spool_status spool__alloc_after_oom(spool_pool *pool, void **out, size_t size, size_t asked,
                                    cudaStream_t stream);

/* ---- trace.c: the trace file (trace_format.h, docs/trace.md) ------------------------------ */

typedef struct spool__trace spool__trace;

/* One event as the recording call site knows it. seq 0: numbered when recorded; a free takes
 * its number before it frees (spool__trace_seq), so that an allocation handed the same address
 * by another thread always comes after it in the trace. */
typedef struct spool__trace_ev {
  uint8_t kind, flags; /* spool_trace_kind, SPOOL_TRACE_CAPTURING ... */
  spool_status status;
  uint32_t aux;
  uint64_t seq;
  const void *ptr;
  uint64_t size;
  cudaStream_t stream;
  const spool__site *site; /* NULL: none */
} spool__trace_ev;

/* At create: opens cfg.trace (else SPOOL_TRACE; %p: process id, %n: pool number) and writes the
 * header, setting pool->trace; nothing when neither names a file. SPOOL_ERR_CONFIG naming the
 * path when it cannot be written. */
spool_status spool__trace_open(spool_pool *pool, const char *ctx);
/* Writes every block and closes the file (pool->trace becomes NULL). */
void spool__trace_close(spool_pool *pool);
/* Only with pool->trace set. The next event number; records ev into this thread's block (a
 * full block is written at once); writes every thread's block. Never fails the caller: an
 * event without host memory goes unrecorded, a failed write ends the trace with a message. */
uint64_t spool__trace_seq(spool_pool *pool);
SPOOL__NOINLINE void spool__trace_event(spool_pool *pool, const spool__trace_ev *ev);
void spool__trace_flush(spool_pool *pool);
/* A chunk the heap took from the pool or gave back (under the pool's lock). */
SPOOL__NOINLINE void spool__trace_chunk(spool_pool *pool, int kind, uintptr_t addr,
                                        uint64_t bytes, cudaStream_t stream);
/* An event at a flush point (trim, stream release, destroy), then the flush. */
SPOOL__NOINLINE void spool__trace_point(spool_pool *pool, int kind, spool_status s,
                                        uint64_t size, cudaStream_t stream);

/* ---- leaks.c: the leak report ------------------------------------------------------------- */

/* Writes the leak report of pool to out (the pool's lock must not be held). */
spool_status spool__leak_report(spool_pool *pool, FILE *out, const char *context);

/* At destroy: writes the report (report= file, SPOOL_REPORT, or stderr), then frees every live
 * buffer after a device synchronize. Returns SPOOL_OK when there were none, SPOOL_ERR_LEAKS, or
 * SPOOL_ERR_CUDA. */
spool_status spool__free_leaks(spool_pool *pool);

/* ---- census.c: whole-pool walks ------------------------------------------------------------ */

/* For messages about a refused free: the live buffer of a stream cache that ptr points at or
 * into. Takes the pool's lock. */
bool spool__census_containing(spool_pool *pool, uintptr_t ptr, spool__buffer *out);

/* Gives every cached block back to the pool: when there are any, synchronizes the pool's device
 * and frees them on this thread's per-thread stream (the caches' own streams may be gone), then
 * waits for that stream. Returns SPOOL_OK or the first failure (the blocks that failed stay
 * cached). Takes the pool's lock. */
spool_status spool__census_flush_all(spool_pool *pool, const char *ctx);

/* The live heap buffer that starts at ptr, from any stream's table. Takes the pool's lock. */
bool spool__census_find_live(spool_pool *pool, uintptr_t ptr, spool__buffer *out);
/* For memory tools: the live buffer at ptr is handed out in pieces (spool__nvtx_piece). False
 * when that is not tracked (no tool attached, not a heap buffer): it stays one region. */
bool spool__census_carve(spool_pool *pool, uintptr_t ptr);

/* Calls fn for every live buffer of every stream cache (each cache's lock held meanwhile). */
void spool__census_each_live(spool_pool *pool, void (*fn)(const spool__buffer *, void *),
                             void *arg);

/* The sum of every cache's counters into *cc (zeroed first). Exact: each cache publishes to the
 * pool-wide totals on the way. Takes the pool's lock and each cache's. */
void spool__census_sum(spool_pool *pool, spool__cache_counters *cc);

/* Bytes and buffers in use now, the uncached path's and every cache's (exact). */
void spool__live_totals(spool_pool *pool, uint64_t *bytes, uint64_t *buffers);

/* Sets the pool-wide peaks to the current totals (after publishing every cache). */
void spool__census_reset_peaks(spool_pool *pool);

/* What one stream holds, for the report and JSON: its front's bytes, the heap's ranges pending
 * on it, and its buffers' bytes in use. thread: for cudaStreamPerThread, the thread's number. */
typedef struct spool__stream_idle {
  cudaStream_t stream;
  uint64_t thread;
  uint64_t front_bytes, pending_bytes, bytes_in_use;
} spool__stream_idle;
/* Calls fn for every stream the pool has seen (the pool's lock held meanwhile). */
void spool__census_each_stream(spool_pool *pool, void (*fn)(const spool__stream_idle *, void *),
                               void *arg);

/* At destroy: gives every cached block back (blocks of streams that are gone, after a device
 * synchronize) and frees the caches. Returns SPOOL_OK or the failure (blocks that could not be
 * given back stay in the pool, which an own pool's destroy takes with it). */
spool_status spool__census_destroy(spool_pool *pool, bool leaks_freed);

/* The pool-wide totals: the uncached path's changes, published at once. */
void spool__totals_add(spool_pool *pool, int64_t bytes, int64_t buffers);
/* The pool-wide bytes and buffers in use as published: the totals and every share. */
uint64_t spool__totals_bytes(spool_pool *pool);
uint64_t spool__totals_buffers(spool_pool *pool);

/* ---- barrier.c ---------------------------------------------------------------------------- */

/* Whether spool__barrier_all works in this process (registers for it on the first call). */
bool spool__barrier_available(void);
/* A full memory barrier on every CPU running a thread of this process; false if it failed
 * (then the caller must not rely on it). Only after spool__barrier_available said true. */
bool spool__barrier_all(void);

/* This thread's number in the process: never reused and never 0 (a thread-local's address would
 * be reused, by the next thread given the same stack). */
extern _Thread_local uint64_t spool__thread_no;
uint64_t spool__thread_new(void);
static inline uint64_t spool__thread_id(void) {
  uint64_t n = spool__thread_no;
  return n ? n : spool__thread_new();
}

/* ---- heap.c ---------------------------------------------------------------------------------- */

/* Enters a buffer of the uncached path in the pool's table (unless track=off) and counters. */
spool_status spool__record_alloc(spool_pool *pool, void *ptr, size_t size, cudaStream_t stream,
                                 const spool__site *site);
/* ---- memory -------------------------------------------------------------------------------- */

/* Zeroed host memory aligned to SPOOL__CACHE_LINE, for structures with lines of their own
 * (calloc promises only 16 bytes). size must be a multiple of SPOOL__CACHE_LINE, as sizeof of
 * such a structure is. Freed with free(). NULL without memory. */
void *spool__zalloc_aligned(size_t size);
/* A growing array's next storage: items (elem bytes each, cap of them; NULL with cap 0)
 * reallocated to twice cap, or to first when empty. Returns it with *grown_cap set, or NULL
 * without memory (or past SIZE_MAX bytes), items untouched. (track.c) */
void *spool__grow_array(void *items, size_t cap, size_t elem, size_t first, size_t *grown_cap);
/* ---- several devices and processes (devices.c, peer.c, ipc.c) ---------------------- */

/* device.c. The device of stream (for 0, cudaStreamLegacy and cudaStreamPerThread: the calling
 * thread's current device) must be the pool's: SPOOL_ERR_INVALID naming both otherwise. Where
 * the runtime cannot tell (built with CUDA < 12.8, which lacks cudaStreamGetDevice, or the query
 * fails, e.g. for a destroyed stream) the check passes and the allocation judges the stream. */
spool_status spool__stream_device_check(const spool_pool *pool, cudaStream_t stream,
                                        const char *context);
/* device.c: the device of stream, as above; -1 where the runtime cannot tell. Not during a
 * capture of stream (cudaStreamGetDevice would break it). */
int spool__stream_device(cudaStream_t stream);

/* 0, cudaStreamLegacy and cudaStreamPerThread: handles that mean "the current device's" stream,
 * whose device is the calling thread's current one. */
static inline bool spool__current_device_stream(cudaStream_t stream) {
  return stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

/* devices.c: the report's lines on access (peer.c) and IPC (ipc.c); they never fail the report
 * and leave this thread's last error as it was. */
void spool__report_multi(spool_pool *pool, FILE *out);
void spool__report_access(spool_pool *pool, FILE *out);
void spool__report_ipc(spool_pool *pool, FILE *out);

/* ipc_rules.c. The config's ipc rules (spool_config_validate); the device and platform support for
 * cfg->ipc, checked before a pool is created (owned: spool creates the cudaMemPool); the handle
 * types of a new pool; the refusals of spool_alloc (imported pool, shareable pool on a capturing
 * stream) and spool_trim (IPC pools never shrink). */
spool_status spool__ipc_validate(const spool_config *cfg);
spool_status spool__ipc_check_create(const spool_config *cfg, bool owned, const char *context);
enum cudaMemAllocationHandleType spool__ipc_handle_types(const spool_config *cfg);
spool_status spool__ipc_alloc_check(const spool_pool *pool, cudaStream_t stream);
spool_status spool__ipc_trim_check(const spool_pool *pool);

/* pool.c, for spool_pool_import: a pool object over handle (no CUDA calls); NULL without host
 * memory. */
spool_pool *spool__pool_new(const spool_config *cfg, cudaMemPool_t handle, bool owned);

/* ---- batches, scopes, hand-off (batch.c, scope.c, handoff.c) --------------------- */

/* heap.c: spool_alloc with the caller's site (a batch passes its count in site->batch). */
spool_status spool__alloc_site(spool_pool *pool, void **ptr, size_t size, cudaStream_t stream,
                               const spool__site *site);
/* heap.c: spool_free with the caller's site. */
spool_status spool__free_site(spool_pool *pool, void *ptr, cudaStream_t stream,
                              const spool__site *site);

/* ---- refuse.c: the words of a refused free ------------------------------------------------ */

/* What the heap found about a pointer it refused: inside a live buffer, recently freed, or a
 * buffer of another pool. */
typedef struct spool__refusal {
  bool inside, freed, other;
  spool__buffer inside_buf; /* the live buffer ptr points into */
  spool__buffer freed_buf;  /* the recent free of ptr */
  spool__owner owner;       /* the other pool's buffer */
} spool__refusal;

/* The refusal's status and message, in the order: interior (a batch member or scope memory
 * named as such), another pool's, a second free, unknown. */
spool_status spool__refuse_free(const spool_pool *pool, const void *ptr, const spool__site *site,
                                const spool__refusal *r);
/* "0x7f00 (1.00 MiB, allocation #5 on stream 0x1, allocated at a.c:10)" */
const char *spool__buffer_text(const spool__buffer *b, char *out, size_t len);
/* For a free refused because ptr points inside the live buffer b: the refusal naming the batch
 * or the scope b is (SPOOL_ERR_BATCH_MEMBER or SPOOL_ERR_INTERIOR_POINTER), or SPOOL_OK when b
 * is neither. here: the free's site, in words. */
spool_status spool__batch_refusal(const spool_pool *pool, const void *ptr,
                                  const spool__buffer *b, const char *here);
spool_status spool__scope_refusal(const void *ptr, const spool__buffer *b, const char *here);
/* The tag of scope chunks, for the leak report and refusals. */
extern const char spool__scope_tag[];

/* scope.c: at pool destroy, after the leak sweep: frees the scope objects. */
void spool__scopes_destroy(spool_pool *pool);

/* handoff.c: whether ptr has recorded streams (spool_record_stream), so that its free goes
 * through the hand-off. Callers test pool->handoff_any first. */
bool spool__handoff_recorded(spool_pool *pool, void *ptr);
/* handoff.c: the hand-off of ptr's free on stream: the hand-off stream waits for every recorded
 * stream, for event (spool_free_after; NULL for none) and for stream; on SPOOL_OK *on is where
 * the caller frees ptr, and the hand-off's lock stays held until spool__handoff_end(s), given
 * the free's status (on success ptr's recorded streams are forgotten). On a failure nothing
 * waits and nothing is held. */
spool_status spool__handoff_begin(spool_pool *pool, void *ptr, cudaStream_t stream,
                                  cudaEvent_t event, const char *ctx, cudaStream_t *on);
void spool__handoff_end(spool_pool *pool, void *ptr, spool_status s);
/* handoff.c: at pool destroy: the hand-off stream, event and table. */
spool_status spool__handoff_destroy(spool_pool *pool);

/* ---- aligned.c: batches aligned past 256 bytes, freed by their first pointer --------------- */

/* Enters an aligned batch: first, its first pointer, lies pad bytes past its allocation's start
 * (a live buffer). SPOOL_OK or SPOOL_ERR_HOST_OOM (then the caller frees the allocation). */
spool_status spool__aligned_add(spool_pool *pool, uintptr_t first, uint64_t pad);
/* The start of the allocation whose aligned batch begins at ptr, else ptr. */
void *spool__aligned_start(spool_pool *pool, void *ptr);
/* The first pointer of the aligned batch whose allocation starts at start, else start (a scan:
 * for messages). */
uintptr_t spool__aligned_first(const spool_pool *pool, uintptr_t start);
/* Before a free of ptr: what to free, the start of its allocation when ptr is an aligned
 * batch's first pointer (whose entry is taken out into *e, so that a second free of it on
 * another thread cannot free the allocation twice), else ptr (e->ptr 0). When the free fails,
 * spool__aligned_undo(e) enters the batch again. */
void *spool__aligned_take(spool_pool *pool, void *ptr, spool__buffer *e);
void spool__aligned_undo(spool_pool *pool, const spool__buffer *e);

/* ---- time --------------------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds (track=full: buffer ages). */
uint64_t spool__now_ns(void);

#endif /* SPOOL_INTERNAL_H */
