/* Runs one workload for the baseline and every chosen strategy, and adds their rows to the
 * report. Per strategy: set up (a fresh pool, or the default pool emptied), reset the peaks,
 * warm up, time the reps, read the reserved high-water mark, tear down (pools destroyed or
 * trimmed, so that no strategy inherits another's memory). */
#ifndef SPOOL_BENCH_MEASURE_H
#define SPOOL_BENCH_MEASURE_H

#include "options.h"
#include "report.h"

typedef struct bench_env {
  const options *o;
  counts c;
  report *rep;
  cudaStream_t streams[BENCH_MAX_STREAMS];  /* non-blocking; a workload uses its first
                                               `streams` (pairs, pipeline, churn) */
  cudaStream_t tstreams[BENCH_MAX_THREADS]; /* non-blocking; one per thread */
  int ntstreams;
} bench_env;

/* Sets the device and makes the streams; env_close releases whatever was made. */
bool env_open(bench_env *e, const options *o, report *rep);
bool env_close(bench_env *e);

bool measure_workload(bench_env *e, workload_id id);

#endif /* SPOOL_BENCH_MEASURE_H */
