/* cudasim: a host-side simulation of the part of the CUDA runtime API that spool and its tests
 * call, so that the suites run without a GPU. Compiled against the real cuda_runtime_api.h: every
 * runtime function below has the declared signature, so the compiler checks it.
 *
 * How the model works
 *  - One global mutex guards all simulated state. Per-thread state (current device, last error,
 *    the per-thread default streams) is thread-local and tagged with a generation number that
 *    cudasim_reset() bumps, so a reset invalidates every thread's state at once.
 *  - Every runtime call is counted under its name (failed ones too), then an armed failure for
 *    it fires if its turn has come: the call returns that error, sets the last error and does
 *    nothing else. Then come the driver check (version 0: cudaErrorInsufficientDriver) and the
 *    device check (no devices: cudaErrorNoDevice).
 *  - Streams count enqueued operations (tickets) and completed ones. Work on a stream that is
 *    not held completes when it is enqueued; on a held stream it stays pending until
 *    cudasim_release() or a stream, event or device synchronize. Events record a stream's ticket.
 *  - Pools reserve memory in segments of CUDASIM_GRANULARITY (2 MiB) multiples, each a lazily
 *    committed anonymous mmap, so device pointers can be dereferenced on the host. Blocks are
 *    carved from segments at 512-byte granularity; a freed block is reusable once its free has
 *    completed, or at once by an allocation on the stream that freed it (stream order).
 *  - At every stream, event or device synchronize, each pool of that device whose reserved bytes
 *    exceed its release threshold gives back entirely free segments, newest first, one at a
 *    time while it is still above the threshold (it may end below it: segments are whole).
 *
 * Simplifications (what the real runtime does and cudasim does not)
 *  - Data operations (cudaMemset*, cudaMemcpy*) happen at once, when they are called, even on a
 *    held stream; only their completion (cudaStreamQuery, events) is deferred. No kernels.
 *  - No dependencies between streams: cudaStreamWaitEvent is accepted and ignored, the legacy
 *    stream does not synchronize with blocking streams, and the three reuse flags are stored and
 *    read back but do not change which blocks are reused (only the two rules above apply).
 *  - An allocation that does not fit reserves a new segment; it never trims its own or other
 *    pools first. Coalescing merges only neighbours whose frees have completed.
 *  - Stream capture is not modelled (cudaStreamIsCapturing always says None); no sticky errors;
 *    priorities are clamped to [-5, 0] and otherwise ignored; elapsed times are 0.
 *  - cudaMalloc reserves whole CUDASIM_GRANULARITY units from the device capacity. cudaFree of
 *    a cudaMalloc'd pointer completes all work of its device and runs the release, as the
 *    implicit synchronization of the real cudaFree does.
 *  - cudaMemset/cudaMemcpy on device memory that is not inside a live allocation fail with
 *    cudaErrorInvalidValue (the real runtime may silently succeed on freed pool memory).
 *  - Destroying a stream completes its work. A per-thread default stream lives until reset.
 *  - Handles are never reused: destroyed streams, events and pools stay allocated (see
 *    graveyard), so a stale handle reliably gives cudaErrorInvalidResourceHandle.
 *  - Only the plain API names are defined: code built with per-thread default stream
 *    (nvcc --default-stream per-thread, CUDA_API_PER_THREAD_DEFAULT_STREAM) calls the _ptds/_ptsz
 *    variants, which cudasim does not provide.
 *
 * Error codes chosen where the real runtime is not documented
 *  - cudaMallocAsync/cudaMallocFromPoolAsync with size 0: cudaErrorInvalidValue.
 *  - cudaFreeAsync(NULL, s) and pointers that are not the start of a live pool block:
 *    cudaErrorInvalidValue. cudaFree(NULL): cudaSuccess.
 *  - cudaMemPoolCreate with handle types other than none / POSIX fd: cudaErrorNotSupported;
 *    on a device without pool support: cudaErrorNotSupported.
 *  - cudaStreamDestroy of NULL, cudaStreamLegacy or cudaStreamPerThread:
 *    cudaErrorInvalidResourceHandle.
 *  - cudaErrorNotReady (from cudaStreamQuery, cudaEventQuery) is a status, not a failure: it is
 *    not stored as the thread's last error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#endif

#include "cudasim.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h> /* issue 6: pool descriptors */
#include <unistd.h>   /* issue 6 */

#define SIM_MAX_DEV 64
/* Block granularity: an H200 (CUDA 13, driver 580) put two 256-byte buffers 512 bytes apart. */
#define SIM_ALIGN ((size_t)512)
#define SIM_PRIO_GREATEST (-5)

/* ---- simulated objects --------------------------------------------------------------------- */

enum sim_stream_kind { SIM_USER, SIM_LEGACY, SIM_PER_THREAD };

struct CUstream_st {
  struct CUstream_st *next; /* registry */
  int device;
  unsigned flags;
  int priority;
  enum sim_stream_kind kind;
  uint64_t ticket;    /* operations enqueued so far */
  uint64_t completed; /* operations completed so far (a prefix: stream order) */
  int held;
};

struct CUevent_st {
  struct CUevent_st *next; /* registry */
  unsigned flags;
  int recorded;
  struct CUstream_st *stream; /* NULL once that stream is gone: then complete */
  uint64_t ticket;
};

typedef struct sim_block {
  struct sim_block *next; /* by offset within the segment */
  size_t off, size;
  int live;
  struct CUstream_st *free_stream; /* NULL: the free has completed (or never was) */
  uint64_t free_ticket;
} sim_block;

typedef struct sim_segment {
  struct sim_segment *next;
  char *base;
  size_t size;
  sim_block *blocks;
} sim_segment;

struct CUmemPoolHandle_st {
  struct CUmemPoolHandle_st *next; /* registry */
  int device;
  int is_default;
  int destroyed; /* destroyed with blocks outstanding: reaped once they are all freed */
  int shareable;  /* issue 6: created with POSIX fd handles: segments are MAP_SHARED */
  struct CUmemPoolHandle_st *imported_from; /* issue 6: an imported pool's exporter, else NULL */
  size_t max_size;
  uint64_t threshold;
  int reuse[3];
  uint64_t reserved, reserved_high, used, used_high;
  enum cudaMemAccessFlags access[SIM_MAX_DEV];
  sim_segment *segs; /* newest first */
};

typedef struct sim_region { /* a cudaMalloc allocation */
  struct sim_region *next;
  char *base;
  size_t size, charged;
  int device;
} sim_region;

typedef struct sim_device {
  size_t capacity;
  size_t reserved; /* pool segments + cudaMalloc regions */
  int pools_supported;
  struct CUmemPoolHandle_st *default_pool, *current_pool; /* lazily created / NULL = default */
  struct CUstream_st *legacy;
} sim_device;

typedef struct sim_count {
  const char *name; /* __func__ of the API: static storage */
  long n;
} sim_count;

typedef struct sim_armed {
  char *name;
  long at; /* fires on this call number of name */
  cudaError_t err;
} sim_armed;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Dead streams, events and pools are kept here, never freed, even across resets: their addresses
 * are never handed out again, so a stale handle can never alias a live object. Reachable, so leak
 * checkers stay quiet; a few dozen bytes each. Guarded by g_lock. */
static struct {
  struct CUstream_st *streams;
  struct CUevent_st *events;
  struct CUmemPoolHandle_st *pools;
} graveyard;

static struct {
  int inited;
  unsigned long gen;
  int ndev, driver;
  sim_device dev[SIM_MAX_DEV];
  unsigned char no_peer[SIM_MAX_DEV][SIM_MAX_DEV]; /* 0: peers can access (the default) */
  struct CUstream_st *streams;
  struct CUevent_st *events;
  struct CUmemPoolHandle_st *pools;
  sim_region *regions;
  long live;
  sim_count *counts;
  size_t ncounts, capcounts;
  sim_armed *armed;
  size_t narmed, caparmed;
} g;

static _Thread_local struct {
  unsigned long gen; /* stale when != g.gen */
  int device;
  cudaError_t last;
  struct CUstream_st *ptds[SIM_MAX_DEV];
} t;

/* ---- issue 6: several processes (IPC); defined in the section at the end of the file ---- */
static int sim6_handle_types(int device);
static int sim6_import_range(const void *ptr, size_t n, int whole);
static int sim6_import_free(const void *ptr, struct CUstream_st *s);
static void sim6_reset(void);

/* ---- state, locking, counting, fault injection ----------------------------------------------- */

