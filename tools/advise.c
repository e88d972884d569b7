/* Each setting comes from one figure of the trace:
 *  - reserve: the live bytes the program does not go below (the median of the periods' lows),
 *    which a pool made with that much ready never has to grow for;
 *  - release_threshold: the highest peak that comes back (the second-highest peak of the
 *    trace's periods), of the live bytes or, where the trace has them, of the heap's chunks
 *    (what the pool must hold for it), so that a synchronize keeps what the next period needs
 *    and gives back a peak that happened once;
 *  - front_limit: the most bytes of small buffers (up to 1 MiB) one stream held at once, so
 *    that a front holds a repeat of all of them;
 *  - chunk_idle: the allocations in a period, so that an all-free chunk waits for the next;
 *  - max_size: the advice's own peak reserved in a replay, plus a quarter.
 * front_limit, chunk_idle and (for a trace of several streams) fence_bytes are then settled by
 * replays, memory first (ad_prove).
 * Periods end at the trace's synchronize points (stream releases, trims, flushes) when there
 * are a few, else the trace is cut into 16 equal parts. */
#include "advise.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spool/spool.h>

#include "tool_text.h"
#include "u64map.h"

#define GRAIN ((uint64_t)2 << 20) /* the pool reserves in 2 MiB steps */
#define SMALL ((uint64_t)1 << 20) /* what the fronts are for */
#define CUTS 16
#define FRONT_MAX ((uint64_t)64 << 20)

static uint64_t round_up(uint64_t n, uint64_t g) { return (n + g - 1) / g * g; }
static uint64_t round_down(uint64_t n, uint64_t g) { return n / g * g; }

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct walk {
  uint64_t *lows, *peaks; /* each period's lowest and highest live bytes */
  uint64_t *held;         /* each period's highest bytes in the heap's chunks */
  size_t nperiods;
  uint64_t nallocs, allocs_per_period_max, front_peak;
  uint64_t live_bytes, chunk_bytes, in_period;
  u64map live;  /* ptr -> index of its allocation */
  u64map small; /* stream + 1 -> its live bytes in buffers up to SMALL */
} walk;

static bool is_sync(const tf_event *e) {
  return e->kind == SPOOL_TRACE_STREAM_RELEASE || e->kind == SPOOL_TRACE_TRIM ||
         e->kind == SPOOL_TRACE_FLUSH;
}

/* Live bytes of small buffers per stream (the stream each was allocated on), at their peak. */
static void small_live(walk *w, const tf_event *a, int64_t delta) {
  uint64_t now = 0;
  uint64_t key = a->stream + 1; /* the map's keys are never 0 */
  (void)u64map_get(&w->small, key, &now);
  now = (uint64_t)((int64_t)now + delta);
  (void)u64map_put(&w->small, key, now);
  if (now > w->front_peak) w->front_peak = now;
}

/* Event i's change of the live bytes and the chunks. */
static void step(const tf_trace *t, size_t i, walk *w) {
  const tf_event *e = &t->ev[i];
  uint64_t at;
  if (e->kind == SPOOL_TRACE_ALLOC && e->status == SPOOL_OK) {
    (void)u64map_put(&w->live, e->ptr, i);
    w->live_bytes += e->size;
    if (e->size <= SMALL) small_live(w, e, (int64_t)e->size);
    w->nallocs++;
    if (++w->in_period > w->allocs_per_period_max) w->allocs_per_period_max = w->in_period;
  } else if (e->kind == SPOOL_TRACE_FREE && e->status == SPOOL_OK &&
             u64map_get(&w->live, e->ptr, &at)) {
    const tf_event *a = &t->ev[at];
    u64map_del(&w->live, e->ptr);
    w->live_bytes -= a->size;
    if (a->size <= SMALL) small_live(w, a, -(int64_t)a->size);
  } else if (e->kind == SPOOL_TRACE_CHUNK_ALLOC) {
    w->chunk_bytes += e->size;
  } else if (e->kind == SPOOL_TRACE_CHUNK_FREE) {
    w->chunk_bytes -= e->size < w->chunk_bytes ? e->size : w->chunk_bytes;
  }
}

