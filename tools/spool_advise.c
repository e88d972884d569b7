/* spool-advise (the CUDA runtime) and spool-advise-sim (cudasim, SPOOL_ADVISE_SIM): settings
 * for the pool a trace was recorded with, a sentence for each, and the replays of the defaults
 * and of the advice that show the difference. Exit status: 0 done, 1 bad usage, 2 the trace
 * could not be read or judged, 3 a replay failed. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advise.h"
#include "replay_report.h"
#include "tool_text.h"
#ifdef SPOOL_ADVISE_SIM
#include "tool_sim.h"
#define NAME "spool-advise-sim"
#define RUNTIME "cudasim"
#else
#define NAME "spool-advise"
#define RUNTIME "cuda"
#endif

static const char USAGE[] =
    "usage: " NAME " TRACE [--json] [--device N]"
#ifdef SPOOL_ADVISE_SIM
    " [--capacity SIZE]"
#endif
    "\n"
    "Reads TRACE (a spool trace, docs/trace.md) and recommends release_threshold, reserve,\n"
    "front_limit, chunk_idle and max_size, each with the reason, then replays the defaults and\n"
    "the recommendation (spool-replay's figures for both).\n"
    "  --json          one JSON object instead of the text\n"
    "  --device N      the device the replays run on (default 0)\n"
#ifdef SPOOL_ADVISE_SIM
    "  --capacity SIZE the simulated device's memory (default: the recorded device's, else\n"
    "                  80GiB); this build replays on cudasim, a simulation without a GPU\n"
    "                  whose pools reserve in an H200's 32 MiB segments\n"
#endif
    "Exit status: 0 done, 1 bad usage, 2 the trace could not be read or judged, 3 a replay\n"
    "failed.\n";

static void print_keys_json(const ad_key *keys, int n) {
  printf("[");
  for (int i = 0; i < n; i++) {
    printf("%s{\"key\":\"%s\",\"value\":%" PRIu64 ",\"why\":", i ? "," : "", keys[i].key,
           keys[i].value);
    tool_json_string(stdout, keys[i].why);
    printf("}");
  }
  printf("]");
}

static void print_json(const tool_args *a, const ad_advice *ad, const rp_result *d,
                       const rp_result *r) {
  printf("{\"trace\":");
  tool_json_string(stdout, a->trace);
  printf(",\"runtime\":\"" RUNTIME "\",\"config\":");
  tool_json_string(stdout, ad->config);
  printf(",\"keys\":");
  print_keys_json(ad->keys, ad->n);
  printf(",\"left\":");
  print_keys_json(ad->left, ad->nleft);
  printf(",\"defaults\":{\"config\":\"\"");
  tool_print_result_json(stdout, d);
  printf("},\"advised\":{\"config\":");
  tool_json_string(stdout, ad->config);
  tool_print_result_json(stdout, r);
  printf("}}\n");
}

static void print_text(const ad_advice *ad, const rp_result *d, const rp_result *r) {
  printf("recommended: %s\n", ad->config);
  for (int i = 0; i < ad->n; i++)
    printf("  %s=%s: %s\n", ad->keys[i].key, ad->keys[i].text, ad->keys[i].why);
  for (int i = 0; i < ad->nleft; i++)
    printf("  not %s=%s: %s\n", ad->left[i].key, ad->left[i].text, ad->left[i].why);
  printf("\nreplayed on " RUNTIME ":\n");
  tool_print_result_header(stdout);
  tool_print_result_row(stdout, "", d);
  tool_print_result_row(stdout, "recommended", r);
}

int main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
    return fputs(USAGE, stdout), 0;
  tool_args a = {0};
  if (tool_parse_args(argc, argv, false, NAME, USAGE, &a) != 0) return 1;
  unsetenv("SPOOL_TRACE"); /* the replays' pools record nothing */
  tf_trace t;
  ad_advice ad;
  char err[TF_ERR];
  if (tf_load(a.trace, &t, err) != 0) return fprintf(stderr, NAME ": %s\n", err), 2;
  if (ad_recommend(&t, &ad, err) != 0) {
    fprintf(stderr, NAME ": %s: %s\n", a.trace, err);
    tf_free(&t);
    return 2;
  }
#ifdef SPOOL_ADVISE_SIM
  tool_sim_device(a.device, a.capacity, &t);
#endif
  rp_result d, r;
  int rc = ad_prove(&t, a.device, &ad, &d, &r, err);
  tf_free(&t);
  if (rc != 0) return fprintf(stderr, NAME ": %s: replay: %s\n", a.trace, err), 3;
  if (a.json) print_json(&a, &ad, &d, &r);
  else print_text(&ad, &d, &r);
  return 0;
}