static void sim_defaults(void) {
  g.ndev = 1;
  g.driver = 13000;
  for (int d = 0; d < SIM_MAX_DEV; d++) {
    g.dev[d].capacity = CUDASIM_DEFAULT_CAPACITY;
    g.dev[d].pools_supported = 1;
  }
  memset(g.no_peer, 0, sizeof g.no_peer);
  g.gen++;
  g.inited = 1;
}

static void tls_sync(void) {
  if (t.gen != g.gen) {
    memset(&t, 0, sizeof t);
    t.gen = g.gen;
  }
}

static void lock(void) {
  pthread_mutex_lock(&g_lock);
  if (!g.inited)
    sim_defaults();
  tls_sync();
}

static void unlock(void) { pthread_mutex_unlock(&g_lock); }

static long count_call(const char *api) {
  for (size_t i = 0; i < g.ncounts; i++)
    if (strcmp(g.counts[i].name, api) == 0)
      return ++g.counts[i].n;
  if (g.ncounts == g.capcounts) {
    size_t cap = g.capcounts ? 2 * g.capcounts : 64;
    sim_count *c = realloc(g.counts, cap * sizeof *c);
    if (!c)
      return 0; /* host OOM: the call goes uncounted */
    g.counts = c;
    g.capcounts = cap;
  }
  g.counts[g.ncounts].name = api;
  g.counts[g.ncounts].n = 1;
  g.ncounts++;
  return 1;
}

static long calls_of(const char *api) {
  for (size_t i = 0; i < g.ncounts; i++)
    if (strcmp(g.counts[i].name, api) == 0)
      return g.counts[i].n;
  return 0;
}

/* The error armed for call number n of api, if any; fired entries are removed. */
static cudaError_t take_armed(const char *api, long n) {
  cudaError_t err = cudaSuccess;
  for (size_t i = 0; i < g.narmed;) {
    if (g.armed[i].at == n && strcmp(g.armed[i].name, api) == 0) {
      if (err == cudaSuccess)
        err = g.armed[i].err;
      free(g.armed[i].name);
      g.armed[i] = g.armed[--g.narmed];
    } else {
      i++;
    }
  }
  return err;
}

/* Start of every runtime call: lock, count, injected failure, driver and device checks. The
 * lock stays held; sim_leave releases it. */
static cudaError_t sim_enter(const char *api, int needs_device) {
  lock();
  cudaError_t e = take_armed(api, count_call(api));
  if (e != cudaSuccess || !needs_device)
    return e;
  if (g.driver == 0)
    return cudaErrorInsufficientDriver;
  if (g.ndev == 0)
    return cudaErrorNoDevice;
  return cudaSuccess;
}

static cudaError_t sim_leave(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady)
    t.last = e;
  unlock();
  return e;
}

/* The body of a runtime function that checks the device: counts it under its own name, runs
 * expr (with the lock held) unless the entry checks failed. */
#define SIM_CALL(expr)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = sim_enter(__func__, 1);                                                      \
    if (e_ == cudaSuccess)                                                                        \
      e_ = (expr);                                                                                \
    return sim_leave(e_);                                                                         \
  } while (0)

static int valid_dev(int d) { return d >= 0 && d < g.ndev; }

static cudaError_t cur_dev(int *d) {
  if (!valid_dev(t.device))
    return cudaErrorInvalidDevice; /* the device count shrank under this thread */
  *d = t.device;
  return cudaSuccess;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* ---- streams and events ---------------------------------------------------------------------- */

static struct CUstream_st *stream_new(int dev, unsigned flags, int prio, enum sim_stream_kind k) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->device = dev;
  s->flags = flags;
  s->priority = prio;
  s->kind = k;
  s->next = g.streams;
  g.streams = s;
  return s;
}

static int stream_known(cudaStream_t s) {
  for (struct CUstream_st *p = g.streams; p; p = p->next)
    if (p == s)
      return 1;
  return 0;
}

/* Resolves a handle: NULL and cudaStreamLegacy are the current device's legacy stream,
 * cudaStreamPerThread this thread's stream on the current device (both made on first use). */
static cudaError_t stream_get(cudaStream_t h, struct CUstream_st **out) {
  int d;
  if (h != NULL && h != cudaStreamLegacy && h != cudaStreamPerThread) {
    if (!stream_known(h))
      return cudaErrorInvalidResourceHandle;
    *out = h;
    return cudaSuccess;
  }
  cudaError_t e = cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  struct CUstream_st **slot = h == cudaStreamPerThread ? &t.ptds[d] : &g.dev[d].legacy;
  if (!*slot)
    *slot = stream_new(d, 0, 0, h == cudaStreamPerThread ? SIM_PER_THREAD : SIM_LEGACY);
  if (!*slot)
    return cudaErrorMemoryAllocation;
  *out = *slot;
  return cudaSuccess;
}

static uint64_t enqueue(struct CUstream_st *s) {
  s->ticket++;
  if (!s->held)
    s->completed = s->ticket;
  return s->ticket;
}

static int event_known(cudaEvent_t ev) {
  for (struct CUevent_st *p = g.events; p; p = p->next)
    if (p == ev)
      return 1;
  return 0;
}

static int event_done(const struct CUevent_st *ev) {
  return !ev->recorded || !ev->stream || ev->stream->completed >= ev->ticket;
}

/* ---- pools: blocks and segments -------------------------------------------------------------- */

static int block_done(const sim_block *b) {
  return !b->live && (!b->free_stream || b->free_stream->completed >= b->free_ticket);
}

/* Merges neighbours whose frees have completed. */
static void seg_coalesce(sim_segment *sg) {
  for (sim_block *b = sg->blocks; b; b = b->next) {
    if (!block_done(b))
      continue;
    b->free_stream = NULL;
    while (b->next && block_done(b->next)) {
      sim_block *n = b->next;
      b->size += n->size;
      b->next = n->next;
      free(n);
    }
  }
}

static int seg_idle(sim_segment *sg) {
  for (sim_block *b = sg->blocks; b; b = b->next)
    if (!block_done(b))
      return 0;
  return 1;
}

/* Unlinks *link (a segment of p) and gives its memory back to the device. */
static void seg_release(struct CUmemPoolHandle_st *p, sim_segment **link) {
  sim_segment *sg = *link;
  *link = sg->next;
  munmap(sg->base, sg->size);
  p->reserved -= sg->size;
  g.dev[p->device].reserved -= sg->size;
  while (sg->blocks) {
    sim_block *b = sg->blocks;
    sg->blocks = b->next;
    free(b);
  }
  free(sg);
}

/* Gives back idle segments while the pool holds more than `above` (sync release) or while
 * reserved - segment >= keep (trim). */
static void pool_shrink(struct CUmemPoolHandle_st *p, uint64_t limit, int trim) {
  if (p->shareable || p->imported_from)
    return; /* issue 6: IPC pools never give memory back (CUDA programming guide) */
  for (sim_segment **link = &p->segs; *link;) {
    sim_segment *sg = *link;
    int fits = trim ? p->reserved - sg->size >= limit : p->reserved > limit;
    if (fits && seg_idle(sg))
      seg_release(p, link);
    else
      link = &sg->next;
  }
}

static void pool_unlink_free(struct CUmemPoolHandle_st *p) {
  while (p->segs)
    seg_release(p, &p->segs);
  for (struct CUmemPoolHandle_st **link = &g.pools; *link; link = &(*link)->next)
    if (*link == p) {
      *link = p->next;
      break;
    }
  p->next = graveyard.pools;
  graveyard.pools = p;
}

/* A destroyed pool goes once nothing in it is live or pending. Returns 1 when it went. */
static int pool_reap(struct CUmemPoolHandle_st *p) {
  if (!p->destroyed)
    return 0;
  for (sim_segment *sg = p->segs; sg; sg = sg->next)
    if (!seg_idle(sg))
      return 0;
  pool_unlink_free(p);
  return 1;
}

static void reap_all(void) {
  for (struct CUmemPoolHandle_st *p = g.pools, *n; p; p = n) {
    n = p->next;
    pool_reap(p);
  }
}

/* What the runtime does at a synchronize: pools of device d shrink to their threshold. */
static void device_release(int d) {
  for (struct CUmemPoolHandle_st *p = g.pools, *n; p; p = n) {
    n = p->next;
    if (p->device != d || pool_reap(p))
      continue;
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      seg_coalesce(sg);
    pool_shrink(p, p->threshold, 0);
  }
}

static void device_complete(int d) {
  for (struct CUstream_st *s = g.streams; s; s = s->next)
    if (s->device == d)
      s->completed = s->ticket;
}

