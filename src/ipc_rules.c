/* What ipc=posix_fd allows and forbids: the config's rules, the device's support, a shareable
 * pool's handle types, and the refusals of an allocation (imported pool, capture) and a trim
 * (IPC pools never shrink). Rules only: ipc.c exports and imports. */
#include "capture.h"

#if defined(__linux__)
#define SPOOL__POSIX_FD 1
#else
#define SPOOL__POSIX_FD 0
#endif

spool_status spool__ipc_validate(const spool_config *cfg) {
  if (cfg->ipc != SPOOL_IPC_NONE && cfg->ipc != SPOOL_IPC_POSIX_FD)
    return spool__fail(SPOOL_ERR_CONFIG, "config: ipc is %d (expected SPOOL_IPC_NONE or "
                       "SPOOL_IPC_POSIX_FD)", (int)cfg->ipc);
  if (cfg->ipc == SPOOL_IPC_NONE) return SPOOL_OK;
  if (cfg->pool != SPOOL_POOL_OWN)
    return spool__fail(SPOOL_ERR_CONFIG, "config: ipc=posix_fd needs pool=own: a device's "
                       "default pool cannot be shared (CUDA creates it without handle types)");
  if (cfg->release_threshold != UINT64_MAX) {
    char t[SPOOL__SIZE_TEXT];
    return spool__fail(SPOOL_ERR_CONFIG,
                       "config: ipc=posix_fd needs release_threshold=max, not %s: CUDA never "
                       "gives a shareable pool's memory back, whatever the threshold says (limit "
                       "the pool with max_size instead)", spool__format_size(
                           cfg->release_threshold, t));
  }
  return SPOOL_OK;
}

#if SPOOL__POSIX_FD
static spool_status check_handle_types(int device, const char *ctx) {
  int driver = 0, types = 0;
  cudaError_t err = cudaDriverGetVersion(&driver);
  if (err != cudaSuccess) return spool__fail_cuda(err, "cudaDriverGetVersion", "%s: ipc", ctx);
  /* The attribute arrived with CUDA 11.3; older drivers reject the query. */
  if (driver < 11030)
    return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: ipc=posix_fd needs a CUDA 11.3 driver; this "
                       "one supports %d.%d", ctx, driver / 1000, (driver % 1000) / 10);
  err = cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, device);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaDeviceGetAttribute", "%s: device %d, "
                            "cudaDevAttrMemoryPoolSupportedHandleTypes", ctx, device);
  if (!(types & (int)cudaMemHandleTypePosixFileDescriptor))
    return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: device %d cannot share pools through POSIX "
                       "file descriptors (cudaDevAttrMemoryPoolSupportedHandleTypes is 0x%x); "
                       "use ipc=none", ctx, device, (unsigned)types);
  return SPOOL_OK;
}
#endif

spool_status spool__ipc_check_create(const spool_config *cfg, bool owned, const char *context) {
  if (cfg->ipc == SPOOL_IPC_NONE) return SPOOL_OK;
  if (!owned)
    return spool__fail(SPOOL_ERR_CONFIG, "%s: ipc=posix_fd needs a pool that spool creates; an "
                       "adopted pool keeps the handle types it was created with", context);
#if SPOOL__POSIX_FD
  return check_handle_types(cfg->device, context);
#else
  return spool__fail(SPOOL_ERR_UNSUPPORTED, "%s: ipc=posix_fd needs POSIX file descriptors, "
                     "which CUDA offers on Linux only", context);
#endif
}

enum cudaMemAllocationHandleType spool__ipc_handle_types(const spool_config *cfg) {
  return cfg->ipc == SPOOL_IPC_POSIX_FD ? cudaMemHandleTypePosixFileDescriptor
                                        : cudaMemHandleTypeNone;
}

spool_status spool__ipc_alloc_check(const spool_pool *pool, cudaStream_t stream) {
  if (pool->imported)
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "spool_alloc: pool %p was imported from another process; CUDA allows no "
                       "allocations from an imported pool: allocate in the exporting process and "
                       "share the buffer (spool_export_pointer)", (const void *)pool);
  if (pool->cfg.ipc == SPOOL_IPC_NONE || !spool__capturing_quiet(stream, false)) return SPOOL_OK;
  return spool__fail(SPOOL_ERR_UNSUPPORTED,
                     "spool_alloc: stream %p is being captured into a graph, where an allocation "
                     "becomes a graph allocation that CUDA cannot share, and this pool (device "
                     "%d) is shareable (ipc=posix_fd); allocate before the capture or from a pool "
                     "with ipc=none", (void *)stream, pool->device);
}

spool_status spool__ipc_trim_check(const spool_pool *pool) {
  if (!pool->imported && pool->cfg.ipc == SPOOL_IPC_NONE) return SPOOL_OK;
  return spool__fail(SPOOL_ERR_UNSUPPORTED,
                     "spool_trim: the pool on device %d is %s; CUDA never gives an IPC pool's "
                     "memory back (cudaMemPoolTrimTo does nothing for it); nothing was trimmed",
                     pool->device,
                     pool->imported ? "imported from another process" : "shareable (ipc=posix_fd)");
}