static int walk_trace(const tf_trace *t, walk *w, char err[TF_ERR]) {
  size_t syncs = 0;
  for (size_t i = 0; i < t->n; i++) syncs += is_sync(&t->ev[i]);
  bool by_sync = syncs >= 3;
  size_t cuts = t->n < CUTS ? t->n : CUTS, periods = (by_sync ? syncs : cuts) + 1;
  w->lows = malloc(periods * sizeof *w->lows);
  w->peaks = calloc(periods, sizeof *w->peaks);
  w->held = calloc(periods, sizeof *w->held);
  if (!w->lows || !w->peaks || !w->held) return snprintf(err, TF_ERR, "no memory"), -1;
  for (size_t p = 0; p < periods; p++) w->lows[p] = UINT64_MAX;
  for (size_t i = 0; i < t->n; i++) {
    size_t period = by_sync ? w->nperiods : i * cuts / t->n;
    if (by_sync && is_sync(&t->ev[i])) {
      w->nperiods++;
      w->in_period = 0;
    }
    step(t, i, w);
    if (w->live_bytes > w->peaks[period]) w->peaks[period] = w->live_bytes;
    if (w->live_bytes < w->lows[period]) w->lows[period] = w->live_bytes;
    if (w->chunk_bytes > w->held[period]) w->held[period] = w->chunk_bytes;
  }
  w->nperiods = by_sync ? w->nperiods + 1 : cuts;
  return 0;
}

static void add(ad_advice *a, const char *key, uint64_t value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(ad_advice *a, const char *key, uint64_t value, const char *fmt, ...) {
  ad_key *k = &a->keys[a->n++];
  k->key = key;
  k->value = value;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->why, sizeof k->why, fmt, ap);
  va_end(ap);
}

/* A size as config text: the largest binary unit it is a whole number of. */
static void size_value(uint64_t n, char out[32]) {
  static const char *const units[] = {"", "KiB", "MiB", "GiB", "TiB"};
  unsigned u = 0;
  while (u < 4 && n && n % 1024 == 0) n /= 1024, u++;
  snprintf(out, 32, "%" PRIu64 "%s", n, units[u]);
}

static void config_text(ad_advice *a) {
  size_t at = 0;
  a->config[0] = '\0';
  for (int i = 0; i < a->n && at < sizeof a->config; i++) {
    ad_key *k = &a->keys[i];
    if (strcmp(k->key, "chunk_idle") == 0) snprintf(k->text, sizeof k->text, "%" PRIu64,
                                                    k->value);
    else size_value(k->value, k->text);
    at += (size_t)snprintf(a->config + at, sizeof a->config - at, "%s%s=%s", i ? ", " : "",
                           k->key, k->text);
  }
}

int ad_recommend(const tf_trace *t, ad_advice *a, char err[TF_ERR]) {
  memset(a, 0, sizeof *a);
  walk w = {0};
  int rc = walk_trace(t, &w, err);
  if (rc == 0 && w.nallocs == 0) {
    snprintf(err, TF_ERR, "no successful allocations to judge");
    rc = -1;
  }
  if (rc == 0) {
    char s1[32], s2[32];
    qsort(w.lows, w.nperiods, sizeof *w.lows, cmp_u64);
    uint64_t floor = w.lows[w.nperiods / 2];
    uint64_t reserve = round_down(floor, GRAIN);
    qsort(w.peaks, w.nperiods, sizeof *w.peaks, cmp_u64);
    qsort(w.held, w.nperiods, sizeof *w.held, cmp_u64);
    a->periods = w.nperiods;
    a->one_off_peak = w.peaks[w.nperiods - 1];
    a->recurring_peak = w.nperiods > 1 ? w.peaks[w.nperiods - 2] : a->one_off_peak;
    a->recurring_held = w.nperiods > 1 ? w.held[w.nperiods - 2] : w.held[w.nperiods - 1];
    uint64_t need = a->recurring_held > a->recurring_peak ? a->recurring_held
                                                          : a->recurring_peak;
    uint64_t threshold = round_up(need, GRAIN);
    if (threshold < reserve) threshold = reserve;
    bool once = a->one_off_peak > a->recurring_peak;
    char s3[32], held[64] = "", highest[64] = "";
    if (a->recurring_held)
      snprintf(held, sizeof held, ", %s in the heap's chunks",
               tool_size_text(a->recurring_held, s3));
    if (once)
      snprintf(highest, sizeof highest, " (the highest live, %s, came once)",
               tool_size_text(a->one_off_peak, s2));
    add(a, "release_threshold", threshold, "the highest peak that recurs across the trace's %"
        PRIu64 " periods is %s live%s%s: a synchronize keeps that much for the next period%s",
        a->periods, tool_size_text(a->recurring_peak, s1), held, highest,
        once ? " and gives the rest back" : "");
    if (reserve)
      add(a, "reserve", reserve, "in half of the periods the live bytes never fell below %s: "
          "a pool created with that much ready (in 2 MiB steps) never grows for it",
          tool_size_text(floor, s1));
    else
      add(a, "reserve", 0, "in half of the periods the live bytes fell to %s, under the pool's "
          "2 MiB step: there is no lasting working set to reserve", tool_size_text(floor, s1));
    uint64_t front = SMALL;
    while (front < w.front_peak && front < FRONT_MAX) front *= 2;
    a->front_peak = w.front_peak;
    add(a, "front_limit", front, "one stream held at most %s of buffers of 1 MiB or less at "
        "once: a front of %s keeps a repeat of all of them a hit",
        tool_size_text(w.front_peak, s1), tool_size_text(front, s2));
    uint64_t idle = w.allocs_per_period_max < 256 ? 256 : w.allocs_per_period_max;
    if (idle > 1000000) idle = 1000000;
    add(a, "chunk_idle", idle, "a period makes up to %" PRIu64 " allocations: an all-free "
        "chunk waits that long for the next period before it goes back to the pool",
        w.allocs_per_period_max);
    config_text(a);
  }
  free(w.lows);
  free(w.peaks);
  free(w.held);
  u64map_free(&w.live);
  u64map_free(&w.small);
  return rc;
}