static int pool_known(cudaMemPool_t h) {
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    if (p == h)
      return !p->destroyed;
  return 0;
}

static struct CUmemPoolHandle_st *pool_new(int dev, int is_default) {
  struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->device = dev;
  p->is_default = is_default;
  p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
  for (int i = 0; i < SIM_MAX_DEV; i++)
    p->access[i] = cudaMemAccessFlagsProtNone;
  p->next = g.pools;
  g.pools = p;
  return p;
}

static cudaError_t default_pool(int d, struct CUmemPoolHandle_st **out) {
  if (!g.dev[d].pools_supported)
    return cudaErrorNotSupported;
  if (!g.dev[d].default_pool)
    g.dev[d].default_pool = pool_new(d, 1);
  if (!g.dev[d].default_pool)
    return cudaErrorMemoryAllocation;
  *out = g.dev[d].default_pool;
  return cudaSuccess;
}

/* Best fit among free blocks that may be reused by an allocation on s. */
static sim_block *pool_best_fit(struct CUmemPoolHandle_st *p, struct CUstream_st *s, size_t need,
                                sim_segment **seg) {
  sim_block *best = NULL;
  for (sim_segment *sg = p->segs; sg; sg = sg->next) {
    seg_coalesce(sg);
    for (sim_block *b = sg->blocks; b; b = b->next) {
      int reusable = !b->live && (block_done(b) || b->free_stream == s);
      if (reusable && b->size >= need && (!best || b->size < best->size)) {
        best = b;
        *seg = sg;
      }
    }
  }
  return best;
}

/* Reserves a new segment for need bytes; on failure the pool is unchanged. */
static cudaError_t pool_grow(struct CUmemPoolHandle_st *p, size_t need, sim_segment **out) {
  if (need > SIZE_MAX - CUDASIM_GRANULARITY)
    return cudaErrorMemoryAllocation;
  size_t size = round_up(need, CUDASIM_GRANULARITY);
  sim_device *dv = &g.dev[p->device];
  if (p->max_size && (size > p->max_size || p->reserved > p->max_size - size))
    return cudaErrorMemoryAllocation;
  if (dv->reserved > dv->capacity || size > dv->capacity - dv->reserved)
    return cudaErrorMemoryAllocation;
  sim_segment *sg = calloc(1, sizeof *sg);
  sim_block *b = calloc(1, sizeof *b);
  void *mem = MAP_FAILED;
  if (sg && b)
    mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
               (p->shareable ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) { /* issue 6: shared, so that an import can map the pages again */
    free(sg);
    free(b);
    return cudaErrorMemoryAllocation;
  }
  sg->base = mem;
  sg->size = b->size = size;
  sg->blocks = b;
  sg->next = p->segs;
  p->segs = sg;
  p->reserved += size;
  if (p->reserved > p->reserved_high)
    p->reserved_high = p->reserved;
  dv->reserved += size;
  *out = sg;
  return cudaSuccess;
}

static cudaError_t pool_alloc(struct CUmemPoolHandle_st *p, struct CUstream_st *s, size_t size,
                              void **out) {
  if (size == 0)
    return cudaErrorInvalidValue; /* spool never asks for 0; see the top of this file */
  if (size > SIZE_MAX - SIM_ALIGN)
    return cudaErrorMemoryAllocation;
  size_t need = round_up(size, SIM_ALIGN);
  sim_block *rest = calloc(1, sizeof *rest); /* before anything changes: failure leaves no trace */
  if (!rest)
    return cudaErrorMemoryAllocation;
  sim_segment *sg = NULL;
  sim_block *b = pool_best_fit(p, s, need, &sg);
  if (!b) {
    cudaError_t e = pool_grow(p, need, &sg);
    if (e != cudaSuccess) {
      free(rest);
      return e;
    }
    b = sg->blocks;
  }
  if (b->size > need) { /* split: the remainder keeps the free's stream order */
    *rest = *b;
    rest->off = b->off + need;
    rest->size = b->size - need;
    b->next = rest;
    b->size = need;
  } else {
    free(rest);
  }
  b->live = 1;
  b->free_stream = NULL;
  p->used += need;
  if (p->used > p->used_high)
    p->used_high = p->used;
  g.live++;
  enqueue(s);
  *out = sg->base + b->off;
  return cudaSuccess;
}

/* The live block that starts at ptr, in any pool (destroyed ones too). */
static sim_block *block_at(const void *ptr, struct CUmemPoolHandle_st **pool) {
  uintptr_t a = (uintptr_t)ptr;
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next) {
      uintptr_t base = (uintptr_t)sg->base;
      if (a < base || a >= base + sg->size)
        continue;
      for (sim_block *b = sg->blocks; b; b = b->next)
        if (b->live && base + b->off == a) {
          *pool = p;
          return b;
        }
      return NULL;
    }
  return NULL;
}

static cudaError_t pool_free(void *ptr, struct CUstream_st *s) {
  struct CUmemPoolHandle_st *p;
  sim_block *b = ptr ? block_at(ptr, &p) : NULL;
  if (!b)
    return cudaErrorInvalidValue;
  b->live = 0;
  b->free_stream = s;
  b->free_ticket = enqueue(s);
  p->used -= b->size;
  g.live--;
  pool_reap(p);
  return cudaSuccess;
}

/* ---- device pointers (for memset / memcpy) ----------------------------------------------------- */

/* 1 when [ptr, ptr + n) lies in one live pool block or cudaMalloc region. */
static int dev_range(const void *ptr, size_t n) {
  uintptr_t a = (uintptr_t)ptr;
  if (sim6_import_range(ptr, n, 1))
    return 1; /* issue 6: an imported buffer */
  for (sim_region *r = g.regions; r; r = r->next) {
    uintptr_t base = (uintptr_t)r->base;
    if (a >= base && a - base <= r->size && n <= r->size - (a - base))
      return 1;
  }
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      for (sim_block *b = sg->blocks; b; b = b->next) {
        uintptr_t base = (uintptr_t)sg->base + b->off;
        if (b->live && a >= base && a - base <= b->size && n <= b->size - (a - base))
          return 1;
      }
  return 0;
}

/* 1 when ptr points into simulated device memory at all (live or not): cudaMemcpyDefault. */
static int dev_pointer(const void *ptr) {
  uintptr_t a = (uintptr_t)ptr;
  if (sim6_import_range(ptr, 1, 0))
    return 1; /* issue 6 */
  for (sim_region *r = g.regions; r; r = r->next)
    if (a >= (uintptr_t)r->base && a - (uintptr_t)r->base < r->size)
      return 1;
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      if (a >= (uintptr_t)sg->base && a - (uintptr_t)sg->base < sg->size)
        return 1;
  return 0;
}

static cudaError_t do_memset(void *ptr, int value, size_t n) {
  if (n == 0)
    return cudaSuccess;
  if (!dev_range(ptr, n))
    return cudaErrorInvalidValue;
  memset(ptr, value, n);
  return cudaSuccess;
}

static cudaError_t do_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  int dst_dev, src_dev;
  switch (kind) {
  case cudaMemcpyHostToHost: dst_dev = 0, src_dev = 0; break;
  case cudaMemcpyHostToDevice: dst_dev = 1, src_dev = 0; break;
  case cudaMemcpyDeviceToHost: dst_dev = 0, src_dev = 1; break;
  case cudaMemcpyDeviceToDevice: dst_dev = 1, src_dev = 1; break;
  case cudaMemcpyDefault: dst_dev = dev_pointer(dst), src_dev = dev_pointer(src); break;
  default: return cudaErrorInvalidMemcpyDirection;
  }
  if (n == 0)
    return cudaSuccess;
  if (!dst || !src || (dst_dev && !dev_range(dst, n)) || (src_dev && !dev_range(src, n)))
    return cudaErrorInvalidValue;
  memmove(dst, src, n);
  return cudaSuccess;
}

/* ---- errors ---------------------------------------------------------------------------------- */

