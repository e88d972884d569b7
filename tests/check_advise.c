/* The advisor (tools/advise.c) on synthetic traces whose right answer is known, proved by
 * replays on cudasim. */
#include "test_main.h"

#include "advise.h"

#define STREAM 0x100

typedef struct maker {
  tf_trace t;
  uint64_t seq, next_ptr;
} maker;

static void push(maker *m, int kind, uint64_t ptr, uint64_t size) {
  m->seq++;
  tf_event e = {.kind = (uint8_t)kind, .seq = m->seq, .time_ns = m->seq * 1000, .ptr = ptr,
                .size = size, .stream = STREAM, .thread = 1, .site = -1};
  ck_assert_int_eq(tf_push(&m->t, &e), 0);
}

/* A call on another stream than the maker's own. */
static void push_on(maker *m, int kind, uint64_t ptr, uint64_t size, uint64_t stream) {
  m->seq++;
  tf_event e = {.kind = (uint8_t)kind, .seq = m->seq, .time_ns = m->seq * 1000, .ptr = ptr,
                .size = size, .stream = stream, .thread = 1, .site = -1};
  ck_assert_int_eq(tf_push(&m->t, &e), 0);
}

static uint64_t alloc(maker *m, uint64_t size) {
  m->next_ptr += 1 << 30; /* addresses never reused: no free is mistaken for another's */
  push(m, SPOOL_TRACE_ALLOC, m->next_ptr, size);
  return m->next_ptr;
}

static void free_(maker *m, uint64_t ptr) { push(m, SPOOL_TRACE_FREE, ptr, 0); }

static const ad_key *key(const ad_advice *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->keys[i].key, name)) return &a->keys[i];
  ck_abort_msg("no %s in the advice '%s'", name, a->config);
  return NULL;
}

static ad_advice advise(const tf_trace *t) {
  ad_advice a;
  char err[TF_ERR];
  ck_assert_msg(ad_recommend(t, &a, err) == 0, "%s", err);
  return a;
}

/* The advice proved by replays on cudasim: *d the defaults', *r the advice's. */
static void prove(const tf_trace *t, ad_advice *a, rp_result *d, rp_result *r) {
  char err[TF_ERR];
  ck_assert_msg(ad_prove(t, 0, a, d, r, err) == 0, "%s", err);
}

START_TEST(advice_reserves_the_working_set_a_program_always_holds) {
  maker m = {0};
  uint64_t held[8];
  for (int i = 0; i < 8; i++) held[i] = alloc(&m, 2 * MiB); /* 16 MiB for the whole run */
  for (int i = 0; i < 2000; i++) free_(&m, alloc(&m, 64 * KiB + (uint64_t)(i % 5) * 4096));
  for (int i = 0; i < 8; i++) free_(&m, held[i]);
  ad_advice a = advise(&m.t);
  ck_assert_uint_eq(key(&a, "reserve")->value, 16 * MiB);
  ck_assert_ptr_nonnull(strstr(key(&a, "reserve")->why, "16.0"));
  ck_assert_uint_ge(key(&a, "release_threshold")->value, 16 * MiB);
  tf_free(&m.t);
}
END_TEST

/* Ten periods, each ending in a stream release: 4 MiB held, a peak of 12 more buffers of
 * 2 MiB, and in one period only a spike of 100 MiB on top. */
static void periodic(maker *m) {
  uint64_t base = alloc(m, 4 * MiB), peak[12];
  for (int p = 0; p < 10; p++) {
    for (int i = 0; i < 12; i++) peak[i] = alloc(m, 2 * MiB);
    if (p == 5) free_(m, alloc(m, 100 * MiB));
    for (int i = 0; i < 12; i++) free_(m, peak[i]);
    push(m, SPOOL_TRACE_STREAM_RELEASE, 0, 0);
  }
  free_(m, base);
}

START_TEST(advice_keeps_what_a_periodic_peak_needs_and_not_a_one_off) {
  maker m = {0};
  periodic(&m);
  ad_advice a = advise(&m.t);
  ck_assert_uint_eq(a.periods, 11);
  ck_assert_uint_eq(a.recurring_peak, 28 * MiB);
  ck_assert_uint_eq(a.one_off_peak, 128 * MiB);
  ck_assert_uint_eq(key(&a, "release_threshold")->value, 28 * MiB);
  ck_assert_uint_eq(key(&a, "reserve")->value, 4 * MiB);
  tf_free(&m.t);
}
END_TEST