/* The advice without its key i. */
static ad_advice without(const ad_advice *a, int i) {
  ad_advice less = *a;
  memmove(&less.keys[i], &less.keys[i + 1], (size_t)(less.n - i - 1) * sizeof less.keys[0]);
  less.n--;
  config_text(&less);
  return less;
}

static int find_key(const ad_advice *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->keys[i].key, name) == 0) return i;
  return -1;
}

/* Whether r holds less than best: fewer bytes reserved (by a pool step or more), or as many and
 * more hits. */
static bool better(const rp_result *r, const rp_result *best) {
  if (r->ooms != best->ooms) return r->ooms < best->ooms;
  if (r->peak_reserved + GRAIN <= best->peak_reserved) return true;
  if (best->peak_reserved + GRAIN <= r->peak_reserved) return false;
  return r->hit_rate > best->hit_rate;
}

/* Replays of candidate advices, the best kept (memory first, then hits), and each one's peak
 * reserved as text for the sentence that explains the choice. */
typedef struct trials {
  ad_advice best;
  rp_result best_r;
  char list[200];
  size_t at;
} trials;

/* shown: the candidate's value (0: "none"). */
static void trials_note(trials *tr, uint64_t shown, const rp_result *r) {
  char s1[32], s2[32];
  if (tr->at >= sizeof tr->list) return;
  tr->at += (size_t)snprintf(tr->list + tr->at, sizeof tr->list - tr->at, "%s%s: %s",
                             tr->at ? ", " : "", shown ? tool_size_text(shown, s1) : "none",
                             tool_size_text(r->peak_reserved, s2));
}

static int trials_run(trials *tr, const tf_trace *t, int device, const ad_advice *tried,
                      uint64_t shown, char err[TF_ERR]) {
  rp_result r;
  if (rp_run(t, tried->config, device, &r, err) != 0) return -1;
  if (better(&r, &tr->best_r)) tr->best = *tried, tr->best_r = r;
  trials_note(tr, shown, &r);
  return 0;
}

/* The front a trace asks for bounds what is worth keeping, not what pays: blocks kept ready
 * for a repeat are bytes the heap cannot merge for other sizes. So the fronts from the trace's
 * figure down to the default, a quarter at a time, are replayed, and the one that reserves
 * least (then hits most) is advised; the default means no key. *with: the advice's replay. */
static int tune_front(const tf_trace *t, int device, ad_advice *a, rp_result *with,
                      char err[TF_ERR]) {
  const uint64_t dflt = SPOOL_FRONT_LIMIT_DEFAULT;
  int i = find_key(a, "front_limit");
  if (i < 0) return 0;
  uint64_t asked = a->keys[i].value;
  trials tr = {.best = *a, .best_r = *with};
  trials_note(&tr, asked > dflt ? asked : dflt, with);
  for (uint64_t v = asked / 4; asked > dflt; v /= 4) {
    ad_advice tried = v <= dflt ? without(a, i) : *a;
    if (v > dflt) tried.keys[i].value = v, config_text(&tried);
    if (trials_run(&tr, t, device, &tried, v > dflt ? v : dflt, err) != 0) return -1;
    if (v <= dflt) break;
  }
  ad_key k = a->keys[i];
  int j = find_key(&tr.best, "front_limit");
  char *why = j >= 0 ? tr.best.keys[j].why : k.why, s1[32];
  snprintf(why, sizeof k.why, "one stream held at most %s of buffers of 1 MiB or less at "
           "once; the replays of fronts from there down (front: peak reserved) gave %s, and %s "
           "reserves least", tool_size_text(a->front_peak, s1), tr.list,
           j >= 0 ? "this one" : "the default");
  if (j < 0) tr.best.left[tr.best.nleft++] = k;
  *a = tr.best;
  *with = tr.best_r;
  return 0;
}

