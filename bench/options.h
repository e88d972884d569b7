/* spool_bench's command line. Parsing touches no CUDA, so --help and bad usage work anywhere. */
#ifndef SPOOL_BENCH_OPTIONS_H
#define SPOOL_BENCH_OPTIONS_H

#include <stdio.h>

#include "strategy.h"
#include "workload.h"

enum { BENCH_MAX_COUNTS = 16, BENCH_DEFAULT_REPS = 5, BENCH_QUICK_REPS = 3, BENCH_MAX_REPS = 100 };

typedef struct options {
  bool quick;
  const char *csv;              /* CSV file; NULL: none (unless --plots, see bench.c) */
  const char *plots;            /* folder for PNG plots; NULL: no plots */
  bool workload[WL_COUNT];      /* --only */
  bool strategy[ST_COUNT];      /* --strategies; the baseline `none` always runs */
  const char *tuned;            /* spool-tuned's config text */
  bool tuned_given;
  int threads[BENCH_MAX_COUNTS]; /* thread counts of the threads workload */
  int nthreads;
  int reps;
  int device;
} options;

enum { OPTIONS_RUN = -1 }; /* options_parse: go on; any other value is the exit status */

/* Fills *o from argv: OPTIONS_RUN, or 0 after printing the help, or 2 after a message on bad
 * usage. */
int options_parse(options *o, int argc, char **argv);

void options_usage(FILE *f);

#endif /* SPOOL_BENCH_OPTIONS_H */
