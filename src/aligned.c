/* Batches aligned past the pool's own 256 bytes (batch.c): such a batch is one allocation of
 * alignment - 256 bytes more than its sub-buffers need, and its first pointer is the first
 * aligned address in it, up to alignment - 256 bytes past the allocation's start. The caller
 * frees the batch with that first pointer; this file maps it back to the allocation's start.
 *
 * The map is pool->aligned, a table of records keyed by first pointer (ptr), each holding the
 * bytes from the allocation's start to it (size) and the allocation's number (seq): a free
 * checks that the buffer at the start is still that allocation, so that an entry outlived by
 * its batch (its start freed by a caller who computed it) never redirects a later free. Frees
 * look here only while some aligned batch is live (pool->aligned_live), so that other pools pay
 * one load. Guarded by the pool's lock, which is never held across the checks (they take it). */
#include "internal.h"

/* The allocation number of the live buffer that starts at start; 0 when there is none (or
 * track=off, which keeps no numbers spool can look up). */
static uint64_t live_seq(spool_pool *pool, uintptr_t start) {
  spool__buffer b = {0};
  pthread_mutex_lock(&pool->lock);
  const spool__buffer *r = spool__table_find(&pool->live, start);
  if (r) b = *r;
  pthread_mutex_unlock(&pool->lock);
  if (!r && pool->cfg.cache && !spool__census_find_live(pool, start, &b)) return 0;
  return b.seq;
}

/* Enters e; an entry its batch outlived makes room. */
static spool_status enter(spool_pool *pool, const spool__buffer *e) {
  pthread_mutex_lock(&pool->lock);
  if (spool__table_remove(&pool->aligned, e->ptr, NULL))
    atomic_fetch_sub(&pool->aligned_live, 1);
  spool_status s = spool__table_insert(&pool->aligned, e, NULL);
  if (s == SPOOL_OK) atomic_fetch_add(&pool->aligned_live, 1);
  pthread_mutex_unlock(&pool->lock);
  return s;
}

spool_status spool__aligned_add(spool_pool *pool, uintptr_t first, uint64_t pad) {
  spool__buffer e = {.ptr = first, .size = pad, .seq = live_seq(pool, first - pad)};
  if (enter(pool, &e) != SPOOL_OK)
    return spool__fail(SPOOL_ERR_HOST_OOM, "spool_alloc_batch: no host memory");
  return SPOOL_OK;
}

/* ptr's entry, copied into *e (taken out of the table when take), when it still names the live
 * allocation it was made for; else false. */
static bool entry_of(spool_pool *pool, uintptr_t ptr, bool take, spool__buffer *e) {
  pthread_mutex_lock(&pool->lock);
  const spool__buffer *r = spool__table_find(&pool->aligned, ptr);
  bool found = r != NULL;
  if (found) *e = *r;
  if (found && take && spool__table_remove(&pool->aligned, ptr, NULL))
    atomic_fetch_sub(&pool->aligned_live, 1);
  pthread_mutex_unlock(&pool->lock);
  return found && (e->seq == 0 || live_seq(pool, ptr - e->size) == e->seq);
}

void *spool__aligned_start(spool_pool *pool, void *ptr) {
  spool__buffer e;
  if (atomic_load_explicit(&pool->aligned_live, memory_order_relaxed) == 0 ||
      !entry_of(pool, (uintptr_t)ptr, false, &e))
    return ptr;
  return (char *)ptr - e.size;
}

uintptr_t spool__aligned_first(const spool_pool *pool, uintptr_t start) {
  spool_pool *p = (spool_pool *)pool; /* the lock only */
  uintptr_t first = start;
  pthread_mutex_lock(&p->lock);
  const spool__index *x = &p->aligned.index;
  for (size_t i = 0; i < x->cap; i++) {
    const spool__buffer *e = x->slots[i].val;
    if (x->slots[i].key && e->ptr - e->size == start) first = e->ptr;
  }
  pthread_mutex_unlock(&p->lock);
  return first;
}

void *spool__aligned_take(spool_pool *pool, void *ptr, spool__buffer *e) {
  if (!entry_of(pool, (uintptr_t)ptr, true, e)) *e = (spool__buffer){0};
  return (char *)ptr - e->size;
}

void spool__aligned_undo(spool_pool *pool, const spool__buffer *e) {
  if (e->ptr) (void)enter(pool, e); /* the removal left room */
}
