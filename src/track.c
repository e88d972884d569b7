/* What a pool knows of its buffers: the live-buffer table (pointer -> record) and the graveyard
 * of recent frees (to tell a double free from a foreign pointer). The list of live pools is
 * registry.c's.
 *
 * The table uses open addressing with linear probing and backward-shift deletion: no tombstones
 * to clean up, and once it has grown to the working set, insert and remove never touch the heap.
 * The pool's lock guards the table and the graveyard. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t slot_of(const spool__table *t, uintptr_t ptr) { return spool__table_home(t, ptr); }

static spool__buffer *place(spool__table *t, const spool__buffer *b) {
  size_t i = slot_of(t, b->ptr);
  while (t->slots[i].ptr != 0) i = (i + 1) & (t->cap - 1);
  t->slots[i] = *b;
  return &t->slots[i];
}

static spool_status grow(spool__table *t) {
  size_t cap = t->cap ? t->cap * 2 : 64;
  spool__buffer *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return spool__fail(SPOOL_ERR_HOST_OOM, "spool: cannot grow the live-buffer table to %zu "
                       "entries", cap);
  spool__table old = *t;
  t->slots = slots;
  t->cap = cap;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slots[i].ptr != 0) place(t, &old.slots[i]);
  free(old.slots);
  return SPOOL_OK;
}

spool_status spool__table_insert(spool__table *t, const spool__buffer *b, spool__buffer **at) {
  /* Keep the load at most one half so that probe runs stay short. */
  if (2 * (t->count + 1) > t->cap) {
    spool_status s = grow(t);
    if (s != SPOOL_OK) return s;
  }
  spool__buffer *slot = place(t, b);
  if (at) *at = slot;
  t->count++;
  return SPOOL_OK;
}

static size_t find_slot(const spool__table *t, uintptr_t ptr) {
  const spool__buffer *b = spool__table_lookup((spool__table *)t, ptr);
  return b ? (size_t)(b - t->slots) : SIZE_MAX;
}

/* Moves later entries of the probe run back over the hole at i, so lookups never stop early. */
static void close_hole(spool__table *t, size_t i) {
  size_t mask = t->cap - 1;
  for (size_t j = (i + 1) & mask; t->slots[j].ptr != 0; j = (j + 1) & mask) {
    size_t home = slot_of(t, t->slots[j].ptr);
    /* The entry at j may fill the hole if its home is not in the cyclic range (i, j]. */
    int home_in_range = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!home_in_range) {
      t->slots[i] = t->slots[j];
      i = j;
    }
  }
  t->slots[i].ptr = 0;
}

void spool__table_remove_at(spool__table *t, spool__buffer *slot, spool__buffer *out) {
  if (out) *out = *slot;
  close_hole(t, (size_t)(slot - t->slots));
  t->count--;
}

int spool__table_remove(spool__table *t, uintptr_t ptr, spool__buffer *out) {
  size_t i = find_slot(t, ptr);
  if (i == SIZE_MAX) return 0;
  spool__table_remove_at(t, &t->slots[i], out);
  return 1;
}

void spool__table_each(const spool__table *t, void (*fn)(const spool__buffer *, void *),
                       void *arg) {
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].ptr != 0) fn(&t->slots[i], arg);
}

void spool__table_free(spool__table *t) {
  free(t->slots);
  memset(t, 0, sizeof *t);
}

const spool__buffer *spool__table_find(const spool__table *t, uintptr_t ptr) {
  size_t i = find_slot(t, ptr);
  return i == SIZE_MAX ? NULL : &t->slots[i];
}

const spool__buffer *spool__table_containing(const spool__table *t, uintptr_t ptr) {
  for (size_t i = 0; i < t->cap; i++) {
    const spool__buffer *b = &t->slots[i];
    if (b->ptr != 0 && b->ptr < ptr && ptr - b->ptr < b->size) return b;
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

bool spool__bin_grow(spool__bin *bin) {
  uint32_t cap = bin->cap ? bin->cap * 2 : 8;
  uintptr_t *ptrs = realloc(bin->ptrs, cap * sizeof *ptrs);
  if (!ptrs) return false;
  bin->ptrs = ptrs;
  bin->cap = cap;
  return true;
}
