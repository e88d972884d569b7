/* Out of device memory: what an allocation does before it gives up.
 *
 * 1. Give back what the pools hold but do not use: trim this pool and the other spool pools on
 *    the same device. That also undoes fragmentation: free memory that is reserved but in
 *    pieces too small goes back to the driver, which can map one contiguous range again.
 * 2. From the second retry on, first synchronize the device: memory freed on other streams is
 *    reusable (and trimmable) only once their work is done. A device synchronize is the only
 *    safe way, since spool cannot know which of the streams it saw still exist.
 * 3. Retry after each step, cfg.oom_retries times in all.
 * 4. Then ask the user's handler, at most SPOOL_OOM_HANDLER_CALLS times, while it says "try
 *    again".
 * 5. Then fail with SPOOL_ERR_OOM and the numbers.
 * No lock is held while CUDA or the handler runs. Steps 1 and 2 are skipped while the stream is
 * being captured into a graph, where they would invalidate the capture. */
#include "capture.h"

#include <inttypes.h>

static const char ALLOC[] = "spool_alloc";

/* Trims every pool on the device, this one first. Failures are not fatal: the retry decides. */
static void give_back(spool_pool *p, bool synchronize) {
  /* Never under capture: the caller asks once (spool__alloc_after_oom). */
  char message[SPOOL__MESSAGE];
  spool__save_error(message); /* what fails here is not the allocation's failure */
  if (synchronize) {
    int saved = 0;
    spool_status s = spool__device_enter(p->device, &saved, ALLOC);
    if (s == SPOOL_OK && cudaDeviceSynchronize() != cudaSuccess) spool__clear_cuda_error();
    spool__device_leave(p->device, saved, s, ALLOC);
  }
  /* What the caches hold is in use as far as the pool knows: it goes back first. */
  (void)spool__census_flush_all(p, ALLOC);
  enum cudaStreamCaptureMode mode;
  bool relaxed = spool__relaxed_enter(&mode); /* other threads' captures */
  if (cudaMemPoolTrimTo(p->handle, 0) != cudaSuccess) spool__clear_cuda_error();
  spool__relaxed_leave(relaxed, mode);
  spool__registry_trim_device(p);
  spool__restore_error(message);
}

static void count(spool_pool *p, uint64_t *counter) {
  pthread_mutex_lock(&p->lock);
  (*counter)++;
  pthread_mutex_unlock(&p->lock);
}

/* One more try: SPOOL_OK, SPOOL_ERR_OOM (still out of memory, error cleared) or another
 * failure with its message. The stats count allocations, not tries: the first try again of an
 * allocation counts it as retried. */
static spool_status try_again(spool_pool *p, void **out, size_t size, cudaStream_t stream,
                              unsigned *tries) {
  if (*tries == 0) count(p, &p->c.oom_retries);
  ++*tries;
  cudaError_t err = cudaMallocFromPoolAsync(out, size, p->handle, stream);
  if (err == cudaSuccess) {
    count(p, &p->c.oom_recoveries);
    return SPOOL_OK;
  }
  if (err == cudaErrorMemoryAllocation) {
    spool__clear_cuda_error();
    return SPOOL_ERR_OOM;
  }
  char a[SPOOL__SIZE_TEXT];
  return spool__fail_cuda(err, "cudaMallocFromPoolAsync", "%s: retrying %s after running out "
                          "of memory on device %d", ALLOC, spool__format_size(size, a), p->device);
}

static spool_status ask_handler(spool_pool *p, void **out, size_t size, cudaStream_t stream,
                                unsigned *tries, bool in_capture) {
  spool_status s = SPOOL_ERR_OOM;
  for (int i = 0; i < SPOOL_OOM_HANDLER_CALLS && s == SPOOL_ERR_OOM; i++) {
    pthread_mutex_lock(&p->lock);
    spool_oom_fn fn = p->oom_fn;
    void *user = p->oom_user;
    if (fn) p->c.oom_handler_calls++;
    pthread_mutex_unlock(&p->lock);
    if (!fn || !fn(p, size, stream, user)) break;
    /* What the handler freed sits in a stream's front or the heap: it goes back to the pool
     * before the retry can see it. */
    if (!in_capture) give_back(p, true);
    s = try_again(p, out, size, stream, tries);
  }
  return s;
}

/* "; idle in the heap: 3.00 MiB (largest free block 2.00 MiB); stream 0x1: 1.00 MiB ..." */
typedef struct idle_text {
  char *buf;
  size_t len, used;
  unsigned streams;
} idle_text;

#define IDLE_STREAMS 4 /* streams named in the message; the rest are summed */

