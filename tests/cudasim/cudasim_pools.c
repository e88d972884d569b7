/* cudasim: pools.
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

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
  cudasim__g.dev[p->device].reserved -= sg->size;
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
    return; /* IPC pools never give memory back (CUDA programming guide) */
  for (sim_segment **link = &p->segs; *link;) {
    sim_segment *sg = *link;
    int fits = trim ? p->reserved - sg->size >= limit : p->reserved > limit;
    if (fits && seg_idle(sg))
      seg_release(p, link);
    else
      link = &sg->next;
  }
}

void cudasim__pool_unlink_free(struct CUmemPoolHandle_st *p) {
  while (p->segs)
    seg_release(p, &p->segs);
  for (struct CUmemPoolHandle_st **link = &cudasim__g.pools; *link; link = &(*link)->next)
    if (*link == p) {
      *link = p->next;
      break;
    }
  p->next = cudasim__graveyard.pools;
  cudasim__graveyard.pools = p;
}

/* A destroyed pool goes once nothing in it is live or pending. Returns 1 when it went. */
int cudasim__pool_reap(struct CUmemPoolHandle_st *p) {
  if (!p->destroyed)
    return 0;
  for (sim_segment *sg = p->segs; sg; sg = sg->next)
    if (!seg_idle(sg))
      return 0;
  cudasim__pool_unlink_free(p);
  return 1;
}

void cudasim__reap_all(void) {
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools, *n; p; p = n) {
    n = p->next;
    cudasim__pool_reap(p);
  }
}

/* What the runtime does at a synchronize: pools of device d shrink to their threshold. */
void cudasim__device_release(int d) {
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools, *n; p; p = n) {
    n = p->next;
    if (p->device != d || cudasim__pool_reap(p))
      continue;
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      seg_coalesce(sg);
    pool_shrink(p, p->threshold, 0);
  }
}

void cudasim__device_complete(int d) {
  for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next)
    if (s->device == d)
      cudasim__stream_force(s);
  cudasim__progress();
}

int cudasim__pool_known(cudaMemPool_t h) {
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
    if (p == h)
      return !p->destroyed;
  return 0;
}

struct CUmemPoolHandle_st *cudasim__pool_new(int dev, int is_default) {
  struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->device = dev;
  p->is_default = is_default;
  p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
  for (int i = 0; i < SIM_MAX_DEV; i++)
    p->access[i] = cudaMemAccessFlagsProtNone;
  p->next = cudasim__g.pools;
  cudasim__g.pools = p;
  return p;
}

