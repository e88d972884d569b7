/* Peer access: which other devices may read or write a pool's memory (cudaMemPoolSetAccess).
 *
 * CUDA rules this file follows: the owning device always has read-write access and must never
 * be named in cudaMemPoolSetAccess (CUDA rejects it, even to set what it already has); other
 * devices need cudaDeviceCanAccessPeer, or the next allocation from the pool may fail; access
 * applies to every buffer of the pool, live and future, and changing it maps or unmaps them all,
 * so a call that would change nothing makes no CUDA call. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static const char SET[] = "spool_pool_set_access";
static const char GET[] = "spool_pool_get_access";

static bool valid_mode(spool_access mode) {
  return mode == SPOOL_ACCESS_NONE || mode == SPOOL_ACCESS_READ ||
         mode == SPOOL_ACCESS_READ_WRITE;
}

static enum cudaMemAccessFlags flags_of(spool_access mode) {
  return mode == SPOOL_ACCESS_READ_WRITE ? cudaMemAccessFlagsProtReadWrite
         : mode == SPOOL_ACCESS_READ     ? cudaMemAccessFlagsProtRead
                                         : cudaMemAccessFlagsProtNone;
}

static spool_access mode_of(enum cudaMemAccessFlags flags) {
  return flags == cudaMemAccessFlagsProtReadWrite ? SPOOL_ACCESS_READ_WRITE
         : flags == cudaMemAccessFlagsProtRead    ? SPOOL_ACCESS_READ
                                                  : SPOOL_ACCESS_NONE;
}

static const char *mode_name(spool_access mode) {
  return mode == SPOOL_ACCESS_READ_WRITE ? "read-write"
         : mode == SPOOL_ACCESS_READ     ? "read-only"
                                         : "none";
}

/* device is an ordinal of this process. */
static spool_status check_device(int device, const char *ctx) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    spool__fail_cuda(err, "cudaGetDeviceCount", "%s: no usable CUDA device", ctx);
    return SPOOL_ERR_NO_DEVICE;
  }
  if (device < 0 || device >= count)
    return spool__fail(SPOOL_ERR_INVALID, "%s: there is no device %d (%d device%s visible)", ctx,
                       device, count, count == 1 ? "" : "s");
  return SPOOL_OK;
}

static spool_status read_access(const spool_pool *pool, int device, spool_access *mode,
                                const char *ctx) {
  if (device == pool->device) {
    *mode = SPOOL_ACCESS_READ_WRITE;
    return SPOOL_OK;
  }
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = device};
  cudaError_t err = cudaMemPoolGetAccess(&flags, pool->handle, &loc);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolGetAccess", "%s: device %d to the pool on device %d",
                            ctx, device, pool->device);
  *mode = mode_of(flags);
  return SPOOL_OK;
}

static spool_status check_peer(const spool_pool *pool, int device) {
  int can = 0;
  cudaError_t err = cudaDeviceCanAccessPeer(&can, device, pool->device);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaDeviceCanAccessPeer", "%s: device %d to device %d", SET,
                            device, pool->device);
  if (!can)
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: device %d cannot access the memory of device %d "
                       "(cudaDeviceCanAccessPeer says no), so it cannot be given access to the "
                       "pool", SET, device, pool->device);
  return SPOOL_OK;
}

static spool_status apply(spool_pool *pool, int device, spool_access mode) {
  struct cudaMemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = device;
  d.flags = flags_of(mode);
  cudaError_t err = cudaMemPoolSetAccess(pool->handle, &d, 1);
  if (err == cudaSuccess) return SPOOL_OK;
  if (mode == SPOOL_ACCESS_READ) { /* the devices are peers (checked): read-only is the issue */
    spool__clear_cuda_error();
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: CUDA refused read-only access of device %d to the pool on device %d "
                       "(cudaMemPoolSetAccess: %s); read-write or none are the choices here", SET,
                       device, pool->device, cudaGetErrorName(err));
  }
  return spool__fail_cuda(err, "cudaMemPoolSetAccess", "%s: %s access of device %d to the pool "
                          "on device %d", SET, mode_name(mode), device, pool->device);
}

spool_status spool_pool_set_access(spool_pool *pool, int device, spool_access mode) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", SET);
  if (!valid_mode(mode))
    return spool__fail(SPOOL_ERR_INVALID, "%s: mode is %d (expected SPOOL_ACCESS_NONE, "
                       "SPOOL_ACCESS_READ or SPOOL_ACCESS_READ_WRITE)", SET, (int)mode);
  spool_status s = check_device(device, SET);
  if (s != SPOOL_OK) return s;
  if (device == pool->device) {
    if (mode == SPOOL_ACCESS_READ_WRITE) return SPOOL_OK;
    return spool__fail(SPOOL_ERR_INVALID,
                       "%s: device %d owns the pool's memory and always has read-write access; "
                       "CUDA cannot make it %s", SET, device, mode_name(mode));
  }
  spool_access now = SPOOL_ACCESS_NONE;
  s = read_access(pool, device, &now, SET);
  if (s != SPOOL_OK || now == mode) return s;
  if (mode != SPOOL_ACCESS_NONE) s = check_peer(pool, device);
  if (s == SPOOL_OK) s = apply(pool, device, mode);
  return s;
}

spool_status spool_pool_get_access(spool_pool *pool, int device, spool_access *mode) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", GET);
  if (!mode) return spool__fail(SPOOL_ERR_INVALID, "%s: mode is NULL", GET);
  spool_status s = check_device(device, GET);
  spool_access m = SPOOL_ACCESS_NONE;
  if (s == SPOOL_OK) s = read_access(pool, device, &m, GET);
  if (s == SPOOL_OK) *mode = m;
  return s;
}

/* "  access:    device 0 read-write (owner), device 1 read-write; others none" */
void spool__report_access(spool_pool *pool, FILE *out) {
  char kept[SPOOL__MESSAGE];
  int count = 0;
  spool__save_error(kept); /* the report succeeds: the caller's last failure must stay */
  fprintf(out, "  access:    device %d read-write (owner)", pool->device);
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    spool__clear_cuda_error();
    fprintf(out, "; other devices unknown (cudaGetDeviceCount failed)\n");
    spool__restore_error(kept);
    return;
  }
  int others = 0, listed = 0;
  for (int d = 0; d < count; d++) {
    spool_access m = SPOOL_ACCESS_NONE;
    if (d == pool->device) continue;
    others++;
    if (read_access(pool, d, &m, "spool_report") != SPOOL_OK)
      listed++, fprintf(out, ", device %d unknown (%s)", d, spool_last_error());
    else if (m != SPOOL_ACCESS_NONE)
      listed++, fprintf(out, ", device %d %s", d, mode_name(m));
  }
  fprintf(out, "%s\n", others == 0 ? "; no other device" : listed < others ? "; others none" : "");
  spool__restore_error(kept);
}
