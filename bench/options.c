/* Command-line parsing (see options.h). Options take their value as the next argument or after
 * '=' ("--reps 3" or "--reps=3"). */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void options_usage(FILE *f) {
  fprintf(f,
          "usage: spool_bench [--quick] [--csv FILE] [--plots DIR] [--only WORKLOAD,...]\n"
          "                   [--strategies NAME,...] [--tuned \"config text\"]\n"
          "                   [--threads 1,2,4,8,16] [--reps N] [--device N]\n"
          "\n"
          "Runs every strategy on the same pre-generated workloads in one process and prints a\n"
          "table per workload (host time, median of the reps, and memory: reserved high / live\n"
          "high and its inverse, utilization), then the issue's targets next to the figures\n"
          "they judge.\n"
          "\n"
          "  --quick          a smoke run of a few seconds (short reps, %d reps)\n"
          "  --csv FILE       also write every row to FILE (CSV)\n"
          "  --plots DIR      write PNG plots into DIR with bench/plot.py (needs python3 and\n"
          "                   matplotlib; skipped with a note otherwise); the CSV goes to FILE or\n"
          "                   DIR/spool_bench.csv\n"
          "  --only LIST      workloads to run (default all):\n",
          BENCH_QUICK_REPS);
  for (int i = 0; i < WL_COUNT; ++i)
    fprintf(f, "      %-9s %s\n", WORKLOADS[i].name, WORKLOADS[i].what);
  fprintf(f, "  --strategies LIST  strategies to run (default all in this build; `none`, the\n"
             "                   baseline, always runs):\n");
  for (int i = 1; i < ST_COUNT; ++i)
    fprintf(f, "      %-16s %s%s\n", STRATEGIES[i].name, STRATEGIES[i].what,
            strategy_in_build(&STRATEGIES[i]) ? "" : " [not in this build]");
  fprintf(f,
          "  --tuned TEXT     spool-tuned's config text (default \"%s\")\n"
          "  --threads LIST   thread counts of the threads workload (default 1,2,4,8,16; 1..%d)\n"
          "  --reps N         timed repetitions per measurement, median reported (default %d)\n"
          "  --device N       CUDA device (default 0)\n"
          "  -h, --help       this text\n"
          "\n"
          "spool strategies are configured by their config text only (SPOOL_CONF is not read); a\n"
          "built-in text this spool does not accept skips its strategy with the parser's reason.\n"
          "torch-* are in builds configured with -DSPOOL_BENCH_TORCH=ON (scripts/bench does so\n"
          "when python3 has torch); they set expandable_segments and leave the rest of\n"
          "PYTORCH_CUDA_ALLOC_CONF to PyTorch.\n"
          "Exit status: 0 ok, 1 a CUDA or spool call failed, 2 bad usage, 77 no CUDA device.\n",
          BENCH_TUNED_DEFAULT, BENCH_MAX_THREADS, BENCH_DEFAULT_REPS);
}

static bool bad(const char *opt, const char *val, const char *want) {
  fprintf(stderr, BENCH_PROG ": %s: expected %s, got '%s'\n", opt, want, val ? val : "");
  return false;
}

static bool parse_int(const char *opt, const char *text, long lo, long hi, int *out) {
  char *end = NULL;
  errno = 0;
  const long v = text != NULL ? strtol(text, &end, 10) : 0;
  if (text == NULL || *text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    char want[64];
    snprintf(want, sizeof want, "a whole number from %ld to %ld", lo, hi);
    return bad(opt, text, want);
  }
  *out = (int)v;
  return true;
}

/* Splits a comma list of names into flags: find(name) is an index below n, or -1. */
static bool parse_names(const char *opt, const char *text, int (*find)(const char *), bool *flags,
                        int n) {
  if (text == NULL || *text == '\0') return bad(opt, text, "a comma-separated list of names");
  if (strcmp(text, "all") == 0) {
    for (int i = 0; i < n; ++i) flags[i] = true;
    return true;
  }
  for (int i = 0; i < n; ++i) flags[i] = false;
  char buf[512];
  if (strlen(text) >= sizeof buf) return bad(opt, text, "a shorter list");
  strcpy(buf, text);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    const int k = find(tok);
    if (k < 0 || k >= n) {
      fprintf(stderr, BENCH_PROG ": %s: unknown name '%s' (see --help)\n", opt, tok);
      return false;
    }
    flags[k] = true;
  }
  return true;
}

