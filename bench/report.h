/* Results: one row per workload, strategy (and thread count), printed as a table per workload
 * and written to CSV as they come (so that a run cut short still leaves its rows). */
#ifndef SPOOL_BENCH_REPORT_H
#define SPOOL_BENCH_REPORT_H

#include <stdio.h>

#include "strategy.h"
#include "workload.h"

typedef struct result {
  const workload *wl;
  const strategy *st;
  const char *conf;       /* spool config text in effect; NULL for the others */
  int threads;            /* host threads (1 except for the threads workload) */
  long iters;             /* iterations per rep (per thread for the threads workload) */
  int reps;
  double pairs_per_iter;  /* alloc+free pairs per iteration: 5 for a pipeline frame, else 1 */
  double ns, ns_min, ns_max; /* host ns per iteration: median, min and max over the reps */
  double wall_ns;         /* pipeline: ns per frame until its streams are synchronized */
  uint64_t reserved_high; /* what the allocator held from the device at most (strategy.h) */
  uint64_t live_high;     /* the harness's count of asked-for bytes at most */
  bool have_allocated;    /* the strategy keeps its own count of bytes handed out ... */
  uint64_t allocated_high; /* ... and this was its highest (strategy.allocated_high) */
  bool have_cache;        /* spool reported its heap's counters (cache) */
  cache_counts cache;
  bool skipped;           /* not run: note says why */
  char note[320];
} result;

/* What the header of the table and of the CSV says about the run. */
typedef struct run_info {
  const char *command;   /* the command line */
  char spool[64];        /* spool version and commit */
  char device[320];      /* ordinal, name, memory */
  char driver[160];      /* driver version (kernel module and CUDA), runtime version */
  char torch[512];       /* PyTorch's version and settings; "" in a build without it */
  char date[32];         /* UTC */
  int reps;
  bool quick;
  const char *tuned;     /* spool-tuned's config text */
  double floor_locks;    /* ns: two lock round trips (bench/floor.h) */
  double floor_capture;  /* ns: one cuStreamIsCapturing; < 0: not measured */
} run_info;

typedef struct report {
  FILE *csv; /* NULL: no CSV */
  result *v;
  size_t n, cap;
} report;

/* Opens the CSV at path (NULL: none) and writes its header lines. */
bool report_open(report *r, const char *path, const run_info *info);
/* Keeps x and appends it to the CSV. */
bool report_add(report *r, const result *x);
/* Closes the CSV (checking that everything reached the file) and frees the rows. */
bool report_close(report *r);

void report_header(FILE *out, const run_info *info);
/* The table of one workload: every row kept so far for wl. */
void report_table(FILE *out, const report *r, const workload *wl, const counts *c);
/* The figures the issue sets targets for, next to their targets. */
void report_targets(FILE *out, const report *r);

/* Derived figures. NULL none: the workload's baseline row was not kept. */
const result *report_none(const report *r, const result *x);
double result_rate(const result *x); /* alloc+free pairs per second, all threads together */

#endif /* SPOOL_BENCH_REPORT_H */
