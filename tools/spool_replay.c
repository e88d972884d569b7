/* spool-replay (the CUDA runtime) and spool-replay-sim (cudasim, SPOOL_REPLAY_SIM): a trace
 * replayed once per --config, in one process, with a line (or a JSON object) of figures each.
 * Exit status: 0 done, 1 bad usage, 2 the trace could not be read, 3 a replay failed. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "replay_report.h"
#include "tool_text.h"
#include "trace_stats.h"
#ifdef SPOOL_REPLAY_SIM
#include "tool_sim.h"
#define NAME "spool-replay-sim"
#else
#define NAME "spool-replay"
#endif

static const char USAGE[] =
    "usage: " NAME " TRACE [--config TEXT]... [--json] [--device N]"
#ifdef SPOOL_REPLAY_SIM
    " [--capacity SIZE]"
#endif
    "\n"
    "Replays TRACE (a spool trace, docs/trace.md) on a fresh pool per --config, one after the\n"
    "other in this process, each recorded stream on a stream of its own, and prints per config:\n"
    "host ns per call, peak reserved and peak live bytes, reserved/live, utilization (live /\n"
    "reserved), the fronts' hit rate, allocations that failed and ran out of memory.\n"
    "  --config TEXT   spool config text on top of the defaults; 'recorded': the recording's\n"
    "                  own config. Default: the recording's config, then the defaults.\n"
    "  --json          one JSON object instead of the table\n"
    "  --device N      the device the pools are made on (default 0)\n"
#ifdef SPOOL_REPLAY_SIM
    "  --capacity SIZE the simulated device's memory (default: the recorded device's, else\n"
    "                  80GiB). This build runs on cudasim, a simulation: no GPU is needed,\n"
    "                  the memory figures are the heap's in an H200's 32 MiB pool segments,\n"
    "                  the times are not a GPU's.\n"
#endif
    "Exit status: 0 done, 1 bad usage, 2 the trace could not be read, 3 a replay failed.\n";

static void print_json(const tool_args *a, const tf_trace *t, const ts_stats *s,
                       const rp_result *r, const char *const *configs, int n) {
  printf("{\"trace\":");
  tool_json_string(stdout, a->trace);
  printf(",\"runtime\":\"%s\",\"events\":%zu,\"recorded_peak_live\":%" PRIu64 ",\"runs\":[",
#ifdef SPOOL_REPLAY_SIM
         "cudasim",
#else
         "cuda",
#endif
         t->n, s->peak_live_bytes);
  for (int i = 0; i < n; i++) {
    printf("%s{\"config\":", i ? "," : "");
    tool_json_string(stdout, configs[i]);
    tool_print_result_json(stdout, &r[i]);
    printf("}");
  }
  printf("]}\n");
}

static void print_table(const tf_trace *t, const ts_stats *s, const rp_result *r,
                        const char *const *configs, int n) {
  char a[32];
  printf("%s: %zu events, recorded peak live %s%s\n", NAME, t->n,
         tool_size_text(s->peak_live_bytes, a), t->ended ? "" : " (no end record)");
  tool_print_result_header(stdout);
  for (int i = 0; i < n; i++) tool_print_result_row(stdout, configs[i], &r[i]);
}

int main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
    return fputs(USAGE, stdout), 0;
  tool_args a = {0};
  if (tool_parse_args(argc, argv, true, NAME, USAGE, &a) != 0) return 1;
  unsetenv("SPOOL_TRACE"); /* the replay's pools record nothing */
  tf_trace t;
  ts_stats s;
  char err[TF_ERR];
  if (tf_load(a.trace, &t, err) != 0 || ts_compute(&t, &s, err) != 0)
    return fprintf(stderr, NAME ": %s\n", err), 2;
#ifdef SPOOL_REPLAY_SIM
  tool_sim_device(a.device, a.capacity, &t);
#endif
  const char *configs[TOOL_CONFIGS];
  int n = 0;
  if (a.nconfigs == 0) configs[n++] = "recorded";
  for (int i = 0; i < a.nconfigs; i++) configs[n++] = a.configs[i];
  rp_result r[TOOL_CONFIGS];
  for (int i = 0; i < n; i++) {
    const char *text = strcmp(configs[i], "recorded") ? configs[i] : t.config;
    if (rp_run(&t, text, a.device, &r[i], err) != 0) {
      fprintf(stderr, NAME ": %s: replay with config '%s': %s\n", a.trace, configs[i], err);
      tf_free(&t);
      return 3;
    }
  }
  if (a.json) print_json(&a, &t, &s, r, configs, n);
  else print_table(&t, &s, r, configs, n);
  tf_free(&t);
  return 0;
}
