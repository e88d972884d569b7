/* What a pool knows of its buffers: the index (address -> record) under the fronts and the
 * live-buffer table, the table itself, and the graveyard of recent frees (to tell a double free
 * from a foreign pointer). The list of live pools is registry.c's.
 *
 * The index uses open addressing with linear probing and backward-shift deletion: no tombstones
 * to clean up, and once it has grown to the working set, insert and remove never touch the heap.
 * Its owner's lock guards it (the pool's for the table and the graveyard). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the index ---------------------------------------------------------------------------- */

/* key is not in x. */
static void place(spool__index *x, uintptr_t key, void *val) {
  x->slots[spool__index_probe(x, key)] = (spool__index_slot){key, val};
}

static spool_status grow(spool__index *x) {
  size_t cap = x->cap ? x->cap * 2 : 64;
  spool__index_slot *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return spool__fail(SPOOL_ERR_HOST_OOM,
                       "spool: no host memory to grow a buffer index to %zu entries", cap);
  spool__index old = *x;
  x->slots = slots;
  x->cap = cap;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slots[i].key != 0) place(x, old.slots[i].key, old.slots[i].val);
  free(old.slots);
  return SPOOL_OK;
}

spool_status spool__index_insert(spool__index *x, uintptr_t key, void *val) {
  /* Keep the load at most one half so that probe runs stay short. */
  if (2 * (x->count + 1) > x->cap) {
    spool_status s = grow(x);
    if (s != SPOOL_OK) return s;
  }
  place(x, key, val);
  x->count++;
  return SPOOL_OK;
}

/* Moves later entries of the probe run back over the hole at i, so lookups never stop early. */
static void close_hole(spool__index *x, size_t i) {
  size_t mask = x->cap - 1;
  for (size_t j = (i + 1) & mask; x->slots[j].key != 0; j = (j + 1) & mask) {
    size_t home = spool__index_home(x, x->slots[j].key);
    /* The entry at j may fill the hole if its home is not in the cyclic range (i, j]. */
    int home_in_range = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!home_in_range) {
      x->slots[i] = x->slots[j];
      i = j;
    }
  }
  x->slots[i].key = 0;
}

void *spool__index_remove(spool__index *x, uintptr_t key) {
  if (x->cap == 0 || key == 0) return NULL;
  size_t i = spool__index_probe(x, key);
  if (x->slots[i].key != key) return NULL;
  void *val = x->slots[i].val;
  close_hole(x, i);
  x->count--;
  return val;
}

void spool__index_each(const spool__index *x, void (*fn)(void *val, void *arg), void *arg) {
  for (size_t i = 0; i < x->cap; i++)
    if (x->slots[i].key != 0) fn(x->slots[i].val, arg);
}

void spool__index_free(spool__index *x) {
  free(x->slots);
  memset(x, 0, sizeof *x);
}

/* ---- the table: buffer records by pointer ---------------------------------------------------- */

/* A removed record, kept for the next insert: the list runs through the records themselves. */
typedef union spool__buffer_spare {
  spool__buffer buf;
  union spool__buffer_spare *next;
} spool__buffer_spare;

spool_status spool__table_insert(spool__table *t, const spool__buffer *b, spool__buffer **at) {
  spool__buffer_spare *r = t->spare;
  if (r) t->spare = r->next;
  else if (!(r = malloc(sizeof *r)))
    return spool__fail(SPOOL_ERR_HOST_OOM, "spool: no host memory for the record of buffer %p",
                       (void *)b->ptr);
  spool_status s = spool__index_insert(&t->index, b->ptr, &r->buf);
  if (s != SPOOL_OK) {
    r->next = t->spare;
    t->spare = r;
    return s;
  }
  r->buf = *b;
  if (at) *at = &r->buf;
  return SPOOL_OK;
}

int spool__table_remove(spool__table *t, uintptr_t ptr, spool__buffer *out) {
  spool__buffer_spare *r = spool__index_remove(&t->index, ptr);
  if (!r) return 0;
  if (out) *out = r->buf;
  r->next = t->spare;
  t->spare = r;
  return 1;
}

typedef struct each_arg {
  void (*fn)(const spool__buffer *, void *);
  void *arg;
} each_arg;

static void each_one(void *val, void *arg) {
  const each_arg *e = arg;
  e->fn(val, e->arg);
}

void spool__table_each(const spool__table *t, void (*fn)(const spool__buffer *, void *),
                       void *arg) {
  each_arg e = {fn, arg};
  spool__index_each(&t->index, each_one, &e);
}

static void free_one(void *val, void *arg) {
  (void)arg;
  free(val);
}

void spool__table_free(spool__table *t) {
  spool__index_each(&t->index, free_one, NULL);
  spool__index_free(&t->index);
  while (t->spare) {
    spool__buffer_spare *r = t->spare;
    t->spare = r->next;
    free(r);
  }
}

const spool__buffer *spool__table_containing(const spool__table *t, uintptr_t ptr) {
  for (size_t i = 0; i < t->index.cap; i++) {
    const spool__buffer *b = t->index.slots[i].val;
    if (t->index.slots[i].key != 0 && b->ptr < ptr && ptr - b->ptr < b->size) return b;
  }
  return NULL;
}

/* ---- graveyard ------------------------------------------------------------------------------ */

void spool__grave_bury(spool__graveyard *g, const spool__buffer *b) {
  if (!g->ring && !(g->ring = malloc(SPOOL__GRAVE_CAP * sizeof *g->ring))) return;
  if (g->count == SPOOL__GRAVE_CAP) { /* the oldest makes room */
    g->ring[g->head] = *b;
    g->head = (g->head + 1) % SPOOL__GRAVE_CAP;
    return;
  }
  g->ring[(g->head + g->count++) % SPOOL__GRAVE_CAP] = *b;
}

const spool__buffer *spool__grave_find(const spool__graveyard *g, uintptr_t ptr) {
  for (size_t i = g->count; i-- > 0;) {
    const spool__buffer *b = &g->ring[(g->head + i) % SPOOL__GRAVE_CAP];
    if (b->ptr == ptr) return b;
  }
  return NULL;
}

void spool__grave_free(spool__graveyard *g) {
  free(g->ring);
  memset(g, 0, sizeof *g);
}

void *spool__zalloc_aligned(size_t size) {
  void *p = aligned_alloc(SPOOL__CACHE_LINE, size);
  if (p) memset(p, 0, size);
  return p;
}

uint64_t spool__now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

const char *spool__site_text(const spool__site *s, char *out, size_t len) {
  if (s->tag) snprintf(out, len, "tag '%s'", s->tag);
  else if (s->file) snprintf(out, len, "%s:%d", s->file, s->line);
  else snprintf(out, len, "an unknown site (SPOOL_ALLOC and SPOOL_FREE record it)");
  return out;
}

void *spool__grow_array(void *items, size_t cap, size_t elem, size_t first, size_t *grown_cap) {
  size_t n = cap ? cap * 2 : first;
  if (n < cap || elem == 0 || n > SIZE_MAX / elem) return NULL;
  void *grown = realloc(items, n * elem);
  if (grown) *grown_cap = n;
  return grown;
}

bool spool__bin_grow(spool__bin *bin) {
  size_t cap;
  void **items = bin->cap < UINT32_MAX / 2
                     ? spool__grow_array(bin->items, bin->cap, sizeof *items, 8, &cap)
                     : NULL;
  if (!items) return false;
  bin->items = items;
  bin->cap = (uint32_t)cap;
  return true;
}