static void idle_stream(const spool__stream_idle *s, void *arg) {
  idle_text *t = arg;
  if (t->streams++ >= IDLE_STREAMS || t->used >= t->len) return;
  char f[SPOOL__SIZE_TEXT], q[SPOOL__SIZE_TEXT];
  int n = snprintf(t->buf + t->used, t->len - t->used, "%s stream %p %s front + %s pending",
                   t->streams == 1 ? "; idle per stream:" : ",", (void *)s->stream,
                   spool__format_size(s->front_bytes, f), spool__format_size(s->pending_bytes, q));
  if (n > 0) t->used += (size_t)n;
}

static void describe_idle(spool_pool *p, char *buf, size_t len) {
  char l[SPOOL__SIZE_TEXT], c[SPOOL__SIZE_TEXT];
  spool__cache_counters k;
  spool__census_sum(p, &k);
  pthread_mutex_lock(&p->lock);
  uint64_t largest = spool__heap_largest_free(p);
  pthread_mutex_unlock(&p->lock);
  int n = snprintf(buf, len, "; the heap holds %s idle (largest free block %s)",
                   spool__format_size(k.bytes_cached, c), spool__format_size(largest, l));
  idle_text t = {buf, len, n > 0 ? (size_t)n : 0, 0};
  spool__census_each_stream(p, idle_stream, &t);
  if (t.streams > IDLE_STREAMS && t.used < len)
    snprintf(buf + t.used, len - t.used, " and %u more", t.streams - IDLE_STREAMS);
}

static spool_status describe(spool_pool *p, size_t asked, cudaStream_t stream, unsigned tries,
                             bool in_capture) {
  char a[SPOOL__SIZE_TEXT], u[SPOOL__SIZE_TEXT] = "?", r[SPOOL__SIZE_TEXT] = "?";
  char l[SPOOL__SIZE_TEXT] = "none", f[SPOOL__SIZE_TEXT] = "?", t[SPOOL__SIZE_TEXT] = "?";
  uint64_t reserved = 0;
  size_t free_b = 0, total_b = 0;
  uint64_t in_use = 0, buffers = 0;
  spool__live_totals(p, &in_use, &buffers);
  if (p->cfg.track != SPOOL_TRACK_OFF) spool__format_size(in_use, u); /* else not kept */
  /* pool attribute calls are prohibited during a global-mode capture */
  cudaError_t err = in_capture ? cudaErrorStreamCaptureUnsupported
                               : cudaMemPoolGetAttribute(p->handle,
                                                         cudaMemPoolAttrReservedMemCurrent,
                                                         &reserved);
  if (err == cudaSuccess) spool__format_size(reserved, r);
  else spool__clear_cuda_error(); /* the figures are best effort */
  if (spool__device_meminfo_quiet(p->device, &free_b, &total_b)) {
    spool__format_size(free_b, f);
    spool__format_size(total_b, t);
  }
  if (p->cfg.max_size != 0 && p->cfg.max_size != UINT64_MAX) spool__format_size(p->cfg.max_size, l);
  char idle[384] = "";
  if (p->cfg.cache) describe_idle(p, idle, sizeof idle);
  return spool__fail(SPOOL_ERR_OOM,
                     "%s: out of device memory: asked %s on stream %p, device %d, after %u "
                     "retr%s; the pool holds %s in use in %" PRIu64 " buffers and %s reserved "
                     "(limit %s); the device has %s free of %s%s",
                     ALLOC, spool__format_size(asked, a), (void *)stream, p->device, tries,
                     tries == 1 ? "y" : "ies", u, buffers, r, l, f, t, idle);
}

spool_status spool__alloc_after_oom(spool_pool *pool, void **out, size_t size, size_t asked,
                                    cudaStream_t stream) {
  spool_status s = SPOOL_ERR_OOM;
  unsigned tries = 0;
  /* during a capture nothing is given back: flushing the caches synchronizes the
   * device, and trims are pool calls that a global-mode capture prohibits (both would
   * invalidate it). The retries and the handler remain. */
  bool in_capture = spool__capturing_quiet(stream, true); /* unknown: as if captured */
  for (unsigned i = 0; i < pool->cfg.oom_retries && s == SPOOL_ERR_OOM; i++) {
    if (!in_capture) give_back(pool, i > 0);
    s = try_again(pool, out, size, stream, &tries);
  }
  if (s == SPOOL_ERR_OOM) s = ask_handler(pool, out, size, stream, &tries, in_capture);
  if (s == SPOOL_ERR_OOM) return describe(pool, asked, stream, tries, in_capture);
  return s;
}

spool_status spool_set_oom_handler(spool_pool *pool, spool_oom_fn fn, void *user) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "spool_set_oom_handler: pool is NULL");
  pthread_mutex_lock(&pool->lock);
  pool->oom_fn = fn;
  pool->oom_user = user;
  pthread_mutex_unlock(&pool->lock);
  return SPOOL_OK;
}
