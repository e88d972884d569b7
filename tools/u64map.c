/* Open addressing with backward-shift deletion: no tombstones, so a long replay's churn never
 * slows the lookups down. */
#include "u64map.h"

#include <stdlib.h>

static size_t home(const u64map *m, uint64_t key) {
  return (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (m->cap - 1);
}

static bool grow(u64map *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  u64map n = {calloc(cap, sizeof *n.keys), calloc(cap, sizeof *n.vals), cap, 0};
  if (!n.keys || !n.vals) {
    free(n.keys);
    free(n.vals);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i]) u64map_put(&n, m->keys[i], m->vals[i]);
  u64map_free(m);
  *m = n;
  return true;
}

bool u64map_put(u64map *m, uint64_t key, uint64_t val) {
  if ((m->count + 1) * 4 > m->cap * 3 && !grow(m)) return false;
  size_t i = home(m, key);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->count++;
  m->keys[i] = key;
  m->vals[i] = val;
  return true;
}

bool u64map_get(const u64map *m, uint64_t key, uint64_t *val) {
  if (m->cap == 0) return false;
  for (size_t i = home(m, key);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) {
      *val = m->vals[i];
      return true;
    }
    if (!m->keys[i]) return false;
  }
}

bool u64map_del(u64map *m, uint64_t key) {
  if (m->cap == 0) return false;
  size_t i = home(m, key), mask = m->cap - 1;
  while (m->keys[i] != key) {
    if (!m->keys[i]) return false;
    i = (i + 1) & mask;
  }
  for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
    size_t h = home(m, m->keys[j]);
    /* j's entry may move into the hole at i when its home is not within (i, j] */
    if (((j - h) & mask) >= ((j - i) & mask)) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = 0;
  m->count--;
  return true;
}

void u64map_free(u64map *m) {
  free(m->keys);
  free(m->vals);
  *m = (u64map){0};
}