static cudaError_t default_pool(int d, struct CUmemPoolHandle_st **out) {
  if (!cudasim__g.dev[d].pools_supported)
    return cudaErrorNotSupported;
  if (!cudasim__g.dev[d].default_pool)
    cudasim__g.dev[d].default_pool = cudasim__pool_new(d, 1);
  if (!cudasim__g.dev[d].default_pool)
    return cudaErrorMemoryAllocation;
  *out = cudasim__g.dev[d].default_pool;
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
  if (need > SIZE_MAX - cudasim__g.pool_segment)
    return cudaErrorMemoryAllocation;
  size_t size = cudasim__round_up(need, cudasim__g.pool_segment);
  sim_device *dv = &cudasim__g.dev[p->device];
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
  if (mem == MAP_FAILED) { /* shared, so that an import can map the pages again */
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
  size_t need = cudasim__round_up(size, SIM_ALIGN);
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
  cudasim__g.live++;
  cudasim__enqueue(s);
  *out = sg->base + b->off;
  return cudaSuccess;
}

/* The live block that starts at ptr, in any pool (destroyed ones too). */
sim_block *cudasim__block_at(const void *ptr, struct CUmemPoolHandle_st **pool) {
  uintptr_t a = (uintptr_t)ptr;
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
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
  sim_block *b = ptr ? cudasim__block_at(ptr, &p) : NULL;
  if (!b)
    return cudaErrorInvalidValue;
  b->live = 0;
  b->free_stream = s;
  b->free_ticket = cudasim__enqueue(s);
  p->used -= b->size;
  cudasim__g.live--;
  cudasim__pool_reap(p);
  return cudaSuccess;
}

/* ---- pools ----------------------------------------------------------------------------------- */

static cudaError_t get_default_pool(cudaMemPool_t *out, int device) {
  struct CUmemPoolHandle_st *p;
  if (!out)
    return cudaErrorInvalidValue;
  if (!cudasim__valid_dev(device))
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
  if (!cudasim__g.dev[d].pools_supported)
    return cudaErrorNotSupported;
  if (cudasim__g.dev[d].current_pool) {
    *out = cudasim__g.dev[d].current_pool;
    return cudaSuccess;
  }
  return default_pool(d, out);
}

static cudaError_t get_mem_pool(cudaMemPool_t *out, int device) {
  struct CUmemPoolHandle_st *p;
  if (!out)
    return cudaErrorInvalidValue;
  if (!cudasim__valid_dev(device))
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
  if (!cudasim__valid_dev(device))
    return cudaErrorInvalidDevice;
  if (!cudasim__g.dev[device].pools_supported)
    return cudaErrorNotSupported;
  if (!cudasim__pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (p->device != device)
    return cudaErrorInvalidValue;
  cudasim__g.dev[device].current_pool = p->is_default ? NULL : p;
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
  if (!cudasim__valid_dev(d))
    return cudaErrorInvalidDevice;
  if (props->handleTypes != cudaMemHandleTypeNone &&
      props->handleTypes != cudaMemHandleTypePosixFileDescriptor)
    return cudaErrorNotSupported;
  if (!cudasim__g.dev[d].pools_supported)
    return cudaErrorNotSupported;
  if ((int)props->handleTypes & ~cudasim__sim6_handle_types(d))
    return cudaErrorNotSupported; /* the device cannot share pools */
  struct CUmemPoolHandle_st *p = cudasim__pool_new(d, 0);
  if (!p)
    return cudaErrorMemoryAllocation;
#if CUDART_VERSION >= 12020
  p->max_size = props->maxSize;
#endif
  /* its segments are mapped shared, so that an import can map them again */
  p->shareable = props->handleTypes == cudaMemHandleTypePosixFileDescriptor;
  *out = p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool,
                                        const struct cudaMemPoolProps *poolProps) {
  SIM_UNSAFE_CALL(pool_create(memPool, poolProps));
}

static cudaError_t pool_destroy(cudaMemPool_t p) {
  if (!cudasim__pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (p->is_default)
    return cudaErrorInvalidValue;
  if (cudasim__g.dev[p->device].current_pool == p)
    cudasim__g.dev[p->device].current_pool = NULL; /* the default pool becomes current again */
  p->destroyed = 1;
  cudasim__pool_reap(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  SIM_UNSAFE_CALL(pool_destroy(memPool));
}

static cudaError_t pool_set_attr(cudaMemPool_t p, enum cudaMemPoolAttr attr, const void *v) {
  if (!cudasim__pool_known(p))
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
  if (!cudasim__pool_known(p))
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
  if (!cudasim__valid_dev(dev) || dev == p->device || cudasim__g.no_peer[dev][p->device])
    return cudaErrorInvalidDevice;
  return cudaSuccess;
}

/* All descriptors are checked before any is applied: a failure changes nothing. */
static cudaError_t pool_set_access(cudaMemPool_t p, const struct cudaMemAccessDesc *list,
                                   size_t n) {
  if (!cudasim__pool_known(p))
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
  if (!cudasim__pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (!flags || !loc || loc->type != cudaMemLocationTypeDevice)
    return cudaErrorInvalidValue;
  if (!cudasim__valid_dev(loc->id))
    return cudaErrorInvalidDevice;
  *flags = loc->id == p->device ? cudaMemAccessFlagsProtReadWrite : p->access[loc->id];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                           struct cudaMemLocation *location) {
  SIM_UNSAFE_CALL(pool_get_access(flags, memPool, location));
}

static cudaError_t pool_trim(cudaMemPool_t p, size_t keep) {
  if (!cudasim__pool_known(p))
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
  if (!cudasim__pool_known(p))
    return cudaErrorInvalidResourceHandle;
  if (p->imported_from)
    return cudaErrorInvalidValue; /* imported pools cannot allocate */
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e != cudaSuccess)
    return e;
  return s->cap ? cudasim__capture_alloc(s, p->device, size, ptr) : pool_alloc(p, s, size, ptr);
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
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e == cudaSuccess)
    e = current_pool(s->device, &p);
  if (e != cudaSuccess)
    return e;
  return s->cap ? cudasim__capture_alloc(s, p->device, size, ptr) : pool_alloc(p, s, size, ptr);
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  SIM_CALL(malloc_async(devPtr, size, hStream));
}

static cudaError_t free_async(void *ptr, cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (s->cap)
    return cudasim__capture_free(s, ptr);
  sim_galloc *ga = ptr ? cudasim__galloc_at(ptr) : NULL;
  if (!ga) {
    if (cudasim__sim6_import_free(ptr, s))
      return cudaSuccess; /* an imported buffer */
    return pool_free(ptr, s);
  }
  if (!ga->live)
    return cudaErrorInvalidValue;
  cudasim__enqueue(s);
  cudasim__galloc_free(ga); /* at once: cudasim's simplification */
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  SIM_CALL(free_async(devPtr, hStream));
}