#define SIM_ERRORS(X)                                                                             \
  X(cudaSuccess, "no error")                                                                      \
  X(cudaErrorInvalidValue, "invalid argument")                                                    \
  X(cudaErrorMemoryAllocation, "out of memory")                                                   \
  X(cudaErrorInitializationError, "initialization error")                                         \
  X(cudaErrorCudartUnloading, "driver shutting down")                                             \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                              \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                         \
  X(cudaErrorInvalidSymbol, "invalid device symbol")                                              \
  X(cudaErrorInvalidHostPointer, "invalid host pointer")                                          \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                      \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                         \
  X(cudaErrorStubLibrary, "CUDA driver is a stub library")                                        \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")  \
  X(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver")   \
  X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable")             \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                                    \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                      \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                             \
  X(cudaErrorStartupFailure, "device init failed")                                                \
  X(cudaErrorInvalidKernelImage, "device kernel image is invalid")                                \
  X(cudaErrorDeviceUninitialized, "invalid device context")                                       \
  X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device")  \
  X(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered")                             \
  X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")     \
  X(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS")             \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                    \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")              \
  X(cudaErrorSymbolNotFound, "named symbol not found")                                            \
  X(cudaErrorNotReady, "device not ready")                                                        \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                          \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                     \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                            \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                          \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                            \
  X(cudaErrorContextIsDestroyed, "context is destroyed")                                          \
  X(cudaErrorAssert, "device-side assert triggered")                                              \
  X(cudaErrorTooManyPeers, "peer mapping resources exhausted")                                    \
  X(cudaErrorHardwareStackError, "hardware stack error")                                          \
  X(cudaErrorIllegalInstruction, "an illegal instruction was encountered")                        \
  X(cudaErrorMisalignedAddress, "misaligned address")                                             \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                         \
  X(cudaErrorNotPermitted, "operation not permitted")                                             \
  X(cudaErrorNotSupported, "operation not supported")                                             \
  X(cudaErrorSystemNotReady, "system not yet initialized")                                        \
  X(cudaErrorSystemDriverMismatch,                                                                \
    "system has unsupported display driver / cuda driver combination")                            \
  X(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW") \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")        \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
  X(cudaErrorStreamCaptureImplicit,                                                               \
    "operation would make the legacy stream depend on a capturing blocking stream")               \
  X(cudaErrorCapturedEvent,                                                                       \
    "operation not permitted on an event last recorded in a capturing stream")                    \
  X(cudaErrorTimeout, "wait operation timed out")                                                 \
  X(cudaErrorUnknown, "unknown error")

static const char *error_text(cudaError_t e, int name) {
  switch (e) {
#define SIM_ERROR_CASE(code, str)                                                                 \
  case code: return name ? #code : str;
    SIM_ERRORS(SIM_ERROR_CASE)
#undef SIM_ERROR_CASE
  default: return "unrecognized error code";
  }
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error) {
  lock();
  count_call(__func__);
  unlock();
  return error_text(error, 1);
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error) {
  lock();
  count_call(__func__);
  unlock();
  return error_text(error, 0);
}

cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t e = sim_enter(__func__, 0);
  if (e != cudaSuccess)
    return sim_leave(e);
  e = t.last;
  t.last = cudaSuccess;
  unlock();
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  cudaError_t e = sim_enter(__func__, 0);
  if (e != cudaSuccess)
    return sim_leave(e);
  e = t.last;
  unlock();
  return e;
}

/* ---- versions and devices -------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion) {
  cudaError_t e = sim_enter(__func__, 0);
  if (e == cudaSuccess && !driverVersion)
    e = cudaErrorInvalidValue;
  if (e == cudaSuccess)
    *driverVersion = g.driver;
  return sim_leave(e);
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion) {
  cudaError_t e = sim_enter(__func__, 0);
  if (e == cudaSuccess && !runtimeVersion)
    e = cudaErrorInvalidValue;
  if (e == cudaSuccess)
    *runtimeVersion = CUDART_VERSION;
  return sim_leave(e);
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count) {
  cudaError_t e = sim_enter(__func__, 1);
  if (e == cudaErrorNoDevice && count)
    *count = 0; /* as the real runtime does */
  if (e == cudaSuccess && !count)
    e = cudaErrorInvalidValue;
  if (e == cudaSuccess)
    *count = g.ndev;
  return sim_leave(e);
}

static cudaError_t get_device(int *device) {
  if (!device)
    return cudaErrorInvalidValue;
  *device = t.device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int *device) { SIM_CALL(get_device(device)); }

static cudaError_t set_device(int device) {
  if (!valid_dev(device))
    return cudaErrorInvalidDevice;
  t.device = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) { SIM_CALL(set_device(device)); }

static int attribute_of(enum cudaDeviceAttr attr, int d) {
  switch (attr) {
  case cudaDevAttrMemoryPoolsSupported: return g.dev[d].pools_supported;
  case cudaDevAttrMemoryPoolSupportedHandleTypes: return sim6_handle_types(d); /* issue 6 */
  case cudaDevAttrMultiProcessorCount: return 132;
  case cudaDevAttrComputeCapabilityMajor: return 9;
  case cudaDevAttrComputeCapabilityMinor: return 0;
  case cudaDevAttrWarpSize: return 32;
  case cudaDevAttrMaxThreadsPerBlock: return 1024;
  case cudaDevAttrMaxSharedMemoryPerBlock: return 48 << 10;
  case cudaDevAttrL2CacheSize: return 50 << 20;
  case cudaDevAttrClockRate: return 1980000;
  case cudaDevAttrUnifiedAddressing: return 1;
  case cudaDevAttrConcurrentManagedAccess: return 1;
  case cudaDevAttrPciBusId: return d + 1;
  default: return 0;
  }
}

static cudaError_t device_attribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (!value)
    return cudaErrorInvalidValue;
  if (!valid_dev(device))
    return cudaErrorInvalidDevice;
  *value = attribute_of(attr, device);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  SIM_CALL(device_attribute(value, attr, device));
}

static cudaError_t device_properties(struct cudaDeviceProp *prop, int device) {
  if (!prop)
    return cudaErrorInvalidValue;
  if (!valid_dev(device))
    return cudaErrorInvalidDevice;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "cudasim device %d", device);
  prop->totalGlobalMem = g.dev[device].capacity;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->unifiedAddressing = 1;
  prop->pciBusID = device + 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  SIM_CALL(device_properties(prop, device));
}

static cudaError_t can_access_peer(int *can, int device, int peer) {
  if (!can)
    return cudaErrorInvalidValue;
  if (!valid_dev(device) || !valid_dev(peer))
    return cudaErrorInvalidDevice;
  *can = device != peer && !g.no_peer[device][peer];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  SIM_CALL(can_access_peer(canAccessPeer, device, peerDevice));
}

static cudaError_t device_synchronize(void) {
  int d;
  cudaError_t e = cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  device_complete(d);
  device_release(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { SIM_CALL(device_synchronize()); }

static cudaError_t mem_get_info(size_t *free_bytes, size_t *total) {
  int d;
  if (!free_bytes || !total)
    return cudaErrorInvalidValue;
  cudaError_t e = cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  sim_device *dv = &g.dev[d];
  *free_bytes = dv->reserved < dv->capacity ? dv->capacity - dv->reserved : 0;
  *total = dv->capacity;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total) {
  SIM_CALL(mem_get_info(free, total));
}

static cudaError_t priority_range(int *least, int *greatest) {
  if (least)
    *least = 0;
  if (greatest)
    *greatest = SIM_PRIO_GREATEST;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  SIM_CALL(priority_range(leastPriority, greatestPriority));
}

/* ---- streams --------------------------------------------------------------------------------- */

static cudaError_t stream_create(cudaStream_t *ps, unsigned flags, int prio) {
  int d;
  if (!ps || (flags & ~(unsigned)cudaStreamNonBlocking))
    return cudaErrorInvalidValue;
  cudaError_t e = cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  prio = prio > 0 ? 0 : prio < SIM_PRIO_GREATEST ? SIM_PRIO_GREATEST : prio; /* clamped */
  struct CUstream_st *s = stream_new(d, flags, prio, SIM_USER);
  if (!s)
    return cudaErrorMemoryAllocation;
  *ps = s;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream) {
  SIM_CALL(stream_create(pStream, cudaStreamDefault, 0));
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  SIM_CALL(stream_create(pStream, flags, 0));
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority) {
  SIM_CALL(stream_create(pStream, flags, priority));
}

/* Work on s is complete and s goes away: frees and events that pointed at it are complete. */
static void stream_forget(struct CUstream_st *s) {
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      for (sim_block *b = sg->blocks; b; b = b->next)
        if (b->free_stream == s)
          b->free_stream = NULL;
  for (struct CUevent_st *ev = g.events; ev; ev = ev->next)
    if (ev->stream == s)
      ev->stream = NULL;
  for (struct CUstream_st **link = &g.streams; *link; link = &(*link)->next)
    if (*link == s) {
      *link = s->next;
      break;
    }
  s->next = graveyard.streams;
  graveyard.streams = s;
}

static cudaError_t stream_destroy(cudaStream_t h) {
  if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread || !stream_known(h))
    return cudaErrorInvalidResourceHandle;
  if (h->kind != SIM_USER)
    return cudaErrorInvalidResourceHandle;
  stream_forget(h);
  reap_all();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) { SIM_CALL(stream_destroy(stream)); }

static cudaError_t stream_synchronize(cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  s->completed = s->ticket;
  device_release(s->device);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  SIM_CALL(stream_synchronize(stream));
}

static cudaError_t stream_query(cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  return s->completed < s->ticket ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) { SIM_CALL(stream_query(stream)); }

static cudaError_t stream_get_flags(cudaStream_t h, unsigned *flags) {
  struct CUstream_st *s;
  if (!flags)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    *flags = s->flags;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  SIM_CALL(stream_get_flags(hStream, flags));
}

static cudaError_t stream_get_priority(cudaStream_t h, int *prio) {
  struct CUstream_st *s;
  if (!prio)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    *prio = s->priority;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t hStream, int *priority) {
  SIM_CALL(stream_get_priority(hStream, priority));
}

static cudaError_t stream_wait_event(cudaStream_t h, cudaEvent_t ev) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  return event_known(ev) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  (void)flags;
  SIM_CALL(stream_wait_event(stream, event));
}

