/* Batched buffers: count sub-buffers carved from one allocation, freed with one spool_free of
 * the first pointer.
 *
 * A batch is one ordinary allocation (spool__alloc_site, so a stream cache may serve it) whose
 * site carries the sub-buffer count. The site is copied into the buffer's record by every path
 * (the pool's table, a stream cache's table), so the record knows it is a batch without any
 * change to those paths; a sub-pointer handed to spool_free is not a buffer's start, the free
 * is refused as an interior pointer, and refuse.c names it a batch member. */
#include "internal.h"

#include <inttypes.h>
#include <string.h>

static const char ALLOC[] = "spool_alloc_batch";

#define BATCH_ALIGN_DEFAULT 256
#define POOL_ALIGN 256 /* what the pool guarantees for an allocation's start */

static void clear(void **ptrs, size_t count) {
  for (size_t i = 0; i < count; i++) ptrs[i] = NULL;
}

/* ptrs is written before sizes is read to the end: the two must not share memory (and a refusal
 * must not clear ptrs then, or it would change the caller's sizes). */
static bool overlap(size_t count, const size_t *sizes, void *const *ptrs) {
  uintptr_t sz = (uintptr_t)sizes, pt = (uintptr_t)ptrs;
  return sizes && ptrs && count <= UINT32_MAX && sz < pt + count * sizeof *ptrs &&
         pt < sz + count * sizeof *sizes;
}

static spool_status check_args(spool_pool *pool, size_t count, const size_t *sizes, void **ptrs,
                               size_t align) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ALLOC);
  if (!ptrs) return spool__fail(SPOOL_ERR_INVALID, "%s: ptrs is NULL", ALLOC);
  if (!sizes) return spool__fail(SPOOL_ERR_INVALID, "%s: sizes is NULL", ALLOC);
  if (count == 0 || count > UINT32_MAX)
    return spool__fail(SPOOL_ERR_INVALID, "%s: count is %zu; a batch has 1 to %" PRIu32
                       " sub-buffers", ALLOC, count, UINT32_MAX);
  if (overlap(count, sizes, ptrs))
    return spool__fail(SPOOL_ERR_INVALID, "%s: sizes (%p) and ptrs (%p) overlap; the %zu "
                       "pointers would overwrite the sizes: pass two arrays", ALLOC,
                       (const void *)sizes, (void *)ptrs, count);
  if (align == 0 || (align & (align - 1)) != 0 || align > SPOOL_BATCH_ALIGN_MAX)
    return spool__fail(SPOOL_ERR_INVALID, "%s: alignment %zu is not a power of two up to %d "
                       "(0 means %d)", ALLOC, align, SPOOL_BATCH_ALIGN_MAX, BATCH_ALIGN_DEFAULT);
  return SPOOL_OK;
}

/* The offset of every sub-buffer (into ptrs, as integers) and the total; SPOOL_ERR_INVALID when
 * the total does not fit a size_t. */
static spool_status layout(size_t count, const size_t *sizes, size_t align, void **offsets,
                           size_t *total) {
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    size_t start = (at + align - 1) & ~(align - 1);
    if (start < at || sizes[i] > SIZE_MAX - start)
      return spool__fail(SPOOL_ERR_INVALID, "%s: the %zu sizes overflow size_t at sub-buffer "
                         "%zu (%zu bytes)", ALLOC, count, i, sizes[i]);
    offsets[i] = (void *)start;
    at = start + sizes[i];
  }
  /* A trailing sub-buffer of no bytes would point just past the allocation, where a free of it
   * could not be told from a stranger's pointer: one byte more keeps it inside. */
  if (at > 0 && (uintptr_t)offsets[count - 1] == at) at++;
  *total = at;
  return SPOOL_OK;
}

/* One allocation for total bytes whose start (*first) is a multiple of align. Past the pool's
 * 256 bytes it takes align - 256 bytes more, and a first pointer after the allocation's start
 * is entered in aligned.c, for spool_free to find the start from it. */
static spool_status alloc_aligned(spool_pool *pool, cudaStream_t stream, size_t total,
                                  size_t align, const spool__site *site, char **first,
                                  void **start) {
  size_t extra = align > POOL_ALIGN ? align - POOL_ALIGN : 0;
  if (total > SIZE_MAX - extra)
    return spool__fail(SPOOL_ERR_INVALID, "%s: %zu bytes and %zu more for alignment %zu "
                       "overflow size_t", ALLOC, total, extra, align);
  void *base = NULL;
  spool_status s = spool__alloc_site(pool, &base, total + extra, stream, site);
  if (s != SPOOL_OK) return s;
  uintptr_t at = ((uintptr_t)base + align - 1) & ~(uintptr_t)(align - 1);
  if (at != (uintptr_t)base) s = spool__aligned_add(pool, at, at - (uintptr_t)base);
  if (s != SPOOL_OK) {
    spool_status undo = spool__free_site(pool, base, stream, site);
    if (undo != SPOOL_OK) spool__append(s, "; freeing the batch's allocation failed too");
    return s;
  }
  *first = (char *)at;
  *start = base;
  return SPOOL_OK;
}

static spool_status alloc_batch(spool_pool *pool, cudaStream_t stream, size_t count,
                                const size_t *sizes, void **ptrs, size_t align,
                                spool__site site) {
  bool clearable = ptrs && count <= UINT32_MAX && !overlap(count, sizes, ptrs);
  if (clearable) clear(ptrs, count);
  if (align == 0) align = BATCH_ALIGN_DEFAULT;
  spool_status s = check_args(pool, count, sizes, ptrs, align);
  size_t total = 0;
  /* The offsets go in ptrs first: no scratch memory, and ptrs is the caller's to write. */
  if (s == SPOOL_OK) s = layout(count, sizes, align, ptrs, &total);
  if (s != SPOOL_OK || total == 0) {
    if (clearable) clear(ptrs, count);
    return s;
  }
  site.batch = (uint32_t)count;
  char *first = NULL;
  void *base = NULL;
  s = alloc_aligned(pool, stream, total, align, &site, &first, &base);
  for (size_t i = 0; i < count; i++) {
    uintptr_t off = (uintptr_t)ptrs[i];
    ptrs[i] = s == SPOOL_OK ? first + off : NULL;
  }
  /* Memory tools see each member, so that a write past one into the padding is reported. */
  if (s == SPOOL_OK && spool__census_carve(pool, (uintptr_t)base))
    for (size_t i = 0; i < count; i++)
      spool__nvtx_piece(pool, (uintptr_t)base, (uintptr_t)ptrs[i], sizes[i]);
  return s;
}

spool_status spool_alloc_batch(spool_pool *pool, cudaStream_t stream, size_t count,
                               const size_t *sizes, void **ptrs, size_t alignment) {
  spool__site site = {NULL, NULL, 0, 0};
  return alloc_batch(pool, stream, count, sizes, ptrs, alignment, site);
}

spool_status spool_alloc_batch_at(spool_pool *pool, cudaStream_t stream, size_t count,
                                  const size_t *sizes, void **ptrs, size_t alignment,
                                  const char *file, int line) {
  spool__site site = {file, NULL, line, 0};
  return alloc_batch(pool, stream, count, sizes, ptrs, alignment, site);
}
