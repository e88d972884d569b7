/* Statistics: the library's counters next to the pool's own attributes, and the human report. */
#include "capture.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

typedef struct pool_attrs {
  uint64_t reserved, reserved_high, used, used_high;
} pool_attrs;

static spool_status read_attrs(spool_pool *p, pool_attrs *a, const char *ctx) {
  static const enum cudaMemPoolAttr which[4] = {
      cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrReservedMemHigh,
      cudaMemPoolAttrUsedMemCurrent, cudaMemPoolAttrUsedMemHigh};
  uint64_t *dst[4] = {&a->reserved, &a->reserved_high, &a->used, &a->used_high};
  enum cudaStreamCaptureMode mode;
  bool relaxed = spool__relaxed_enter(&mode); /* other threads' captures */
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 4 && err == cudaSuccess; i++)
    err = cudaMemPoolGetAttribute(p->handle, which[i], dst[i]);
  spool__relaxed_leave(relaxed, mode);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolGetAttribute", "%s: device %d", ctx, p->device);
  return SPOOL_OK;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The uncached path's counters c and the caches' k; peaks are the pool-wide ones, never below
 * the exact current values. */
/* The heap's figures, read under the pool's lock. */
typedef struct heap_figures {
  uint64_t chunk_bytes, largest, chunk_allocs, chunk_frees, fences;
  uint64_t malloc_bytes; /* chunks from cudaMalloc, which the pool's attributes leave out */
} heap_figures;

static void fill(spool_stats *out, const spool__counters *c, const spool__cache_counters *k,
                 const uint64_t peaks[2], const pool_attrs *a, const heap_figures *h) {
  memset(out, 0, sizeof *out);
  out->size = sizeof *out;
  out->bytes_in_use = c->bytes_in_use + k->bytes_in_use;
  out->bytes_in_use_peak = max_u64(peaks[0], out->bytes_in_use);
  out->buffers_in_use = c->buffers_in_use + k->buffers_in_use;
  out->buffers_in_use_peak = max_u64(peaks[1], out->buffers_in_use);
  out->bytes_reserved = a->reserved + h->malloc_bytes;
  out->bytes_reserved_peak = max_u64(a->reserved_high, out->bytes_reserved);
  out->allocs = c->allocs + k->allocs;
  out->frees = c->frees + k->frees;
  out->bytes_used = a->used + h->malloc_bytes;
  out->bytes_used_peak = max_u64(a->used_high, out->bytes_used);
  out->bytes_allocated = c->bytes_allocated + k->bytes_allocated;
  out->cache_hits = k->hits;
  out->cache_misses = k->misses;
  out->bytes_cached = k->bytes_cached;
  out->cache_flushes = k->flushes;
  out->alloc_failures = c->alloc_failures;
  out->ooms = c->ooms;
  out->trims = c->trims;
  out->oom_retries = c->oom_retries;
  out->oom_recoveries = c->oom_recoveries;
  out->oom_handler_calls = c->oom_handler_calls;
  out->bad_frees = c->bad_frees;
  out->bytes_front = k->bytes_front;
  out->bytes_heap = h->chunk_bytes;
  out->largest_free_block = h->largest;
  out->chunk_allocs = h->chunk_allocs;
  out->chunk_frees = h->chunk_frees;
  out->fences = h->fences;
}

static spool_status snapshot(spool_pool *p, spool_stats *out, const char *ctx) {
  pool_attrs a;
  spool_status s = read_attrs(p, &a, ctx);
  if (s != SPOOL_OK) return s;
  spool__cache_counters k;
  spool__census_sum(p, &k); /* publishes every cache: the totals are exact after */
  pthread_mutex_lock(&p->lock);
  spool__counters c = p->c;
  heap_figures h = {p->heap.chunk_bytes, spool__heap_largest_free(p), p->heap.chunk_allocs,
                    p->heap.chunk_frees, p->heap.fences, p->heap.malloc_bytes};
  pthread_mutex_unlock(&p->lock);
  /* The published peaks are within 1 MiB and 8 buffers per stream; no stream's own high is
   * above the truth. */
  uint64_t peaks[2] = {atomic_load(&p->peak_bytes), atomic_load(&p->peak_buffers)};
  if (k.high > peaks[0]) peaks[0] = k.high;
  if (k.high_buffers > peaks[1]) peaks[1] = k.high_buffers;
  fill(out, &c, &k, peaks, &a, &h);
  return SPOOL_OK;
}

