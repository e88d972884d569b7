/* The allocators the harness compares (see strategy.h). Each strategy is a few small functions;
 * the table at the end ties them together. */
#include "strategy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_strategy.h"

/* ---- none: the loop with the allocations taken out ------------------------------------------- */

/* Per thread, so that threads do not share a counter's cache line. Kernels never see two live
 * buffers of one iteration in the same ring slot (a pipeline frame has 5 live at most). */
static _Thread_local unsigned ring_next;

static bool none_setup(allocator *a) {
  for (int i = 0; i < BENCH_RING; ++i) CUDA_TRY(cudaMalloc(&a->ring[i], a->slot));
  return true;
}

static bool none_alloc(allocator *a, void **p, size_t n, cudaStream_t s) {
  (void)n, (void)s;
  *p = a->ring[ring_next++ % BENCH_RING];
  return true;
}

static bool none_free(allocator *a, void *p, cudaStream_t s) {
  (void)a, (void)p, (void)s;
  return true;
}

/* For strategies with no pool to ask: none, and cudaMalloc, whose reserved is the live count. */
static bool nothing(allocator *a) {
  (void)a;
  return true;
}

static bool no_reserved(allocator *a, uint64_t *out) {
  (void)a;
  *out = 0;
  return true;
}

static bool none_teardown(allocator *a) {
  bool ok = bench_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__, __LINE__);
  for (int i = 0; i < BENCH_RING; ++i) {
    if (a->ring[i] != NULL)
      ok = bench_cuda_ok(cudaFree(a->ring[i]), "cudaFree(ring)", __FILE__, __LINE__) && ok;
    a->ring[i] = NULL;
  }
  return ok;
}

/* ---- cudaMalloc / cudaFree ------------------------------------------------------------------- */

static bool malloc_alloc(allocator *a, void **p, size_t n, cudaStream_t s) {
  (void)a, (void)n, (void)s; /* cudaMalloc is not stream-ordered */
  CUDA_TRY(cudaMalloc(p, n));
  return true;
}

static bool malloc_free(allocator *a, void *p, cudaStream_t s) {
  (void)a, (void)s;
  CUDA_TRY(cudaFree(p));
  return true;
}

/* ---- cudaMallocAsync on the device's pool ---------------------------------------------------- */

/* Configures the pool cudaMallocAsync uses (the default pool unless someone set another) and
 * empties it, so that this strategy starts from what an earlier one left: nothing. */
static bool async_setup(allocator *a, uint64_t threshold) {
  CUDA_TRY(cudaDeviceGetMemPool(&a->mp, a->device));
  CUDA_TRY(cudaMemPoolGetAttribute(a->mp, cudaMemPoolAttrReleaseThreshold, &a->saved_threshold));
  a->ready = true; /* from here teardown puts the threshold back */
  CUDA_TRY(cudaMemPoolSetAttribute(a->mp, cudaMemPoolAttrReleaseThreshold, &threshold));
  CUDA_TRY(cudaDeviceSynchronize());
  CUDA_TRY(cudaMemPoolTrimTo(a->mp, 0));
  return true;
}

static bool async_t0_setup(allocator *a) { return async_setup(a, 0); }
static bool async_tmax_setup(allocator *a) { return async_setup(a, UINT64_MAX); }

static bool async_alloc(allocator *a, void **p, size_t n, cudaStream_t s) {
  (void)a;
  CUDA_TRY(cudaMallocAsync(p, n, s));
  return true;
}

static bool async_free(allocator *a, void *p, cudaStream_t s) {
  (void)a;
  CUDA_TRY(cudaFreeAsync(p, s));
  return true;
}

/* Setting a high-water mark to 0 resets it to the current value (CUDA accepts only 0). */
static bool async_reset(allocator *a) {
  uint64_t zero = 0;
  CUDA_TRY(cudaMemPoolSetAttribute(a->mp, cudaMemPoolAttrReservedMemHigh, &zero));
  CUDA_TRY(cudaMemPoolSetAttribute(a->mp, cudaMemPoolAttrUsedMemHigh, &zero));
  return true;
}

