/* Pools: creating or adopting a cudaMemPool, applying the config's knobs, destroying it.
 *
 * Every step that can fail is undone on failure, so a failed create leaves nothing behind: an
 * own pool is destroyed, an adopted pool gets its old settings back. */
#include "internal.h"
#include "trace_format.h"

#include <stdlib.h>
#include <string.h>

static const char CREATE[] = "spool_pool_create";
static const char ADOPT[] = "spool_pool_adopt";

/* ---- creating the cudaMemPool -------------------------------------------------------------- */

static spool_status check_max_size(const spool_config *cfg, const char *ctx) {
  if (cfg->max_size == 0 || cfg->max_size == UINT64_MAX) return SPOOL_OK;
#if CUDART_VERSION >= 12020
  int driver = 0;
  cudaError_t err = cudaDriverGetVersion(&driver);
  if (err != cudaSuccess) return spool__fail_cuda(err, "cudaDriverGetVersion", "%s", ctx);
  if (driver < 12020)
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: max_size needs a CUDA 12.2 driver; this one supports %d.%d", ctx,
                       driver / 1000, (driver % 1000) / 10);
  return SPOOL_OK;
#else
  return spool__fail(SPOOL_ERR_UNSUPPORTED,
                     "%s: max_size needs spool built with CUDA 12.2 or newer (built with %d.%d)",
                     ctx, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
#endif
}

static spool_status create_handle(const spool_config *cfg, cudaMemPool_t *out) {
  spool_status s = check_max_size(cfg, CREATE);
  if (s != SPOOL_OK) return s;
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props); /* reserved fields must be zero */
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = spool__ipc_handle_types(cfg); /* none unless ipc=posix_fd */
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = cfg->device;
#if CUDART_VERSION >= 12020
  /* UINT64_MAX means "no limit" to spool; to CUDA that is 0. */
  props.maxSize = cfg->max_size == UINT64_MAX ? 0 : (size_t)cfg->max_size;
#endif
  cudaError_t err = cudaMemPoolCreate(out, &props);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolCreate", "%s: device %d", CREATE, cfg->device);
  return SPOOL_OK;
}

/* ---- knobs ----------------------------------------------------------------------------------- */

/* What an adopted pool had before spool touched it, so that a failed adopt can put it back. */
typedef struct saved_settings {
  uint64_t threshold;
  uint64_t reserved; /* what it held from the device: what priming added goes back */
  int reuse[3];
  enum cudaMemAccessFlags access[SPOOL_MAX_PEERS];
} saved_settings;

static const enum cudaMemPoolAttr REUSE_ATTRS[3] = {
    cudaMemPoolReuseFollowEventDependencies, cudaMemPoolReuseAllowOpportunistic,
    cudaMemPoolReuseAllowInternalDependencies};
static const char *const REUSE_NAMES[3] = {"reuse_follow_event_dependencies",
                                           "reuse_allow_opportunistic",
                                           "reuse_allow_internal_dependencies"};

static spool_status set_attr(spool_pool *p, enum cudaMemPoolAttr attr, void *value,
                             const char *what, const char *ctx) {
  cudaError_t err = cudaMemPoolSetAttribute(p->handle, attr, value);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolSetAttribute", "%s: %s", ctx, what);
  return SPOOL_OK;
}

static spool_status get_attr(const spool_pool *p, enum cudaMemPoolAttr attr, void *value,
                             const char *what, const char *ctx) {
  cudaError_t err = cudaMemPoolGetAttribute(p->handle, attr, value);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolGetAttribute", "%s: reading %s of the pool", ctx,
                            what);
  return SPOOL_OK;
}

static spool_status apply_attrs(spool_pool *p, const char *ctx) {
  uint64_t threshold = p->cfg.release_threshold;
  spool_status s = set_attr(p, cudaMemPoolAttrReleaseThreshold, &threshold,
                            "release_threshold", ctx);
  const bool flags[3] = {p->cfg.reuse_follow_event_dependencies, p->cfg.reuse_allow_opportunistic,
                         p->cfg.reuse_allow_internal_dependencies};
  for (int i = 0; i < 3 && s == SPOOL_OK; i++) {
    int v = flags[i];
    s = set_attr(p, REUSE_ATTRS[i], &v, REUSE_NAMES[i], ctx);
  }
  return s;
}

