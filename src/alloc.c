/* Where an allocation comes from and where a free goes: the stream-ordered paths over
 * cudaMallocFromPoolAsync / cudaFreeAsync, trim, and the leak sweep at destroy. */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>

static const char ALLOC[] = "spool_alloc";
static const char FREE[] = "spool_free";

/* ---- failures ------------------------------------------------------------------------------ */

/* Device-wide figures for an out-of-memory message; "?" where CUDA could not say. */
static void describe_oom(spool_pool *p, size_t asked, cudaStream_t stream, uint64_t in_use,
                         uint64_t buffers) {
  char a[SPOOL__SIZE_TEXT], u[SPOOL__SIZE_TEXT], r[SPOOL__SIZE_TEXT] = "?";
  char l[SPOOL__SIZE_TEXT] = "none", f[SPOOL__SIZE_TEXT] = "?", t[SPOOL__SIZE_TEXT] = "?";
  uint64_t reserved = 0;
  size_t free_b = 0, total_b = 0;
  cudaError_t err = cudaMemPoolGetAttribute(p->handle, cudaMemPoolAttrReservedMemCurrent, &reserved);
  if (err == cudaSuccess) spool__format_size(reserved, r);
  if (spool__device_meminfo(p->device, &free_b, &total_b) == SPOOL_OK) {
    spool__format_size(free_b, f);
    spool__format_size(total_b, t);
  }
  if (p->cfg.max_size != 0) spool__format_size(p->cfg.max_size, l);
  spool__fail(SPOOL_ERR_OOM,
              "%s: out of device memory: asked %s on stream %p, device %d; the pool holds %s in "
              "use in %" PRIu64 " buffers and %s reserved (limit %s); the device has %s free of %s",
              ALLOC, spool__format_size(asked, a), (void *)stream, p->device,
              spool__format_size(in_use, u), buffers, r, l, f, t);
}

static spool_status alloc_failed(spool_pool *p, cudaError_t err, size_t size, cudaStream_t stream) {
  pthread_mutex_lock(&p->lock);
  p->c.alloc_failures++;
  if (err == cudaErrorMemoryAllocation) p->c.ooms++;
  uint64_t in_use = p->c.bytes_in_use, buffers = p->c.buffers_in_use;
  pthread_mutex_unlock(&p->lock);
  if (err != cudaErrorMemoryAllocation) {
    char a[SPOOL__SIZE_TEXT];
    return spool__fail_cuda(err, "cudaMallocFromPoolAsync", "%s: %s on stream %p, device %d",
                            ALLOC, spool__format_size(size, a), (void *)stream, p->device);
  }
  describe_oom(p, size, stream, in_use, buffers);
  spool__clear_cuda_error(); /* the failed allocation's error, and any of describe_oom's */
  return SPOOL_ERR_OOM;
}

/* ---- counters (under the lock) ---------------------------------------------------------- */

static void count_alloc(spool__counters *c, uint64_t size) {
  c->allocs++;
  c->bytes_allocated += size;
  c->bytes_in_use += size;
  c->buffers_in_use++;
  if (c->bytes_in_use > c->bytes_in_use_peak) c->bytes_in_use_peak = c->bytes_in_use;
  if (c->buffers_in_use > c->buffers_in_use_peak) c->buffers_in_use_peak = c->buffers_in_use;
}

static void count_free(spool__counters *c, uint64_t size) {
  c->frees++;
  c->bytes_in_use -= size;
  c->buffers_in_use--;
}

/* ---- alloc, free, trim -------------------------------------------------------------------- */

spool_status spool_alloc(spool_pool *pool, void **ptr, size_t size, cudaStream_t stream) {
  if (ptr) *ptr = NULL;
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ALLOC);
  if (!ptr) return spool__fail(SPOOL_ERR_INVALID, "%s: ptr is NULL", ALLOC);
  if (size == 0) return SPOOL_OK;

  void *p = NULL;
  cudaError_t err = cudaMallocFromPoolAsync(&p, size, pool->handle, stream);
  if (err != cudaSuccess) return alloc_failed(pool, err, size, stream);

  pthread_mutex_lock(&pool->lock);
  spool__buffer b = {.ptr = (uintptr_t)p, .size = size, .seq = ++pool->c.next_seq,
                     .stream = stream};
  spool_status s = spool__table_insert(&pool->live, &b);
  if (s == SPOOL_OK) count_alloc(&pool->c, size);
  else pool->c.alloc_failures++;
  pthread_mutex_unlock(&pool->lock);

  if (s != SPOOL_OK) {
    /* Untracked memory could never be freed through spool: give it back now. */
    err = cudaFreeAsync(p, stream);
    if (err != cudaSuccess) spool__also_failed(s, err, "freeing the untracked buffer");
    return s;
  }
  *ptr = p;
  return SPOOL_OK;
}

