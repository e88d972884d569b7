/* Sharing a pool between processes: shareable pools (ipc=posix_fd), their export as a file
 * descriptor, imported pools, and buffers exported and imported one by one.
 *
 * CUDA's lifetime rules (CUDA programming guide, "IPC memory pools"; spool.h repeats them for
 * users) and where spool enforces them:
 *  - imported pools cannot allocate                       -> spool_alloc: SPOOL_ERR_UNSUPPORTED
 *  - IPC pools never release memory (threshold ignored,   -> config: release_threshold=max;
 *    trims do nothing)                                       spool_trim: SPOOL_ERR_UNSUPPORTED
 *  - allocations under stream capture are graph           -> spool_alloc while capturing:
 *    allocations, which cannot be shared                     SPOOL_ERR_UNSUPPORTED
 *  - the importer frees before the exporter               -> the callers' (other process);
 *                                                            destroying an imported pool frees
 *                                                            what is left first
 * POSIX file descriptors exist on Linux only, the one platform where CUDA offers them. The rules
 * themselves (what a config, an allocation and a trim of such a pool may do) are ipc_rules.c's. */
#define _POSIX_C_SOURCE 200809L /* fcntl's F_GETFD and FD_CLOEXEC */

#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#define SPOOL__POSIX_FD 1
#else
#define SPOOL__POSIX_FD 0
#endif

static const char EXPORT[] = "spool_pool_export";
static const char IMPORT[] = "spool_pool_import";
static const char EXPORT_PTR[] = "spool_export_pointer";
static const char IMPORT_PTR[] = "spool_import_pointer";

/* ---- pools -------------------------------------------------------------------------------- */

static void count(spool_pool *pool, uint64_t *counter) {
  pthread_mutex_lock(&pool->lock);
  (*counter)++;
  pthread_mutex_unlock(&pool->lock);
}

static spool_status check_exporter(const spool_pool *pool, const char *ctx) {
  if (pool->imported)
    return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: pool %p was imported from another process; "
                       "only the process that created a pool can share it", ctx,
                       (const void *)pool);
  if (pool->cfg.ipc != SPOOL_IPC_POSIX_FD)
    return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: the pool on device %d was created with "
                       "ipc=none; create it with ipc=posix_fd to share it", ctx, pool->device);
  return SPOOL_OK;
}

#if SPOOL__POSIX_FD

/* errno in words, without strerror's shared buffer (POSIX strerror_r). */
static const char *errno_text(int err, char *buf, size_t len) {
  if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
  return buf;
}

/* The descriptor goes to the process it is sent to, not to every child this one starts. */
static spool_status close_on_exec(int fd, const char *ctx) {
  int flags = fcntl(fd, F_GETFD);
  if (flags != -1 && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != -1) return SPOOL_OK;
  int err = errno;
  char why[128];
  close(fd);
  return spool__fail(SPOOL_ERR_IO, "%s: cannot make the pool's descriptor %d close-on-exec "
                     "(%s); it was closed", ctx, fd, errno_text(err, why, sizeof why));
}

spool_status spool_pool_export(spool_pool *pool, int *fd) {
  if (fd) *fd = -1;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", EXPORT);
  if (!fd) return spool__fail(SPOOL_ERR_INVALID, "%s: fd is NULL", EXPORT);
  spool_status s = check_exporter(pool, EXPORT);
  if (s != SPOOL_OK) return s;
  int handle = -1;
  cudaError_t err = cudaMemPoolExportToShareableHandle(
      &handle, pool->handle, cudaMemHandleTypePosixFileDescriptor, 0);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolExportToShareableHandle", "%s: pool on device %d",
                            EXPORT, pool->device);
  s = close_on_exec(handle, EXPORT);
  if (s != SPOOL_OK) return s;
  count(pool, &pool->ipc_exports);
  *fd = handle;
  return SPOOL_OK;
}

/* The device with access to an imported pool: CUDA gives only the pool's own device access to
 * a freshly imported pool. -1 when no visible device has it; *failed: the first query CUDA
 * refused (cudaSuccess if none), so that a refusal is not taken for a device out of sight. */
static int resident_device(cudaMemPool_t handle, int count, cudaError_t *failed) {
  *failed = cudaSuccess;
  for (int d = 0; d < count; d++) {
    enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = d};
    cudaError_t err = cudaMemPoolGetAccess(&flags, handle, &loc);
    if (err != cudaSuccess) {
      if (*failed == cudaSuccess) *failed = err;
      spool__clear_cuda_error();
      continue;
    }
    if (flags == cudaMemAccessFlagsProtReadWrite) return d;
  }
  return -1;
}

static spool_status destroy_import(cudaMemPool_t handle, spool_status s) {
  cudaError_t err = cudaMemPoolDestroy(handle);
  if (err != cudaSuccess) spool__also_failed(s, err, "cudaMemPoolDestroy of the imported pool");
  return s;
}

