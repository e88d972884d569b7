/* spool as PyTorch's CUDA allocator (see spool_torch.h for the contract).
 *
 * State: one slot per device, holding its pool (made once, under a lock, then read without one),
 * the bytes PyTorch holds there and the memory-fraction limit. The config is read once, at the
 * first pool or at spool_torch_configure, whichever comes first.
 *
 * Devices: PyTorch calls the free function from whatever thread drops the last reference, with
 * whatever device is current there; for the legacy stream (handle NULL) "the stream" means the
 * current device's, so every call that passes a stream to spool first makes the buffer's device
 * current (and restores the caller's after).
 *
 * Errors: statuses and messages inside, one throw at the exported function's end, where
 * nothing is locked or half done (see spool__torch_throw). Nothing runs at process exit: the
 * pools live until the process ends, as PyTorch's own cached memory does. */
#include "spool_torch.h"

#include "internal.h" /* spool__format_size: the same sizes in words as spool's messages */

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MESSAGE 1024

typedef struct device_slot {
  _Atomic(spool_pool *) pool;     /* NULL until the device's first allocation */
  atomic_uint_least64_t in_use;   /* bytes PyTorch holds: asked at alloc, given back at free */
  atomic_bool limited;            /* a memory fraction was set ... */
  atomic_uint_least64_t limit;    /* ... and this many bytes of in_use are allowed */
  atomic_uint_least64_t total;    /* the device's memory when the fraction was set */
} device_slot;