static bool async_reserved(allocator *a, uint64_t *out) {
  CUDA_TRY(cudaMemPoolGetAttribute(a->mp, cudaMemPoolAttrReservedMemHigh, out));
  return true;
}

/* Gives the memory back and the threshold its old value: the next strategy inherits nothing. */
static bool async_teardown(allocator *a) {
  if (!a->ready) return true; /* no pool found: nothing was changed */
  bool ok = bench_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__, __LINE__);
  ok = bench_cuda_ok(cudaMemPoolTrimTo(a->mp, 0), "cudaMemPoolTrimTo(pool, 0)", __FILE__,
                     __LINE__) && ok;
  ok = bench_cuda_ok(cudaMemPoolSetAttribute(a->mp, cudaMemPoolAttrReleaseThreshold,
                                             &a->saved_threshold),
                     "cudaMemPoolSetAttribute(ReleaseThreshold)", __FILE__, __LINE__) && ok;
  return ok;
}

/* ---- PyTorch's caching allocator (torch_strategy.h) ------------------------------------------ */

/* teardown empties PyTorch's cache only after a setup that got that far. */
static bool torch_setup(allocator *a, bool expandable) {
  a->expandable = expandable;
  a->ready = bench_torch_setup(a->device, expandable);
  return a->ready;
}

static bool torch_native_setup(allocator *a) { return torch_setup(a, false); }
static bool torch_expandable_setup(allocator *a) { return torch_setup(a, true); }

static bool torch_reset(allocator *a) { return bench_torch_reset_peaks(a->device); }

static bool torch_reserved(allocator *a, uint64_t *out) {
  uint64_t allocated = 0;
  return bench_torch_peaks(a->device, out, &allocated);
}

static bool torch_allocated(allocator *a, uint64_t *out) {
  uint64_t reserved = 0;
  return bench_torch_peaks(a->device, &reserved, out);
}

static bool torch_teardown(allocator *a) {
  return !a->ready || bench_torch_teardown(a->device, a->expandable);
}

/* ---- spool (sp_*: spool_ is the library's prefix) -------------------------------------------- */

static bool sp_setup(allocator *a) {
  spool_config cfg;
  spool_config_init(&cfg);
  cfg.device = a->device;
  SPOOL_TRY(spool_config_parse(&cfg, a->conf));
  SPOOL_TRY(spool_pool_create(&a->pool, &cfg));
  return true;
}

/* SPOOL_ALLOC / SPOOL_FREE: the forms the README shows users (they record the call site). */
static bool sp_alloc(allocator *a, void **p, size_t n, cudaStream_t s) {
  return bench_spool_ok(SPOOL_ALLOC(a->pool, p, n, s), "spool_alloc", __FILE__, __LINE__);
}

static bool sp_free(allocator *a, void *p, cudaStream_t s) {
  return bench_spool_ok(SPOOL_FREE(a->pool, p, s), "spool_free", __FILE__, __LINE__);
}

static bool sp_reset(allocator *a) {
  SPOOL_TRY(spool_stats_reset_peaks(a->pool));
  return true;
}

static bool sp_reserved(allocator *a, uint64_t *out) {
  spool_stats st;
  SPOOL_TRY(spool_stats_get(a->pool, &st));
  *out = st.bytes_reserved_peak;
  return true;
}

/* Every buffer was freed, so destroy must say SPOOL_OK; SPOOL_ERR_LEAKS is a harness bug. */
static bool sp_teardown(allocator *a) {
  bool ok = bench_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__, __LINE__);
  ok = bench_spool_ok(spool_pool_destroy(a->pool), "spool_pool_destroy", __FILE__, __LINE__) && ok;
  a->pool = NULL;
  return ok;
}

/* ---- the table ------------------------------------------------------------------------------- */

#define POOL_FNS(prefix)                                                                          \
  .alloc = prefix##_alloc, .free = prefix##_free, .reset_peaks = prefix##_reset,                  \
  .reserved_high = prefix##_reserved, .teardown = prefix##_teardown
#define SPOOL_STRATEGY(nm, text, desc)                                                            \
  {.name = nm, .what = desc, .conf = text, .setup = sp_setup, POOL_FNS(sp)}