static spool_status import_handle(int fd, cudaMemPool_t *handle, int *device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    spool__fail_cuda(err, "cudaGetDeviceCount", "%s: no usable CUDA device", IMPORT);
    return SPOOL_ERR_NO_DEVICE;
  }
  err = cudaMemPoolImportFromShareableHandle(handle, (void *)(intptr_t)fd,
                                             cudaMemHandleTypePosixFileDescriptor, 0);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolImportFromShareableHandle", "%s: descriptor %d (is "
                            "it from spool_pool_export, and is that pool still alive?)", IMPORT,
                            fd);
  cudaError_t failed;
  *device = resident_device(*handle, count, &failed);
  if (*device >= 0) return SPOOL_OK;
  if (failed != cudaSuccess)
    return destroy_import(*handle, spool__fail_cuda(failed, "cudaMemPoolGetAccess", "%s: finding "
                                                    "the device of descriptor %d's pool",
                                                    IMPORT, fd));
  spool_status s = spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: the pool of descriptor %d lives on a "
                               "device this process cannot see (none of its %d visible devices "
                               "has access; CUDA_VISIBLE_DEVICES?)", IMPORT, fd, count);
  return destroy_import(*handle, s);
}

spool_status spool_pool_import(int fd, spool_pool **pool) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", IMPORT);
  *pool = NULL;
  if (fd < 0) return spool__fail(SPOOL_ERR_INVALID, "%s: fd is %d", IMPORT, fd);
  if (fcntl(fd, F_GETFD) == -1) {
    char why[128];
    return spool__fail(SPOOL_ERR_INVALID, "%s: descriptor %d is not open in this process (%s); "
                       "a process can import a pool only through a descriptor it was given, "
                       "e.g. over a Unix domain socket (SCM_RIGHTS)", IMPORT, fd,
                       errno_text(errno, why, sizeof why));
  }
  cudaMemPool_t handle = NULL;
  int device = -1;
  spool_status s = import_handle(fd, &handle, &device);
  if (s != SPOOL_OK) return s;
  spool_config cfg;
  spool_config_init(&cfg);
  cfg.device = device;
  cfg.ipc = SPOOL_IPC_POSIX_FD;
  spool_pool *p = spool__pool_new(&cfg, handle, true);
  if (!p)
    return destroy_import(handle, spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the "
                                              "pool", IMPORT));
  p->imported = true;
  spool__registry_add(p);
  *pool = p;
  return SPOOL_OK;
}

#else /* no POSIX file descriptors */

spool_status spool_pool_export(spool_pool *pool, int *fd) {
  if (fd) *fd = -1;
  (void)pool;
  return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: needs POSIX file descriptors (Linux)", EXPORT);
}

spool_status spool_pool_import(int fd, spool_pool **pool) {
  if (pool) *pool = NULL;
  (void)fd;
  return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: needs POSIX file descriptors (Linux)", IMPORT);
}

#endif

/* ---- buffers ------------------------------------------------------------------------------ */

/* ptr is the start of a live buffer of pool: its size, or the refusal spool_free would give. */
static spool_status exported_size(spool_pool *pool, void *ptr, uint64_t *size) {
  uintptr_t u = (uintptr_t)ptr;
  spool__buffer inside = {0};
  bool found = false, interior = false;
  pthread_mutex_lock(&pool->lock);
  const spool__buffer *b = spool__table_find(&pool->live, u);
  if (b) found = true, *size = b->size;
  else if ((b = spool__table_containing(&pool->live, u)) != NULL) interior = true, inside = *b;
  pthread_mutex_unlock(&pool->lock);
  spool__buffer cached; /* a buffer the stream caches served */
  if (!found && !interior && spool__census_containing(pool, u, &cached)) {
    found = cached.ptr == u;
    interior = !found;
    if (found) *size = cached.size;
    else inside = cached;
  }
  if (found) return SPOOL_OK;
  if (interior)
    return spool__fail(SPOOL_ERR_INTERIOR_POINTER, "%s: %p points %" PRIuPTR " bytes into "
                       "buffer %p (allocation #%" PRIu64 "); export the buffer's start",
                       EXPORT_PTR, ptr, u - inside.ptr, (void *)inside.ptr, inside.seq);
  spool__owner owner;
  if (spool__registry_owner(pool, u, &owner))
    return spool__fail(SPOOL_ERR_WRONG_POOL, "%s: %p belongs to another pool (%p on device %d); "
                       "export it through that pool", EXPORT_PTR, ptr, owner.pool, owner.device);
  return spool__fail(SPOOL_ERR_UNKNOWN_POINTER, "%s: %p is not a live buffer of this pool (%p "
                     "on device %d)", EXPORT_PTR, ptr, (void *)pool, pool->device);
}

/* CUDA exports a pointer only "from an already shared memory pool": the H200 refused
 * cudaMemPoolExportPointer (cudaErrorInvalidValue) before the pool's first export. So the pool
 * is exported once here if the caller has not done it yet, and the descriptor closed. */
static spool_status ensure_shared(spool_pool *pool) {
  pthread_mutex_lock(&pool->lock);
  bool shared = pool->ipc_exports > 0;
  pthread_mutex_unlock(&pool->lock);
  if (shared) return SPOOL_OK;
  int fd = -1;
  spool_status s = spool_pool_export(pool, &fd);
  if (s != SPOOL_OK) return spool__prefix(s, EXPORT_PTR);
#if SPOOL__POSIX_FD
  close(fd);
#endif
  return SPOOL_OK;
}

