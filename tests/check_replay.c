/* The replay (tools/replay.c): a recorded kernel pipeline replayed against fresh pools gives the
 * recording's peak live bytes, and the same figures every time. */
#include "test_main.h"

#include <unistd.h>

#include "replay.h"
#include "test_kernels.h"
#include "trace_stats.h"

enum { STREAMS = 3, FRAMES = 40 };

/* Per frame and stream: an input filled by a kernel, an output copied from it, the input freed,
 * the output worked on and freed on the next stream after a hand-off; a batch and a scope now
 * and then. Sizes vary by frame so that the heap splits and merges. */
static void pipeline(spool_pool *p, cudaStream_t *s) {
  for (int f = 0; f < FRAMES; f++) {
    for (int k = 0; k < STREAMS; k++) {
      size_t n = (size_t)(64 + 37 * ((f * 7 + k) % 23)) * 1024; /* elements */
      uint32_t *in = test_alloc_on(p, n * 4, s[k]);
      uint32_t *out = test_alloc_on(p, n * 4, s[k]);
      if (test_kernels_available()) {
        CK_CUDA(test_kernel_fill(in, n, (uint32_t)f, s[k]));
        CK_CUDA(test_kernel_copy(out, in, n, s[k]));
      }
      CK_SPOOL(spool_free(p, in, s[k]));
      cudaStream_t next = s[(k + 1) % STREAMS];
      CK_SPOOL(spool_record_stream(p, out, next));
      if (test_kernels_available()) CK_CUDA(test_kernel_add(out, n, 1, next));
      CK_SPOOL(spool_free(p, out, s[k]));
    }
    if (f % 10 == 9) {
      size_t sizes[2] = {4096, 100000};
      void *parts[2];
      CK_SPOOL(spool_alloc_batch(p, s[0], 2, sizes, parts, 0));
      spool_scope *sc;
      void *piece;
      CK_SPOOL(spool_scope_begin(p, s[1], &sc));
      CK_SPOOL(spool_scope_alloc(sc, &piece, 3 * MiB));
      CK_SPOOL(spool_scope_end(sc));
      CK_SPOOL(spool_free(p, parts[0], s[0]));
    }
  }
  CK_CUDA(cudaDeviceSynchronize());
}

/* Records the pipeline to a file and reads it back; the recording pool's own peak into *peak. */
static void record(const char *config, tf_trace *t, uint64_t *peak) {
  char path[256], text[512];
  snprintf(path, sizeof path, "/tmp/spool_check_replay_%ld.sptr", (long)getpid());
  snprintf(text, sizeof text, "trace=\"%s\",%s", path, config);
  spool_pool *p = test_pool_with(text);
  cudaStream_t s[STREAMS];
  for (int k = 0; k < STREAMS; k++) s[k] = test_stream_create();
  pipeline(p, s);
  *peak = test_stats(p).bytes_in_use_peak;
  for (int k = 0; k < STREAMS; k++) CK_SPOOL(spool_stream_release(p, s[k]));
  test_pool_destroy(p);
  for (int k = 0; k < STREAMS; k++) test_stream_destroy(s[k]);
  char err[TF_ERR];
  ck_assert_msg(tf_load(path, t, err) == 0, "%s", err);
  unlink(path);
}

static uint64_t trace_peak(const tf_trace *t) {
  ts_stats st;
  char err[TF_ERR];
  ck_assert_msg(ts_compute(t, &st, err) == 0, "%s", err);
  return st.peak_live_bytes;
}

static rp_result replay(const tf_trace *t, const char *config) {
  rp_result r;
  char err[TF_ERR];
  ck_assert_msg(rp_run(t, config, 0, &r, err) == 0, "rp_run(%s): %s", config, err);
  ck_assert_uint_eq(r.failed_allocs, 0);
  ck_assert_uint_eq(r.allocs, r.frees);
  return r;
}

START_TEST(replay_of_a_pipeline_has_the_recordings_peak_live) {
  tf_trace t;
  uint64_t recorded;
  record("cache=off", &t, &recorded); /* the uncached path counts its peak exactly */
  ck_assert_uint_eq(trace_peak(&t), recorded);
  rp_result r = replay(&t, "cache=off");
  ck_assert_uint_eq(r.peak_live, recorded);
  r = replay(&t, t.config); /* the recording's own config, as spool-replay's default */
  ck_assert_uint_eq(r.peak_live, recorded);
  ck_assert_uint_ge(r.peak_reserved, r.peak_live);
  tf_free(&t);
}
END_TEST

START_TEST(replay_with_the_heap_has_the_recording_pools_peak) {
  tf_trace t;
  uint64_t recorded;
  record("cache=on", &t, &recorded);
  rp_result r = replay(&t, "");
  ck_assert_uint_eq(r.peak_live, recorded); /* the same calls in the same order */
  ck_assert_uint_gt(r.hits, 0);
  ck_assert(r.hit_rate > 0 && r.hit_rate <= 1);
  ck_assert(r.utilization > 0 && r.utilization <= 1);
  tf_free(&t);
}
END_TEST

START_TEST(replay_twice_gives_the_same_figures) {
  tf_trace t;
  uint64_t recorded;
  record("", &t, &recorded);
  const char *configs[] = {"", "front_limit=0, chunk_idle=0", "cache=off"};
  for (int i = 0; i < 3; i++) {
    rp_result a = replay(&t, configs[i]), b = replay(&t, configs[i]);
    a.ns_per_op = b.ns_per_op = 0; /* the one figure that is the host's, not the trace's */
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "config '%s' replayed differently",
                  configs[i]);
    ck_assert_uint_gt(a.ops, 2 * STREAMS * FRAMES * 2);
  }
  tf_free(&t);
}
END_TEST

START_TEST(replay_refuses_a_config_that_does_not_parse) {
  tf_trace t;
  uint64_t recorded;
  record("", &t, &recorded);
  rp_result r;
  char err[TF_ERR] = "";
  ck_assert_int_eq(rp_run(&t, "front_limt=1MiB", 0, &r, err), -1);
  ck_assert_ptr_nonnull(strstr(err, "front_limt"));
  ck_assert_ptr_nonnull(strstr(err, "front_limit")); /* the key it meant */
  tf_free(&t);
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("replay");
  TCase *tc = test_tcase("replay");
  tcase_add_test(tc, replay_of_a_pipeline_has_the_recordings_peak_live);
  tcase_add_test(tc, replay_with_the_heap_has_the_recording_pools_peak);
  tcase_add_test(tc, replay_twice_gives_the_same_figures);
  tcase_add_test(tc, replay_refuses_a_config_that_does_not_parse);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