static size_t streams_seen(const tf_trace *t) {
  uint64_t seen[8];
  size_t n = 0;
  for (size_t i = 0; i < t->n && n < 8; i++) {
    if (t->ev[i].kind != SPOOL_TRACE_ALLOC) continue;
    size_t k = 0;
    while (k < n && seen[k] != t->ev[i].stream) k++;
    if (k == n) seen[n++] = t->ev[i].stream;
  }
  return n;
}

/* A block freed on one stream reaches the others at that stream's next fence; fence_bytes
 * records the fence at the free of a large block, which lets another stream reuse it at once
 * instead of taking a chunk of its own, for an event per such free. Only a trace of several
 * streams can gain; the sizes from none down to 1 MiB are replayed, and the one that reserves
 * least (then hits most) is advised. *with: the advice's replay. */
static int tune_fence(const tf_trace *t, int device, ad_advice *a, rp_result *with,
                      char err[TF_ERR]) {
  static const uint64_t sizes[] = {(uint64_t)16 << 20, (uint64_t)4 << 20, (uint64_t)1 << 20};
  size_t streams = streams_seen(t);
  if (streams < 2 || a->n >= AD_KEYS) return 0;
  trials tr = {.best = *a, .best_r = *with};
  trials_note(&tr, 0, with);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    ad_advice tried = *a;
    tried.keys[tried.n++] = (ad_key){.key = "fence_bytes", .value = sizes[i]};
    config_text(&tried);
    if (trials_run(&tr, t, device, &tried, sizes[i], err) != 0) return -1;
  }
  int j = find_key(&tr.best, "fence_bytes");
  if (j < 0) return 0; /* no fence pays: the key stays out */
  snprintf(tr.best.keys[j].why, sizeof tr.best.keys[j].why, "the trace allocates on %s%zu "
           "streams; the replays of fence_bytes from none down (fence: peak reserved) gave %s, "
           "and this one reserves least: a free of a block this large lets the other streams "
           "reuse it at once, for one event", streams >= 8 ? "at least " : "", streams, tr.list);
  *a = tr.best;
  *with = tr.best_r;
  return 0;
}

/* chunk_idle holds all-free chunks over the trace's longest period; where the replay without
 * it reserves less, it goes, its sentence saying what it would have bought. */
static int drop_costly_idle(const tf_trace *t, int device, ad_advice *a, rp_result *with,
                            char err[TF_ERR]) {
  int i = find_key(a, "chunk_idle");
  if (i < 0) return 0;
  ad_advice less = without(a, i);
  rp_result r;
  if (rp_run(t, less.config, device, &r, err) != 0) return -1;
  if (!better(&r, with)) return 0;
  ad_key k = a->keys[i];
  char s1[32], s2[32];
  snprintf(k.why, sizeof k.why, "the replay with it reserved %s against %s without it (a hit "
           "rate of %.1f%% against %.1f%%): left at its default",
           tool_size_text(with->peak_reserved, s1), tool_size_text(r.peak_reserved, s2),
           100 * with->hit_rate, 100 * r.hit_rate);
  less.left[less.nleft++] = k;
  *a = less;
  *with = r;
  return 0;
}

int ad_prove(const tf_trace *t, int device, ad_advice *a, rp_result *defaults,
             rp_result *advised, char err[TF_ERR]) {
  if (rp_run(t, "", device, defaults, err) != 0) return -1;
  if (rp_run(t, a->config, device, advised, err) != 0) return -1;
  if (tune_front(t, device, a, advised, err) != 0) return -1;
  if (tune_fence(t, device, a, advised, err) != 0) return -1;
  if (drop_costly_idle(t, device, a, advised, err) != 0) return -1;
  char s1[32];
  uint64_t max = round_up(advised->peak_reserved + advised->peak_reserved / 4, GRAIN);
  uint64_t threshold = a->keys[0].value;
  if (max < threshold) max = round_up(threshold, GRAIN); /* what a synchronize keeps fits */
  add(a, "max_size", max, "the advice's replay reserved at most %s: a quarter more leaves "
      "room, and beyond it an allocation fails instead of taking other processes' memory",
      tool_size_text(advised->peak_reserved, s1));
  config_text(a);
  return rp_run(t, a->config, device, advised, err);
}