static spool_status check_peer(int device, int peer, int count, const char *ctx) {
  if (peer >= count)
    return spool__fail(SPOOL_ERR_CONFIG,
                       "%s: peer_access names device %d, but there %s %d device%s", ctx, peer,
                       count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
  int can = 0;
  cudaError_t err = cudaDeviceCanAccessPeer(&can, peer, device);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaDeviceCanAccessPeer", "%s: peer %d of device %d", ctx,
                            peer, device);
  if (!can)
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: device %d cannot access memory of device %d (cudaDeviceCanAccessPeer)",
                       ctx, peer, device);
  return SPOOL_OK;
}

/* Every listed peer exists and can reach the device: checked before anything is created or
 * changed, so that a bad list costs nothing to undo. */
static spool_status check_peers(const spool_config *cfg, const char *ctx) {
  if (cfg->peer_access_count == 0) return SPOOL_OK;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaGetDeviceCount", "%s: peer_access", ctx);
  for (int i = 0; i < cfg->peer_access_count; i++) {
    if (cfg->peer_access[i] == cfg->device) continue; /* the owner always has access */
    spool_status s = check_peer(cfg->device, cfg->peer_access[i], count, ctx);
    if (s != SPOOL_OK) return s;
  }
  return SPOOL_OK;
}

static struct cudaMemAccessDesc access_desc(int device, enum cudaMemAccessFlags flags) {
  struct cudaMemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = device;
  d.flags = flags;
  return d;
}

static spool_status apply_peers(spool_pool *p, const char *ctx) {
  struct cudaMemAccessDesc descs[SPOOL_MAX_PEERS];
  size_t n = 0;
  for (int i = 0; i < p->cfg.peer_access_count; i++) {
    /* CUDA rejects the owning device here: it always has read-write access. */
    if (p->cfg.peer_access[i] != p->device)
      descs[n++] = access_desc(p->cfg.peer_access[i], cudaMemAccessFlagsProtReadWrite);
  }
  if (n == 0) return SPOOL_OK;
  cudaError_t err = cudaMemPoolSetAccess(p->handle, descs, n);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolSetAccess", "%s: peer_access on device %d", ctx,
                            p->device);
  return SPOOL_OK;
}

/* Allocates and frees `reserve` bytes, then synchronizes: the pool keeps the memory (reserve is
 * within the release threshold), so the first real allocations find it ready. It runs on the
 * calling thread's per-thread default stream: that needs no creating (nor destroying, which
 * could fail and leave a stream behind), and it waits only for the legacy default stream's
 * work, not for other streams'. */
static spool_status prime(spool_pool *p, const char *ctx) {
  if (p->cfg.reserve == 0) return SPOOL_OK;
  int saved = 0;
  spool_status s = spool__device_enter(p->device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaStream_t stream = cudaStreamPerThread;
  void *ptr = NULL;
  char size[SPOOL__SIZE_TEXT];
  spool__format_size(p->cfg.reserve, size);
  cudaError_t err = cudaMallocFromPoolAsync(&ptr, (size_t)p->cfg.reserve, p->handle, stream);
  if (err != cudaSuccess) {
    s = spool__fail_cuda(err, "cudaMallocFromPoolAsync", "%s: reserve=%s on device %d", ctx, size,
                         p->device);
  } else {
    err = cudaFreeAsync(ptr, stream);
    if (err != cudaSuccess) {
      s = spool__fail_cuda(err, "cudaFreeAsync", "%s: reserve", ctx);
      /* Otherwise the pool would hold an allocation that nobody can free, for good when the
       * pool is adopted: try the synchronous free, which takes pool memory too. */
      err = cudaFree(ptr);
      if (err != cudaSuccess) {
        spool__also_failed(s, err, "cudaFree");
        spool__append(s, "; %s stay allocated in the pool", size);
      }
    }
    err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess && s == SPOOL_OK)
      s = spool__fail_cuda(err, "cudaStreamSynchronize", "%s: reserve", ctx);
    else if (err != cudaSuccess)
      spool__also_failed(s, err, "cudaStreamSynchronize");
  }
  return spool__device_leave(p->device, saved, s, ctx);
}

/* ---- adopted pools: remember and restore ------------------------------------------------- */