static struct {
  pthread_mutex_t lock;     /* making pools, and the config */
  spool_config cfg;
  bool configured;
  bool any_pool;            /* once true, the config is fixed */
  atomic_int device_count;  /* from the init hook, for messages; 0 until then */
  atomic_uint_least64_t free_failures;
  _Atomic(spool__torch_throw_fn) thrower; /* NULL: spool__torch_throw */
  device_slot dev[SPOOL_TORCH_MAX_DEVICES];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local char last_error[MESSAGE];

/* ---- messages -------------------------------------------------------------------------------- */

static spool_status failf(spool_status s, const char *fmt, ...) SPOOL__PRINTF(2, 3);
static spool_status failf(spool_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return s;
}

/* A failure spool reported: its message, verbatim (it names the call and the numbers). */
static spool_status fail_spool(spool_status s) {
  return failf(s, "%s", spool_last_error());
}

/* Throws (or, with a test's thrower, returns) for status s with the message in last_error. */
static void throw_status(spool_status s, const char *function, int line) {
  spool__torch_throw_fn fn = atomic_load(&g.thrower);
  if (!fn) fn = spool__torch_throw;
  fn(s == SPOOL_ERR_OOM, function, __FILE__, line, last_error);
}
#define THROW_STATUS(s) throw_status((s), __func__, __LINE__)

void spool__torch_set_throw(spool__torch_throw_fn fn) { atomic_store(&g.thrower, fn); }

const char *spool_torch_last_error(void) { return last_error; }

const char *spool_torch_version(void) { return spool_version_string(); }

/* ---- devices --------------------------------------------------------------------------------- */

static spool_status check_device(int device, const char *ctx) {
  if (device >= 0 && device < SPOOL_TORCH_MAX_DEVICES) return SPOOL_OK;
  char seen[64] = "";
  int count = atomic_load(&g.device_count);
  if (count > 0) snprintf(seen, sizeof seen, "; PyTorch sees %d", count);
  return failf(SPOOL_ERR_INVALID, "%s: device %d is out of range (the plug-in serves devices 0 "
               "to %d%s)", ctx, device, SPOOL_TORCH_MAX_DEVICES - 1, seen);
}

/* Makes device current; *saved is the caller's current device, for leave_device. */
static spool_status enter_device(int device, int *saved, const char *ctx) {
  cudaError_t err = cudaGetDevice(saved);
  if (err == cudaSuccess && *saved != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) return SPOOL_OK;
  spool__clear_cuda_error(); /* reported here: the caller's next check must not see it */
  return failf(SPOOL_ERR_CUDA, "%s: making device %d current failed: %s", ctx, device,
               cudaGetErrorName(err));
}

/* Restores the caller's device. Keeps s; a failure to restore becomes the failure when s is
 * SPOOL_OK (the work is done, but the caller's thread is left on the wrong device). */
static spool_status leave_device(int device, int saved, spool_status s, const char *ctx) {
  if (saved == device) return s;
  cudaError_t err = cudaSetDevice(saved);
  if (err == cudaSuccess) return s;
  spool__clear_cuda_error();
  if (s != SPOOL_OK) return s;
  return failf(SPOOL_ERR_CUDA, "%s: restoring device %d failed: %s", ctx, saved,
               cudaGetErrorName(err));
}

/* ---- config and pools ------------------------------------------------------------------------ */

/* What the plug-in changes in spool's defaults: all-free heap chunks wait for the next user
 * until empty_cache or an out-of-memory gives them back, as PyTorch's own allocator keeps its
 * segments. A model's step frees and retakes chunks of many sizes; handed back after the
 * library's 256 idle allocations, they left the cudaMemPool fragmented: on an H200
 * (docs/benchmarks.md, PyTorch) the transformer reserved 3,584 MiB with the library's default
 * and 3,104 MiB with this one (PyTorch native: 3,032); the CNN 2,592 either way. */
#define PLUGIN_DEFAULTS "chunk_idle=1000000"

/* spool's defaults, the plug-in's, SPOOL_CONF, then text; into *cfg only when all of it is
 * valid. */
static spool_status read_config(spool_config *cfg, const char *text) {
  spool_config c;
  spool_config_init(&c);
  spool_status s = spool_config_parse(&c, PLUGIN_DEFAULTS);
  if (s == SPOOL_OK) s = spool_config_from_env(&c);
  if (s == SPOOL_OK && text && text[0]) s = spool_config_parse(&c, text);
  if (s == SPOOL_OK) s = spool_config_validate(&c);
  if (s != SPOOL_OK) return fail_spool(s);
  *cfg = c;
  return SPOOL_OK;
}

int spool_torch_configure(const char *text) {
  pthread_mutex_lock(&g.lock);
  spool_status s = SPOOL_OK;
  if (g.any_pool)
    s = failf(SPOOL_ERR_INVALID, "spool_torch_configure: the pools exist already (the first CUDA "
              "tensor made them), so their config can no longer change: configure first");
  if (s == SPOOL_OK) s = read_config(&g.cfg, text);
  if (s == SPOOL_OK) g.configured = true;
  pthread_mutex_unlock(&g.lock);
  return (int)s;
}

/* The device's pool, or NULL when none has been made. */
static spool_pool *existing_pool(int device) {
  return atomic_load_explicit(&g.dev[device].pool, memory_order_acquire);
}

static spool_status make_pool_locked(int device, spool_pool **out) {
  spool_status s = g.configured ? SPOOL_OK : read_config(&g.cfg, NULL);
  if (s == SPOOL_OK) {
    g.configured = true;
    spool_config cfg = g.cfg;
    cfg.device = device;
    s = spool_pool_create(out, &cfg);
  }
  if (s != SPOOL_OK) /* a bad SPOOL_CONF is reported here, and read again next time */
    return failf(s, "spool_torch: making the pool of device %d failed: %s", device,
                 spool_last_error());
  g.any_pool = true;
  atomic_store_explicit(&g.dev[device].pool, *out, memory_order_release);
  return SPOOL_OK;
}

/* The device's pool, made at the first call (device checked by the caller). */
static spool_status pool_for(int device, spool_pool **out) {
  *out = existing_pool(device);
  if (*out) return SPOOL_OK;
  pthread_mutex_lock(&g.lock);
  *out = existing_pool(device);
  spool_status s = *out ? SPOOL_OK : make_pool_locked(device, out);
  pthread_mutex_unlock(&g.lock);
  return s;
}

int spool_torch_pool(int device, spool_pool **out) {
  static const char ctx[] = "spool_torch_pool";
  if (!out) return (int)failf(SPOOL_ERR_INVALID, "%s: out is NULL", ctx);
  *out = NULL;
  spool_status s = check_device(device, ctx);
  if (s == SPOOL_OK) s = pool_for(device, out);
  return (int)s;
}

/* ---- allocation ------------------------------------------------------------------------------ */

/* Counts size against the device's memory-fraction limit, if one is set; on failure nothing is
 * counted. Counting first and undoing on failure keeps concurrent allocations from passing the
 * limit together. */
static spool_status take_quota(device_slot *d, int device, size_t size) {
  uint64_t before = atomic_fetch_add(&d->in_use, size);
  if (!atomic_load(&d->limited)) return SPOOL_OK;
  uint64_t limit = atomic_load(&d->limit);
  if (before + size <= limit) return SPOOL_OK;
  atomic_fetch_sub(&d->in_use, size);
  uint64_t total = atomic_load(&d->total);
  char a[SPOOL__SIZE_TEXT], u[SPOOL__SIZE_TEXT], l[SPOOL__SIZE_TEXT], t[SPOOL__SIZE_TEXT];
  return failf(SPOOL_ERR_OOM, "spool_torch_alloc: out of device memory: asked %s on device %d, "
               "where tensors hold %s; that would pass the limit of %s set by "
               "torch.cuda.set_per_process_memory_fraction (%.4g of %s)",
               spool__format_size(size, a), device, spool__format_size(before, u),
               spool__format_size(limit, l), total ? (double)limit / (double)total : 0.0,
               spool__format_size(total, t));
}

static spool_status alloc_on(size_t size, int device, cudaStream_t stream, void **out) {
  static const char ctx[] = "spool_torch_alloc";
  spool_pool *pool = NULL;
  spool_status s = check_device(device, ctx);
  if (s == SPOOL_OK) s = pool_for(device, &pool);
  if (s == SPOOL_OK) s = take_quota(&g.dev[device], device, size);
  if (s != SPOOL_OK) return s;
  int saved = device;
  s = enter_device(device, &saved, ctx);
  if (s == SPOOL_OK) {
    s = spool_alloc(pool, out, size, stream);
    if (s != SPOOL_OK) fail_spool(s);
    s = leave_device(device, saved, s, ctx);
  }
  if (s == SPOOL_OK) return SPOOL_OK;
  if (*out) { /* allocated, but the caller's device could not be restored: give it back */
    spool_status freed = spool_free(pool, *out, stream);
    if (freed != SPOOL_OK) fprintf(stderr, "spool_torch: %s\n", spool_last_error());
    *out = NULL;
  }
  atomic_fetch_sub(&g.dev[device].in_use, size);
  return s;
}

void *spool_torch_alloc(size_t size, int device, cudaStream_t stream) {
  if (size == 0) return NULL;
  void *ptr = NULL;
  spool_status s = alloc_on(size, device, stream, &ptr);
  if (s == SPOOL_OK) return ptr;
  THROW_STATUS(s); /* PyTorch would take NULL for a tensor at address 0 */
  return NULL;     /* only with a test's thrower */
}

/* ctypes callers (spool.cupy, spool.numba) cannot catch a C++ exception: it would end the
 * process. Same path as spool_torch_alloc, with the status returned instead of thrown. */
int spool_torch_try_alloc(void **out, size_t size, int device, cudaStream_t stream) {
  if (!out) return failf(SPOOL_ERR_INVALID, "spool_torch_try_alloc: out is NULL");
  *out = NULL;
  if (size == 0) return SPOOL_OK;
  return alloc_on(size, device, stream, out);
}

static spool_status free_on(void *ptr, size_t size, int device, cudaStream_t stream) {
  static const char ctx[] = "spool_torch_free";
  spool_status s = check_device(device, ctx);
  spool_pool *pool = s == SPOOL_OK ? existing_pool(device) : NULL;
  if (s == SPOOL_OK && !pool)
    s = failf(SPOOL_ERR_UNKNOWN_POINTER, "%s: %p on device %d: the plug-in has no pool there, so "
              "it did not allocate this pointer", ctx, ptr, device);
  int saved = device;
  if (s == SPOOL_OK) s = enter_device(device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  s = spool_free(pool, ptr, stream);
  if (s != SPOOL_OK) fail_spool(s);
  else atomic_fetch_sub(&g.dev[device].in_use, size);
  return leave_device(device, saved, s, ctx);
}

void spool_torch_free(void *ptr, size_t size, int device, cudaStream_t stream) {
  if (!ptr) return;
  spool_status s = free_on(ptr, size, device, stream);
  if (s == SPOOL_OK) return;
  /* PyTorch frees in destructors, where an exception would end the process. */
  atomic_fetch_add(&g.free_failures, 1);
  fprintf(stderr, "spool_torch: %s\n", last_error);
}

/* ---- the hooks ------------------------------------------------------------------------------- */

void spool_torch_record_stream(void *ptr, cudaStream_t stream) {
  if (!ptr) return;
  spool_pool *pool = NULL;
  spool_status s = spool_pool_of(ptr, &pool); /* the tensor's device is not passed */
  if (s == SPOOL_OK) s = spool_record_stream(pool, ptr, stream);
  if (s == SPOOL_OK) return;
  failf(s, "spool_torch_record_stream: %s", spool_last_error());
  THROW_STATUS(s);
}

/* Synchronizes device and trims its pool. */
static spool_status empty_one(int device, spool_pool *pool) {
  static const char ctx[] = "spool_torch_empty_cache";
  int saved = device;
  spool_status s = enter_device(device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    spool__clear_cuda_error();
    s = failf(SPOOL_ERR_CUDA, "%s: cudaDeviceSynchronize on device %d failed: %s", ctx, device,
              cudaGetErrorName(err));
  }
  if (s == SPOOL_OK && (s = spool_trim(pool, 0)) != SPOOL_OK) fail_spool(s);
  return leave_device(device, saved, s, ctx);
}

void spool_torch_empty_cache(void) {
  spool_status first = SPOOL_OK;
  char message[MESSAGE] = "";
  for (int d = 0; d < SPOOL_TORCH_MAX_DEVICES; d++) {
    spool_pool *pool = existing_pool(d);
    spool_status s = pool ? empty_one(d, pool) : SPOOL_OK;
    if (s != SPOOL_OK && first == SPOOL_OK) {
      first = s;
      memcpy(message, last_error, sizeof message);
    }
  }
  if (first == SPOOL_OK) return;
  memcpy(last_error, message, sizeof message);
  THROW_STATUS(first);
}

void spool_torch_init(int device_count) { atomic_store(&g.device_count, device_count); }

/* cudaMemGetInfo of device (checked by the caller), with the caller's device kept. */
static spool_status device_memory(int device, size_t *free_b, size_t *total_b, const char *ctx) {
  int saved = device;
  spool_status s = enter_device(device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaError_t err = cudaMemGetInfo(free_b, total_b);
  if (err != cudaSuccess) {
    spool__clear_cuda_error();
    s = failf(SPOOL_ERR_CUDA, "%s: cudaMemGetInfo on device %d failed: %s", ctx, device,
              cudaGetErrorName(err));
  }
  return leave_device(device, saved, s, ctx);
}

static spool_status set_fraction(double fraction, int device) {
  static const char ctx[] = "spool_torch_set_memory_fraction";
  if (!(fraction >= 0.0 && fraction <= 1.0)) /* NaN too */
    return failf(SPOOL_ERR_INVALID, "%s: fraction %g is not between 0 and 1", ctx, fraction);
  spool_status s = check_device(device, ctx);
  size_t free_b = 0, total_b = 0;
  if (s == SPOOL_OK) s = device_memory(device, &free_b, &total_b, ctx);
  if (s != SPOOL_OK) return s;
  device_slot *d = &g.dev[device];
  atomic_store(&d->total, (uint64_t)total_b);
  atomic_store(&d->limit, (uint64_t)(fraction * (double)total_b));
  atomic_store(&d->limited, true);
  return SPOOL_OK;
}

void spool_torch_set_memory_fraction(double fraction, int device) {
  spool_status s = set_fraction(fraction, device);
  if (s != SPOOL_OK) THROW_STATUS(s);
}

/* ---- statistics ------------------------------------------------------------------------------ */

/* Replaces the closing brace of spool's JSON in buf with the plug-in's keys. */
static spool_status append_plugin_keys(int device, char *buf, size_t len) {
  device_slot *d = &g.dev[device];
  size_t used = strlen(buf) - 1; /* spool's JSON ends with '}' */
  char limit[32] = "null";
  if (atomic_load(&d->limited))
    snprintf(limit, sizeof limit, "%" PRIu64, (uint64_t)atomic_load(&d->limit));
  int n = snprintf(buf + used, len - used,
                   ",\"torch_bytes_in_use\":%" PRIu64 ",\"torch_limit\":%s,\"free_failures\":%"
                   PRIu64 "}", (uint64_t)atomic_load(&d->in_use), limit,
                   (uint64_t)atomic_load(&g.free_failures));
  if (n >= 0 && (size_t)n < len - used) return SPOOL_OK;
  buf[0] = '\0';
  return failf(SPOOL_ERR_INVALID, "spool_torch_stats_json: buf holds %zu bytes; the JSON needs "
               "%zu (NUL included)", len, used + (size_t)(n < 0 ? 0 : n) + 1);
}

int spool_torch_stats_json(int device, char *buf, size_t len) {
  static const char ctx[] = "spool_torch_stats_json";
  if (!buf || !len) return failf(SPOOL_ERR_INVALID, "%s: buf is NULL or len is 0", ctx);
  buf[0] = '\0';
  spool_status s = check_device(device, ctx);
  if (s != SPOOL_OK) return (int)s;
  spool_pool *pool = existing_pool(device);
  if (!pool)
    return (int)failf(SPOOL_ERR_INVALID, "%s: no pool on device %d yet (it is made at the "
                      "device's first CUDA allocation)", ctx, device);
  s = spool_stats_json(pool, buf, len);
  if (s != SPOOL_OK) return (int)failf(s, "%s: %s", ctx, spool_last_error());
  return (int)append_plugin_keys(device, buf, len);
}

int spool_torch_counters_get(int device, spool_torch_counters *out) {
  static const char ctx[] = "spool_torch_counters_get";
  if (!out || out->size < sizeof *out)
    return (int)failf(SPOOL_ERR_INVALID, "%s: out is NULL or out->size is not set to "
                      "sizeof(spool_torch_counters) (%zu)", ctx, sizeof *out);
  spool_status s = check_device(device, ctx);
  if (s != SPOOL_OK) return (int)s;
  size_t size = out->size;
  memset(out, 0, sizeof *out);
  out->size = size;
  spool_pool *pool = existing_pool(device);
  if (!pool) return SPOOL_OK;
  spool_stats st;
  s = spool_stats_get(pool, &st);
  if (s != SPOOL_OK) return (int)failf(s, "%s: %s", ctx, spool_last_error());
  out->bytes_in_use = st.bytes_in_use;
  out->bytes_in_use_peak = st.bytes_in_use_peak;
  out->buffers_in_use = st.buffers_in_use;
  out->buffers_in_use_peak = st.buffers_in_use_peak;
  out->bytes_reserved = st.bytes_reserved;
  out->bytes_reserved_peak = st.bytes_reserved_peak;
  out->bytes_allocated = st.bytes_allocated;
  out->allocs = st.allocs;
  out->frees = st.frees;
  out->ooms = st.ooms;
  out->oom_retries = st.oom_retries;
  out->chunk_allocs = st.chunk_allocs;
  out->chunk_frees = st.chunk_frees;
  out->bytes_cached = st.bytes_cached;
  out->largest_free_block = st.largest_free_block;
  out->torch_bytes_in_use = atomic_load(&g.dev[device].in_use);
  return SPOOL_OK;
}

int spool_torch_reset_peaks(int device) {
  spool_status s = check_device(device, "spool_torch_reset_peaks");
  spool_pool *pool = s == SPOOL_OK ? existing_pool(device) : NULL;
  if (pool && (s = spool_stats_reset_peaks(pool)) != SPOOL_OK) fail_spool(s);
  return (int)s;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

int spool_torch_cache_info(int device, size_t *largest) {
  static const char ctx[] = "spool_torch_cache_info";
  if (!largest) return (int)failf(SPOOL_ERR_INVALID, "%s: largest is NULL", ctx);
  spool_status s = check_device(device, ctx);
  uint64_t guess = *largest;
  size_t free_b = 0, total_b = 0;
  if (s == SPOOL_OK && guess == 0 && (s = device_memory(device, &free_b, &total_b, ctx)) ==
      SPOOL_OK)
    guess = free_b;
  if (s != SPOOL_OK) return (int)s;
  spool_pool *pool = existing_pool(device);
  if (pool) {
    spool_stats st;
    if ((s = spool_stats_get(pool, &st)) != SPOOL_OK)
      return (int)failf(s, "%s: %s", ctx, spool_last_error());
    guess = max_u64(guess, st.largest_free_block);
    uint64_t max_size = spool_pool_config(pool)->max_size; /* 0: no limit */
    if (max_size) { /* new chunks fit in what max_size leaves; the idle block is there already */
      uint64_t room = max_size > st.bytes_reserved ? max_size - st.bytes_reserved : 0;
      guess = min_u64(guess, max_u64(room, st.largest_free_block));
    }
  }
  device_slot *d = &g.dev[device];
  if (atomic_load(&d->limited)) {
    uint64_t limit = atomic_load(&d->limit), used = atomic_load(&d->in_use);
    guess = min_u64(guess, limit > used ? limit - used : 0);
  }
  *largest = (size_t)guess;
  return SPOOL_OK;
}

/* ---- tests ----------------------------------------------------------------------------------- */

int spool__torch_forget(void) {
  pthread_mutex_lock(&g.lock);
  spool_status first = SPOOL_OK;
  for (int i = 0; i < SPOOL_TORCH_MAX_DEVICES; i++) {
    device_slot *d = &g.dev[i];
    spool_status s = spool_pool_destroy(atomic_exchange(&d->pool, NULL));
    if (s != SPOOL_OK && first == SPOOL_OK) first = fail_spool(s);
    atomic_store(&d->in_use, 0);
    atomic_store(&d->limited, false);
    atomic_store(&d->limit, 0);
    atomic_store(&d->total, 0);
  }
  g.configured = g.any_pool = false;
  atomic_store(&g.device_count, 0);
  atomic_store(&g.free_failures, 0);
  atomic_store(&g.thrower, NULL);
  pthread_mutex_unlock(&g.lock);
  return (int)first;
}
