/* Replaying a trace against a fresh pool: the calls of the recording, in their order, each on
 * a stream of its own that stands for the recorded one. Built once and linked either against the
 * CUDA runtime (spool-replay) or cudasim (spool-replay-sim, and the tests). */
#ifndef SPOOL_TOOLS_REPLAY_H
#define SPOOL_TOOLS_REPLAY_H

#include "trace_read.h"

typedef struct rp_result {
  uint64_t ops;           /* spool calls made */
  uint64_t allocs, frees, failed_allocs, ooms;
  uint64_t skipped_frees; /* frees of buffers whose replayed allocation failed */
  double ns_per_op;       /* host time of the spool calls, per call */
  uint64_t peak_live, peak_reserved;
  double reserved_over_live; /* peak reserved / peak live (0 without allocations) */
  double utilization;        /* peak live / peak reserved */
  uint64_t hits, misses;     /* the stream fronts' hits and the heap's allocations */
  double hit_rate;           /* hits / (hits + misses) */
} rp_result;

/* Replays t on a pool made from the defaults with config on top (spool_config_parse; its
 * `trace` key is ignored) on device. 0 with *out filled; -1 with the reason in err (a config
 * that does not parse, a pool or stream that cannot be made). Allocations that fail in the
 * replay are counted, not fatal. Refuses to run while SPOOL_TRACE is set. The process's first
 * call replays twice and reports the second, so the first config is timed warm like the rest. */
int rp_run(const tf_trace *t, const char *config, int device, rp_result *out,
           char err[TF_ERR]);

#endif