spool_status spool_stats_get(spool_pool *pool, spool_stats *out) {
  static const char ctx[] = "spool_stats_get";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!out) return spool__fail(SPOOL_ERR_INVALID, "%s: out is NULL", ctx);
  spool_stats st;
  spool_status s = snapshot(pool, &st, ctx);
  if (s == SPOOL_OK) *out = st;
  return s;
}

spool_status spool_stats_reset_peaks(spool_pool *pool) {
  static const char ctx[] = "spool_stats_reset_peaks";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  /* CUDA accepts only 0 for the high-water marks, meaning "reset to the current value". No
   * reset can be undone: when the second fails, the first stands (documented in spool.h). */
  uint64_t zero = 0;
  enum cudaStreamCaptureMode mode;
  bool relaxed = spool__relaxed_enter(&mode); /* other threads' captures */
  cudaError_t err = cudaMemPoolSetAttribute(pool->handle, cudaMemPoolAttrReservedMemHigh, &zero);
  if (err == cudaSuccess)
    err = cudaMemPoolSetAttribute(pool->handle, cudaMemPoolAttrUsedMemHigh, &zero);
  spool__relaxed_leave(relaxed, mode);
  if (err != cudaSuccess)
    return spool__fail_cuda(err, "cudaMemPoolSetAttribute", "%s: device %d", ctx, pool->device);
  spool__census_reset_peaks(pool);
  return SPOOL_OK;
}

/* ---- report ---------------------------------------------------------------------------------- */

static void report_config(const spool_pool *p, FILE *out) {
  char t[SPOOL__SIZE_TEXT], r[SPOOL__SIZE_TEXT], m[SPOOL__SIZE_TEXT];
  const spool_config *c = &p->cfg;
  fprintf(out, "  settings:  release_threshold=%s reserve=%s max_size=%s\n",
          spool__format_size(c->release_threshold, t), spool__format_size(c->reserve, r),
          c->max_size ? spool__format_size(c->max_size, m) : "none");
  fprintf(out, "             reuse: follow_event_dependencies=%s allow_opportunistic=%s "
               "allow_internal_dependencies=%s\n",
          c->reuse_follow_event_dependencies ? "on" : "off",
          c->reuse_allow_opportunistic ? "on" : "off",
          c->reuse_allow_internal_dependencies ? "on" : "off");
  static const char *const tracks[] = {"off", "counts", "full"};
  fprintf(out, "             track=%s poison=%s oom_retries=%u\n",
          (unsigned)c->track < 3 ? tracks[c->track] : "?", c->poison ? "on" : "off",
          c->oom_retries);
  char l[SPOOL__SIZE_TEXT], b[SPOOL__SIZE_TEXT];
  char f[SPOOL__SIZE_TEXT];
  fprintf(out, "             cache=%s front_limit=%s front_brief=%s heap_max_block=%s "
               "chunk_idle=%u fence_every=%u fence_bytes=%s capture_check=%s cache_owner=%s%s\n",
          c->cache ? "on" : "off", spool__format_size(c->front_limit, l),
          c->front_brief ? "on" : "off",
          spool__format_size(c->heap_max_block, b), c->chunk_idle, c->fence_every,
          spool__format_size(c->fence_bytes, f),
          c->capture_check ? "on" : "off",
          c->cache_owner ? "on" : "off",
          c->cache_owner && !spool__barrier_available() ? " (no barrier here: locks)" : "");
  fprintf(out, "             peer_access=[");
  for (int i = 0; i < c->peer_access_count; i++)
    fprintf(out, "%s%d", i ? "," : "", c->peer_access[i]);
  fprintf(out, "]\n");
}

static void report_stats(const spool_stats *st, FILE *out) {
  char a[SPOOL__SIZE_TEXT], b[SPOOL__SIZE_TEXT], d[SPOOL__SIZE_TEXT], e[SPOOL__SIZE_TEXT];
  fprintf(out, "  in use:    %s in %" PRIu64 " buffers (peak %s in %" PRIu64 ")\n",
          spool__format_size(st->bytes_in_use, a), st->buffers_in_use,
          spool__format_size(st->bytes_in_use_peak, b), st->buffers_in_use_peak);
  fprintf(out, "  reserved:  %s (peak %s); the pool counts %s used (peak %s)\n",
          spool__format_size(st->bytes_reserved, a), spool__format_size(st->bytes_reserved_peak, b),
          spool__format_size(st->bytes_used, d), spool__format_size(st->bytes_used_peak, e));
  fprintf(out, "  totals:    %" PRIu64 " allocs (%s), %" PRIu64 " frees, %" PRIu64
               " failed allocs (%" PRIu64 " out of memory), %" PRIu64
               " trims\n",
          st->allocs, spool__format_size(st->bytes_allocated, a), st->frees, st->alloc_failures,
          st->ooms, st->trims);
  fprintf(out, "  safety:    %" PRIu64 " out-of-memory retries (%" PRIu64 " recovered), %" PRIu64
               " handler calls, %" PRIu64 " frees refused\n",
          st->oom_retries, st->oom_recoveries, st->oom_handler_calls, st->bad_frees);
  fprintf(out, "  heap:      %s in %" PRIu64 " chunks taken (%" PRIu64 " given back); %s idle "
               "(%s in the fronts), largest free block %s\n",
          spool__format_size(st->bytes_heap, a), st->chunk_allocs, st->chunk_frees,
          spool__format_size(st->bytes_cached, b), spool__format_size(st->bytes_front, d),
          spool__format_size(st->largest_free_block, e));
  fprintf(out, "             %" PRIu64 " front hits, %" PRIu64 " heap allocations, %" PRIu64
               " fences, %" PRIu64 " flushes\n", st->cache_hits, st->cache_misses, st->fences,
          st->cache_flushes);
}