static spool_status save_settings(const spool_pool *p, saved_settings *out, const char *ctx) {
  spool_status s = get_attr(p, cudaMemPoolAttrReleaseThreshold, &out->threshold,
                            "release_threshold", ctx);
  if (s == SPOOL_OK && p->cfg.reserve > 0)
    s = get_attr(p, cudaMemPoolAttrReservedMemCurrent, &out->reserved, "reserved bytes", ctx);
  for (int i = 0; i < 3 && s == SPOOL_OK; i++)
    s = get_attr(p, REUSE_ATTRS[i], &out->reuse[i], REUSE_NAMES[i], ctx);
  for (int i = 0; i < p->cfg.peer_access_count && s == SPOOL_OK; i++) {
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = p->cfg.peer_access[i]};
    out->access[i] = cudaMemAccessFlagsProtReadWrite;
    if (loc.id == p->device) continue;
    cudaError_t err = cudaMemPoolGetAccess(&out->access[i], p->handle, &loc);
    if (err != cudaSuccess)
      s = spool__fail_cuda(err, "cudaMemPoolGetAccess", "%s: reading the access of device %d",
                           ctx, loc.id);
  }
  return s;
}

/* Best effort, on a path that is already failing: a restore that fails is added to the message. */
static void restore_settings(spool_pool *p, const saved_settings *old) {
  cudaError_t err = cudaMemPoolSetAttribute(p->handle, cudaMemPoolAttrReleaseThreshold,
                                            (void *)&old->threshold);
  for (int i = 0; i < 3 && err == cudaSuccess; i++)
    err = cudaMemPoolSetAttribute(p->handle, REUSE_ATTRS[i], (void *)&old->reuse[i]);
  for (int i = 0; i < p->cfg.peer_access_count && err == cudaSuccess; i++) {
    if (p->cfg.peer_access[i] == p->device) continue;
    struct cudaMemAccessDesc d = access_desc(p->cfg.peer_access[i], old->access[i]);
    err = cudaMemPoolSetAccess(p->handle, &d, 1);
  }
  /* A reserve primed within the old threshold stays reserved until the owner's next
   * synchronize, or for good once its threshold is back: trim to what the pool held. */
  if (err == cudaSuccess && p->cfg.reserve > 0)
    err = cudaMemPoolTrimTo(p->handle, (size_t)old->reserved);
  if (err != cudaSuccess)
    spool__also_failed(SPOOL_OK, err, "restoring the adopted pool's settings");
}

/* ---- create, adopt, destroy --------------------------------------------------------------- */

static spool_status resolve_config(const spool_config *cfg, spool_config *out, const char *ctx) {
  if (cfg) {
    *out = *cfg;
  } else {
    spool_config_init(out);
    spool_status s = spool_config_from_env(out);
    if (s != SPOOL_OK) return spool__prefix(s, ctx);
  }
  spool_status s = spool_config_validate(out);
  if (s != SPOOL_OK) return spool__prefix(s, ctx);
  return SPOOL_OK;
}

static spool_pool *pool_new(const spool_config *cfg, cudaMemPool_t handle, bool owned) {
  spool_pool *p = spool__zalloc_aligned(sizeof *p);
  if (!p) return NULL;
  if (pthread_mutex_init(&p->lock, NULL) != 0) {
    free(p);
    return NULL;
  }
  p->cfg = *cfg;
  /* A shareable pool is served uncached: a freed buffer must reach CUDA, so that a process
   * still importing it is refused rather than handed memory the exporter reuses. */
  if (p->cfg.ipc != SPOOL_IPC_NONE) p->cfg.cache = false;
  p->handle = handle;
  p->device = cfg->device;
  p->owned = owned;
  static atomic_uint_fast64_t pools_made;
  p->id = atomic_fetch_add(&pools_made, 1) + 1;
  atomic_init(&p->seq, 0);
  atomic_init(&p->total_bytes, 0);
  atomic_init(&p->total_buffers, 0);
  atomic_init(&p->peak_bytes, 0);
  atomic_init(&p->peak_buffers, 0);
  atomic_init(&p->shares_used, 0);
  for (unsigned i = 0; i < SPOOL__SHARES; i++) {
    atomic_init(&p->shares[i].bytes, 0);
    atomic_init(&p->shares[i].buffers, 0);
  }
  spool__nvtx_init(p);
  atomic_init(&p->aligned_live, 0);
  return p;
}

