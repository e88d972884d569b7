/* What a trace says about its program's memory: the figures of `spool-trace stats`, which the
 * advisor and the tests read too. */
#ifndef SPOOL_TOOLS_TRACE_STATS_H
#define SPOOL_TOOLS_TRACE_STATS_H

#include "trace_read.h"

#define TS_BUCKETS 64 /* size histogram: bucket k holds sizes in (2^(k-1), 2^k] */
#define TS_STREAMS 64 /* streams listed one by one; the rest are summed into "others" */

typedef struct ts_stream {
  uint64_t stream, thread; /* thread: for cudaStreamPerThread (a stream per thread), else 0 */
  uint64_t allocs, live, peak_live, peak_bytes, bytes; /* buffers; bytes live now */
  bool capturing; /* its last allocation or free was made under a capture */
} ts_stream;

typedef struct ts_stats {
  uint64_t events, allocs, frees, failed_allocs, ooms, bad_frees, trims, releases, scopes;
  uint64_t handoffs, captured, leaks, leak_bytes;
  uint64_t captures; /* captures seen: a stream's calls going from uncaptured to captured */
  uint64_t chunk_allocs, chunk_frees, chunk_bytes_peak; /* the heap's chunks (its reserve) */
  uint64_t peak_live_bytes, peak_live_buffers;
  uint64_t bytes_allocated, duration_ns;
  uint64_t max_size, min_size;
  uint64_t hist[TS_BUCKETS];
  uint64_t life_p50_ns, life_p90_ns, life_max_ns, lifetimes; /* of freed buffers */
  size_t nstreams;                   /* distinct streams seen */
  unsigned peak_streams_live;        /* most streams with live buffers at one time */
  ts_stream streams[TS_STREAMS];
  /* the live bytes just before each of the biggest drops: what a periodic peak needs */
  uint64_t steady_live_bytes;        /* median of live bytes over the events */
} ts_stats;

/* Walks t once. 0, or -1 without memory (err says so). */
int ts_compute(const tf_trace *t, ts_stats *out, char err[TF_ERR]);

/* Size bucket of n bytes. */
unsigned ts_bucket(uint64_t n);

/* cudaStreamPerThread's handle: its events are told apart by thread. */
#define TS_PER_THREAD_STREAM 0x2u

#endif