static void stream_name(const spool__stream_idle *s, char *out, size_t len) {
  if (s->thread) snprintf(out, len, "per-thread stream of thread %" PRIu64, s->thread);
  else if (!s->stream) snprintf(out, len, "legacy stream");
  else snprintf(out, len, "stream %p", (void *)s->stream);
}

static void report_stream(const spool__stream_idle *s, void *arg) {
  char name[64], u[SPOOL__SIZE_TEXT], f[SPOOL__SIZE_TEXT], q[SPOOL__SIZE_TEXT];
  stream_name(s, name, sizeof name);
  fprintf(arg, "  %-30s %s in use, idle: %s in its front, %s pending in the heap\n", name,
          spool__format_size(s->bytes_in_use, u), spool__format_size(s->front_bytes, f),
          spool__format_size(s->pending_bytes, q));
}

static void report_device(const spool_pool *p, FILE *out) {
  size_t free_b = 0, total_b = 0;
  char f[SPOOL__SIZE_TEXT], t[SPOOL__SIZE_TEXT];
  char kept[SPOOL__MESSAGE];
  spool__save_error(kept); /* the report succeeds: the caller's last failure must stay */
  if (spool__device_meminfo(p->device, &free_b, &total_b) == SPOOL_OK)
    fprintf(out, "  device:    %s free of %s (cudaMemGetInfo)\n", spool__format_size(free_b, f),
            spool__format_size(total_b, t));
  else /* the report still has value without this line: say why it is missing */
    fprintf(out, "  device:    cudaMemGetInfo unavailable: %s\n", spool_last_error());
  spool__restore_error(kept);
}

static const char *device_name(int device, struct cudaDeviceProp *prop) {
  if (cudaGetDeviceProperties(prop, device) != cudaSuccess) {
    spool__clear_cuda_error(); /* the report succeeds: the caller's next check must too */
    return "name unavailable";
  }
  prop->name[sizeof prop->name - 1] = '\0';
  return prop->name;
}

spool_status spool_report(spool_pool *pool, FILE *out) {
  static const char ctx[] = "spool_report";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!out) return spool__fail(SPOOL_ERR_INVALID, "%s: out is NULL", ctx);
  spool_stats st;
  spool_status s = snapshot(pool, &st, ctx);
  if (s != SPOOL_OK) return s;
  struct cudaDeviceProp prop;
  fprintf(out, "spool %s pool %p on device %d (%s), %s\n", spool_version_string(),
          (void *)pool->handle, pool->device, device_name(pool->device, &prop),
          pool->owned ? "own cudaMemPool" : "adopted cudaMemPool");
  report_config(pool, out);
  spool__report_multi(pool, out); /* access and IPC */
  report_stats(&st, out);
  spool__census_each_stream(pool, report_stream, out);
  report_device(pool, out);
  if (fflush(out) != 0 || ferror(out))
    return spool__fail(SPOOL_ERR_IO, "%s: writing the report failed", ctx);
  return SPOOL_OK;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

