/* What every file of the benchmark harness (spool_bench) shares: checking every CUDA and spool
 * call, host time, medians, and the harness's own count of live bytes.
 *
 * A failed call ends the run: the check prints one line that names the workload and strategy
 * being measured, the call and CUDA's or spool's reason, and returns false; every caller passes
 * the false up after releasing what it built, and main exits 1. */
#ifndef SPOOL_BENCH_COMMON_H
#define SPOOL_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <spool/spool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_PROG "spool_bench"

/* Names what this thread is measuring, for failure messages ("64mib/spool"); NULLs clear it. */
void bench_context(const char *workload, const char *strategy);

/* Print one line about a failed call and return false. Out of line: only failures get here. */
bool bench_cuda_fail(cudaError_t err, const char *call, const char *file, int line);
bool bench_spool_fail(spool_status st, const char *call, const char *file, int line);
/* A failure that is no CUDA or spool call (a printf-style message); returns false. */
bool bench_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Inline so that the success path in the timed loops is one compare. */
static inline bool bench_cuda_ok(cudaError_t err, const char *call, const char *file, int line) {
  return err == cudaSuccess ? true : bench_cuda_fail(err, call, file, line);
}
static inline bool bench_spool_ok(spool_status st, const char *call, const char *file, int line) {
  return st == SPOOL_OK ? true : bench_spool_fail(st, call, file, line);
}

#define CUDA_TRY(call)                                                                            \
  do {                                                                                            \
    if (!bench_cuda_ok((call), #call, __FILE__, __LINE__)) return false;                          \
  } while (0)
#define SPOOL_TRY(call)                                                                           \
  do {                                                                                            \
    if (!bench_spool_ok((call), #call, __FILE__, __LINE__)) return false;                         \
  } while (0)

/* Host time in ns, CLOCK_MONOTONIC. */
double bench_now_ns(void);

/* Median of v[0..n) (sorts v); the mean of the two middle values when n is even. n > 0. */
double bench_median(double *v, int n);
double bench_min(const double *v, int n);
double bench_max(const double *v, int n);

/* Bytes the workload has asked for and not yet freed, as the harness counts them (host view:
 * from the return of alloc to the call of free), and the highest such count. */
typedef struct live_count {
  uint64_t now, high;
} live_count;

static inline void live_add(live_count *l, size_t n) {
  l->now += n;
  if (l->now > l->high) l->high = l->now;
}
static inline void live_sub(live_count *l, size_t n) { l->now -= n; }

/* "1.5 MiB" into buf; returns buf. */
const char *bench_bytes(double b, char *buf, size_t len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPOOL_BENCH_COMMON_H */
