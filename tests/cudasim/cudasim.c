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
 *    cudasim_release() or a stream, event or device synchronize. Events record a stream's ticket;
 *    an event belongs to the device current at its creation, and recording it on a stream of
 *    another device is cudaErrorInvalidResourceHandle (the runtime: "event and stream must be on
 *    the same device"). Waiting for it from any device's stream is allowed.
 *  - Pools reserve memory in segments of CUDASIM_GRANULARITY (2 MiB) multiples, each a lazily
 *    committed anonymous mmap, so device pointers can be dereferenced on the host. Blocks are
 *    carved from segments at 512-byte granularity; a freed block is reusable once its free has
 *    completed, or at once by an allocation on the stream that freed it (stream order).
 *  - At every stream, event or device synchronize, each pool of that device whose reserved bytes
 *    exceed its release threshold gives back entirely free segments, newest first, one at a
 *    time while it is still above the threshold (it may end below it: segments are whole).
 *  - Stream capture: a capture sequence begun on a stream is joined by every stream that waits on
 *    an event recorded in it (a fork); work enqueued on a member stream (cudaMemsetAsync,
 *    cudaMemcpyAsync, cudaMallocAsync, cudaMallocFromPoolAsync, cudaFreeAsync, cudaEventRecord-
 *    WithFlags(External), cudaStreamWaitEvent(External)) becomes a node of the capture's graph
 *    instead of running. cudaStreamEndCapture on the origin stream ends it for all members.
 *  - The rules, after the CUDA programming guide (stream capture: "Prohibited and Unhandled
 *    Operations", "Invalidation") and cudaThreadExchangeStreamCaptureMode's documentation:
 *    . synchronizing or querying a member stream: cudaErrorStreamCaptureUnsupported; a captured
 *      event (last recorded in an open capture): cudaErrorCapturedEvent. Both invalidate;
 *    . cudaDeviceSynchronize while any member stream is on the current device:
 *      cudaErrorStreamCaptureUnsupported, invalidating those captures, whatever the modes;
 *    . any use of the legacy stream (NULL, cudaStreamLegacy, and the synchronous cudaMemcpy and
 *      cudaMemset) while a blocking stream (created without cudaStreamNonBlocking, or a
 *      per-thread stream) of its device is a member: cudaErrorStreamCaptureImplicit, invalidating;
 *      cudaStreamIsCapturing and cudaStreamGetCaptureInfo report it without invalidating;
 *    . "potentially unsafe" calls: cudaMalloc, cudaFree, cudaMemset, cudaMemcpy, cudaEventQuery,
 *      cudaEventSynchronize, and the pool administration calls cudaMemPoolCreate, Destroy,
 *      TrimTo, SetAttribute, GetAttribute, SetAccess, GetAccess (CCCL wraps pool attribute reads
 *      and writes in relaxed mode for this reason; ROCm checks all seven). Refused with
 *      cudaErrorStreamCaptureUnsupported, invalidating the captures that forbid them: the calling
 *      thread's own capture begun in global or thread-local mode, and, when the thread's mode
 *      (cudaThreadExchangeStreamCaptureMode, default global) is global, every capture begun in
 *      global mode by any thread. A thread in relaxed mode may make them;
 *    . once invalidated, enqueueing on a member stream, synchronizing it, or using its captured
 *      events gives cudaErrorStreamCaptureInvalidated; cudaStreamEndCapture then returns the
 *      same, with a NULL graph, and ends the capture;
 *    . waits: a capturing stream waiting on an event recorded outside any capture:
 *      cudaErrorStreamCaptureIsolation unless cudaEventWaitExternal (a wait node); on an event of
 *      another open capture: cudaErrorStreamCaptureMerge. A never-recorded event is a no-op;
 *    . cudaStreamEndCapture: not capturing: cudaErrorIllegalState; on a joined stream rather
 *      than the origin: cudaErrorStreamCaptureUnmatched (invalidates); from another thread than
 *      the one that began a non-relaxed capture: cudaErrorStreamCaptureWrongThread (the capture
 *      goes on); a joined stream with work after its last join: cudaErrorStreamCaptureUnjoined;
 *    . an operation that cannot be captured as asked (bad pointer, size 0, a free of memory
 *      that is not a graph allocation) fails and invalidates the capture.
 *  - Graph memory (CUDA programming guide, "Graph Memory Nodes"): a stream allocation under
 *    capture is an allocation node whose address is fixed at once (reserved address space, not
 *    charged) and whose memory belongs to the graph, not the pool (the pool's counters do not
 *    move). A launch that runs the node makes it live (charged to the device) until a free node,
 *    cudaFreeAsync or cudaFree; it outlives its graph and executable graph. Relaunching while an
 *    allocation of the graph is live fails with cudaErrorInvalidValue (unless instantiated with
 *    cudaGraphInstantiateFlagAutoFreeOnLaunch). Only graph allocations can be freed in a graph
 *    (cudaFreeAsync of other memory under capture is illegal), and one freed in its own graph
 *    cannot be freed anywhere else. A graph with memory nodes has one executable graph at a time.
 *  - cudaGraphLaunch checks the above and the device's capacity (at the graph's peak), then runs
 *    the nodes in capture order on the launch stream, one operation each.
 *  - Driver entry points: cudaGetDriverEntryPoint[ByVersion] knows "cuStreamIsCapturing" (since
 *    10000): a simulated function over the same state (see cudasim.h); with
 *    cudaEnablePerThreadDefaultStream, its handle 0 means the per-thread stream. Other symbols:
 *    cudaSuccess, a NULL function and cudaDriverEntryPointSymbolNotFound, as documented.
 *
 * Simplifications (what the real runtime does and cudasim does not)
 *  - Data operations (cudaMemset*, cudaMemcpy*) happen at once, when they are called, even on a
 *    held stream; only their completion (cudaStreamQuery, events) is deferred. No kernels.
 *  - Dependencies between streams are only those of cudaStreamWaitEvent: a stream that waits
 *    for an event whose work is pending completes nothing until that work has completed
 *    (cudasim_release or a synchronize of the other stream; a synchronize of the waiting stream
 *    completes the work it waits for). The legacy stream does not synchronize with blocking
 *    streams, and the three reuse flags are stored and read back but do not change which blocks
 *    are reused (only the two rules above apply).
 *  - An allocation that does not fit reserves a new segment; it never trims its own or other
 *    pools first. Coalescing merges only neighbours whose frees have completed.
 *  - No sticky errors; priorities are clamped to [-5, 0] and otherwise ignored; elapsed times are
 *    0.
 *  - Capture: nodes form a chain in capture order; no dependency edges, so
 *    cudaStreamGetCaptureInfo reports a stream's last captured node as its only dependency, and
 *    a forked stream counts as joined once any other member waited on an event it recorded after
 *    its last node. No kernels, host nodes, child graphs (cudaGraphLaunch into a capturing stream
 *    returns cudaErrorStreamCaptureUnsupported without invalidating), or cudaStreamBeginCapture-
 *    ToGraph. The "potentially unsafe" list is cudasim's reading of the sources above; other
 *    calls (cudaMemGetInfo, cudaStreamCreate, cudaDeviceGetMemPool, synchronizing a stream that
 *    is not capturing, ...) are allowed.
 *  - Graph memory is charged to the device only while live (the real graph pool keeps what it
 *    mapped until cudaDeviceGraphMemTrim); a free node, or cudaFreeAsync of a graph allocation,
 *    frees at once rather than in stream order. A node that fails during a launch (a memset of
 *    memory freed since capture) ends the launch with its error; the nodes before it have run.
 *  - cudaMalloc reserves whole CUDASIM_GRANULARITY units from the device capacity. cudaFree of
 *    a cudaMalloc'd pointer completes all work of its device and runs the release, as the
 *    implicit synchronization of the real cudaFree does.
 *  - cudaMemset/cudaMemcpy on device memory that is not inside a live allocation fail with
 *    cudaErrorInvalidValue (the real runtime may silently succeed on freed pool memory).
 *  - Destroying a stream completes its work. A per-thread default stream lives until reset.
 *  - Handles are never reused: destroyed streams, events, pools, graphs and executable graphs
 *    stay allocated (see graveyard), so a stale handle reliably gives
 *    cudaErrorInvalidResourceHandle (cudaErrorInvalidValue for graph handles), unless a test
 *    asks for a destroyed stream's address with cudasim_stream_create_at.
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
 *  - cudaStreamDestroy of a capturing stream: cudaErrorStreamCaptureUnsupported; the stream stays
 *    and its capture is invalidated.
 *  - cudaStreamBeginCapture on the legacy stream: cudaErrorStreamCaptureUnsupported; on a stream
 *    already capturing: cudaErrorIllegalState (as ROCm's HIP, which follows CUDA, does).
 *  - An event last recorded in a capture that has ended (it stands for a node of that graph):
 *    cudaEventQuery, Synchronize, ElapsedTime and cudaStreamWaitEvent give cudaErrorInvalidValue
 *    until it is recorded again outside capture.
 *  - cudaGraphDestroy of a graph being captured into, unknown graph or exec handles:
 *    cudaErrorInvalidValue.
 *  - cudaErrorNotReady (from cudaStreamQuery, cudaEventQuery) is a status, not a failure: it is
 *    not stored as the thread's last error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#endif

#include "cudasim.h"

#include <cuda.h>         /* driver types only: cudasim never links libcuda */
#include <cudaTypedefs.h> /* PFN_ types, to check the simulated driver function's signature */
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

#define SIM_MAX_DEPS 8 /* pending waits per stream; more complete the oldest's stream at once */

struct CUstream_st {
  struct CUstream_st *next; /* registry */
  int device;
  unsigned flags;
  int priority;
  enum sim_stream_kind kind;
  uint64_t ticket;    /* operations enqueued so far */
  uint64_t completed; /* operations completed so far (a prefix: stream order) */
  int held;
  unsigned long long id;         /* cudaStreamGetId: never reused, not even across resets */
  struct sim_capture *cap;       /* the capture sequence it is part of (begun or joined) */
  uint64_t cap_ops;              /* nodes captured on it in cap */
  uint64_t cap_joined;           /* cap_ops when another member last waited on it */
  struct CUgraphNode_st *cap_last; /* its last captured node: cudaStreamGetCaptureInfo's deps */
  /* Waits outside capture (cudaStreamWaitEvent on an event whose work is pending): nothing on
   * this stream completes until each stream `on` has completed `ticket`. */
  struct sim_dep {
    struct CUstream_st *on;
    uint64_t ticket;
  } deps[SIM_MAX_DEPS];
  int ndeps;
};

struct CUevent_st {
  struct CUevent_st *next; /* registry */
  int device;              /* current at its creation: it is recorded on that device's streams */
  unsigned flags;
  int recorded;
  struct CUstream_st *stream; /* NULL once that stream is gone: then complete */
  uint64_t ticket;
  unsigned long long cap_id;     /* the capture its last record was made in; 0: outside any */
  struct CUstream_st *cap_stream; /* ... on that member stream, */
  uint64_t cap_pos;               /* ... after that many of its nodes, */
  struct CUgraphNode_st *cap_node; /* ... the last of which was this one */
};

/* A capture sequence: begun on origin, joined by the streams that waited on its events. */
typedef struct sim_capture {
  struct sim_capture *next;
  unsigned long long id; /* unique for the life of the process */
  enum cudaStreamCaptureMode mode;
  int invalidated;
  pthread_t thread; /* the thread that began it */
  struct CUstream_st *origin;
  struct CUgraph_st *graph;
} sim_capture;

/* A graph allocation: its address is fixed when its allocation node is made; it is live (its
 * memory charged to the device) from a launch that runs that node until it is freed. */
typedef struct sim_galloc {
  struct sim_galloc *next;
  char *base;
  size_t size, charged;
  int device;
  int live;
  int refs;                 /* nodes (in graphs and executable graphs) that name it */
  struct CUgraph_st *owner; /* the graph holding its allocation node; NULL once destroyed */
  int owner_frees;          /* owner also holds a free node for it */
} sim_galloc;

enum sim_node_kind { SIM_NODE_MEMSET, SIM_NODE_MEMCPY, SIM_NODE_ALLOC, SIM_NODE_FREE,
                     SIM_NODE_EVENT, SIM_NODE_WAIT };

struct CUgraphNode_st {
  enum sim_node_kind kind;
  void *dst; /* memset, memcpy */
  const void *src;
  size_t n;
  int value;
  enum cudaMemcpyKind dir;
  sim_galloc *ga;  /* alloc, free */
  cudaEvent_t ev;  /* event record (cudaEventRecordExternal), event wait (cudaEventWaitExternal) */
};

struct CUgraph_st {
  struct CUgraph_st *next; /* registry */
  struct CUgraphNode_st **nodes; /* each its own allocation: node handles stay valid */
  size_t n, cap;
  int execs;           /* executable graphs made from it that still exist */
  sim_capture *capture; /* being captured into */
};

struct CUgraphExec_st {
  struct CUgraphExec_st *next; /* registry */
  struct CUgraphNode_st *nodes; /* copies, made at instantiation */
  size_t n;
  unsigned long long flags;
  struct CUgraph_st *graph; /* NULL once that graph is destroyed */
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
  struct CUgraph_st *graphs;    /* their nodes are freed, the handles kept */
  struct CUgraphExec_st *execs; /* likewise */
} graveyard;

/* Stream and capture ids: unique for the life of the process, as CUDA's are. Guarded by g_lock. */
static unsigned long long last_stream_id, last_capture_id;

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
  sim_capture *captures; /* begun and not yet ended (active or invalidated) */
  struct CUgraph_st *graphs;
  struct CUgraphExec_st *execs;
  sim_galloc *gallocs;
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
  enum cudaStreamCaptureMode mode; /* cudaThreadExchangeStreamCaptureMode; 0 is global */
  int context; /* a runtime call made the device's context current on this thread */
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
  /* The runtime makes the primary context current on a thread's first call that needs the
   * device; the driver API does not (see cu_is_capturing). */
  if (strncmp(api, "cuda", 4) == 0)
    t.context = 1;
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

/* SIM_CALL for the calls that stream capture deems "potentially unsafe" (see capture_unsafe). */
#define SIM_UNSAFE_CALL(expr)                                                                     \
  do {                                                                                            \
    cudaError_t e_ = sim_enter(__func__, 1);                                                      \
    if (e_ == cudaSuccess)                                                                        \
      e_ = capture_unsafe();                                                                      \
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
  s->id = ++last_stream_id;
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

/* Drops the waits of s that are satisfied; whether any is left. */
static int stream_blocked(struct CUstream_st *s) {
  int n = 0;
  for (int i = 0; i < s->ndeps; i++)
    if (s->deps[i].on->completed < s->deps[i].ticket)
      s->deps[n++] = s->deps[i];
  s->ndeps = n;
  return n > 0;
}

/* Completes what waited for work that has completed since, until nothing changes. */
static void progress(void) {
  int changed = 1;
  while (changed) {
    changed = 0;
    for (struct CUstream_st *s = g.streams; s; s = s->next) {
      if (s->ndeps == 0 || stream_blocked(s) || s->held || s->completed == s->ticket)
        continue;
      s->completed = s->ticket;
      changed = 1;
    }
  }
}

/* A synchronize of s: the work it waits for completes, then its own. */
static void stream_force(struct CUstream_st *s) {
  for (int i = 0; i < s->ndeps; i++)
    if (s->deps[i].on->completed < s->deps[i].ticket)
      s->deps[i].on->completed = s->deps[i].ticket;
  s->ndeps = 0;
  s->completed = s->ticket;
}

/* s waits for on's work up to ticket. */
static void stream_add_dep(struct CUstream_st *s, struct CUstream_st *on, uint64_t ticket) {
  for (int i = 0; i < s->ndeps; i++) {
    if (s->deps[i].on == on) {
      if (s->deps[i].ticket < ticket)
        s->deps[i].ticket = ticket;
      return;
    }
  }
  if (s->ndeps == SIM_MAX_DEPS) { /* the oldest wait is over at once */
    if (s->deps[0].on->completed < s->deps[0].ticket)
      s->deps[0].on->completed = s->deps[0].ticket;
    memmove(&s->deps[0], &s->deps[1], (SIM_MAX_DEPS - 1) * sizeof s->deps[0]);
    s->ndeps--;
  }
  s->deps[s->ndeps++] = (struct sim_dep){on, ticket};
}

static uint64_t enqueue(struct CUstream_st *s) {
  s->ticket++;
  if (!s->held && !stream_blocked(s))
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

/* ---- stream capture: the rules ----------------------------------------------------------------
 * What a call may do while capture sequences are open. The errors follow the CUDA programming
 * guide ("Prohibited and Unhandled Operations", "Invalidation") and the documentation of
 * cudaThreadExchangeStreamCaptureMode; see the top of this file. */

static sim_capture *capture_by_id(unsigned long long id) {
  for (sim_capture *c = g.captures; c; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

/* Once invalidated, a capture stays so until cudaStreamEndCapture, which then fails. */
static void capture_invalidate(sim_capture *c) { c->invalidated = 1; }

/* Streams that the legacy stream synchronizes with: blocking ones and per-thread streams. */
static int stream_blocking(const struct CUstream_st *s) {
  return s->kind == SIM_PER_THREAD || (s->kind == SIM_USER && !(s->flags & cudaStreamNonBlocking));
}

/* Any use of device d's legacy stream while a blocking stream of d is being captured would make
 * the legacy stream depend on captured work: cudaErrorStreamCaptureImplicit. Queries of the
 * capture status report it without invalidating anything. */
static cudaError_t legacy_implicit(int d, int invalidate) {
  cudaError_t e = cudaSuccess;
  for (struct CUstream_st *s = g.streams; s; s = s->next)
    if (s->cap && s->device == d && stream_blocking(s)) {
      e = cudaErrorStreamCaptureImplicit;
      if (invalidate)
        capture_invalidate(s->cap);
    }
  return e;
}

/* Whether capture c forbids this thread the "potentially unsafe" calls. */
static int capture_restricts(const sim_capture *c) {
  if (c->invalidated || t.mode == cudaStreamCaptureModeRelaxed)
    return 0;
  if (c->mode != cudaStreamCaptureModeRelaxed && pthread_equal(c->thread, pthread_self()))
    return 1; /* the thread's own capture, in global and thread-local mode alike */
  return t.mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal;
}

/* Start of a "potentially unsafe" call (cudaMalloc, cudaFree, pool administration, event queries,
 * ...): refused, and every capture that forbids it invalidated. */
static cudaError_t capture_unsafe(void) {
  cudaError_t e = cudaSuccess;
  for (sim_capture *c = g.captures; c; c = c->next)
    if (capture_restricts(c)) {
      capture_invalidate(c);
      e = cudaErrorStreamCaptureUnsupported;
    }
  return e;
}

/* A device-wide synchronize encompasses every capture on the device, whatever the modes. */
static cudaError_t capture_on_device(int d) {
  cudaError_t e = cudaSuccess;
  for (struct CUstream_st *s = g.streams; s; s = s->next)
    if (s->cap && s->device == d) {
      capture_invalidate(s->cap);
      e = cudaErrorStreamCaptureUnsupported;
    }
  return e;
}

/* Before work is enqueued on s (it is captured instead when s->cap is set). */
static cudaError_t stream_use(struct CUstream_st *s) {
  if (s->kind == SIM_LEGACY)
    return legacy_implicit(s->device, 1);
  if (s->cap && s->cap->invalidated)
    return cudaErrorStreamCaptureInvalidated;
  return cudaSuccess;
}

/* Before s is synchronized or queried: a capturing stream has nothing to wait for. */
static cudaError_t stream_wait_check(struct CUstream_st *s) {
  cudaError_t e = stream_use(s);
  if (e != cudaSuccess || !s->cap)
    return e;
  capture_invalidate(s->cap);
  return cudaErrorStreamCaptureUnsupported;
}

/* Before ev is queried, synchronized, timed or waited on: an event last recorded in a capture
 * stands for a node of a graph, not for work the host could wait for. */
static cudaError_t event_capture_check(struct CUevent_st *ev) {
  if (!ev->cap_id)
    return cudaSuccess;
  sim_capture *c = capture_by_id(ev->cap_id);
  if (!c)
    return cudaErrorInvalidValue; /* that capture has ended: the event belongs to its graph */
  if (c->invalidated)
    return cudaErrorStreamCaptureInvalidated;
  capture_invalidate(c);
  return cudaErrorCapturedEvent;
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
      stream_force(s);
  progress();
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

/* ---- graph allocations and graphs ------------------------------------------------------------ */

/* The graph allocation whose address is ptr (live or not). */
static sim_galloc *galloc_at(const void *ptr) {
  for (sim_galloc *ga = g.gallocs; ga; ga = ga->next)
    if (ga->base == ptr)
      return ga;
  return NULL;
}

/* 1 when [ptr, ptr + n) lies in one graph allocation, a live one if live_only. */
static int galloc_range(const void *ptr, size_t n, int live_only) {
  uintptr_t a = (uintptr_t)ptr;
  for (sim_galloc *ga = g.gallocs; ga; ga = ga->next) {
    uintptr_t base = (uintptr_t)ga->base;
    if ((ga->live || !live_only) && a >= base && a - base <= ga->size &&
        n <= ga->size - (a - base))
      return 1;
  }
  return 0;
}

/* An allocation node's address: reserved now, charged to the device only while live. */
static sim_galloc *galloc_new(int device, size_t size) {
  if (size > SIZE_MAX - CUDASIM_GRANULARITY)
    return NULL;
  size_t charged = round_up(size, CUDASIM_GRANULARITY);
  sim_galloc *ga = calloc(1, sizeof *ga);
  void *mem = MAP_FAILED;
  if (ga)
    mem = mmap(NULL, charged, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
               -1, 0);
  if (mem == MAP_FAILED) {
    free(ga);
    return NULL;
  }
  ga->base = mem;
  ga->size = size;
  ga->charged = charged;
  ga->device = device;
  ga->next = g.gallocs;
  g.gallocs = ga;
  return ga;
}

/* Gives the address back once no node names it and it is not live. */
static void galloc_reap(sim_galloc *ga) {
  if (ga->refs > 0 || ga->live)
    return;
  for (sim_galloc **link = &g.gallocs; *link; link = &(*link)->next)
    if (*link == ga) {
      *link = ga->next;
      break;
    }
  munmap(ga->base, ga->charged);
  free(ga);
}

static void galloc_live(sim_galloc *ga) {
  ga->live = 1;
  g.dev[ga->device].reserved += ga->charged;
}

/* The end of a live graph allocation's lifetime (a free node, cudaFreeAsync or cudaFree). */
static void galloc_free(sim_galloc *ga) {
  ga->live = 0;
  g.dev[ga->device].reserved -= ga->charged;
  galloc_reap(ga);
}

static void node_release(struct CUgraphNode_st *nd) {
  if (nd->ga) {
    sim_galloc *ga = nd->ga;
    nd->ga = NULL;
    ga->refs--;
    galloc_reap(ga);
  }
}

static struct CUgraph_st *graph_new(void) {
  struct CUgraph_st *gr = calloc(1, sizeof *gr);
  if (!gr)
    return NULL;
  gr->next = g.graphs;
  g.graphs = gr;
  return gr;
}

/* Adds a node (the graph owns it); NULL on host OOM. */
static struct CUgraphNode_st *graph_add(struct CUgraph_st *gr, enum sim_node_kind kind) {
  if (gr->n == gr->cap) {
    size_t cap = gr->cap ? 2 * gr->cap : 16;
    struct CUgraphNode_st **nodes = realloc(gr->nodes, cap * sizeof *nodes);
    if (!nodes)
      return NULL;
    gr->nodes = nodes;
    gr->cap = cap;
  }
  struct CUgraphNode_st *nd = calloc(1, sizeof *nd);
  if (!nd)
    return NULL;
  nd->kind = kind;
  gr->nodes[gr->n++] = nd;
  return nd;
}

static int graph_known(cudaGraph_t gr) {
  for (struct CUgraph_st *p = g.graphs; p; p = p->next)
    if (p == gr)
      return 1;
  return 0;
}

/* Unregisters gr and frees its nodes; the handle goes to the graveyard. */
static void graph_free(struct CUgraph_st *gr) {
  for (size_t i = 0; i < gr->n; i++) {
    node_release(gr->nodes[i]);
    free(gr->nodes[i]);
  }
  free(gr->nodes);
  gr->nodes = NULL;
  gr->n = gr->cap = 0;
  for (sim_galloc *ga = g.gallocs; ga; ga = ga->next)
    if (ga->owner == gr)
      ga->owner = NULL;
  for (struct CUgraphExec_st *x = g.execs; x; x = x->next)
    if (x->graph == gr)
      x->graph = NULL;
  for (struct CUgraph_st **link = &g.graphs; *link; link = &(*link)->next)
    if (*link == gr) {
      *link = gr->next;
      break;
    }
  gr->next = graveyard.graphs;
  graveyard.graphs = gr;
}

static int graph_has_mem_nodes(const struct CUgraph_st *gr) {
  for (size_t i = 0; i < gr->n; i++)
    if (gr->nodes[i]->kind == SIM_NODE_ALLOC || gr->nodes[i]->kind == SIM_NODE_FREE)
      return 1;
  return 0;
}

/* ---- device pointers (for memset / memcpy) --------------------------------------------------- */

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
  return galloc_range(ptr, n, 1);
}

/* What a captured memset or memcpy may name: live memory, or a graph allocation (whose memory
 * is live only when the graph runs). */
static int capture_range(const void *ptr, size_t n) {
  return dev_range(ptr, n) || galloc_range(ptr, n, 0);
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
  for (sim_galloc *ga = g.gallocs; ga; ga = ga->next)
    if (a >= (uintptr_t)ga->base && a - (uintptr_t)ga->base < ga->size)
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

/* Pool memory of another device that the current device has no access to (defined with the
 * issue 6 section at the end). */
static int sim6_unmapped_here(const void *ptr, size_t n);

/* Checks a copy; in_range says which device memory it may touch. A copy of pool memory with a
 * current device the pool gives no access fails with cudaErrorInvalidValue, whatever the stream,
 * as the H200 showed: pool memory is mapped only where the pool grants access. */
static cudaError_t memcpy_check(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                int (*in_range)(const void *, size_t)) {
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
  if (!dst || !src || (dst_dev && !in_range(dst, n)) || (src_dev && !in_range(src, n)))
    return cudaErrorInvalidValue;
  if ((dst_dev && sim6_unmapped_here(dst, n)) || (src_dev && sim6_unmapped_here(src, n)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

static cudaError_t do_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = memcpy_check(dst, src, n, kind, dev_range);
  if (e == cudaSuccess && n > 0)
    memmove(dst, src, n);
  return e;
}

/* ---- stream capture: recording ----------------------------------------------------------------
 * Work enqueued on a capturing stream becomes a node of the capture's graph instead of running.
 * An operation that cannot be captured as asked fails and invalidates the capture. */

static cudaError_t capture_refuse(struct CUstream_st *s, cudaError_t e) {
  capture_invalidate(s->cap);
  return e;
}

/* A new node captured on s; NULL on host OOM. */
static struct CUgraphNode_st *capture_node(struct CUstream_st *s, enum sim_node_kind kind) {
  struct CUgraphNode_st *nd = graph_add(s->cap->graph, kind);
  if (nd) {
    s->cap_ops++;
    s->cap_last = nd;
  }
  return nd;
}

static cudaError_t capture_memset(struct CUstream_st *s, void *ptr, int value, size_t n) {
  if (n > 0 && !capture_range(ptr, n))
    return capture_refuse(s, cudaErrorInvalidValue);
  struct CUgraphNode_st *nd = capture_node(s, SIM_NODE_MEMSET);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->dst = ptr;
  nd->value = value;
  nd->n = n;
  return cudaSuccess;
}

static cudaError_t capture_memcpy(struct CUstream_st *s, void *dst, const void *src, size_t n,
                                  enum cudaMemcpyKind kind) {
  cudaError_t e = memcpy_check(dst, src, n, kind, capture_range);
  if (e != cudaSuccess)
    return capture_refuse(s, e);
  struct CUgraphNode_st *nd = capture_node(s, SIM_NODE_MEMCPY);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->dst = dst;
  nd->src = src;
  nd->n = n;
  nd->dir = kind;
  return cudaSuccess;
}

/* A stream allocation under capture is an allocation node: the graph owns the memory, not the
 * pool (whose counters do not move), and the address is fixed from now on. */
static cudaError_t capture_alloc(struct CUstream_st *s, int device, size_t size, void **out) {
  if (size == 0)
    return capture_refuse(s, cudaErrorInvalidValue);
  sim_galloc *ga = galloc_new(device, size);
  if (!ga)
    return cudaErrorMemoryAllocation;
  struct CUgraphNode_st *nd = capture_node(s, SIM_NODE_ALLOC);
  if (!nd) {
    galloc_reap(ga);
    return cudaErrorMemoryAllocation;
  }
  nd->ga = ga;
  ga->refs++;
  ga->owner = s->cap->graph;
  *out = ga->base;
  return cudaSuccess;
}

/* Only graph allocations can be freed in a graph: a free node names an allocation node's address
 * (cudaFreeAsync of memory from an uncaptured allocation is illegal during capture). One that
 * its own graph frees cannot be freed anywhere else. */
static cudaError_t capture_free(struct CUstream_st *s, void *ptr) {
  sim_galloc *ga = ptr ? galloc_at(ptr) : NULL;
  if (!ga || ga->owner_frees)
    return capture_refuse(s, cudaErrorInvalidValue);
  struct CUgraphNode_st *nd = capture_node(s, SIM_NODE_FREE);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->ga = ga;
  ga->refs++;
  if (ga->owner == s->cap->graph)
    ga->owner_frees = 1;
  return cudaSuccess;
}

/* A record in capture marks a point to fork from or join at; only cudaEventRecordExternal makes
 * an event record node, which sets the event when the graph runs. */
static cudaError_t capture_record(struct CUstream_st *s, struct CUevent_st *ev, unsigned flags) {
  if (flags & cudaEventRecordExternal) {
    struct CUgraphNode_st *nd = capture_node(s, SIM_NODE_EVENT);
    if (!nd)
      return cudaErrorMemoryAllocation;
    nd->ev = ev;
  }
  ev->cap_id = s->cap->id;
  ev->cap_stream = s;
  ev->cap_pos = s->cap_ops;
  ev->cap_node = s->cap_last;
  return cudaSuccess;
}

/* s waits on an event last recorded in a capture: s joins that capture (a fork) when it is not
 * capturing, marks the recording stream joined when it is part of the same capture. */
static cudaError_t capture_wait(struct CUstream_st *s, struct CUevent_st *ev) {
  sim_capture *c = capture_by_id(ev->cap_id);
  if (!c)
    return s->cap ? capture_refuse(s, cudaErrorInvalidValue) : cudaErrorInvalidValue;
  if (c->invalidated)
    return cudaErrorStreamCaptureInvalidated;
  if (s->cap && s->cap != c) {
    capture_invalidate(c);
    return capture_refuse(s, cudaErrorStreamCaptureMerge);
  }
  if (!s->cap) {
    if (s->kind == SIM_LEGACY) { /* the legacy stream cannot be captured */
      capture_invalidate(c);
      return cudaErrorStreamCaptureUnsupported;
    }
    s->cap = c;
    s->cap_ops = s->cap_joined = 0;
    s->cap_last = ev->cap_node;
    return cudaSuccess;
  }
  struct CUstream_st *from = ev->cap_stream;
  if (from != s && ev->cap_pos > from->cap_joined)
    from->cap_joined = ev->cap_pos;
  return cudaSuccess;
}

/* A stream that joined c has work after its last join. */
static int capture_unjoined(const sim_capture *c) {
  for (struct CUstream_st *s = g.streams; s; s = s->next)
    if (s->cap == c && s != c->origin && s->cap_ops > s->cap_joined)
      return 1;
  return 0;
}

/* Takes every member out of capture and forgets c (its graph stays). */
static void capture_end(sim_capture *c) {
  for (struct CUstream_st *s = g.streams; s; s = s->next)
    if (s->cap == c) {
      s->cap = NULL;
      s->cap_ops = s->cap_joined = 0;
      s->cap_last = NULL;
    }
  for (sim_capture **link = &g.captures; *link; link = &(*link)->next)
    if (*link == c) {
      *link = c->next;
      break;
    }
  c->graph->capture = NULL;
  free(c);
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
  X(cudaErrorCompatNotSupportedOnDevice,                                                          \
    "forward compatibility was attempted on non supported HW")                                    \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")        \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
  X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences")\
  X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")      \
  X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                         \
  X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")   \
  X(cudaErrorStreamCaptureImplicit,                                                               \
    "operation would make the legacy stream depend on a capturing blocking stream")               \
  X(cudaErrorCapturedEvent,                                                                       \
    "operation not permitted on an event last recorded in a capturing stream")                    \
  X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence "   \
                                       "from another thread")                                     \
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
  cudaError_t busy = capture_on_device(d); /* both checks run: each invalidates what it hits */
  e = capture_unsafe();
  if (busy != cudaSuccess || e != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
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
  for (struct CUstream_st *o = g.streams; o; o = o->next) /* waits for s are over */
    for (int i = 0; i < o->ndeps; i++)
      if (o->deps[i].on == s)
        o->deps[i].ticket = 0;
  for (struct CUstream_st **link = &g.streams; *link; link = &(*link)->next)
    if (*link == s) {
      *link = s->next;
      break;
    }
  s->next = graveyard.streams;
  graveyard.streams = s;
  progress(); /* what waited for s completes */
}

static cudaError_t stream_destroy(cudaStream_t h) {
  if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread || !stream_known(h))
    return cudaErrorInvalidResourceHandle;
  if (h->kind != SIM_USER)
    return cudaErrorInvalidResourceHandle;
  if (h->cap) { /* cudasim's choice: the stream stays, its capture is invalidated */
    capture_invalidate(h->cap);
    return cudaErrorStreamCaptureUnsupported;
  }
  stream_forget(h);
  reap_all();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) { SIM_CALL(stream_destroy(stream)); }

static cudaError_t stream_synchronize(cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = stream_wait_check(s);
  if (e != cudaSuccess)
    return e;
  stream_force(s);
  progress();
  device_release(s->device);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  SIM_CALL(stream_synchronize(stream));
}

static cudaError_t stream_query(cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = stream_wait_check(s);
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

/* Outside capture a wait orders nothing in cudasim (no dependencies between streams); in capture
 * it forks, joins, or crosses the capture's boundary, which only cudaEventWaitExternal may. */
static cudaError_t stream_wait_event(cudaStream_t h, cudaEvent_t ev, unsigned flags) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (!event_known(ev))
    return cudaErrorInvalidResourceHandle;
  if (flags & ~(unsigned)cudaEventWaitExternal)
    return cudaErrorInvalidValue;
  e = stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (ev->cap_id)
    return capture_wait(s, ev);
  if (!s->cap && ev->recorded && ev->stream && !event_done(ev))
    stream_add_dep(s, ev->stream, ev->ticket); /* its later work waits for ev's */
  if (!s->cap || !ev->recorded) /* waiting on a never recorded event is a no-op */
    return cudaSuccess;
  if (!(flags & cudaEventWaitExternal))
    return capture_refuse(s, cudaErrorStreamCaptureIsolation);
  struct CUgraphNode_st *nd = capture_node(s, SIM_NODE_WAIT);
  if (!nd)
    return cudaErrorMemoryAllocation;
  nd->ev = ev;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags) {
  SIM_CALL(stream_wait_event(stream, event, flags));
}

static enum cudaStreamCaptureStatus capture_status(const struct CUstream_st *s) {
  if (!s->cap)
    return cudaStreamCaptureStatusNone;
  return s->cap->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
}

/* The status query shared by cudaStreamIsCapturing and the simulated cuStreamIsCapturing. */
static cudaError_t stream_is_capturing(cudaStream_t h, enum cudaStreamCaptureStatus *status) {
  struct CUstream_st *s;
  if (!status)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess && s->kind == SIM_LEGACY)
    e = legacy_implicit(s->device, 0);
  if (e != cudaSuccess)
    return e;
  *status = capture_status(s);
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
  int d;
  cudaError_t e = cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev)
    return cudaErrorMemoryAllocation;
  ev->device = d;
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

static void event_set(struct CUevent_st *ev, struct CUstream_st *s) {
  ev->stream = s;
  ev->ticket = enqueue(s);
  ev->recorded = 1;
  ev->cap_id = 0;
}

static cudaError_t event_record(cudaEvent_t ev, cudaStream_t h, unsigned flags) {
  struct CUstream_st *s;
  if (!event_known(ev))
    return cudaErrorInvalidResourceHandle;
  if (flags & ~(unsigned)cudaEventRecordExternal)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess && s->device != ev->device)
    e = cudaErrorInvalidResourceHandle; /* "event and stream must be on the same device" */
  if (e == cudaSuccess)
    e = stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (s->cap)
    return capture_record(s, ev, flags);
  event_set(ev, s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIM_CALL(event_record(event, stream, cudaEventRecordDefault));
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags) {
  SIM_CALL(event_record(event, stream, flags));
}

/* Querying or waiting for an event: refused for a captured event, and potentially unsafe. */
static cudaError_t event_wait_check(cudaEvent_t ev) {
  if (!event_known(ev))
    return cudaErrorInvalidResourceHandle;
  cudaError_t e = event_capture_check(ev);
  return e != cudaSuccess ? e : capture_unsafe();
}

static cudaError_t event_query(cudaEvent_t ev) {
  cudaError_t e = event_wait_check(ev);
  if (e != cudaSuccess)
    return e;
  return event_done(ev) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) { SIM_CALL(event_query(event)); }

static cudaError_t event_synchronize(cudaEvent_t ev) {
  cudaError_t e = event_wait_check(ev);
  if (e != cudaSuccess)
    return e;
  if (!ev->recorded || !ev->stream)
    return cudaSuccess;
  if (ev->stream->ndeps)
    stream_force(ev->stream);
  if (ev->stream->completed < ev->ticket)
    ev->stream->completed = ev->ticket;
  progress();
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
  cudaError_t e = event_capture_check(start);
  if (e == cudaSuccess)
    e = event_capture_check(end);
  if (e != cudaSuccess)
    return e;
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

/* ---- pools ----------------------------------------------------------------------------------- */

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
  SIM_UNSAFE_CALL(pool_create(memPool, poolProps));
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

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  SIM_UNSAFE_CALL(pool_destroy(memPool));
}

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
  SIM_UNSAFE_CALL(pool_set_attr(memPool, attr, value));
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
  SIM_UNSAFE_CALL(pool_get_attr(memPool, attr, value));
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
  SIM_UNSAFE_CALL(pool_set_access(memPool, descList, count));
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
  SIM_UNSAFE_CALL(pool_get_access(flags, memPool, location));
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
  SIM_UNSAFE_CALL(pool_trim(memPool, minBytesToKeep));
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
  if (e == cudaSuccess)
    e = stream_use(s);
  if (e != cudaSuccess)
    return e;
  return s->cap ? capture_alloc(s, p->device, size, ptr) : pool_alloc(p, s, size, ptr);
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
    e = stream_use(s);
  if (e == cudaSuccess)
    e = current_pool(s->device, &p);
  if (e != cudaSuccess)
    return e;
  return s->cap ? capture_alloc(s, p->device, size, ptr) : pool_alloc(p, s, size, ptr);
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  SIM_CALL(malloc_async(devPtr, size, hStream));
}

static cudaError_t free_async(void *ptr, cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (s->cap)
    return capture_free(s, ptr);
  sim_galloc *ga = ptr ? galloc_at(ptr) : NULL;
  if (!ga) {
    if (sim6_import_free(ptr, s))
      return cudaSuccess; /* issue 6: an imported buffer */
    return pool_free(ptr, s);
  }
  if (!ga->live)
    return cudaErrorInvalidValue;
  enqueue(s);
  galloc_free(ga); /* at once: cudasim's simplification */
  return cudaSuccess;
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

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size) {
  SIM_UNSAFE_CALL(plain_malloc(devPtr, size));
}

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
  sim_galloc *ga = galloc_at(ptr);
  if (ga && ga->live) {
    galloc_free(ga);
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

cudaError_t CUDARTAPI cudaFree(void *devPtr) { SIM_UNSAFE_CALL(plain_free(devPtr)); }

/* Synchronous copies and sets run on the legacy stream. */
static cudaError_t legacy_use(void) {
  int d;
  cudaError_t e = cur_dev(&d);
  return e != cudaSuccess ? e : legacy_implicit(d, 1);
}

static cudaError_t sync_memset(void *ptr, int value, size_t n) {
  cudaError_t e = legacy_use();
  return e != cudaSuccess ? e : do_memset(ptr, value, n);
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count) {
  SIM_UNSAFE_CALL(sync_memset(devPtr, value, count));
}

static cudaError_t memset_async(void *ptr, int value, size_t n, cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = stream_use(s);
  if (e == cudaSuccess && s->cap)
    return capture_memset(s, ptr, value, n);
  if (e == cudaSuccess)
    e = do_memset(ptr, value, n);
  if (e == cudaSuccess)
    enqueue(s);
  return e;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  SIM_CALL(memset_async(devPtr, value, count, stream));
}

static cudaError_t sync_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = legacy_use();
  return e != cudaSuccess ? e : do_memcpy(dst, src, n, kind);
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind) {
  SIM_UNSAFE_CALL(sync_memcpy(dst, src, count, kind));
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = stream_use(s);
  if (e == cudaSuccess && s->cap)
    return capture_memcpy(s, dst, src, n, kind);
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

/* ---- stream identity ------------------------------------------------------------------------- */

static cudaError_t stream_get_id(cudaStream_t h, unsigned long long *id) {
  struct CUstream_st *s;
  if (!id)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    *id = s->id;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId) {
  SIM_CALL(stream_get_id(hStream, streamId));
}

static cudaError_t stream_get_device(cudaStream_t h, int *device) {
  struct CUstream_st *s;
  if (!device)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s); /* the built-in streams resolve on the current device */
  /* Asked of a stream being captured, the H200 invalidated the capture (relaxed mode too). */
  if (e == cudaSuccess && s->cap) {
    capture_invalidate(s->cap);
    return cudaErrorStreamCaptureUnsupported;
  }
  if (e == cudaSuccess)
    *device = s->device;
  return e;
}

cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device) {
  SIM_CALL(stream_get_device(hStream, device));
}

/* ---- stream capture -------------------------------------------------------------------------- */

static int valid_capture_mode(enum cudaStreamCaptureMode mode) {
  return mode == cudaStreamCaptureModeGlobal || mode == cudaStreamCaptureModeThreadLocal ||
         mode == cudaStreamCaptureModeRelaxed;
}

static cudaError_t begin_capture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
  struct CUstream_st *s;
  if (!valid_capture_mode(mode))
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (s->kind == SIM_LEGACY)
    return cudaErrorStreamCaptureUnsupported;
  if (s->cap)
    return cudaErrorIllegalState;
  sim_capture *c = calloc(1, sizeof *c);
  struct CUgraph_st *gr = c ? graph_new() : NULL;
  if (!gr) {
    free(c);
    return cudaErrorMemoryAllocation;
  }
  c->id = ++last_capture_id;
  c->mode = mode;
  c->thread = pthread_self();
  c->origin = s;
  c->graph = gr;
  gr->capture = c;
  c->next = g.captures;
  g.captures = c;
  s->cap = c;
  s->cap_ops = s->cap_joined = 0;
  s->cap_last = NULL;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  SIM_CALL(begin_capture(stream, mode));
}

/* Ends the capture begun on h. A failed capture (invalidated, or with unjoined work) still ends:
 * its streams leave capture mode and *graph is NULL. */
static cudaError_t end_capture(cudaStream_t h, cudaGraph_t *graph) {
  struct CUstream_st *s;
  cudaError_t e = stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  if (!graph)
    return cudaErrorInvalidValue;
  sim_capture *c = s->cap;
  if (!c)
    return cudaErrorIllegalState;
  if (c->origin != s) {
    capture_invalidate(c);
    return cudaErrorStreamCaptureUnmatched;
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self()))
    return cudaErrorStreamCaptureWrongThread; /* the capture goes on */
  e = c->invalidated        ? cudaErrorStreamCaptureInvalidated
      : capture_unjoined(c) ? cudaErrorStreamCaptureUnjoined
                            : cudaSuccess;
  struct CUgraph_st *gr = c->graph;
  capture_end(c);
  if (e != cudaSuccess) {
    graph_free(gr);
    gr = NULL;
  }
  *graph = gr;
  return e;
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  SIM_CALL(end_capture(stream, pGraph));
}

/* The dependencies reported are the stream's last captured node only (no fork/join edges). */
static cudaError_t capture_info(cudaStream_t h, enum cudaStreamCaptureStatus *status,
                                unsigned long long *id, cudaGraph_t *graph,
                                const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                size_t *ndeps) {
  static const cudaGraphEdgeData no_edge_data[1];
  struct CUstream_st *s;
  if (edges && !deps)
    return cudaErrorInvalidValue;
  cudaError_t e = stream_is_capturing(h, status);
  if (e != cudaSuccess || *status != cudaStreamCaptureStatusActive)
    return e;
  (void)stream_get(h, &s); /* resolved already by stream_is_capturing */
  if (id)
    *id = s->cap->id;
  if (graph)
    *graph = s->cap->graph;
  if (deps)
    *deps = (const cudaGraphNode_t *)&s->cap_last;
  if (edges)
    *edges = no_edge_data;
  if (ndeps)
    *ndeps = s->cap_last ? 1 : 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
                                               enum cudaStreamCaptureStatus *captureStatus_out,
                                               unsigned long long *id_out, cudaGraph_t *graph_out,
                                               const cudaGraphNode_t **dependencies_out,
                                               const cudaGraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out) {
  SIM_CALL(capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out));
}

static cudaError_t exchange_capture_mode(enum cudaStreamCaptureMode *mode) {
  if (!mode || !valid_capture_mode(*mode))
    return cudaErrorInvalidValue;
  enum cudaStreamCaptureMode old = t.mode;
  t.mode = *mode;
  *mode = old;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  SIM_CALL(exchange_capture_mode(mode));
}

/* ---- graphs ---------------------------------------------------------------------------------- */

static cudaError_t graph_create(cudaGraph_t *out, unsigned flags) {
  if (!out || flags != 0)
    return cudaErrorInvalidValue;
  struct CUgraph_st *gr = graph_new();
  if (!gr)
    return cudaErrorMemoryAllocation;
  *out = gr;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
  SIM_CALL(graph_create(pGraph, flags));
}

static cudaError_t graph_destroy(cudaGraph_t gr) {
  if (!graph_known(gr) || gr->capture) /* a graph being captured into is the capture's */
    return cudaErrorInvalidValue;
  graph_free(gr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) { SIM_CALL(graph_destroy(graph)); }

static cudaError_t graph_get_nodes(cudaGraph_t gr, cudaGraphNode_t *nodes, size_t *n) {
  if (!graph_known(gr) || !n)
    return cudaErrorInvalidValue;
  if (nodes) {
    for (size_t i = 0; i < *n; i++)
      nodes[i] = i < gr->n ? gr->nodes[i] : NULL;
    if (*n > gr->n)
      *n = gr->n;
  } else {
    *n = gr->n;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes,
                                        size_t *numNodes) {
  SIM_CALL(graph_get_nodes(graph, nodes, numNodes));
}

static int node_known(cudaGraphNode_t nd) {
  for (struct CUgraph_st *gr = g.graphs; gr; gr = gr->next)
    for (size_t i = 0; i < gr->n; i++)
      if (gr->nodes[i] == nd)
        return 1;
  return 0;
}

static cudaError_t node_get_type(cudaGraphNode_t nd, enum cudaGraphNodeType *type) {
  static const enum cudaGraphNodeType types[] = {
      [SIM_NODE_MEMSET] = cudaGraphNodeTypeMemset,  [SIM_NODE_MEMCPY] = cudaGraphNodeTypeMemcpy,
      [SIM_NODE_ALLOC] = cudaGraphNodeTypeMemAlloc, [SIM_NODE_FREE] = cudaGraphNodeTypeMemFree,
      [SIM_NODE_EVENT] = cudaGraphNodeTypeEventRecord, [SIM_NODE_WAIT] = cudaGraphNodeTypeWaitEvent,
  };
  if (!type || !node_known(nd))
    return cudaErrorInvalidValue;
  *type = types[nd->kind];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType) {
  SIM_CALL(node_get_type(node, pType));
}

static int exec_known(cudaGraphExec_t x) {
  for (struct CUgraphExec_st *p = g.execs; p; p = p->next)
    if (p == x)
      return 1;
  return 0;
}

static int valid_instantiate_flags(unsigned long long flags) {
  unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch |
                             cudaGraphInstantiateFlagUpload | cudaGraphInstantiateFlagDeviceLaunch |
                             cudaGraphInstantiateFlagUseNodePriority;
  unsigned long long both = cudaGraphInstantiateFlagAutoFreeOnLaunch |
                            cudaGraphInstantiateFlagDeviceLaunch;
  return !(flags & ~known) && (flags & both) != both;
}

/* A graph with memory nodes may have one executable graph at a time; the copies of its nodes
 * hold their graph allocations' addresses. */
static cudaError_t instantiate(cudaGraphExec_t *out, cudaGraph_t gr, unsigned long long flags) {
  if (!out || !graph_known(gr) || !valid_instantiate_flags(flags))
    return cudaErrorInvalidValue;
  int mem = graph_has_mem_nodes(gr);
  if (mem && (gr->execs > 0 || (flags & cudaGraphInstantiateFlagDeviceLaunch)))
    return cudaErrorInvalidValue;
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  struct CUgraphNode_st *nodes = x && gr->n ? calloc(gr->n, sizeof *nodes) : NULL;
  if (!x || (gr->n && !nodes)) {
    free(x);
    return cudaErrorMemoryAllocation;
  }
  for (size_t i = 0; i < gr->n; i++) {
    nodes[i] = *gr->nodes[i];
    if (nodes[i].ga)
      nodes[i].ga->refs++;
  }
  x->nodes = nodes;
  x->n = gr->n;
  x->flags = flags;
  x->graph = gr;
  gr->execs++;
  x->next = g.execs;
  g.execs = x;
  *out = x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  SIM_CALL(instantiate(pGraphExec, graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                    cudaGraph_t graph, unsigned long long flags) {
  SIM_CALL(instantiate(pGraphExec, graph, flags));
}

/* Live graph allocations survive their executable graph (and graph): they must be freed. */
static cudaError_t exec_destroy(cudaGraphExec_t x) {
  if (!exec_known(x))
    return cudaErrorInvalidValue;
  for (size_t i = 0; i < x->n; i++)
    node_release(&x->nodes[i]);
  free(x->nodes);
  x->nodes = NULL;
  x->n = 0;
  if (x->graph)
    x->graph->execs--;
  x->graph = NULL;
  for (struct CUgraphExec_st **link = &g.execs; *link; link = &(*link)->next)
    if (*link == x) {
      *link = x->next;
      break;
    }
  x->next = graveyard.execs;
  graveyard.execs = x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  SIM_CALL(exec_destroy(graphExec));
}

/* What a launch checks before it runs anything: no allocation of the graph may still be live
 * (unless auto-free), and its allocations must fit each device at their peak. */
static cudaError_t launch_check(const struct CUgraphExec_st *x) {
  int autofree = (x->flags & cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0;
  for (size_t i = 0; i < x->n; i++)
    if (x->nodes[i].kind == SIM_NODE_ALLOC && x->nodes[i].ga->live && !autofree)
      return cudaErrorInvalidValue;
  for (int d = 0; d < g.ndev; d++) {
    size_t cur = g.dev[d].reserved;
    for (size_t i = 0; i < x->n; i++) {
      const struct CUgraphNode_st *nd = &x->nodes[i];
      if (!nd->ga || nd->ga->device != d)
        continue;
      if (nd->kind == SIM_NODE_ALLOC && nd->ga->live) /* auto-freed first */
        cur -= nd->ga->charged;
      if (nd->kind == SIM_NODE_FREE)
        cur -= nd->ga->charged < cur ? nd->ga->charged : cur;
      else if (g.dev[d].capacity < cur || nd->ga->charged > g.dev[d].capacity - cur)
        return cudaErrorMemoryAllocation;
      else
        cur += nd->ga->charged;
    }
  }
  return cudaSuccess;
}

static cudaError_t node_run(const struct CUgraphNode_st *nd, struct CUstream_st *s) {
  switch (nd->kind) {
  case SIM_NODE_MEMSET: return do_memset(nd->dst, nd->value, nd->n);
  case SIM_NODE_MEMCPY: return do_memcpy(nd->dst, nd->src, nd->n, nd->dir);
  case SIM_NODE_ALLOC:
    if (nd->ga->live)
      galloc_free(nd->ga); /* cudaGraphInstantiateFlagAutoFreeOnLaunch */
    galloc_live(nd->ga);
    return cudaSuccess;
  case SIM_NODE_FREE:
    if (!nd->ga->live)
      return cudaErrorInvalidValue;
    galloc_free(nd->ga);
    return cudaSuccess;
  case SIM_NODE_EVENT:
    if (event_known(nd->ev))
      event_set(nd->ev, s);
    return cudaSuccess;
  case SIM_NODE_WAIT: return cudaSuccess;
  }
  return cudaErrorUnknown;
}

/* Runs the nodes in capture order, each one operation of s. */
static cudaError_t graph_launch(cudaGraphExec_t x, cudaStream_t h) {
  struct CUstream_st *s;
  if (!exec_known(x))
    return cudaErrorInvalidValue;
  cudaError_t e = stream_get(h, &s);
  if (e == cudaSuccess)
    e = stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (s->cap)
    return cudaErrorStreamCaptureUnsupported; /* cudasim captures no child graphs */
  e = launch_check(x);
  for (size_t i = 0; e == cudaSuccess && i < x->n; i++) {
    e = node_run(&x->nodes[i], s);
    if (x->nodes[i].kind != SIM_NODE_EVENT)
      enqueue(s);
  }
  return e;
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  SIM_CALL(graph_launch(graphExec, stream));
}

/* ---- driver entry points ----------------------------------------------------------------------
 * The one driver function spool asks for, cuStreamIsCapturing, simulated over the same state. */

/* A runtime error as the driver would return it: the same number where the driver has that code
 * (all codes the two APIs share have the same values), else CUDA_ERROR_UNKNOWN. */
static CUresult cu_result(cudaError_t e) {
  int v = (int)e;
  if (e == cudaErrorInsufficientDriver)
    return CUDA_ERROR_NOT_INITIALIZED;
  if ((v >= 0 && v <= 8) || v == 34 || v == 36 || v == 46 || (v >= 100 && v <= 102) ||
      (v >= 200 && v <= 202) || (v >= 205 && v <= 226) || (v >= 300 && v <= 304) ||
      (v >= 400 && v <= 402) || v == 500 || v == 600 || (v >= 700 && v <= 705) ||
      (v >= 708 && v <= 721) || (v >= 800 && v <= 812) || (v >= 900 && v <= 916))
    return (CUresult)v;
  return CUDA_ERROR_UNKNOWN;
}

/* ptsz: the per-thread-default-stream variant, where handle 0 is the per-thread stream. The
 * driver API leaves the runtime's last error alone. */
static CUresult cu_is_capturing(CUstream h, CUstreamCaptureStatus *status, int ptsz) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = sim_enter("cuStreamIsCapturing", 1);
  if (e == cudaSuccess && !status)
    e = cudaErrorInvalidValue;
  /* The special handles name a stream of the current context: on a thread where no runtime
   * call has made one current, the driver fails (as an H200 showed for cudaStreamPerThread). A
   * created stream carries its own context. */
  int special = h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
  if (e == cudaSuccess && special && !t.context)
    e = cudaErrorDeviceUninitialized; /* 201: CUDA_ERROR_INVALID_CONTEXT */
  if (e == cudaSuccess)
    e = stream_is_capturing(h == NULL && ptsz ? cudaStreamPerThread : h, &st);
  if (e == cudaSuccess)
    *status = (CUstreamCaptureStatus)st;
  unlock();
  return cu_result(e);
}

static CUresult CUDAAPI sim_cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status) {
  return cu_is_capturing(h, status, 0);
}

static CUresult CUDAAPI sim_cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *status) {
  return cu_is_capturing(h, status, 1);
}

/* The compiler checks the simulated functions against the driver's own typedefs. */
static const PFN_cuStreamIsCapturing_v10000 sim_is_capturing_fn = sim_cuStreamIsCapturing;
static const PFN_cuStreamIsCapturing_v10000_ptsz sim_is_capturing_ptsz_fn =
    sim_cuStreamIsCapturing_ptsz;

/* Not found is a success with a NULL function and a status that says so, as documented.
 * version_checked: cudaGetDriverEntryPointByVersion refuses a version above the driver's. */
static cudaError_t entry_point(const char *symbol, void **fn, unsigned version,
                               int version_checked, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status) {
  unsigned long long known = cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream;
  if (!symbol || !fn || (flags & ~known))
    return cudaErrorInvalidValue;
  if (version_checked && version > (unsigned)g.driver)
    return cudaErrorInvalidValue;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  *fn = NULL;
  if (strcmp(symbol, "cuStreamIsCapturing") == 0) {
    found = version < 10000 ? cudaDriverEntryPointVersionNotSufficent : cudaDriverEntryPointSuccess;
    if (found == cudaDriverEntryPointSuccess && (flags & cudaEnablePerThreadDefaultStream))
      memcpy(fn, &sim_is_capturing_ptsz_fn, sizeof *fn); /* no function-to-void* cast in C */
    else if (found == cudaDriverEntryPointSuccess)
      memcpy(fn, &sim_is_capturing_fn, sizeof *fn);
  }
  if (status)
    *status = found;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  SIM_CALL(entry_point(symbol, funcPtr, cudaVersion, 1, flags, driverStatus));
}

/* Deprecated since CUDA 12.5: the version asked for is the runtime's own. */
cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *driverStatus) {
  SIM_CALL(entry_point(symbol, funcPtr, CUDART_VERSION, 0, flags, driverStatus));
}

/* ---- control API ----------------------------------------------------------------------------- */

/* Everything about captures and graphs goes; graph and exec handles to the graveyard. */
static void reset_graphs(void) {
  while (g.captures) {
    sim_capture *c = g.captures;
    g.captures = c->next;
    c->graph->capture = NULL;
    free(c);
  }
  while (g.execs)
    (void)exec_destroy(g.execs);
  while (g.graphs)
    graph_free(g.graphs);
  while (g.gallocs) { /* the live ones nobody freed */
    sim_galloc *ga = g.gallocs;
    g.gallocs = ga->next;
    munmap(ga->base, ga->charged);
    free(ga);
  }
}

void cudasim_reset(void) {
  lock();
  reset_graphs();
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
    s->cap = NULL;
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
    if (!stream_blocked(st))
      st->completed = st->ticket;
    progress();
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

cudaStream_t cudasim_stream_create_at(cudaStream_t reuse, unsigned flags) {
  struct CUstream_st *s = NULL;
  lock();
  int ok = g.driver != 0 && g.ndev > 0 && valid_dev(t.device) && reuse &&
           !(flags & ~(unsigned)cudaStreamNonBlocking);
  for (struct CUstream_st **link = &graveyard.streams; ok && *link; link = &(*link)->next)
    if (*link == reuse) {
      s = reuse;
      *link = s->next;
      break;
    }
  if (s) {
    memset(s, 0, sizeof *s);
    s->device = t.device;
    s->flags = flags;
    s->kind = SIM_USER;
    s->id = ++last_stream_id; /* the address comes back, the id never does */
    s->next = g.streams;
    g.streams = s;
  }
  unlock();
  return s;
}

int cudasim_capturing(cudaStream_t s) {
  lock();
  struct CUstream_st *st = control_stream(s);
  int status = st ? (int)capture_status(st) : -1;
  unlock();
  return status;
}

long cudasim_graph_allocations(void) {
  long n = 0;
  lock();
  for (sim_galloc *ga = g.gallocs; ga; ga = ga->next)
    n += ga->live;
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

/* cudaStreamGetDevice: with the stream functions above. */

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

static int sim6_unmapped_here(const void *ptr, size_t n) {
  int device = -1;
  struct CUmemPoolHandle_st *p = sim6_owner(ptr, n, &device);
  return p && device != t.device && p->access[t.device] == cudaMemAccessFlagsProtNone;
}

cudaError_t cudasim_kernel(cudaStream_t s, const void *ptr, size_t bytes, int write) {
  lock();
  cudaError_t e = g.driver == 0 || g.ndev == 0 ? cudaErrorNoDevice : sim6_kernel(s, ptr, bytes,
                                                                                 write);
  unlock();
  return e;
}
