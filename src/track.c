/* The live-buffer table: pointer -> what the library knows of the buffer.
 *
 * Open addressing with linear probing and backward-shift deletion: no tombstones to clean up,
 * and once the table has grown to the working set, insert and remove never touch the heap.
 * The pool's lock guards every call. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const spool__table *t, uintptr_t ptr) {
  /* Pool pointers are 256-aligned: drop the zero bits, then Fibonacci hashing spreads them. */
  uint64_t h = (uint64_t)(ptr >> 8) * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 32) & (t->cap - 1);
}

static void place(spool__table *t, const spool__buffer *b) {
  size_t i = slot_of(t, b->ptr);
  while (t->slots[i].ptr != 0) i = (i + 1) & (t->cap - 1);
  t->slots[i] = *b;
}

static spool_status grow(spool__table *t) {
  size_t cap = t->cap ? t->cap * 2 : 64;
  spool__buffer *slots = calloc(cap, sizeof *slots);
  if (!slots) return spool__fail(SPOOL_ERR_HOST_OOM, "spool: cannot grow the live-buffer table to %zu entries", cap);
  spool__table old = *t;
  t->slots = slots;
  t->cap = cap;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slots[i].ptr != 0) place(t, &old.slots[i]);
  free(old.slots);
  return SPOOL_OK;
}

spool_status spool__table_insert(spool__table *t, const spool__buffer *b) {
  /* Keep the load at most one half so that probe runs stay short. */
  if (2 * (t->count + 1) > t->cap) {
    spool_status s = grow(t);
    if (s != SPOOL_OK) return s;
  }
  place(t, b);
  t->count++;
  return SPOOL_OK;
}

static size_t find(const spool__table *t, uintptr_t ptr) {
  if (t->cap == 0) return SIZE_MAX;
  for (size_t i = slot_of(t, ptr);; i = (i + 1) & (t->cap - 1)) {
    if (t->slots[i].ptr == ptr) return i;
    if (t->slots[i].ptr == 0) return SIZE_MAX;
  }
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

int spool__table_remove(spool__table *t, uintptr_t ptr, spool__buffer *out) {
  size_t i = find(t, ptr);
  if (i == SIZE_MAX) return 0;
  if (out) *out = t->slots[i];
  close_hole(t, i);
  t->count--;
  return 1;
}

void spool__table_each(const spool__table *t, void (*fn)(const spool__buffer *, void *), void *arg) {
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].ptr != 0) fn(&t->slots[i], arg);
}

void spool__table_free(spool__table *t) {
  free(t->slots);
  memset(t, 0, sizeof *t);
}