static void pool_free(spool_pool *p) {
  spool__trace_close(p);
  spool__table_free(&p->live);
  spool__table_free(&p->aligned);
  spool__grave_free(&p->graves);
  spool__nvtx_fini(p);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

static spool_status apply_all(spool_pool *p, const char *ctx) {
  spool_status s = apply_attrs(p, ctx);
  if (s == SPOOL_OK) s = apply_peers(p, ctx);
  if (s == SPOOL_OK) s = prime(p, ctx);
  if (s == SPOOL_OK && p->owned && p->cfg.reserve > 0) {
    /* Priming is not use: start the pool's used high-water mark from zero. */
    uint64_t zero = 0;
    s = set_attr(p, cudaMemPoolAttrUsedMemHigh, &zero, "resetting the used high-water mark", ctx);
  }
  return s;
}

/* Applies every knob; on failure undoes what it can and frees p (and an own handle). */
static spool_status configure(spool_pool *p, const char *ctx) {
  saved_settings old;
  spool_status s = p->owned ? SPOOL_OK : save_settings(p, &old, ctx);
  if (s != SPOOL_OK) { /* nothing changed yet */
    pool_free(p);
    return s;
  }
  s = apply_all(p, ctx);
  if (s == SPOOL_OK) return SPOOL_OK;
  if (p->owned) {
    cudaError_t err = cudaMemPoolDestroy(p->handle);
    if (err != cudaSuccess) spool__also_failed(s, err, "destroying the new pool");
  } else {
    restore_settings(p, &old);
  }
  pool_free(p);
  return s;
}

/* CUDA cannot tell where a pool lives, but its own device always has read-write access: a
 * device without it is certainly the wrong one. */
static spool_status check_location(cudaMemPool_t handle, int device, const char *ctx) {
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = device};
  cudaError_t err = cudaMemPoolGetAccess(&flags, handle, &loc);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolGetAccess", "%s: device %d", ctx, device);
  if (flags != cudaMemAccessFlagsProtReadWrite)
    return spool__fail(SPOOL_ERR_CONFIG,
                       "%s: device=%d has no read-write access to the pool, so the pool is not "
                       "on device %d; set device to where the pool lives", ctx, device, device);
  return SPOOL_OK;
}

static spool_status open_pool(spool_pool **pool, const spool_config *cfg, cudaMemPool_t adopt,
                              const char *ctx) {
  spool_status s = spool__device_check(cfg->device, ctx);
  if (s == SPOOL_OK) s = check_peers(cfg, ctx);
  if (s != SPOOL_OK) return s;
  bool owned = adopt == NULL && cfg->pool == SPOOL_POOL_OWN;
  s = spool__ipc_check_create(cfg, owned, ctx);
  if (s != SPOOL_OK) return s;
  if (!owned && cfg->max_size != 0 && cfg->max_size != UINT64_MAX)
    return spool__fail(SPOOL_ERR_CONFIG,
                       "%s: max_size is fixed when a pool is created; it cannot be set on an "
                       "adopted pool (pool=default or spool_pool_adopt)", ctx);
  cudaMemPool_t handle = adopt;
  if (adopt) {
    s = check_location(adopt, cfg->device, ctx);
  } else if (owned) {
    s = create_handle(cfg, &handle);
  } else if (!handle) {
    cudaError_t err = cudaDeviceGetDefaultMemPool(&handle, cfg->device);
    if (err != cudaSuccess)
      s = spool__fail_cuda(err, "cudaDeviceGetDefaultMemPool", "%s: device %d", ctx, cfg->device);
  }
  if (s != SPOOL_OK) return s;
  spool_pool *p = pool_new(cfg, handle, owned);
  if (!p) {
    s = spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the pool", ctx);
    cudaError_t err = owned ? cudaMemPoolDestroy(handle) : cudaSuccess;
    if (err != cudaSuccess) spool__also_failed(s, err, "destroying the new pool");
    return s;
  }
  s = spool__trace_open(p, ctx);
  if (s != SPOOL_OK) {
    cudaError_t err = owned ? cudaMemPoolDestroy(handle) : cudaSuccess;
    if (err != cudaSuccess) spool__also_failed(s, err, "destroying the new pool");
    pool_free(p);
    return s;
  }
  s = configure(p, ctx);
  if (s != SPOOL_OK) return s;
  spool__nvtx_probe(p);
  spool__registry_add(p);
  *pool = p;
  return SPOOL_OK;
}