static bool parse_threads(const char *opt, const char *text, options *o) {
  if (text == NULL || *text == '\0') return bad(opt, text, "a list such as 1,2,4,8,16");
  char buf[256];
  if (strlen(text) >= sizeof buf) return bad(opt, text, "a shorter list");
  strcpy(buf, text);
  o->nthreads = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    if (o->nthreads == BENCH_MAX_COUNTS) return bad(opt, text, "at most 16 thread counts");
    if (!parse_int(opt, tok, 1, BENCH_MAX_THREADS, &o->threads[o->nthreads++])) return false;
  }
  return o->nthreads > 0 ? true : bad(opt, text, "a list such as 1,2,4,8,16");
}

/* "all" means all that this binary has; a strategy named that it has not is bad usage. */
static bool strategies_in_build(const char *opt, const char *text, options *o) {
  for (int i = 0; i < ST_COUNT; ++i) {
    if (!o->strategy[i] || strategy_in_build(&STRATEGIES[i])) continue;
    if (strcmp(text, "all") == 0) {
      o->strategy[i] = false;
      continue;
    }
    fprintf(stderr, BENCH_PROG ": %s: %s is not in this build (configure with "
            "-DSPOOL_BENCH_TORCH=ON; scripts/bench does when python3 has torch)\n", opt,
            STRATEGIES[i].name);
    return false;
  }
  return true;
}

static void defaults(options *o) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < WL_COUNT; ++i) o->workload[i] = true;
  for (int i = 0; i < ST_COUNT; ++i) o->strategy[i] = strategy_in_build(&STRATEGIES[i]);
  o->tuned = BENCH_TUNED_DEFAULT;
  static const int thr[] = {1, 2, 4, 8, 16};
  for (int i = 0; i < 5; ++i) o->threads[i] = thr[i];
  o->nthreads = 5;
  o->reps = 0; /* 0: chosen after all options are read (--quick changes it) */
}

/* "--name" or "--name=value": the value, taken from the next argument when needed. */
static bool option_value(const char *arg, const char *name, int argc, char **argv, int *i,
                         const char **val) {
  const size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0 || (arg[n] != '\0' && arg[n] != '=')) return false;
  *val = arg[n] == '=' ? arg + n + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
  return true;
}

/* One option with a value; false on bad usage (a message was printed). */
static bool value_option(options *o, const char *name, const char *val) {
  if (strcmp(name, "--csv") == 0 || strcmp(name, "--plots") == 0) {
    if (val == NULL || *val == '\0') return bad(name, val, "a path");
    *(name[2] == 'c' ? &o->csv : &o->plots) = val;
    return true;
  }
  if (strcmp(name, "--only") == 0)
    return parse_names(name, val, workload_find, o->workload, WL_COUNT);
  if (strcmp(name, "--strategies") == 0) {
    if (!parse_names(name, val, strategy_find, o->strategy, ST_COUNT)) return false;
    o->strategy[ST_NONE] = true;
    return strategies_in_build(name, val, o);
  }
  if (strcmp(name, "--tuned") == 0) {
    if (val == NULL) return bad(name, val, "config text");
    o->tuned = val, o->tuned_given = true;
    return true;
  }
  if (strcmp(name, "--threads") == 0) return parse_threads(name, val, o);
  if (strcmp(name, "--reps") == 0) return parse_int(name, val, 1, BENCH_MAX_REPS, &o->reps);
  return parse_int(name, val, 0, 1023, &o->device); /* --device */
}

int options_parse(options *o, int argc, char **argv) {
  static const char *names[] = {"--csv",    "--plots", "--only", "--strategies",
                                "--tuned", "--threads", "--reps", "--device"};
  defaults(o);
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i], *val = NULL;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      options_usage(stdout);
      return 0;
    }
    if (strcmp(arg, "--quick") == 0) {
      o->quick = true;
      continue;
    }
    size_t k = 0;
    while (k < sizeof names / sizeof names[0] && !option_value(arg, names[k], argc, argv, &i, &val))
      ++k;
    if (k == sizeof names / sizeof names[0]) {
      fprintf(stderr, BENCH_PROG ": unknown option '%s' (see --help)\n", arg);
      return 2;
    }
    if (!value_option(o, names[k], val)) return 2;
  }
  if (o->reps == 0) o->reps = o->quick ? BENCH_QUICK_REPS : BENCH_DEFAULT_REPS;
  return OPTIONS_RUN;
}
