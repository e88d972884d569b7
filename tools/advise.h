/* The config advisor: settings read off a trace, each with the one sentence that says why, and
 * the replays that show what they change against the defaults. */
#ifndef SPOOL_TOOLS_ADVISE_H
#define SPOOL_TOOLS_ADVISE_H

#include "replay.h"
#include "trace_read.h"

#define AD_KEYS 8

typedef struct ad_key {
  const char *key; /* a config key */
  uint64_t value;
  char text[32]; /* the value as config text: "28MiB" */
  char why[640];
} ad_key;

typedef struct ad_advice {
  ad_key keys[AD_KEYS];
  int n;
  ad_key left[AD_KEYS]; /* keys read off the trace but left at their defaults by the replays */
  int nleft;
  char config[512]; /* the keys as config text */
  uint64_t periods, recurring_peak, one_off_peak; /* what release_threshold was judged on: */
  uint64_t recurring_held; /* live bytes, and bytes in the heap's chunks (spool traces) */
  uint64_t front_peak;     /* the most bytes of small buffers one stream held at once */
} ad_advice;

/* Everything but max_size, from the trace alone. 0, or -1 with err. */
int ad_recommend(const tf_trace *t, ad_advice *a, char err[TF_ERR]);
/* Replays the defaults and the advice on device; leaves a heap bound (front_limit, chunk_idle)
 * at its default where the advice without it reserves less (moved to left, its sentence saying
 * what it would have bought); adds max_size (the advice's peak reserved with headroom) and
 * replays the advice again with it: *defaults and *advised are the figures of the first and the
 * last. 0, or -1 with err. */
int ad_prove(const tf_trace *t, int device, ad_advice *a, rp_result *defaults,
             rp_result *advised, char err[TF_ERR]);

#endif
