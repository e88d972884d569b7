/* Several devices: one pool per device from one config, and the way back from a pointer to its
 * pool. */
#include "internal.h"

#include <stdio.h>

/* ---- one pool per device ------------------------------------------------------------------ */

static const char CREATE_ALL[] = "spool_pools_create_all";

/* Destroys pools[0..n) on a path that already failed with s: the first failure's message
 * stays, a failure of the undo is added to it. */
static void undo_create(spool_pool **pools, int n, spool_status s) {
  char first[SPOOL__MESSAGE], later[SPOOL__MESSAGE] = "";
  spool__save_error(first);
  for (int i = 0; i < n; i++) {
    if (spool_pool_destroy(pools[i]) != SPOOL_OK && later[0] == '\0')
      snprintf(later, sizeof later, "%s", spool_last_error());
    pools[i] = NULL;
  }
  spool__restore_error(first);
  if (later[0] != '\0')
    spool__append(s, "; destroying the pools made so far failed too: %s", later);
}

static spool_status resolve(const spool_config *cfg, spool_config *out) {
  if (cfg) {
    *out = *cfg;
    return SPOOL_OK;
  }
  spool_config_init(out);
  spool_status s = spool_config_from_env(out);
  return s == SPOOL_OK ? s : spool__prefix(s, CREATE_ALL);
}

static spool_status device_count(int *count, const char *context) {
  cudaError_t err = cudaGetDeviceCount(count);
  if (err == cudaSuccess) return SPOOL_OK;
  *count = 0;
  spool__fail_cuda(err, "cudaGetDeviceCount", "%s: no usable CUDA device", context);
  return SPOOL_ERR_NO_DEVICE;
}

spool_status spool_pools_create_all(spool_pool **pools, int capacity, int *count,
                                    const spool_config *cfg) {
  if (!pools) return spool__fail(SPOOL_ERR_INVALID, "%s: pools is NULL", CREATE_ALL);
  if (!count) return spool__fail(SPOOL_ERR_INVALID, "%s: count is NULL", CREATE_ALL);
  *count = 0;
  for (int i = 0; i < capacity; i++) pools[i] = NULL;
  spool_config c;
  int n = 0;
  spool_status s = resolve(cfg, &c);
  if (s == SPOOL_OK) s = device_count(&n, CREATE_ALL);
  if (s != SPOOL_OK) return s;
  if (n > capacity)
    return spool__fail(SPOOL_ERR_INVALID, "%s: pools has %d slot%s, but there %s %d device%s",
                       CREATE_ALL, capacity, capacity == 1 ? "" : "s", n == 1 ? "is" : "are", n,
                       n == 1 ? "" : "s");
  for (int d = 0; d < n; d++) {
    c.device = d;
    s = spool_pool_create(&pools[d], &c);
    if (s != SPOOL_OK) {
      char where[64];
      snprintf(where, sizeof where, "%s: device %d of %d", CREATE_ALL, d, n);
      spool__prefix(s, where);
      undo_create(pools, d, s);
      return s;
    }
  }
  *count = n;
  return SPOOL_OK;
}

spool_status spool_pools_destroy_all(spool_pool **pools, int count) {
  static const char ctx[] = "spool_pools_destroy_all";
  if (count < 0) return spool__fail(SPOOL_ERR_INVALID, "%s: count is %d", ctx, count);
  if (!pools && count > 0)
    return spool__fail(SPOOL_ERR_INVALID, "%s: pools is NULL, count %d", ctx, count);
  spool_status first = SPOOL_OK;
  char message[SPOOL__MESSAGE] = "";
  for (int i = 0; i < count; i++) {
    spool_status s = spool_pool_destroy(pools[i]);
    pools[i] = NULL;
    if (s != SPOOL_OK && first == SPOOL_OK) {
      first = s;
      spool__save_error(message); /* later pools must not overwrite the first failure */
    }
  }
  if (first != SPOOL_OK) spool__restore_error(message);
  return first;
}

/* ---- from a pointer to its pool ---------------------------------------------------------- */

/* What CUDA knows of a pointer no tracking pool holds, for the message. */
static const char *cuda_view(const void *ptr, char *out, size_t len) {
  struct cudaPointerAttributes a;
  cudaError_t err = cudaPointerGetAttributes(&a, ptr);
  if (err != cudaSuccess) {
    spool__clear_cuda_error();
    snprintf(out, len, "CUDA does not know it (cudaPointerGetAttributes: %s)",
             cudaGetErrorName(err));
  } else if (a.type == cudaMemoryTypeDevice) {
    snprintf(out, len, "CUDA knows it as device memory of device %d: a buffer of a pool with "
             "track=off (which does not know its buffers), of another allocator, or one freed "
             "already", a.device);
  } else {
    snprintf(out, len, "CUDA does not know it as device memory (%s)",
             a.type == cudaMemoryTypeHost      ? "it is host memory"
             : a.type == cudaMemoryTypeManaged ? "it is managed memory"
                                               : "unregistered");
  }
  return out;
}

spool_status spool_pool_of(const void *ptr, spool_pool **pool) {
  static const char ctx[] = "spool_pool_of";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  *pool = NULL;
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", ctx);
  spool__owner owner;
  /* No pool is "self" here: every live pool is searched. */
  if (spool__registry_owner(NULL, (uintptr_t)ptr, &owner)) {
    *pool = (spool_pool *)(uintptr_t)owner.pool; /* the registry hands it out as const */
    return SPOOL_OK;
  }
  char view[256];
  return spool__fail(SPOOL_ERR_UNKNOWN_POINTER,
                     "%s: %p is not in a live buffer of any spool pool that tracks its buffers; "
                     "%s", ctx, ptr, cuda_view(ptr, view, sizeof view));
}

/* ---- report ------------------------------------------------------------------------------- */

void spool__report_multi(spool_pool *pool, FILE *out) {
  spool__report_access(pool, out);
  spool__report_ipc(pool, out);
}