static cudaError_t stream_is_capturing(cudaStream_t h, enum cudaStreamCaptureStatus *status) {
  struct CUstream_st *s;
  if (!status)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus *pCaptureStatus) {
  SIM_CALL(stream_is_capturing(stream, pCaptureStatus));
}

/* ---- events ---------------------------------------------------------------------------------- */

static cudaError_t event_create(cudaEvent_t *pev, unsigned flags) {
  unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!pev || (flags & ~known))
    return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev)
    return cudaErrorMemoryAllocation;
  ev->flags = flags;
  ev->next = g.events;
  g.events = ev;
  *pev = ev;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event) {
  SIM_CALL(event_create(event, cudaEventDefault));
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  SIM_CALL(event_create(event, flags));
}

static cudaError_t event_destroy(cudaEvent_t ev) {
  for (struct CUevent_st **link = &g.events; *link; link = &(*link)->next)
    if (*link == ev) {
      *link = ev->next;
      ev->next = graveyard.events;
      graveyard.events = ev;
      return cudaSuccess;
    }
  return cudaErrorInvalidResourceHandle;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) { SIM_CALL(event_destroy(event)); }

static cudaError_t event_record(cudaEvent_t ev, cudaStream_t h) {
  struct CUstream_st *s;
  if (!event_known(ev))
    return cudaErrorInvalidResourceHandle;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  ev->stream = s;
  ev->ticket = enqueue(s);
  ev->recorded = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIM_CALL(event_record(event, stream));
}

static cudaError_t event_query(cudaEvent_t ev) {
  if (!event_known(ev))
    return cudaErrorInvalidResourceHandle;
  return event_done(ev) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) { SIM_CALL(event_query(event)); }

static cudaError_t event_synchronize(cudaEvent_t ev) {
  if (!event_known(ev))
    return cudaErrorInvalidResourceHandle;
  if (!ev->recorded || !ev->stream)
    return cudaSuccess;
  if (ev->stream->completed < ev->ticket)
    ev->stream->completed = ev->ticket;
  device_release(ev->stream->device);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  SIM_CALL(event_synchronize(event));
}

static cudaError_t event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms)
    return cudaErrorInvalidValue;
  if (!event_known(start) || !event_known(end))
    return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded || ((start->flags | end->flags) & cudaEventDisableTiming))
    return cudaErrorInvalidResourceHandle;
  if (!event_done(start) || !event_done(end))
    return cudaErrorNotReady;
  *ms = 0.0f;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  SIM_CALL(event_elapsed(ms, start, end));
}

/* ---- pools ------------------------------------------------------------------------------------- */

static cudaError_t get_default_pool(cudaMemPool_t *out, int device) {
  struct CUmemPoolHandle_st *p;
  if (!out)
    return cudaErrorInvalidValue;
  if (!valid_dev(device))
    return cudaErrorInvalidDevice;
  cudaError_t e = default_pool(device, &p);
  if (e == cudaSuccess)
    *out = p;
  return e;
}

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
  SIM_CALL(get_default_pool(memPool, device));
}

static cudaError_t current_pool(int d, struct CUmemPoolHandle_st **out) {
  if (!g.dev[d].pools_supported)
    return cudaErrorNotSupported;
  if (g.dev[d].current_pool) {
    *out = g.dev[d].current_pool;
    return cudaSuccess;
  }
  return default_pool(d, out);
}

static cudaError_t get_mem_pool(cudaMemPool_t *out, int device) {
  struct CUmemPoolHandle_st *p;
  if (!out)
    return cudaErrorInvalidValue;
  if (!valid_dev(device))
    return cudaErrorInvalidDevice;
  cudaError_t e = current_pool(device, &p);
  if (e == cudaSuccess)
    *out = p;
  return e;
}

cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device) {
  SIM_CALL(get_mem_pool(memPool, device));
}

static cudaError_t set_mem_pool(int device, cudaMemPool_t p) {
  if (!valid_dev(device))
    return cudaErrorInvalidDevice;
  if (!g.dev[device].pools_supported)
    return cudaErrorNotSupported;
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (p->device != device)
    return cudaErrorInvalidValue;
  g.dev[device].current_pool = p->is_default ? NULL : p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  SIM_CALL(set_mem_pool(device, memPool));
}

/* The header says the reserved bytes "must be 0": hold callers to it, as a later driver that
 * gives them meaning would. */
static int props_reserved_zero(const struct cudaMemPoolProps *props) {
  for (size_t i = 0; i < sizeof props->reserved; i++)
    if (props->reserved[i] != 0) return 0;
  return 1;
}

static cudaError_t pool_create(cudaMemPool_t *out, const struct cudaMemPoolProps *props) {
  if (!out || !props || props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice || !props_reserved_zero(props))
    return cudaErrorInvalidValue;
  int d = props->location.id;
  if (!valid_dev(d))
    return cudaErrorInvalidDevice;
  if (props->handleTypes != cudaMemHandleTypeNone &&
      props->handleTypes != cudaMemHandleTypePosixFileDescriptor)
    return cudaErrorNotSupported;
  if (!g.dev[d].pools_supported)
    return cudaErrorNotSupported;
  if ((int)props->handleTypes & ~sim6_handle_types(d))
    return cudaErrorNotSupported; /* issue 6 */
  struct CUmemPoolHandle_st *p = pool_new(d, 0);
  if (!p)
    return cudaErrorMemoryAllocation;
#if CUDART_VERSION >= 12020
  p->max_size = props->maxSize;
#endif
  p->shareable = props->handleTypes == cudaMemHandleTypePosixFileDescriptor; /* issue 6 */
  *out = p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool,
                                        const struct cudaMemPoolProps *poolProps) {
  SIM_CALL(pool_create(memPool, poolProps));
}

static cudaError_t pool_destroy(cudaMemPool_t p) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (p->is_default)
    return cudaErrorInvalidValue;
  if (g.dev[p->device].current_pool == p)
    g.dev[p->device].current_pool = NULL; /* the default pool becomes current again */
  p->destroyed = 1;
  pool_reap(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) { SIM_CALL(pool_destroy(memPool)); }

static cudaError_t pool_set_attr(cudaMemPool_t p, enum cudaMemPoolAttr attr, const void *v) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (!v)
    return cudaErrorInvalidValue;
  switch (attr) {
  case cudaMemPoolReuseFollowEventDependencies:
  case cudaMemPoolReuseAllowOpportunistic:
  case cudaMemPoolReuseAllowInternalDependencies:
    p->reuse[attr - cudaMemPoolReuseFollowEventDependencies] = *(const int *)v != 0;
    return cudaSuccess;
  case cudaMemPoolAttrReleaseThreshold: p->threshold = *(const uint64_t *)v; return cudaSuccess;
  case cudaMemPoolAttrReservedMemHigh:
    if (*(const uint64_t *)v != 0)
      return cudaErrorInvalidValue;
    p->reserved_high = p->reserved;
    return cudaSuccess;
  case cudaMemPoolAttrUsedMemHigh:
    if (*(const uint64_t *)v != 0)
      return cudaErrorInvalidValue;
    p->used_high = p->used;
    return cudaSuccess;
  default: return cudaErrorInvalidValue; /* the Current ones are read-only */
  }
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value) {
  SIM_CALL(pool_set_attr(memPool, attr, value));
}

