/* Checks, time and small numeric helpers shared by the harness (see common.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Per thread: the threads workload measures from several threads at once. */
static _Thread_local char context[96];

void bench_context(const char *workload, const char *strategy) {
  if (workload == NULL || strategy == NULL) {
    context[0] = '\0';
    return;
  }
  snprintf(context, sizeof context, "%s/%s: ", workload, strategy);
}

/* __FILE__ is an absolute path in CMake builds; the file name is enough to find the call. */
static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

bool bench_cuda_fail(cudaError_t err, const char *call, const char *file, int line) {
  fprintf(stderr, BENCH_PROG ": %s%s failed: %s: %s (%s:%d)\n", context, call,
          cudaGetErrorName(err), cudaGetErrorString(err), base_name(file), line);
  return false;
}

bool bench_spool_fail(spool_status st, const char *call, const char *file, int line) {
  fprintf(stderr, BENCH_PROG ": %s%s failed: %s: %s (%s:%d)\n", context, call,
          spool_status_name(st), spool_last_error(), base_name(file), line);
  return false;
}

bool bench_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, BENCH_PROG ": %s", context);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return false;
}

double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_min(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; ++i) m = v[i] < m ? v[i] : m;
  return m;
}

double bench_max(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

const char *bench_bytes(double b, char *buf, size_t len) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", b, unit[u]);
  return buf;
}