START_TEST(advice_keeps_the_heap_chunks_a_periodic_peak_needs) {
  /* the same periods, the heap holding a 32 MiB chunk for each peak of 28 MiB live */
  maker m = {0};
  uint64_t base = alloc(&m, 4 * MiB), peak[12];
  for (int p = 0; p < 10; p++) {
    push(&m, SPOOL_TRACE_CHUNK_ALLOC, 0x7000000000 + (uint64_t)p * GiB, 32 * MiB);
    for (int i = 0; i < 12; i++) peak[i] = alloc(&m, 2 * MiB);
    for (int i = 0; i < 12; i++) free_(&m, peak[i]);
    push(&m, SPOOL_TRACE_CHUNK_FREE, 0x7000000000 + (uint64_t)p * GiB, 32 * MiB);
    push(&m, SPOOL_TRACE_STREAM_RELEASE, 0, 0);
  }
  free_(&m, base);
  ad_advice a = advise(&m.t);
  ck_assert_uint_eq(a.recurring_peak, 28 * MiB);
  ck_assert_uint_eq(a.recurring_held, 32 * MiB);
  ck_assert_uint_eq(key(&a, "release_threshold")->value, 32 * MiB);
  ck_assert_ptr_nonnull(strstr(key(&a, "release_threshold")->why, "32.00 MiB in the heap's"));
  tf_free(&m.t);
}
END_TEST

START_TEST(advice_is_proved_by_replays_of_the_defaults_and_of_itself) {
  maker m = {0};
  periodic(&m);
  ad_advice a = advise(&m.t);
  rp_result d, r;
  prove(&m.t, &a, &d, &r);
  const ad_key *max = key(&a, "max_size");
  ck_assert_uint_ge(max->value, r.peak_reserved);
  ck_assert_ptr_nonnull(strstr(a.config, "max_size="));
  ck_assert_uint_eq(r.ooms, 0); /* the limit it set leaves the program room */
  ck_assert_uint_eq(d.ooms, 0);
  ck_assert_uint_eq(r.peak_live, d.peak_live);
  ck_assert_uint_eq(r.peak_live, 128 * MiB);
  spool_config cfg; /* the advice is a config the pool takes */
  spool_config_init(&cfg);
  CK_SPOOL(spool_config_parse(&cfg, a.config));
  CK_SPOOL(spool_config_validate(&cfg));
  tf_free(&m.t);
}
END_TEST

/* Periods of one buffer too large for the mid band (a chunk of its own), a churn of small ones,
 * then two mid-band ones live at once: a chunk_idle of the period's length keeps the all-free
 * large chunk, which the mid band cannot use, where the default gives it back to the pool in
 * time for the pool to serve the mid-band chunks from it. */
static void large_then_mid(maker *m) {
  for (int period = 0; period < 4; period++) {
    free_(m, alloc(m, 64 * MiB));
    for (int i = 0; i < 600; i++) free_(m, alloc(m, 4096 + (uint64_t)i * 512));
    uint64_t a = alloc(m, 30 * MiB), b = alloc(m, 30 * MiB);
    free_(m, a);
    free_(m, b);
    push(m, SPOOL_TRACE_STREAM_RELEASE, 0, 0);
  }
}

START_TEST(an_idle_bound_that_would_cost_memory_is_left_at_its_default_with_the_reason) {
  maker m = {0};
  large_then_mid(&m);
  ad_advice a = advise(&m.t);
  ck_assert_uint_gt(key(&a, "chunk_idle")->value, 256);
  rp_result d, r;
  prove(&m.t, &a, &d, &r);
  ck_assert_ptr_null(strstr(a.config, "chunk_idle"));
  ck_assert_int_ge(a.nleft, 1);
  ck_assert_str_eq(a.left[a.nleft - 1].key, "chunk_idle");
  ck_assert_ptr_nonnull(strstr(a.left[a.nleft - 1].why, "without it"));
  ck_assert_uint_le(r.peak_reserved, d.peak_reserved); /* no more than the defaults hold */
  tf_free(&m.t);
}
END_TEST

/* Two sets of small sizes taking turns, 24 buffers live at a time (a forward and a backward
 * pass): how big a front pays is a question for the replays. */
static void two_sets_taking_turns(maker *m) {
  uint64_t live[24];
  for (int round = 0; round < 32; round++) {
    uint64_t base = round % 2 ? 520 * KiB : 780 * KiB;
    for (int i = 0; i < 24; i++) live[i] = alloc(m, base + (uint64_t)i * 8192);
    for (int i = 0; i < 24; i++) free_(m, live[i]);
  }
}

