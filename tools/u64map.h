/* A map from 64-bit keys (never 0) to 64-bit values: open addressing, linear probing,
 * backward-shift deletion. For the tools' pointer tables. */
#ifndef SPOOL_TOOLS_U64MAP_H
#define SPOOL_TOOLS_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct u64map {
  uint64_t *keys, *vals;
  size_t cap, count; /* cap: a power of two, or 0 */
} u64map;

/* Sets key to val (replacing an old value). false without memory (map unchanged). */
bool u64map_put(u64map *m, uint64_t key, uint64_t val);
/* The value of key into *val; false when key is absent. */
bool u64map_get(const u64map *m, uint64_t key, uint64_t *val);
/* Removes key; false when it was absent. */
bool u64map_del(u64map *m, uint64_t key);
void u64map_free(u64map *m);

#endif