/* Every uint64_t field of spool_stats, by name: the JSON keys are the field names. */
#define SPOOL__STAT(name) {#name, offsetof(spool_stats, name)}
static const struct {
  const char *name;
  size_t offset;
} stat_fields[] = {
    SPOOL__STAT(bytes_in_use),   SPOOL__STAT(bytes_in_use_peak), SPOOL__STAT(buffers_in_use),
    SPOOL__STAT(buffers_in_use_peak), SPOOL__STAT(bytes_reserved), SPOOL__STAT(bytes_reserved_peak),
    SPOOL__STAT(allocs),         SPOOL__STAT(frees),             SPOOL__STAT(bytes_used),
    SPOOL__STAT(bytes_used_peak), SPOOL__STAT(bytes_allocated),  SPOOL__STAT(alloc_failures),
    SPOOL__STAT(ooms),           SPOOL__STAT(trims),             SPOOL__STAT(oom_retries),
    SPOOL__STAT(oom_recoveries), SPOOL__STAT(oom_handler_calls), SPOOL__STAT(bad_frees),
    SPOOL__STAT(cache_hits),     SPOOL__STAT(cache_misses),      SPOOL__STAT(bytes_cached),
    SPOOL__STAT(cache_flushes),  SPOOL__STAT(bytes_front),       SPOOL__STAT(bytes_heap),
    SPOOL__STAT(largest_free_block), SPOOL__STAT(chunk_allocs),  SPOOL__STAT(chunk_frees),
    SPOOL__STAT(fences),
};
#undef SPOOL__STAT

/* Appends to buf while counting what the whole text needs, so one pass both measures and
 * writes. */
typedef struct json_out {
  char *buf;
  size_t len, used;
} json_out;

static void put(json_out *j, const char *fmt, ...) SPOOL__PRINTF(2, 3);
static void put(json_out *j, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(j->used < j->len ? j->buf + j->used : NULL,
                    j->used < j->len ? j->len - j->used : 0, fmt, ap);
  va_end(ap);
  if (n > 0) j->used += (size_t)n;
}

typedef struct json_streams {
  json_out *j;
  unsigned n;
} json_streams;

static void json_stream(const spool__stream_idle *s, void *arg) {
  json_streams *w = arg;
  put(w->j, "%s{\"stream\":%" PRIuPTR ",\"thread\":%" PRIu64 ",\"bytes_in_use\":%" PRIu64
      ",\"bytes_front\":%" PRIu64 ",\"bytes_pending\":%" PRIu64 "}", w->n++ ? "," : "",
      (uintptr_t)s->stream, s->thread, s->bytes_in_use, s->front_bytes, s->pending_bytes);
}

static void write_json(json_out *j, spool_pool *pool, const spool_stats *st, int device,
                       bool have_mem, size_t free_b, size_t total_b) {
  put(j, "{\"device\":%d", device);
  for (size_t i = 0; i < sizeof stat_fields / sizeof stat_fields[0]; i++) {
    uint64_t v;
    memcpy(&v, (const char *)st + stat_fields[i].offset, sizeof v);
    put(j, ",\"%s\":%" PRIu64, stat_fields[i].name, v);
  }
  put(j, ",\"streams\":[");
  json_streams w = {j, 0};
  spool__census_each_stream(pool, json_stream, &w);
  put(j, "]");
  if (have_mem) put(j, ",\"device_free\":%zu,\"device_total\":%zu}", free_b, total_b);
  else put(j, ",\"device_free\":null,\"device_total\":null}");
}

/* Both entry points: with needed NULL (spool_stats_json) even len 0 is a buffer too small. */
static spool_status stats_json(spool_pool *pool, char *buf, size_t len, size_t *needed,
                               const char *ctx) {
  if (needed) *needed = 0;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!buf && len) return spool__fail(SPOOL_ERR_INVALID, "%s: buf is NULL, len %zu", ctx, len);
  spool_stats st;
  spool_status s = snapshot(pool, &st, ctx);
  if (s != SPOOL_OK) return s;
  size_t free_b = 0, total_b = 0; /* unavailable figures are written as null, not a failure */
  bool have_mem = spool__device_meminfo_quiet(pool->device, &free_b, &total_b);
  json_out j = {buf, len, 0};
  write_json(&j, pool, &st, pool->device, have_mem, free_b, total_b);
  if (needed) *needed = j.used + 1;
  if (j.used < len || (needed && len == 0)) return SPOOL_OK;
  if (len) buf[0] = '\0';
  return spool__fail(SPOOL_ERR_INVALID, "%s: buf holds %zu bytes; the JSON needs %zu (NUL "
                     "included)", ctx, len, j.used + 1);
}

spool_status spool_stats_json(spool_pool *pool, char *buf, size_t len) {
  return stats_json(pool, buf, len, NULL, "spool_stats_json");
}

spool_status spool_stats_json_sized(spool_pool *pool, char *buf, size_t len, size_t *needed) {
  static const char ctx[] = "spool_stats_json_sized";
  if (!needed) return spool__fail(SPOOL_ERR_INVALID, "%s: needed is NULL", ctx);
  return stats_json(pool, buf, len, needed, ctx);
}