static cudaError_t pool_get_attr(cudaMemPool_t p, enum cudaMemPoolAttr attr, void *v) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (!v)
    return cudaErrorInvalidValue;
  uint64_t x;
  switch (attr) {
  case cudaMemPoolReuseFollowEventDependencies:
  case cudaMemPoolReuseAllowOpportunistic:
  case cudaMemPoolReuseAllowInternalDependencies:
    *(int *)v = p->reuse[attr - cudaMemPoolReuseFollowEventDependencies];
    return cudaSuccess;
  case cudaMemPoolAttrReleaseThreshold: x = p->threshold; break;
  case cudaMemPoolAttrReservedMemCurrent: x = p->reserved; break;
  case cudaMemPoolAttrReservedMemHigh: x = p->reserved_high; break;
  case cudaMemPoolAttrUsedMemCurrent: x = p->used; break;
  case cudaMemPoolAttrUsedMemHigh: x = p->used_high; break;
  default: return cudaErrorInvalidValue;
  }
  *(uint64_t *)v = x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value) {
  SIM_CALL(pool_get_attr(memPool, attr, value));
}

static cudaError_t access_check(cudaMemPool_t p, const struct cudaMemAccessDesc *d) {
  if (d->location.type != cudaMemLocationTypeDevice)
    return cudaErrorInvalidValue;
  if (d->flags != cudaMemAccessFlagsProtNone && d->flags != cudaMemAccessFlagsProtRead &&
      d->flags != cudaMemAccessFlagsProtReadWrite)
    return cudaErrorInvalidValue;
  int dev = d->location.id;
  if (!valid_dev(dev) || dev == p->device || g.no_peer[dev][p->device])
    return cudaErrorInvalidDevice;
  return cudaSuccess;
}

/* All descriptors are checked before any is applied: a failure changes nothing. */
static cudaError_t pool_set_access(cudaMemPool_t p, const struct cudaMemAccessDesc *list,
                                   size_t n) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (n > 0 && !list)
    return cudaErrorInvalidValue;
  for (size_t i = 0; i < n; i++) {
    cudaError_t e = access_check(p, &list[i]);
    if (e != cudaSuccess)
      return e;
  }
  for (size_t i = 0; i < n; i++)
    p->access[list[i].location.id] = list[i].flags;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                           const struct cudaMemAccessDesc *descList, size_t count) {
  SIM_CALL(pool_set_access(memPool, descList, count));
}

static cudaError_t pool_get_access(enum cudaMemAccessFlags *flags, cudaMemPool_t p,
                                   const struct cudaMemLocation *loc) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (!flags || !loc || loc->type != cudaMemLocationTypeDevice)
    return cudaErrorInvalidValue;
  if (!valid_dev(loc->id))
    return cudaErrorInvalidDevice;
  *flags = loc->id == p->device ? cudaMemAccessFlagsProtReadWrite : p->access[loc->id];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                           struct cudaMemLocation *location) {
  SIM_CALL(pool_get_access(flags, memPool, location));
}

static cudaError_t pool_trim(cudaMemPool_t p, size_t keep) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  for (sim_segment *sg = p->segs; sg; sg = sg->next)
    seg_coalesce(sg);
  pool_shrink(p, keep, 1);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  SIM_CALL(pool_trim(memPool, minBytesToKeep));
}

static cudaError_t malloc_from_pool(void **ptr, size_t size, cudaMemPool_t p, cudaStream_t h) {
  struct CUstream_st *s;
  if (!ptr)
    return cudaErrorInvalidValue;
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (p->imported_from)
    return cudaErrorInvalidValue; /* issue 6: imported pools cannot allocate */
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  return pool_alloc(p, s, size, ptr);
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                              cudaStream_t stream) {
  SIM_CALL(malloc_from_pool(ptr, size, memPool, stream));
}

static cudaError_t malloc_async(void **ptr, size_t size, cudaStream_t h) {
  struct CUstream_st *s;
  struct CUmemPoolHandle_st *p;
  if (!ptr)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = current_pool(s->device, &p);
  if (e != cudaSuccess)
    return e;
  return pool_alloc(p, s, size, ptr);
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  SIM_CALL(malloc_async(devPtr, size, hStream));
}

static cudaError_t free_async(void *ptr, cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (sim6_import_free(ptr, s))
    return cudaSuccess; /* issue 6: an imported buffer */
  return pool_free(ptr, s);
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  SIM_CALL(free_async(devPtr, hStream));
}

/* ---- cudaMalloc, memset, memcpy -------------------------------------------------------------- */

static cudaError_t plain_malloc(void **ptr, size_t size) {
  int d;
  if (!ptr)
    return cudaErrorInvalidValue;
  cudaError_t e = cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  if (size == 0) { /* as the real cudaMalloc */
    *ptr = NULL;
    return cudaSuccess;
  }
  sim_device *dv = &g.dev[d];
  if (size > SIZE_MAX - CUDASIM_GRANULARITY)
    return cudaErrorMemoryAllocation;
  size_t charged = round_up(size, CUDASIM_GRANULARITY);
  if (dv->reserved > dv->capacity || charged > dv->capacity - dv->reserved)
    return cudaErrorMemoryAllocation;
  sim_region *r = calloc(1, sizeof *r);
  void *mem = MAP_FAILED;
  if (r)
    mem = mmap(NULL, charged, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
               -1, 0);
  if (mem == MAP_FAILED) {
    free(r);
    return cudaErrorMemoryAllocation;
  }
  r->base = mem;
  r->size = size;
  r->charged = charged;
  r->device = d;
  r->next = g.regions;
  g.regions = r;
  dv->reserved += charged;
  g.live++;
  *ptr = mem;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size) { SIM_CALL(plain_malloc(devPtr, size)); }

/* cudaFree: a cudaMalloc region (with the implicit device synchronize), or a pool block, which
 * the real runtime also accepts (freed at once, without synchronizing). */
static cudaError_t plain_free(void *ptr) {
  if (!ptr)
    return cudaSuccess;
  if (sim6_import_free(ptr, NULL))
    return cudaSuccess; /* issue 6: an imported buffer */
  for (sim_region **link = &g.regions; *link; link = &(*link)->next) {
    sim_region *r = *link;
    if (r->base != ptr)
      continue;
    *link = r->next;
    int d = r->device;
    munmap(r->base, r->charged);
    g.dev[d].reserved -= r->charged;
    g.live--;
    free(r);
    device_complete(d);
    device_release(d);
    return cudaSuccess;
  }
  struct CUmemPoolHandle_st *p;
  sim_block *b = block_at(ptr, &p);
  if (!b)
    return cudaErrorInvalidValue;
  b->live = 0;
  b->free_stream = NULL;
  p->used -= b->size;
  g.live--;
  pool_reap(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void *devPtr) { SIM_CALL(plain_free(devPtr)); }

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count) {
  SIM_CALL(do_memset(devPtr, value, count));
}

static cudaError_t memset_async(void *ptr, int value, size_t n, cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = do_memset(ptr, value, n);
  if (e == cudaSuccess)
    enqueue(s);
  return e;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  SIM_CALL(memset_async(devPtr, value, count, stream));
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind) {
  SIM_CALL(do_memcpy(dst, src, count, kind));
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = do_memcpy(dst, src, n, kind);
  if (e == cudaSuccess)
    enqueue(s);
  return e;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  SIM_CALL(memcpy_async(dst, src, count, kind, stream));
}

/* ---- control API ----------------------------------------------------------------------------- */

void cudasim_reset(void) {
  lock();
  sim6_reset(); /* issue 6: imports unmapped, export records dropped */
  while (g.pools)
    pool_unlink_free(g.pools);
  while (g.regions) {
    sim_region *r = g.regions;
    g.regions = r->next;
    munmap(r->base, r->charged);
    free(r);
  }
  while (g.streams) {
    struct CUstream_st *s = g.streams;
    g.streams = s->next;
    s->next = graveyard.streams;
    graveyard.streams = s;
  }
  while (g.events) {
    struct CUevent_st *ev = g.events;
    g.events = ev->next;
    ev->next = graveyard.events;
    graveyard.events = ev;
  }
  for (size_t i = 0; i < g.narmed; i++)
    free(g.armed[i].name);
  free(g.armed);
  free(g.counts);
  unsigned long gen = g.gen;
  memset(&g, 0, sizeof g);
  g.gen = gen;
  sim_defaults(); /* bumps the generation: every thread's state is stale now */
  tls_sync();
  unlock();
}