#define TORCH_STRATEGY(nm, kind, desc)                                                            \
  {.name = nm, .what = desc, .in_build = bench_torch_built, .usable = bench_torch_usable,         \
   .setup = torch_##kind##_setup, .alloc = bench_torch_alloc, .free = bench_torch_free,           \
   .reset_peaks = torch_reset, .reserved_high = torch_reserved,                                   \
   .allocated_high = torch_allocated, .teardown = torch_teardown}

const strategy STRATEGIES[ST_COUNT] = {
    {.name = "none",
     .what = "no allocation: the same loop; alloc hands out one of 8 buffers made at setup",
     .setup = none_setup, .alloc = none_alloc, .free = none_free, .reset_peaks = nothing,
     .reserved_high = no_reserved, .teardown = none_teardown},
    {.name = "cudaMalloc", .what = "cudaMalloc + cudaFree (cudaFree waits for the whole device)",
     .slow = true, .live_is_reserved = true, .setup = nothing, .alloc = malloc_alloc,
     .free = malloc_free, .reset_peaks = nothing, .reserved_high = no_reserved,
     .teardown = nothing},
    {.name = "async-t0",
     .what = "cudaMallocAsync + cudaFreeAsync, default pool, release threshold 0 (shipped)",
     .setup = async_t0_setup, POOL_FNS(async)},
    {.name = "async-tmax",
     .what = "cudaMallocAsync + cudaFreeAsync, default pool, release threshold max",
     .setup = async_tmax_setup, POOL_FNS(async)},
    TORCH_STRATEGY("torch-native", native,
                   "PyTorch's caching allocator: raw_alloc_with_stream + raw_delete (c10)"),
    TORCH_STRATEGY("torch-expandable", expandable,
                   "the same with expandable_segments:True (torch-native sets False)"),
    SPOOL_STRATEGY("spool-nocache", "cache=off",
                   "spool_alloc + spool_free, defaults with cache=off"),
    SPOOL_STRATEGY("spool", "", "spool_alloc + spool_free, defaults"),
    SPOOL_STRATEGY("spool-tuned", BENCH_TUNED_DEFAULT,
                   "spool_alloc + spool_free, tuned config (--tuned)"),
};

int strategy_find(const char *name) {
  for (int i = 0; i < ST_COUNT; ++i)
    if (strcmp(STRATEGIES[i].name, name) == 0) return i;
  return -1;
}

bool strategy_in_build(const strategy *st) { return st->in_build == NULL || st->in_build(); }

bool strategy_conf_ok(const char *conf, char *why, size_t len) {
  spool_config cfg;
  spool_config_init(&cfg);
  if (spool_config_parse(&cfg, conf) == SPOOL_OK) return true;
  snprintf(why, len, "%s", spool_last_error());
  return false;
}

void strategy_init(allocator *a, const strategy *st, int device, const char *conf, size_t slot) {
  memset(a, 0, sizeof *a);
  a->st = st;
  a->device = device;
  a->conf = conf;
  a->slot = slot;
  a->alloc = st->alloc;
  a->free = st->free;
}

/* "key":<digits> in spool's JSON; false when the key is not there. */
static bool json_u64(const char *json, const char *key, uint64_t *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *p = strstr(json, pat);
  if (p == NULL) return false;
  p += strlen(pat);
  while (isspace((unsigned char)*p) || *p == ':') ++p;
  if (!isdigit((unsigned char)*p)) return false;
  *out = strtoull(p, NULL, 10);
  return true;
}

/* Read through the JSON, not the struct, so that the harness builds against a spool whose
 * spool_stats has no cache fields yet. */
bool strategy_cache_stats(allocator *a, cache_counts *out) {
  if (a->pool == NULL) return false;
  char json[4096];
  if (spool_stats_json(a->pool, json, sizeof json) != SPOOL_OK) return false;
  return json_u64(json, "cache_hits", &out->hits) &&
         json_u64(json, "cache_misses", &out->misses) &&
         json_u64(json, "chunk_allocs", &out->chunk_allocs) &&
         json_u64(json, "fences", &out->fences);
}