START_TEST(the_advised_front_is_the_one_whose_replay_reserves_least) {
  maker m = {0};
  two_sets_taking_turns(&m);
  ad_advice a = advise(&m.t);
  uint64_t asked = key(&a, "front_limit")->value;
  rp_result d, r;
  prove(&m.t, &a, &d, &r);
  char err[TF_ERR];
  const ad_key *front = key(&a, "front_limit");
  ck_assert_ptr_nonnull(strstr(front->why, "replays of fronts"));
  for (uint64_t v = asked; v >= SPOOL_FRONT_LIMIT_DEFAULT; v /= 4) {
    char conf[64];
    snprintf(conf, sizeof conf, "front_limit=%llu", (unsigned long long)v);
    rp_result other;
    ck_assert_msg(rp_run(&m.t, conf, 0, &other, err) == 0, "%s", err);
    ck_assert_msg(r.peak_reserved <= other.peak_reserved + 2 * MiB,
                  "front_limit=%llu reserved %llu, the advice (%s) %llu", (unsigned long long)v,
                  (unsigned long long)other.peak_reserved, a.config,
                  (unsigned long long)r.peak_reserved);
  }
  ck_assert_uint_le(r.peak_reserved, d.peak_reserved);
  tf_free(&m.t);
}
END_TEST

/* Four streams taking turns, each with two temporaries of 2 to 4 MiB (an image pipeline's
 * stages) and five small buffers it holds throughout (so no stream is a brief one, whose front
 * would keep its temporaries: front_brief): a stream's freed block that goes into the heap
 * waits for the stream's next fence, so every stream holds a chunk of its own, unless the free
 * of a block that large fences at once. */
static void streams_taking_turns(maker *m) {
  for (int i = 0; i < 20; i++) {
    uint64_t stream = STREAM + (uint64_t)(i % 4) * 0x100;
    m->next_ptr += 1 << 30;
    push_on(m, SPOOL_TRACE_ALLOC, m->next_ptr, 4 * KiB, stream);
  }
  for (int i = 0; i < 400; i++) {
    uint64_t stream = STREAM + (uint64_t)(i % 4) * 0x100, a = m->next_ptr + (1 << 30);
    uint64_t b = a + (1 << 30);
    m->next_ptr = b;
    push_on(m, SPOOL_TRACE_ALLOC, a, 4 * MiB - (uint64_t)(i % 7) * 64 * KiB, stream);
    push_on(m, SPOOL_TRACE_ALLOC, b, 2 * MiB + (uint64_t)(i % 5) * 64 * KiB, stream);
    push_on(m, SPOOL_TRACE_FREE, a, 0, stream);
    push_on(m, SPOOL_TRACE_FREE, b, 0, stream);
  }
}

START_TEST(a_trace_of_several_streams_is_advised_the_fence_that_reserves_least) {
  maker m = {0};
  streams_taking_turns(&m);
  ad_advice a = advise(&m.t);
  rp_result d, r;
  prove(&m.t, &a, &d, &r);
  const ad_key *fence = key(&a, "fence_bytes");
  ck_assert_uint_le(fence->value, 2 * MiB); /* a fence at the temporaries' free */
  ck_assert_ptr_nonnull(strstr(fence->why, "4 streams"));
  ck_assert_uint_lt(r.peak_reserved, d.peak_reserved);
  tf_free(&m.t);
}
END_TEST

START_TEST(a_trace_of_one_stream_gets_no_fence_advice) {
  maker m = {0};
  two_sets_taking_turns(&m);
  ad_advice a = advise(&m.t);
  rp_result d, r;
  prove(&m.t, &a, &d, &r);
  ck_assert_ptr_null(strstr(a.config, "fence_bytes"));
  tf_free(&m.t);
}
END_TEST

START_TEST(advice_of_a_trace_without_allocations_is_refused) {
  maker m = {0};
  push(&m, SPOOL_TRACE_TRIM, 0, 0);
  ad_advice a;
  char err[TF_ERR] = "";
  ck_assert_int_eq(ad_recommend(&m.t, &a, err), -1);
  ck_assert_ptr_nonnull(strstr(err, "no successful allocations"));
  tf_free(&m.t);
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("advise");
  TCase *tc = test_tcase("advise");
  tcase_add_test(tc, advice_reserves_the_working_set_a_program_always_holds);
  tcase_add_test(tc, advice_keeps_what_a_periodic_peak_needs_and_not_a_one_off);
  tcase_add_test(tc, advice_keeps_the_heap_chunks_a_periodic_peak_needs);
  tcase_add_test(tc, advice_is_proved_by_replays_of_the_defaults_and_of_itself);
  tcase_add_test(tc, an_idle_bound_that_would_cost_memory_is_left_at_its_default_with_the_reason);
  tcase_add_test(tc, the_advised_front_is_the_one_whose_replay_reserves_least);
  tcase_add_test(tc, a_trace_of_several_streams_is_advised_the_fence_that_reserves_least);
  tcase_add_test(tc, a_trace_of_one_stream_gets_no_fence_advice);
  tcase_add_test(tc, advice_of_a_trace_without_allocations_is_refused);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
