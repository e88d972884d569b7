/* cudasim_internal.h: what the files of cudasim share: the simulated objects, the state, the
 * helpers (prefixed cudasim__) and the macros that begin every runtime function. Private to
 * cudasim: its users include cudasim.h. The model is described at the top of cudasim.c. */
#ifndef CUDASIM_INTERNAL_H
#define CUDASIM_INTERNAL_H

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
#include <sys/stat.h> /* fstat of pool descriptors */
#include <unistd.h>   /* close of pool descriptors */

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
  int shareable;  /* created with POSIX fd handles: segments are MAP_SHARED */
  struct CUmemPoolHandle_st *imported_from; /* an imported pool's exporter, else NULL */
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
extern pthread_mutex_t cudasim__g_lock;

/* Dead streams, events and pools are kept here, never freed, even across resets: their addresses
 * are never handed out again, so a stale handle can never alias a live object. Reachable, so leak
 * checkers stay quiet; a few dozen bytes each. Guarded by cudasim__g_lock. */
struct sim_graveyard {
  struct CUstream_st *streams;
  struct CUevent_st *events;
  struct CUmemPoolHandle_st *pools;
  struct CUgraph_st *graphs;    /* their nodes are freed, the handles kept */
  struct CUgraphExec_st *execs; /* likewise */
};
extern struct sim_graveyard cudasim__graveyard;

/* Stream and capture ids: unique for the life of the process, as CUDA's are. Guarded by
 * cudasim__g_lock. */
extern unsigned long long cudasim__last_stream_id, cudasim__last_capture_id;

struct sim_state {
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
  size_t pool_segment; /* cudasim_set_pool_segment */
};
extern struct sim_state cudasim__g;

struct sim_thread {
  unsigned long gen; /* stale when != g.gen */
  int device;
  cudaError_t last;
  struct CUstream_st *ptds[SIM_MAX_DEV];
  enum cudaStreamCaptureMode mode; /* cudaThreadExchangeStreamCaptureMode; 0 is global */
  int context; /* a runtime call made the device's context current on this thread */
};
extern _Thread_local struct sim_thread cudasim__t;

/* ---- cudasim.c ------------------------------------------------------------------------------- */
void cudasim__sim_defaults(void);
void cudasim__tls_sync(void);
void cudasim__lock(void);
void cudasim__unlock(void);
long cudasim__calls_of(const char *api);
cudaError_t cudasim__sim_enter(const char *api, int needs_device);
cudaError_t cudasim__sim_leave(cudaError_t e);
int cudasim__valid_dev(int d);
cudaError_t cudasim__cur_dev(int *d);
size_t cudasim__round_up(size_t n, size_t to);

/* ---- cudasim_streams.c ----------------------------------------------------------------------- */
cudaError_t cudasim__stream_get(cudaStream_t h, struct CUstream_st **out);
int cudasim__stream_blocked(struct CUstream_st *s);
void cudasim__progress(void);
void cudasim__stream_force(struct CUstream_st *s);
uint64_t cudasim__enqueue(struct CUstream_st *s);
int cudasim__event_known(cudaEvent_t ev);
enum cudaStreamCaptureStatus cudasim__capture_status(const struct CUstream_st *s);
cudaError_t cudasim__stream_is_capturing(cudaStream_t h, enum cudaStreamCaptureStatus *status);
/* cudaEventRecordWithFlags and cudaEventQuery without the call's bookkeeping (the driver's
 * entry points share them). Under the lock. */
cudaError_t cudasim__event_record(cudaEvent_t ev, cudaStream_t h, unsigned flags);
cudaError_t cudasim__event_query(cudaEvent_t ev);
void cudasim__event_set(struct CUevent_st *ev, struct CUstream_st *s);

