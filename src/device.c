/* Devices: the support checks every pool create runs, work on a device other than the caller's
 * current one without changing it behind the caller's back, and the device a stream belongs
 * to. */
#include "internal.h"

static spool_status check_driver(const char *context) {
  int version = 0;
  cudaError_t err = cudaDriverGetVersion(&version);
  if (err != cudaSuccess) return spool__fail_cuda(err, "cudaDriverGetVersion", "%s", context);
  if (version == 0)
    return spool__fail(SPOOL_ERR_NO_DEVICE, "%s: no CUDA driver is installed", context);
  /* Stream-ordered allocation and cudaMemPool arrived with CUDA 11.2. */
  if (version < 11020)
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: the CUDA driver supports CUDA %d.%d; spool needs 11.2 or newer "
                       "(cudaMemPool)", context, version / 1000, (version % 1000) / 10);
  return SPOOL_OK;
}

spool_status spool__device_check(int device, const char *context) {
  spool_status s = check_driver(context);
  if (s != SPOOL_OK) return s;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    /* Whatever the reason, there is no device to put a pool on: say so, with CUDA's words. */
    spool__fail_cuda(err, "cudaGetDeviceCount", "%s: no usable CUDA device", context);
    return SPOOL_ERR_NO_DEVICE;
  }
  if (device < 0 || device >= count)
    return spool__fail(SPOOL_ERR_NO_DEVICE, "%s: there is no device %d (%d device%s visible)",
                       context, device, count, count == 1 ? "" : "s");
  int pools = 0;
  err = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)",
                            "%s: device %d", context, device);
  if (!pools)
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: device %d does not support memory pools "
                       "(cudaDevAttrMemoryPoolsSupported is 0)", context, device);
  return SPOOL_OK;
}

spool_status spool__device_enter(int device, int *saved, const char *context) {
  cudaError_t err = cudaGetDevice(saved);
  if (err != cudaSuccess) return spool__fail_cuda(err, "cudaGetDevice", "%s", context);
  if (*saved == device) return SPOOL_OK;
  err = cudaSetDevice(device);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaSetDevice", "%s: device %d", context, device);
  return SPOOL_OK;
}

spool_status spool__device_leave(int device, int saved, spool_status s, const char *context) {
  if (saved == device) return s;
  cudaError_t err = cudaSetDevice(saved);
  if (err == cudaSuccess) return s;
  if (s != SPOOL_OK) return spool__also_failed(s, err, "restoring the current device");
  return spool__fail_cuda(err, "cudaSetDevice", "%s: restoring device %d", context, saved);
}

spool_status spool__device_meminfo(int device, size_t *free_bytes, size_t *total_bytes) {
  static const char context[] = "spool: reading device memory";
  int saved = 0;
  spool_status s = spool__device_enter(device, &saved, context);
  if (s != SPOOL_OK) return s;
  cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
  if (err != cudaSuccess)
    s = spool__fail_cuda(err, "cudaMemGetInfo", "%s of device %d", context, device);
  return spool__device_leave(device, saved, s, context);
}

bool spool__device_meminfo_quiet(int device, size_t *free_bytes, size_t *total_bytes) {
  char kept[SPOOL__MESSAGE];
  spool__save_error(kept);
  bool ok = spool__device_meminfo(device, free_bytes, total_bytes) == SPOOL_OK;
  spool__restore_error(kept);
  return ok;
}

/* ---- the stream's device --------------------------------------------------------------------- */

/* Why spool refuses a stream of another device although cudaMallocFromPoolAsync accepts one:
 * the buffer would still live on the pool's device, where the stream's kernels fault unless
 * their device was given access, and the pool's out-of-memory and leak handling synchronize the
 * pool's device, not the stream's. A clear refusal beats a fault in a kernel far away. */

int spool__stream_device(cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  int device = -1;
  cudaError_t err =
      spool__current_device_stream(stream) ? cudaGetDevice(&device)
                                           : cudaStreamGetDevice(stream, &device);
  if (err == cudaSuccess) return device;
  spool__clear_cuda_error();
#else
  /* cudaStreamGetDevice arrived with CUDA 12.8: older builds leave the check to the caller. */
  (void)stream;
#endif
  return -1;
}

spool_status spool__stream_device_check(const spool_pool *pool, cudaStream_t stream,
                                        const char *context) {
  int device = spool__stream_device(stream);
  /* -1: cannot tell; the allocation itself judges the stream */
  if (device < 0 || device == pool->device) return SPOOL_OK;
  return spool__fail(SPOOL_ERR_INVALID,
                     "%s: stream %p belongs to device %d, but the pool's memory lives on device "
                     "%d; allocate from a pool on device %d (spool_pools_create_all makes one per "
                     "device) or use a stream of device %d",
                     context, (void *)stream, device, pool->device, device, pool->device);
}
