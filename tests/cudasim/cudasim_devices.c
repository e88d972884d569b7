/* cudasim: device pointers, versions and devices, cudaMalloc, memset, memcpy.
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

/* ---- device pointers (for memset / memcpy) --------------------------------------------------- */

/* 1 when [ptr, ptr + n) lies in one live pool block or cudaMalloc region. */
static int dev_range(const void *ptr, size_t n) {
  uintptr_t a = (uintptr_t)ptr;
  if (cudasim__sim6_import_range(ptr, n, 1))
    return 1; /* an imported buffer */
  for (sim_region *r = cudasim__g.regions; r; r = r->next) {
    uintptr_t base = (uintptr_t)r->base;
    if (a >= base && a - base <= r->size && n <= r->size - (a - base))
      return 1;
  }
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      for (sim_block *b = sg->blocks; b; b = b->next) {
        uintptr_t base = (uintptr_t)sg->base + b->off;
        if (b->live && a >= base && a - base <= b->size && n <= b->size - (a - base))
          return 1;
      }
  return cudasim__galloc_range(ptr, n, 1);
}

/* What a captured memset or memcpy may name: live memory, or a graph allocation (whose memory
 * is live only when the graph runs). */
int cudasim__capture_range(const void *ptr, size_t n) {
  return dev_range(ptr, n) || cudasim__galloc_range(ptr, n, 0);
}

/* 1 when ptr points into simulated device memory at all (live or not): cudaMemcpyDefault. */
static int dev_pointer(const void *ptr) {
  uintptr_t a = (uintptr_t)ptr;
  if (cudasim__sim6_import_range(ptr, 1, 0))
    return 1; /* into an imported buffer */
  for (sim_region *r = cudasim__g.regions; r; r = r->next)
    if (a >= (uintptr_t)r->base && a - (uintptr_t)r->base < r->size)
      return 1;
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
    for (sim_segment *sg = p->segs; sg; sg = sg->next)
      if (a >= (uintptr_t)sg->base && a - (uintptr_t)sg->base < sg->size)
        return 1;
  for (sim_galloc *ga = cudasim__g.gallocs; ga; ga = ga->next)
    if (a >= (uintptr_t)ga->base && a - (uintptr_t)ga->base < ga->size)
      return 1;
  return 0;
}

cudaError_t cudasim__do_memset(void *ptr, int value, size_t n) {
  if (n == 0)
    return cudaSuccess;
  if (!dev_range(ptr, n))
    return cudaErrorInvalidValue;
  memset(ptr, value, n);
  return cudaSuccess;
}

/* Checks a copy; in_range says which device memory it may touch. A copy of pool memory with a
 * current device the pool gives no access fails with cudaErrorInvalidValue, whatever the stream,
 * as the H200 showed: pool memory is mapped only where the pool grants access. */