/* ---- cudasim_capture.c ----------------------------------------------------------------------- */
void cudasim__capture_invalidate(sim_capture *c);
cudaError_t cudasim__legacy_implicit(int d, int invalidate);
cudaError_t cudasim__capture_unsafe(void);
cudaError_t cudasim__capture_on_device(int d);
cudaError_t cudasim__stream_use(struct CUstream_st *s);
cudaError_t cudasim__stream_wait_check(struct CUstream_st *s);
cudaError_t cudasim__event_capture_check(struct CUevent_st *ev);
cudaError_t cudasim__capture_refuse(struct CUstream_st *s, cudaError_t e);
struct CUgraphNode_st *cudasim__capture_node(struct CUstream_st *s, enum sim_node_kind kind);
cudaError_t cudasim__capture_memset(struct CUstream_st *s, void *ptr, int value, size_t n);
cudaError_t cudasim__capture_memcpy(struct CUstream_st *s, void *dst, const void *src, size_t n,
                                    enum cudaMemcpyKind kind);
cudaError_t cudasim__capture_alloc(struct CUstream_st *s, int device, size_t size, void **out);
cudaError_t cudasim__capture_free(struct CUstream_st *s, void *ptr);
cudaError_t cudasim__capture_record(struct CUstream_st *s, struct CUevent_st *ev, unsigned flags);
cudaError_t cudasim__capture_wait(struct CUstream_st *s, struct CUevent_st *ev);

/* ---- cudasim_pools.c ------------------------------------------------------------------------- */
void cudasim__pool_unlink_free(struct CUmemPoolHandle_st *p);
int cudasim__pool_reap(struct CUmemPoolHandle_st *p);
void cudasim__reap_all(void);
void cudasim__device_release(int d);
void cudasim__device_complete(int d);
int cudasim__pool_known(cudaMemPool_t h);
struct CUmemPoolHandle_st *cudasim__pool_new(int dev, int is_default);
sim_block *cudasim__block_at(const void *ptr, struct CUmemPoolHandle_st **pool);

/* ---- cudasim_graphs.c ------------------------------------------------------------------------ */
sim_galloc *cudasim__galloc_at(const void *ptr);
int cudasim__galloc_range(const void *ptr, size_t n, int live_only);
sim_galloc *cudasim__galloc_new(int device, size_t size);
void cudasim__galloc_reap(sim_galloc *ga);
void cudasim__galloc_free(sim_galloc *ga);
struct CUgraph_st *cudasim__graph_new(void);
struct CUgraphNode_st *cudasim__graph_add(struct CUgraph_st *gr, enum sim_node_kind kind);
void cudasim__graph_free(struct CUgraph_st *gr);
cudaError_t cudasim__exec_destroy(cudaGraphExec_t x);

/* ---- cudasim_devices.c ----------------------------------------------------------------------- */
int cudasim__capture_range(const void *ptr, size_t n);
cudaError_t cudasim__do_memset(void *ptr, int value, size_t n);
cudaError_t cudasim__memcpy_check(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                  int (*in_range)(const void *, size_t));
cudaError_t cudasim__do_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);

/* ---- cudasim_ipc.c --------------------------------------------------------------------------- */
void cudasim__sim6_reset(void);
int cudasim__sim6_handle_types(int d);
int cudasim__sim6_import_range(const void *ptr, size_t n, int whole);
int cudasim__sim6_import_free(const void *ptr, struct CUstream_st *s);
/* Pool memory of another device that the current device has no access to. */
int cudasim__sim6_unmapped_here(const void *ptr, size_t n);

/* ---- the body of a runtime function ---------------------------------------------------------- */
/* The body of a runtime function that checks the device: counts it under its own name, runs
 * expr (with the lock held) unless the entry checks failed. */
#define SIM_CALL(expr)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = cudasim__sim_enter(__func__, 1);                                             \
    if (e_ == cudaSuccess)                                                                        \
      e_ = (expr);                                                                                \
    return cudasim__sim_leave(e_);                                                                \
  } while (0)

/* SIM_CALL for the calls that stream capture deems "potentially unsafe" (see capture_unsafe). */
#define SIM_UNSAFE_CALL(expr)                                                                     \
  do {                                                                                            \
    cudaError_t e_ = cudasim__sim_enter(__func__, 1);                                             \
    if (e_ == cudaSuccess)                                                                        \
      e_ = cudasim__capture_unsafe();                                                             \
    if (e_ == cudaSuccess)                                                                        \
      e_ = (expr);                                                                                \
    return cudasim__sim_leave(e_);                                                                \
  } while (0)

#endif
