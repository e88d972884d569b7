/* The allocators the harness compares, behind one interface, so that every workload's loop is
 * the same code whichever allocator it runs (and the no-allocation baseline is that very loop).
 *
 *   none           the baseline: alloc hands out one of 8 buffers allocated at setup, free does
 *                  nothing; the loop "with the allocations taken out"
 *   cudaMalloc     cudaMalloc + cudaFree (cudaFree waits for the whole device)
 *   async-t0       cudaMallocAsync + cudaFreeAsync on the device's current (default) pool with
 *                  release threshold 0, as CUDA ships it
 *   async-tmax     the same with release threshold max (the pool keeps its memory)
 *   torch-native   PyTorch's CUDA caching allocator through its C++ API (raw_alloc_with_stream
 *                  + raw_delete), expandable_segments:False; only in a build with PyTorch
 *                  (torch_strategy.h)
 *   torch-expandable  the same with expandable_segments:True
 *   spool-nocache  spool with its defaults and `cache=off`
 *   spool          spool with its defaults
 *   spool-tuned    spool with the tuned config text (--tuned)
 *
 * spool strategies are configured by config text through spool_config_parse, so the harness
 * builds against any version of spool; a strategy whose text this build of spool does not accept
 * (a key it does not know yet) is skipped with the parser's message. SPOOL_CONF is not read:
 * every strategy is exactly what its text says. The torch strategies set expandable_segments
 * and leave the rest of PYTORCH_CUDA_ALLOC_CONF to PyTorch, which reads it when libc10_cuda
 * loads; the run's header prints it. */
#ifndef SPOOL_BENCH_STRATEGY_H
#define SPOOL_BENCH_STRATEGY_H

#include "common.h"

/* The default text of spool-tuned: spool's defaults with the check for graph capture turned off
 * (the targets give a figure for exactly that). --tuned replaces it. */
#define BENCH_TUNED_DEFAULT "capture_check=off"

enum { BENCH_RING = 8 }; /* buffers the baseline hands out in turn */

typedef enum strategy_id {
  ST_NONE,
  ST_CUDAMALLOC,
  ST_ASYNC_T0,
  ST_ASYNC_TMAX,
  ST_TORCH_NATIVE,
  ST_TORCH_EXPANDABLE,
  ST_SPOOL_NOCACHE,
  ST_SPOOL,
  ST_SPOOL_TUNED,
  ST_COUNT
} strategy_id;

typedef struct allocator allocator;

/* alloc and free must be callable from several threads at once (the threads workload). */
typedef bool (*alloc_fn)(allocator *a, void **p, size_t n, cudaStream_t s);
typedef bool (*free_fn)(allocator *a, void *p, cudaStream_t s);

typedef struct strategy {
  const char *name; /* table, CSV and --strategies */
  const char *what; /* one line for --help and the table's header */
  const char *conf; /* spool config text; NULL for the others */
  bool slow;        /* cudaMalloc: fewer pairs where every pair is alike (see workload.h) */
  bool live_is_reserved; /* cudaMalloc: no pool to ask; what it holds is what is live (the
                            driver's rounding is not visible), so reserved := the live count */
  /* Optional (NULL: always). in_build: whether this binary has the strategy at all (the torch
   * ones need a build with PyTorch); one that is not is left out of the default run and of
   * "all". usable: whether it can run in this process, checked before each measurement; a row
   * that cannot is skipped with the reason. */
  bool (*in_build)(void);
  bool (*usable)(char *why, size_t len);
  bool (*setup)(allocator *a);
  alloc_fn alloc;
  free_fn free;
  bool (*reset_peaks)(allocator *a);
  bool (*reserved_high)(allocator *a, uint64_t *out);
  /* Optional: the allocator's own count of bytes handed out at most, where it keeps one apart
   * from what it reserves (PyTorch's allocated_bytes peak, its rounded blocks). */
  bool (*allocated_high)(allocator *a, uint64_t *out);
  bool (*teardown)(allocator *a);
} strategy;

extern const strategy STRATEGIES[ST_COUNT];

/* One strategy for one measurement: strategy_init, then st->setup ... st->teardown. */
struct allocator {
  const strategy *st;
  int device;
  const char *conf; /* spool strategies: the text in effect (spool-tuned: --tuned) */
  size_t slot;      /* none: bytes of each ring buffer, at least the workload's largest size */
  /* Copied from st, so that the timed loops make one indirect call, not two. */
  alloc_fn alloc;
  free_fn free;
  /* State, per strategy. */
  spool_pool *pool;          /* spool */
  cudaMemPool_t mp;          /* async: the pool cudaMallocAsync uses */
  uint64_t saved_threshold;  /* async: put back at teardown */
  void *ring[BENCH_RING];    /* none */
  bool ready;                /* async: the threshold was changed, teardown puts it back;
                                torch: set up, teardown empties the cache */
  bool expandable;           /* torch: expandable_segments */
};

/* Looks a strategy up by name; -1 if there is none. */
int strategy_find(const char *name);

/* Whether this binary has st (strategy.in_build). */
bool strategy_in_build(const strategy *st);

/* Whether this build of spool accepts conf (no CUDA is touched); if not, why: spool's message. */
bool strategy_conf_ok(const char *conf, char *why, size_t len);

/* Sets a up for st on device (conf: the spool text; slot: the baseline's buffer size). */
void strategy_init(allocator *a, const strategy *st, int device, const char *conf, size_t slot);

/* spool's heap counters since create, warm-up included. */
typedef struct cache_counts {
  uint64_t hits, misses;   /* allocations a stream's front served / the heap behind it placed */
  uint64_t chunk_allocs;   /* of those, how many took a new chunk: an allocation call */
  uint64_t fences;         /* fence events recorded (one driver call each, and a query later) */
} cache_counts;

/* The heap's counters from spool_stats_json when this spool has them; false for other
 * strategies and for a spool without them. */
bool strategy_cache_stats(allocator *a, cache_counts *out);

#endif /* SPOOL_BENCH_STRATEGY_H */