spool_status spool_free(spool_pool *pool, void *ptr, cudaStream_t stream) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", FREE);
  if (!ptr) return SPOOL_OK;

  /* The lock is held across cudaFreeAsync: once the driver has the memory back, another thread
   * may be handed the same address and must find its slot empty; and if the driver refuses,
   * the record goes back into the slot just vacated, which no other thread can take. */
  spool__buffer b;
  cudaError_t err = cudaSuccess;
  pthread_mutex_lock(&pool->lock);
  int found = spool__table_remove(&pool->live, (uintptr_t)ptr, &b);
  if (found) {
    err = cudaFreeAsync(ptr, stream);
    if (err == cudaSuccess) count_free(&pool->c, b.size);
    else (void)spool__table_insert(&pool->live, &b); /* cannot fail: the removal left room */
  }
  pthread_mutex_unlock(&pool->lock);

  if (!found)
    return spool__fail(SPOOL_ERR_UNKNOWN_POINTER,
                       "%s: %p is not a live buffer of this pool (device %d): it was never "
                       "allocated here, is already freed, or points inside a buffer; nothing was "
                       "freed", FREE, ptr, pool->device);
  if (err == cudaSuccess) return SPOOL_OK;
  char size[SPOOL__SIZE_TEXT];
  return spool__fail_cuda(err, "cudaFreeAsync", "%s: %p (%s) on stream %p; it stays allocated",
                          FREE, ptr, spool__format_size(b.size, size), (void *)stream);
}

spool_status spool_trim(spool_pool *pool, size_t keep_bytes) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "spool_trim: pool is NULL");
  cudaError_t err = cudaMemPoolTrimTo(pool->handle, keep_bytes);
  if (err != cudaSuccess) {
    char keep[SPOOL__SIZE_TEXT];
    return spool__fail_cuda(err, "cudaMemPoolTrimTo", "spool_trim: keep %s on device %d",
                            spool__format_size(keep_bytes, keep), pool->device);
  }
  pthread_mutex_lock(&pool->lock);
  pool->c.trims++;
  pthread_mutex_unlock(&pool->lock);
  return SPOOL_OK;
}

/* ---- leaks at destroy ------------------------------------------------------------------- */

typedef struct leak_list {
  spool__buffer *items;
  size_t n;
} leak_list;

static void collect(const spool__buffer *b, void *arg) {
  leak_list *l = arg;
  l->items[l->n++] = *b;
}

static int by_seq(const void *a, const void *b) {
  uint64_t x = ((const spool__buffer *)a)->seq, y = ((const spool__buffer *)b)->seq;
  return (x > y) - (x < y);
}

static void print_leak(const spool__buffer *b, void *arg) {
  char size[SPOOL__SIZE_TEXT];
  (void)arg;
  fprintf(stderr, "spool:   %p  %10s  stream %p  allocation #%" PRIu64 "\n", (void *)b->ptr,
          spool__format_size(b->size, size), (void *)b->stream, b->seq);
}

/* Lists the leaks in allocation order; unsorted when there is no memory to sort them. */
static void print_leaks(const spool_pool *p) {
  char size[SPOOL__SIZE_TEXT];
  size_t n = p->live.count;
  leak_list l = {.items = malloc(n * sizeof *l.items), .n = 0};
  fprintf(stderr, "spool: pool on device %d destroyed with %zu live buffer%s, %s in all:\n",
          p->device, n, n == 1 ? "" : "s", spool__format_size(p->c.bytes_in_use, size));
  if (!l.items) {
    spool__table_each(&p->live, print_leak, NULL);
    return;
  }
  spool__table_each(&p->live, collect, &l);
  qsort(l.items, l.n, sizeof *l.items, by_seq);
  for (size_t i = 0; i < l.n; i++) print_leak(&l.items[i], NULL);
  free(l.items);
}

typedef struct free_pass {
  cudaError_t err;
  uintptr_t ptr; /* the first that failed */
} free_pass;

static void free_one(const spool__buffer *b, void *arg) {
  free_pass *f = arg;
  cudaError_t err = cudaFreeAsync((void *)b->ptr, cudaStreamLegacy);
  if (err != cudaSuccess && f->err == cudaSuccess) {
    f->err = err;
    f->ptr = b->ptr;
  }
}

/* Frees every leaked buffer. Their streams may already be destroyed, and work queued on them may
 * still use the memory: a device synchronize makes freeing on the legacy stream safe. */
static spool_status free_all(spool_pool *p) {
  static const char ctx[] = "spool_pool_destroy: freeing leaked buffers";
  int saved = 0;
  spool_status s = spool__device_enter(p->device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    s = spool__fail_cuda(err, "cudaDeviceSynchronize", "%s", ctx);
  } else {
    free_pass f = {cudaSuccess, 0};
    spool__table_each(&p->live, free_one, &f);
    if (f.err != cudaSuccess)
      s = spool__fail_cuda(f.err, "cudaFreeAsync", "%s: %p", ctx, (void *)f.ptr);
  }
  return spool__device_leave(p->device, saved, s, ctx);
}

spool_status spool__free_leaks(spool_pool *pool) {
  size_t n = pool->live.count;
  if (n == 0) return SPOOL_OK;
  print_leaks(pool);
  spool_status s = free_all(pool);
  if (s != SPOOL_OK) return s;
  return spool__fail(SPOOL_ERR_LEAKS,
                     "spool_pool_destroy: %zu buffer%s still allocated on device %d (listed on "
                     "stderr); freed now", n, n == 1 ? " was" : "s were", pool->device);
}