void cudasim_set_device_count(int n) {
  lock();
  g.ndev = n < 0 ? 0 : n > SIM_MAX_DEV ? SIM_MAX_DEV : n;
  unlock();
}

void cudasim_set_capacity(int device, size_t bytes) {
  lock();
  if (device >= 0 && device < SIM_MAX_DEV)
    g.dev[device].capacity = bytes;
  unlock();
}

void cudasim_fail(const char *api, int nth, cudaError_t err) {
  if (!api || nth < 1)
    return;
  lock();
  if (g.narmed == g.caparmed) {
    size_t cap = g.caparmed ? 2 * g.caparmed : 16;
    sim_armed *a = realloc(g.armed, cap * sizeof *a);
    if (!a) {
      unlock();
      return;
    }
    g.armed = a;
    g.caparmed = cap;
  }
  size_t len = strlen(api) + 1;
  char *name = malloc(len);
  if (name) {
    memcpy(name, api, len);
    g.armed[g.narmed].name = name;
    g.armed[g.narmed].at = calls_of(api) + nth;
    g.armed[g.narmed].err = err;
    g.narmed++;
  }
  unlock();
}

/* Resolves s for the control API without creating anything on an error path. */
static struct CUstream_st *control_stream(cudaStream_t s) {
  struct CUstream_st *out;
  if (g.driver == 0 || g.ndev == 0 || stream_get(s, &out) != cudaSuccess)
    return NULL;
  return out;
}

void cudasim_hold(cudaStream_t s) {
  lock();
  struct CUstream_st *st = control_stream(s);
  if (st)
    st->held = 1;
  unlock();
}

void cudasim_release(cudaStream_t s) {
  lock();
  struct CUstream_st *st = control_stream(s);
  if (st) {
    st->held = 0;
    st->completed = st->ticket;
    reap_all();
  }
  unlock();
}

long cudasim_calls(const char *api) {
  lock();
  long n = api ? calls_of(api) : 0;
  unlock();
  return n;
}

void cudasim_set_driver_version(int version) {
  lock();
  g.driver = version;
  unlock();
}

void cudasim_set_pools_supported(int device, int supported) {
  lock();
  if (device >= 0 && device < SIM_MAX_DEV)
    g.dev[device].pools_supported = supported != 0;
  unlock();
}

void cudasim_set_can_access_peer(int device, int peer, int can) {
  lock();
  if (device >= 0 && device < SIM_MAX_DEV && peer >= 0 && peer < SIM_MAX_DEV)
    g.no_peer[device][peer] = !can;
  unlock();
}

int cudasim_pool_count(void) {
  int n = 0;
  lock();
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    n += !p->is_default && !p->destroyed;
  unlock();
  return n;
}

long cudasim_live_allocations(void) {
  lock();
  long n = g.live;
  unlock();
  return n;
}

int cudasim_stream_count(void) {
  int n = 0;
  lock();
  for (struct CUstream_st *s = g.streams; s; s = s->next)
    n += s->kind == SIM_USER;
  unlock();
  return n;
}

long cudasim_pending(cudaStream_t s) {
  lock();
  struct CUstream_st *st = control_stream(s);
  long n = st ? (long)(st->ticket - st->completed) : -1;
  unlock();
  return n;
}

int cudasim_armed(void) {
  lock();
  int n = (int)g.narmed;
  unlock();
  return n;
}

/* ==== issue 6: several devices and processes =====================================================
 *
 * Model
 *  - A pool created with cudaMemHandleTypePosixFileDescriptor ("shareable") keeps its segments in
 *    MAP_SHARED memory and, like every IPC pool of the real driver, never gives memory back: no
 *    release at a synchronize, trims do nothing (pool_shrink). The same holds for imported pools.
 *  - cudaMemPoolExportToShareableHandle returns a new memfd, whose inode cudasim records. An import
 *    finds the pool by fstat() of the descriptor, so a descriptor passed over a Unix domain socket
 *    (SCM_RIGHTS) imports in the same process. Another process cannot import: cudasim's state is
 *    its own (without a driver, pool memory cannot cross processes).
 *  - An imported pool is a pool object with imported_from set: it cannot allocate, is accessible
 *    from its own device only until cudaMemPoolSetAccess, and counts its imported buffers in
 *    cudaMemPoolAttrUsedMemCurrent.
 *  - cudaMemPoolImportPointer maps the exporter's segment a second time (mremap of the shared
 *    pages): the imported buffer has an address of its own and shares the data, as it would in
 *    another process. Freeing it (cudaFree, cudaFreeAsync) unmaps it at once.
 *  - cudaStreamGetDevice; cudaPointerGetAttributes (device memory: pool segments, cudaMalloc
 *    regions and imports; anything else is cudaMemoryTypeUnregistered, device -1).
 *  - cudasim_kernel: what the loads and stores of a kernel on a stream would meet: memory inside
 *    one live allocation, which the stream's device may access (its own memory, or a pool's access
 *    flags for that device); otherwise cudaErrorIllegalAddress (not sticky here, unlike a GPU).
 *
 * Error codes chosen where the real runtime is not documented
 *  - Exporting a pool that was not created shareable, importing a descriptor that is not one of a
 *    live pool, exporting a pointer that is not a live block of a shareable pool, importing one
 *    into a pool other than that pool's import, allocating from an imported pool:
 *    cudaErrorInvalidValue.
 */

typedef struct sim6_export {
  struct sim6_export *next;
  dev_t dev;
  ino_t ino;
  struct CUmemPoolHandle_st *pool;
} sim6_export;

typedef struct sim6_import {
  struct sim6_import *next;
  char *map; /* the second mapping of the exporter's segment */
  size_t map_size;
  char *ptr; /* the imported buffer, inside map */
  size_t size;
  struct CUmemPoolHandle_st *pool; /* the imported pool it belongs to */
} sim6_import;

/* What cudaMemPoolExportPointer writes into the 64 opaque bytes. */
typedef struct sim6_ptr_data {
  uint64_t magic;
  uintptr_t pool, addr;
} sim6_ptr_data;
#define SIM6_MAGIC UINT64_C(0x3649504353494D43) /* "CMISCPI6" */
_Static_assert(sizeof(sim6_ptr_data) <= sizeof(((struct cudaMemPoolPtrExportData *)0)->reserved),
               "the export data must fit CUDA's opaque bytes");

/* Guarded by g_lock, like g. */
static struct {
  sim6_export *exports;
  sim6_import *imports;
  unsigned char no_ipc[SIM_MAX_DEV]; /* 0: POSIX fd handles supported (the default) */
} g6;

static void sim6_reset(void) {
  while (g6.exports) {
    sim6_export *x = g6.exports;
    g6.exports = x->next;
    free(x);
  }
  while (g6.imports) {
    sim6_import *im = g6.imports;
    g6.imports = im->next;
    munmap(im->map, im->map_size);
    free(im);
  }
  memset(g6.no_ipc, 0, sizeof g6.no_ipc);
}

static int sim6_handle_types(int d) {
  return g.dev[d].pools_supported && !g6.no_ipc[d] ? (int)cudaMemHandleTypePosixFileDescriptor
                                                    : 0;
}

/* whole: [ptr, ptr + n) lies in one imported buffer; else ptr points into one. */
static sim6_import *sim6_import_at(const void *ptr, size_t n, int whole) {
  uintptr_t a = (uintptr_t)ptr;
  for (sim6_import *im = g6.imports; im; im = im->next) {
    uintptr_t base = (uintptr_t)im->ptr;
    if (a < base || a - base >= im->size)
      continue;
    if (!whole || n <= im->size - (a - base))
      return im;
  }
  return NULL;
}

static int sim6_import_range(const void *ptr, size_t n, int whole) {
  return sim6_import_at(ptr, n, whole) != NULL;
}

static int sim6_import_free(const void *ptr, struct CUstream_st *s) {
  for (sim6_import **link = &g6.imports; *link; link = &(*link)->next) {
    sim6_import *im = *link;
    if (im->ptr != ptr)
      continue;
    *link = im->next;
    munmap(im->map, im->map_size);
    im->pool->used -= im->size;
    if (s)
      enqueue(s);
    free(im);
    return 1;
  }
  return 0;
}

/* ---- export and import of pools ---- */