spool_status spool_export_pointer(spool_pool *pool, void *ptr, spool_ipc_pointer *out) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", EXPORT_PTR);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", EXPORT_PTR);
  if (!out) return spool__fail(SPOOL_ERR_INVALID, "%s: out is NULL", EXPORT_PTR);
  spool_status s = check_exporter(pool, EXPORT_PTR);
  uint64_t size = 0; /* unknown with track=off */
  if (s == SPOOL_OK && pool->cfg.track != SPOOL_TRACK_OFF) s = exported_size(pool, ptr, &size);
  if (s != SPOOL_OK) return s;
  if (s == SPOOL_OK) s = ensure_shared(pool);
  if (s != SPOOL_OK) return s;
  spool_ipc_pointer x;
  memset(&x, 0, sizeof x);
  cudaError_t err = cudaMemPoolExportPointer(&x.cuda, ptr);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolExportPointer", "%s: %p of the pool on device %d",
                            EXPORT_PTR, ptr, pool->device);
  x.size = size;
  x.magic = SPOOL_IPC_POINTER_MAGIC;
  x.version = SPOOL_IPC_POINTER_VERSION;
  count(pool, &pool->ipc_pointers);
  *out = x;
  return SPOOL_OK;
}

static spool_status check_import(const spool_pool *pool, const spool_ipc_pointer *in) {
  if (!pool->imported)
    return spool__fail(SPOOL_ERR_INVALID, "%s: pool %p (device %d) was not made by "
                       "spool_pool_import; buffers are imported into the pool made from the "
                       "exporter's descriptor", IMPORT_PTR, (const void *)pool, pool->device);
  if (in->magic != SPOOL_IPC_POINTER_MAGIC)
    return spool__fail(SPOOL_ERR_INVALID, "%s: the data is not from spool_export_pointer (magic "
                       "0x%08" PRIx32 ", expected 0x%08" PRIx32 ")", IMPORT_PTR, in->magic,
                       (uint32_t)SPOOL_IPC_POINTER_MAGIC);
  if (in->version != SPOOL_IPC_POINTER_VERSION)
    return spool__fail(SPOOL_ERR_INVALID, "%s: the data is of version %" PRIu32 "; this spool "
                       "reads version %u", IMPORT_PTR, in->version, SPOOL_IPC_POINTER_VERSION);
  return SPOOL_OK;
}

/* Enters an imported buffer in the table and the counters, as an allocation would be. */
static spool_status record_import(spool_pool *pool, void *ptr, uint64_t size) {
  static const spool__site site = {NULL, "imported from another process", 0, 0};
  spool_status s = spool__record_alloc(pool, ptr, (size_t)size, NULL, &site);
  if (s == SPOOL_OK) {
    pthread_mutex_lock(&pool->lock);
    pool->ipc_pointers++;
    pthread_mutex_unlock(&pool->lock);
  }
  return s;
}

spool_status spool_import_pointer(spool_pool *pool, const spool_ipc_pointer *in, void **ptr) {
  if (ptr) *ptr = NULL;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", IMPORT_PTR);
  if (!in) return spool__fail(SPOOL_ERR_INVALID, "%s: in is NULL", IMPORT_PTR);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", IMPORT_PTR);
  spool_status s = check_import(pool, in);
  if (s != SPOOL_OK) return s;
  struct cudaMemPoolPtrExportData data = in->cuda; /* CUDA takes it by non-const pointer */
  void *p = NULL;
  cudaError_t err = cudaMemPoolImportPointer(&p, pool->handle, &data);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolImportPointer", "%s: into the pool imported on "
                            "device %d (was the buffer exported from the pool this pool was "
                            "imported from, and is it still allocated there?)", IMPORT_PTR,
                            pool->device);
  s = record_import(pool, p, in->size);
  if (s != SPOOL_OK) {
    err = cudaFree(p); /* spool could never free it: give it back now */
    if (err != cudaSuccess) spool__also_failed(s, err, "cudaFree of the imported buffer");
    return s;
  }
  *ptr = p;
  return SPOOL_OK;
}

/* ---- report ------------------------------------------------------------------------------- */

void spool__report_ipc(spool_pool *pool, FILE *out) {
  pthread_mutex_lock(&pool->lock);
  uint64_t exports = pool->ipc_exports, pointers = pool->ipc_pointers;
  pthread_mutex_unlock(&pool->lock);
  if (pool->imported)
    fprintf(out, "  ipc:       imported from another process (cannot allocate, never shrinks); "
            "%" PRIu64 " buffer%s imported\n", pointers, pointers == 1 ? "" : "s");
  else if (pool->cfg.ipc == SPOOL_IPC_POSIX_FD)
    fprintf(out, "  ipc:       shareable (posix_fd, never shrinks); exported %" PRIu64
            " time%s, %" PRIu64 " buffer%s exported\n", exports, exports == 1 ? "" : "s",
            pointers, pointers == 1 ? "" : "s");
  else
    fprintf(out, "  ipc:       none\n");
}