spool_status spool_pool_create(spool_pool **pool, const spool_config *cfg) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", CREATE);
  *pool = NULL;
  spool_config c;
  spool_status s = resolve_config(cfg, &c, CREATE);
  if (s != SPOOL_OK) return s;
  return open_pool(pool, &c, NULL, CREATE);
}

spool_status spool_pool_adopt(spool_pool **pool, cudaMemPool_t handle, const spool_config *cfg) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ADOPT);
  *pool = NULL;
  if (!handle) return spool__fail(SPOOL_ERR_INVALID, "%s: handle is NULL", ADOPT);
  spool_config c;
  spool_status s = resolve_config(cfg, &c, ADOPT);
  if (s != SPOOL_OK) return s;
  return open_pool(pool, &c, handle, ADOPT);
}

/* The status of a destroy so far (s) and of its next step (later): the first failure wins,
 * except that leaks, already reported, give way to a CUDA failure after them, whose message is
 * this thread's now (status and message must tell the same story). */
static spool_status later_failure(spool_status s, spool_status later) {
  if (later == SPOOL_OK || (s != SPOOL_OK && s != SPOOL_ERR_LEAKS)) return s;
  if (s == SPOOL_ERR_LEAKS)
    return spool__append(later, "; the pool also had leaked buffers (see the leak report)");
  return later;
}

/* The trace's last record, before the leak sweep: the peak and what is still live. */
static void trace_end(spool_pool *pool) {
  uint64_t live_bytes = 0, live_buffers = 0;
  spool__live_totals(pool, &live_bytes, &live_buffers);
  spool__trace_ev end = {.kind = SPOOL_TRACE_END, .size = atomic_load(&pool->peak_bytes),
                         .aux = (uint32_t)(live_buffers > UINT32_MAX ? UINT32_MAX
                                                                     : live_buffers)};
  spool__trace_event(pool, &end);
}

spool_status spool_pool_destroy(spool_pool *pool) {
  if (!pool) return SPOOL_OK;
  /* A second destroy finds the pointer in no list: a status instead of a use after free (as
   * long as no new pool has been given the same address meanwhile). */
  if (!spool__registry_remove(pool))
    return spool__fail(SPOOL_ERR_INVALID, "spool_pool_destroy: %p is not a live pool (destroyed "
                       "already?); nothing done", (void *)pool);
  if (pool->trace) trace_end(pool);
  spool_status s = spool__free_leaks(pool);
  s = later_failure(s, spool__census_destroy(pool, s == SPOOL_OK || s == SPOOL_ERR_LEAKS));
  /* scope objects (their chunks were leaks, freed above) and the hand-off stream, after the
   * heap gave back the blocks freed on it */
  spool__scopes_destroy(pool);
  s = later_failure(s, spool__handoff_destroy(pool));
  if (pool->owned) {
    cudaError_t err = cudaMemPoolDestroy(pool->handle);
    if (err != cudaSuccess) {
      /* The pool object goes all the same: the caller has no way to try again. */
      if (s == SPOOL_OK)
        s = spool__fail_cuda(err, "cudaMemPoolDestroy", "spool_pool_destroy: device %d; the "
                             "cudaMemPool %p stays", pool->device, (void *)pool->handle);
      else
        spool__also_failed(s, err, "cudaMemPoolDestroy (the cudaMemPool stays)");
    }
  }
  spool__front_pool_gone(pool->id);
  pool_free(pool);
  return s;
}

cudaMemPool_t spool_pool_handle(const spool_pool *pool) { return pool ? pool->handle : NULL; }

int spool_pool_device(const spool_pool *pool) { return pool ? pool->device : -1; }

const spool_config *spool_pool_config(const spool_pool *pool) { return pool ? &pool->cfg : NULL; }

/* spool_pool_import (ipc.c) makes pools from another process's descriptor. */
spool_pool *spool__pool_new(const spool_config *cfg, cudaMemPool_t handle, bool owned) {
  return pool_new(cfg, handle, owned);
}