static cudaError_t export_pool(void *handle, cudaMemPool_t p, enum cudaMemAllocationHandleType type,
                               unsigned flags) {
  if (!pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (!handle || type != cudaMemHandleTypePosixFileDescriptor || flags != 0 || !p->shareable)
    return cudaErrorInvalidValue;
  sim6_export *x = calloc(1, sizeof *x);
  if (!x)
    return cudaErrorMemoryAllocation;
  struct stat st;
  int fd = memfd_create("cudasim-pool", 0); /* like the driver's: not close-on-exec */
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0)
      close(fd);
    free(x);
    return cudaErrorOperatingSystem;
  }
  x->dev = st.st_dev;
  x->ino = st.st_ino;
  x->pool = p;
  x->next = g6.exports;
  g6.exports = x;
  *(int *)handle = fd;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolExportToShareableHandle(
    void *shareableHandle, cudaMemPool_t memPool, enum cudaMemAllocationHandleType handleType,
    unsigned int flags) {
  SIM_CALL(export_pool(shareableHandle, memPool, handleType, flags));
}

static cudaError_t import_pool(cudaMemPool_t *out, void *handle,
                               enum cudaMemAllocationHandleType type, unsigned flags) {
  struct stat st;
  if (!out || type != cudaMemHandleTypePosixFileDescriptor || flags != 0)
    return cudaErrorInvalidValue;
  if (fstat((int)(intptr_t)handle, &st) != 0)
    return cudaErrorInvalidValue; /* not an open descriptor of this process */
  for (sim6_export *x = g6.exports; x; x = x->next) {
    if (x->dev != st.st_dev || x->ino != st.st_ino || !pool_known(x->pool))
      continue;
    struct CUmemPoolHandle_st *q = pool_new(x->pool->device, 0);
    if (!q)
      return cudaErrorMemoryAllocation;
    q->imported_from = x->pool;
    *out = q;
    return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t CUDARTAPI cudaMemPoolImportFromShareableHandle(
    cudaMemPool_t *memPool, void *shareableHandle, enum cudaMemAllocationHandleType handleType,
    unsigned int flags) {
  SIM_CALL(import_pool(memPool, shareableHandle, handleType, flags));
}

/* ---- export and import of pointers ---- */

static cudaError_t export_pointer(struct cudaMemPoolPtrExportData *data, void *ptr) {
  struct CUmemPoolHandle_st *p;
  if (!data || !ptr || !block_at(ptr, &p) || !p->shareable || p->destroyed)
    return cudaErrorInvalidValue;
  sim6_ptr_data d = {SIM6_MAGIC, (uintptr_t)p, (uintptr_t)ptr};
  memset(data, 0, sizeof *data);
  memcpy(data->reserved, &d, sizeof d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData,
                                               void *ptr) {
  SIM_CALL(export_pointer(exportData, ptr));
}

static sim_segment *sim6_segment_of(struct CUmemPoolHandle_st *p, uintptr_t a) {
  for (sim_segment *sg = p->segs; sg; sg = sg->next)
    if (a >= (uintptr_t)sg->base && a - (uintptr_t)sg->base < sg->size)
      return sg;
  return NULL;
}

static cudaError_t import_pointer(void **out, cudaMemPool_t q,
                                  const struct cudaMemPoolPtrExportData *data) {
  sim6_ptr_data d;
  struct CUmemPoolHandle_st *p;
  if (!out || !data)
    return cudaErrorInvalidValue;
  if (!pool_known(q))
    return cudaErrorInvalidResourceHandle;
  memcpy(&d, data->reserved, sizeof d);
  if (!q->imported_from || d.magic != SIM6_MAGIC || d.pool != (uintptr_t)q->imported_from)
    return cudaErrorInvalidValue;
  sim_block *b = block_at((const void *)d.addr, &p);
  sim_segment *sg = b && p == q->imported_from ? sim6_segment_of(p, d.addr) : NULL;
  if (!sg)
    return cudaErrorInvalidValue; /* freed by the exporter meanwhile */
  sim6_import *im = calloc(1, sizeof *im);
  void *map = im ? mremap(sg->base, 0, sg->size, MREMAP_MAYMOVE) : MAP_FAILED;
  if (map == MAP_FAILED) {
    free(im);
    return cudaErrorMemoryAllocation;
  }
  im->map = map;
  im->map_size = sg->size;
  im->ptr = im->map + (d.addr - (uintptr_t)sg->base);
  im->size = b->size;
  im->pool = q;
  im->next = g6.imports;
  g6.imports = im;
  q->used += im->size;
  if (q->used > q->used_high)
    q->used_high = q->used;
  *out = im->ptr;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
                                               struct cudaMemPoolPtrExportData *exportData) {
  SIM_CALL(import_pointer(ptr, memPool, exportData));
}

/* ---- streams and pointers ---- */

static cudaError_t stream_get_device(cudaStream_t h, int *device) {
  struct CUstream_st *s;
  if (!device)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    *device = s->device;
  return e;
}

/* issue 6; another helper adds it on main too: keep one at the merge. */
cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device) {
  SIM_CALL(stream_get_device(hStream, device));
}

/* The device whose memory ptr points into (any pool segment, region or import), or -1. */
static int sim6_device_of(const void *ptr) {
  uintptr_t a = (uintptr_t)ptr;
  sim6_import *im = sim6_import_at(ptr, 1, 0);
  if (im)
    return im->pool->device;
  for (sim_region *r = g.regions; r; r = r->next)
    if (a >= (uintptr_t)r->base && a - (uintptr_t)r->base < r->size)
      return r->device;
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next)
    if (sim6_segment_of(p, a))
      return p->device;
  return -1;
}

static cudaError_t pointer_attributes(struct cudaPointerAttributes *attr, const void *ptr) {
  if (!attr)
    return cudaErrorInvalidValue;
  memset(attr, 0, sizeof *attr);
  attr->device = sim6_device_of(ptr);
  attr->type = attr->device < 0 ? cudaMemoryTypeUnregistered : cudaMemoryTypeDevice;
  attr->devicePointer = attr->device < 0 ? NULL : (void *)(uintptr_t)ptr;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                               const void *ptr) {
  SIM_CALL(pointer_attributes(attributes, ptr));
}

/* ---- control ---- */

void cudasim_set_ipc_supported(int device, int supported) {
  lock();
  if (device >= 0 && device < SIM_MAX_DEV)
    g6.no_ipc[device] = !supported;
  unlock();
}

int cudasim_imports(void) {
  int n = 0;
  lock();
  for (sim6_import *im = g6.imports; im; im = im->next)
    n++;
  unlock();
  return n;
}

/* The pool (exporting or imported) whose live buffer holds [ptr, ptr + n) and its device, or
 * NULL. */
static struct CUmemPoolHandle_st *sim6_owner(const void *ptr, size_t n, int *device) {
  uintptr_t a = (uintptr_t)ptr;
  sim6_import *im = sim6_import_at(ptr, n, 1);
  if (im) {
    *device = im->pool->device;
    return im->pool;
  }
  for (struct CUmemPoolHandle_st *p = g.pools; p; p = p->next) {
    sim_segment *sg = sim6_segment_of(p, a);
    for (sim_block *b = sg ? sg->blocks : NULL; b; b = b->next) {
      uintptr_t base = (uintptr_t)sg->base + b->off;
      if (b->live && a >= base && a - base < b->size && n <= b->size - (a - base)) {
        *device = p->device;
        return p;
      }
    }
  }
  return NULL;
}

static cudaError_t sim6_kernel(cudaStream_t h, const void *ptr, size_t n, int write) {
  struct CUstream_st *s;
  int device = -1;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  struct CUmemPoolHandle_st *p = sim6_owner(ptr, n, &device);
  if (!p) {
    for (sim_region *r = g.regions; r; r = r->next) /* cudaMalloc memory: its device only */
      if ((uintptr_t)ptr >= (uintptr_t)r->base && (uintptr_t)ptr - (uintptr_t)r->base < r->size &&
          n <= r->size - ((uintptr_t)ptr - (uintptr_t)r->base))
        device = r->device;
    if (device != s->device)
      return cudaErrorIllegalAddress;
  } else if (device != s->device) {
    unsigned need = write ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtRead;
    if (((unsigned)p->access[s->device] & need) != need)
      return cudaErrorIllegalAddress;
  }
  enqueue(s);
  return cudaSuccess;
}

cudaError_t cudasim_kernel(cudaStream_t s, const void *ptr, size_t bytes, int write) {
  lock();
  cudaError_t e = g.driver == 0 || g.ndev == 0 ? cudaErrorNoDevice : sim6_kernel(s, ptr, bytes,
                                                                                 write);
  unlock();
  return e;
}