cudaError_t cudasim__memcpy_check(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
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
  if ((dst_dev && cudasim__sim6_unmapped_here(dst, n)) ||
      (src_dev && cudasim__sim6_unmapped_here(src, n)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t cudasim__do_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = cudasim__memcpy_check(dst, src, n, kind, dev_range);
  if (e == cudaSuccess && n > 0)
    memmove(dst, src, n);
  return e;
}

/* ---- versions and devices -------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion) {
  cudaError_t e = cudasim__sim_enter(__func__, 0);
  if (e == cudaSuccess && !driverVersion)
    e = cudaErrorInvalidValue;
  if (e == cudaSuccess)
    *driverVersion = cudasim__g.driver;
  return cudasim__sim_leave(e);
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion) {
  cudaError_t e = cudasim__sim_enter(__func__, 0);
  if (e == cudaSuccess && !runtimeVersion)
    e = cudaErrorInvalidValue;
  if (e == cudaSuccess)
    *runtimeVersion = CUDART_VERSION;
  return cudasim__sim_leave(e);
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count) {
  cudaError_t e = cudasim__sim_enter(__func__, 1);
  if (e == cudaErrorNoDevice && count)
    *count = 0; /* as the real runtime does */
  if (e == cudaSuccess && !count)
    e = cudaErrorInvalidValue;
  if (e == cudaSuccess)
    *count = cudasim__g.ndev;
  return cudasim__sim_leave(e);
}

static cudaError_t get_device(int *device) {
  if (!device)
    return cudaErrorInvalidValue;
  *device = cudasim__t.device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int *device) { SIM_CALL(get_device(device)); }

static cudaError_t set_device(int device) {
  if (!cudasim__valid_dev(device))
    return cudaErrorInvalidDevice;
  cudasim__t.device = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) { SIM_CALL(set_device(device)); }

static int attribute_of(enum cudaDeviceAttr attr, int d) {
  switch (attr) {
  case cudaDevAttrMemoryPoolsSupported: return cudasim__g.dev[d].pools_supported;
  case cudaDevAttrMemoryPoolSupportedHandleTypes:
    return cudasim__sim6_handle_types(d); /* posix_fd unless IPC is switched off */
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
  if (!cudasim__valid_dev(device))
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
  if (!cudasim__valid_dev(device))
    return cudaErrorInvalidDevice;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "cudasim device %d", device);
  prop->totalGlobalMem = cudasim__g.dev[device].capacity;
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
  if (!cudasim__valid_dev(device) || !cudasim__valid_dev(peer))
    return cudaErrorInvalidDevice;
  *can = device != peer && !cudasim__g.no_peer[device][peer];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  SIM_CALL(can_access_peer(canAccessPeer, device, peerDevice));
}

static cudaError_t device_synchronize(void) {
  int d;
  cudaError_t e = cudasim__cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  cudaError_t busy =
      cudasim__capture_on_device(d); /* both checks run: each invalidates what it hits */
  e = cudasim__capture_unsafe();
  if (busy != cudaSuccess || e != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  cudasim__device_complete(d);
  cudasim__device_release(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { SIM_CALL(device_synchronize()); }

static cudaError_t mem_get_info(size_t *free_bytes, size_t *total) {
  int d;
  if (!free_bytes || !total)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  sim_device *dv = &cudasim__g.dev[d];
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

/* ---- cudaMalloc, memset, memcpy -------------------------------------------------------------- */

static cudaError_t plain_malloc(void **ptr, size_t size) {
  int d;
  if (!ptr)
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__cur_dev(&d);
  if (e != cudaSuccess)
    return e;
  if (size == 0) { /* as the real cudaMalloc */
    *ptr = NULL;
    return cudaSuccess;
  }
  sim_device *dv = &cudasim__g.dev[d];
  if (size > SIZE_MAX - CUDASIM_GRANULARITY)
    return cudaErrorMemoryAllocation;
  size_t charged = cudasim__round_up(size, CUDASIM_GRANULARITY);
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
  r->next = cudasim__g.regions;
  cudasim__g.regions = r;
  dv->reserved += charged;
  cudasim__g.live++;
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
  if (cudasim__sim6_import_free(ptr, NULL))
    return cudaSuccess; /* an imported buffer */
  for (sim_region **link = &cudasim__g.regions; *link; link = &(*link)->next) {
    sim_region *r = *link;
    if (r->base != ptr)
      continue;
    *link = r->next;
    int d = r->device;
    munmap(r->base, r->charged);
    cudasim__g.dev[d].reserved -= r->charged;
    cudasim__g.live--;
    free(r);
    cudasim__device_complete(d);
    cudasim__device_release(d);
    return cudaSuccess;
  }
  sim_galloc *ga = cudasim__galloc_at(ptr);
  if (ga && ga->live) {
    cudasim__galloc_free(ga);
    return cudaSuccess;
  }
  struct CUmemPoolHandle_st *p;
  sim_block *b = cudasim__block_at(ptr, &p);
  if (!b)
    return cudaErrorInvalidValue;
  b->live = 0;
  b->free_stream = NULL;
  p->used -= b->size;
  cudasim__g.live--;
  cudasim__pool_reap(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void *devPtr) { SIM_UNSAFE_CALL(plain_free(devPtr)); }

/* Synchronous copies and sets run on the legacy stream. */
static cudaError_t legacy_use(void) {
  int d;
  cudaError_t e = cudasim__cur_dev(&d);
  return e != cudaSuccess ? e : cudasim__legacy_implicit(d, 1);
}

static cudaError_t sync_memset(void *ptr, int value, size_t n) {
  cudaError_t e = legacy_use();
  return e != cudaSuccess ? e : cudasim__do_memset(ptr, value, n);
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count) {
  SIM_UNSAFE_CALL(sync_memset(devPtr, value, count));
}

static cudaError_t memset_async(void *ptr, int value, size_t n, cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e == cudaSuccess && s->cap)
    return cudasim__capture_memset(s, ptr, value, n);
  if (e == cudaSuccess)
    e = cudasim__do_memset(ptr, value, n);
  if (e == cudaSuccess)
    cudasim__enqueue(s);
  return e;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  SIM_CALL(memset_async(devPtr, value, count, stream));
}

static cudaError_t sync_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = legacy_use();
  return e != cudaSuccess ? e : cudasim__do_memcpy(dst, src, n, kind);
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind) {
  SIM_UNSAFE_CALL(sync_memcpy(dst, src, count, kind));
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                cudaStream_t h) {
  struct CUstream_st *s;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e == cudaSuccess && s->cap)
    return cudasim__capture_memcpy(s, dst, src, n, kind);
  if (e == cudaSuccess)
    e = cudasim__do_memcpy(dst, src, n, kind);
  if (e == cudaSuccess)
    cudasim__enqueue(s);
  return e;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  SIM_CALL(memcpy_async(dst, src, count, kind, stream));
}

