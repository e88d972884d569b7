/* cudasim: several devices and processes (IPC).
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

/* ==== several devices and processes ==============================================================
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

/* Guarded by cudasim__g_lock, like g. */
static struct {
  sim6_export *exports;
  sim6_import *imports;
  unsigned char no_ipc[SIM_MAX_DEV]; /* 0: POSIX fd handles supported (the default) */
} g6;

void cudasim__sim6_reset(void) {
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

int cudasim__sim6_handle_types(int d) {
  return cudasim__g.dev[d].pools_supported && !g6.no_ipc[d]
             ? (int)cudaMemHandleTypePosixFileDescriptor
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

int cudasim__sim6_import_range(const void *ptr, size_t n, int whole) {
  return sim6_import_at(ptr, n, whole) != NULL;
}

int cudasim__sim6_import_free(const void *ptr, struct CUstream_st *s) {
  for (sim6_import **link = &g6.imports; *link; link = &(*link)->next) {
    sim6_import *im = *link;
    if (im->ptr != ptr)
      continue;
    *link = im->next;
    munmap(im->map, im->map_size);
    im->pool->used -= im->size;
    if (s)
      cudasim__enqueue(s);
    free(im);
    return 1;
  }
  return 0;
}

/* ---- export and import of pools ---- */

static cudaError_t export_pool(void *handle, cudaMemPool_t p, enum cudaMemAllocationHandleType type,
                               unsigned flags) {
  if (!cudasim__pool_known(p))
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
    if (x->dev != st.st_dev || x->ino != st.st_ino || !cudasim__pool_known(x->pool))
      continue;
    struct CUmemPoolHandle_st *q = cudasim__pool_new(x->pool->device, 0);
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
  if (!data || !ptr || !cudasim__block_at(ptr, &p) || !p->shareable || p->destroyed)
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
  if (!cudasim__pool_known(q))
    return cudaErrorInvalidResourceHandle;
  memcpy(&d, data->reserved, sizeof d);
  if (!q->imported_from || d.magic != SIM6_MAGIC || d.pool != (uintptr_t)q->imported_from)
    return cudaErrorInvalidValue;
  sim_block *b = cudasim__block_at((const void *)d.addr, &p);
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
  for (sim_region *r = cudasim__g.regions; r; r = r->next)
    if (a >= (uintptr_t)r->base && a - (uintptr_t)r->base < r->size)
      return r->device;
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
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
  cudasim__lock();
  if (device >= 0 && device < SIM_MAX_DEV)
    g6.no_ipc[device] = !supported;
  cudasim__unlock();
}

int cudasim_imports(void) {
  int n = 0;
  cudasim__lock();
  for (sim6_import *im = g6.imports; im; im = im->next)
    n++;
  cudasim__unlock();
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
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next) {
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
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e != cudaSuccess)
    return e;
  struct CUmemPoolHandle_st *p = sim6_owner(ptr, n, &device);
  if (!p) {
    for (sim_region *r = cudasim__g.regions; r;
         r = r->next) /* cudaMalloc memory: its device only */
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
  cudasim__enqueue(s);
  return cudaSuccess;
}

int cudasim__sim6_unmapped_here(const void *ptr, size_t n) {
  int device = -1;
  struct CUmemPoolHandle_st *p = sim6_owner(ptr, n, &device);
  return p && device != cudasim__t.device &&
         p->access[cudasim__t.device] == cudaMemAccessFlagsProtNone;
}

cudaError_t cudasim_kernel(cudaStream_t s, const void *ptr, size_t bytes, int write) {
  cudasim__lock();
  cudaError_t e = cudasim__g.driver == 0 || cudasim__g.ndev == 0
                      ? cudaErrorNoDevice
                      : sim6_kernel(s, ptr, bytes, write);
  cudasim__unlock();
  return e;
}
