/* check_handoff: cross-stream hand-off (src/handoff.c): spool_record_stream and
 * spool_free_after keep a buffer from being reused before the other stream's work (or the
 * event) is done, without making the freeing stream wait; their errors; and on the GPU the race
 * itself: without the hand-off a long kernel on another stream sees the next owner's writes,
 * with it never.
 *
 * Built twice: check_handoff_sim (cudasim, whose streams honour cudaStreamWaitEvent) and
 * check_handoff_gpu (real CUDA; the race test needs nvcc's kernels, test_kernels.h). */
#include "test_main.h"

#include "test_kernels.h"

#include <pthread.h>

/* ---- errors ------------------------------------------------------------------------------- */

START_TEST(handoff_record_stream_errors) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  char *a = test_alloc_on(p, 4 * KiB, s1);
  CK_STATUS(spool_record_stream(NULL, a, s2), SPOOL_ERR_INVALID);
  CK_STATUS(spool_record_stream(p, NULL, s2), SPOOL_ERR_INVALID);
  CK_STATUS(spool_record_stream(p, a + 256, s2), SPOOL_ERR_INTERIOR_POINTER);
  int local;
  CK_STATUS(spool_record_stream(p, &local, s2), SPOOL_ERR_UNKNOWN_POINTER);
  size_t sizes[] = {512, 512};
  void *batch[2];
  CK_SPOOL(spool_alloc_batch(p, s1, 2, sizes, batch, 0));
  CK_STATUS(spool_record_stream(p, batch[1], s2), SPOOL_ERR_BATCH_MEMBER);
  CK_SPOOL(spool_record_stream(p, batch[0], s2)); /* the batch itself */
  CK_SPOOL(spool_free(p, batch[0], s1));
  CK_STATUS(spool_free_after(p, a, s1, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_free_after(NULL, a, s1, NULL), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_free(p, a, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

START_TEST(handoff_needs_tracking) {
  spool_pool *p = test_pool_with("track=off, cache=off");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s1);
  CK_STATUS(spool_record_stream(p, a, s2), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("track=off");
  CK_SPOOL(spool_free(p, a, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* Recording the buffer's own stream changes nothing: the free is the ordinary one, and the
 * stream's cache hands the block out again at once. */
START_TEST(handoff_own_stream_is_plain) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s);
  CK_SPOOL(spool_record_stream(p, a, s));
  CK_SPOOL(spool_free(p, a, s));
  void *b = test_alloc_on(p, 4 * KiB, s);
  ck_assert_ptr_eq(a, b);
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A hand-off cannot be captured: refused, and the capture stays intact. */
START_TEST(handoff_refused_under_capture) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s1);
  cudaGraph_t graph = NULL;
  CK_CUDA(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
  spool_status rs = spool_record_stream(p, a, s2);
  CK_CUDA(cudaStreamEndCapture(s2, &graph));
  CK_STATUS(rs, SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("being captured");
  ck_assert_ptr_nonnull(graph);
  CK_CUDA(cudaGraphDestroy(graph));
  CK_SPOOL(spool_record_stream(p, a, s2));
  CK_CUDA(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  spool_status fs = spool_free(p, a, s1);
  CK_CUDA(cudaStreamEndCapture(s1, &graph));
  CK_STATUS(fs, SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(graph);
  CK_CUDA(cudaGraphDestroy(graph));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  CK_SPOOL(spool_free(p, a, s1)); /* after the capture */
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  CK_STATUS(spool_free(p, a, s1), SPOOL_ERR_DOUBLE_FREE);
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* ---- the hand-off, in cudasim's deferred completion ------------------------------------------ */

#ifdef SPOOL_TEST_SIM
/* cfg: cached or uncached. While s2 is held, the buffer freed on s1 with s2 recorded is handed
 * to nobody, on any stream; s1 itself never waits. With the pool alone (cache=off) the block is
 * the pool's again once s2 is done. */
static void record_stream_round(const char *cfg) {
  spool_pool *p = test_pool_with(cfg);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create(), s3 = test_stream_create();
  void *a = test_alloc_on(p, MiB, s1);
  cudasim_hold(s2);
  CK_CUDA(cudaMemsetAsync(a, 1, MiB, s2)); /* s2's work on a, pending */
  CK_SPOOL(spool_record_stream(p, a, s2));
  CK_SPOOL(spool_free(p, a, s1));
  CK_CUDA(cudaStreamQuery(s1)); /* the freeing stream does not wait for s2 */
  void *got[6];
  cudaStream_t on[3] = {s1, s2, s3};
  for (int i = 0; i < 6; i++) {
    got[i] = test_alloc_on(p, MiB, on[i % 3]);
    ck_assert_ptr_ne(got[i], a);
  }
  for (int i = 0; i < 6; i++) CK_SPOOL(spool_free(p, got[i], on[i % 3]));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.frees, 7);
  cudasim_release(s2);
  if (strcmp(cfg, "cache=off") == 0) {
    /* s2 is done, so the hand-off stream's free has completed: a is among the free blocks */
    void *b[7];
    bool found = false;
    for (int i = 0; i < 7; i++) found |= (b[i] = test_alloc_on(p, MiB, s1)) == a;
    ck_assert(found);
    for (int i = 0; i < 7; i++) CK_SPOOL(spool_free(p, b[i], s1));
  }
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  test_stream_destroy(s3);
}

START_TEST(handoff_record_stream_uncached) { record_stream_round("cache=off"); }
END_TEST

START_TEST(handoff_record_stream_cached) { record_stream_round("cache=on"); }
END_TEST

/* spool_free_after: the free waits for the caller's event (recorded on a held stream), the
 * event is not kept (destroyed at once), and the freeing stream does not wait. */
START_TEST(handoff_free_after_event) {
  spool_pool *p = test_pool_with("cache=off");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, MiB, s1);
  cudaEvent_t ev;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudasim_hold(s2);
  CK_CUDA(cudaMemsetAsync(a, 2, MiB, s2));
  CK_CUDA(cudaEventRecord(ev, s2));
  CK_SPOOL(spool_free_after(p, a, s1, ev));
  CK_CUDA(cudaEventDestroy(ev)); /* the event stays the caller's */
  CK_CUDA(cudaStreamQuery(s1));
  void *b = test_alloc_on(p, MiB, s1);
  ck_assert_ptr_ne(b, a);
  cudasim_release(s2);
  void *c = test_alloc_on(p, MiB, s1); /* the only free block now: a */
  ck_assert_ptr_eq(c, a);
  CK_SPOOL(spool_free(p, b, s1));
  CK_SPOOL(spool_free(p, c, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* A failure on the way (the recorded stream's event cannot be recorded) frees nothing. */
START_TEST(handoff_failure_frees_nothing) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s1);
  CK_SPOOL(spool_record_stream(p, a, s2));
  cudasim_fail("cudaEventRecord", 1, cudaErrorLaunchFailure);
  CK_STATUS(spool_free(p, a, s1), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("nothing was freed");
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  CK_SPOOL(spool_free(p, a, s1)); /* the recorded stream is still waited for */
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* A recorded stream of another device (a peer reading the buffer), and a free on the legacy
 * stream while that device is current: the pool's event cannot be recorded there ("event and
 * stream must be on the same device"), so each wait gets an event of the stream's device. The
 * free succeeds and still waits for the peer. */
START_TEST(handoff_stream_of_another_device) {
  cudasim_set_device_count(2);
  spool_pool *p = test_pool_with("cache=off"); /* device 0 */
  cudaStream_t s0 = test_stream_create();
  CK_CUDA(cudaSetDevice(1));
  cudaStream_t s1 = test_stream_create();
  void *a = test_alloc_on(p, MiB, s0);
  cudasim_hold(s1);
  CK_CUDA(cudaMemsetAsync(a, 1, MiB, s1)); /* the peer's work on a, pending */
  CK_SPOOL(spool_record_stream(p, a, s1));
  CK_SPOOL(spool_free(p, a, s0));
  void *b = test_alloc_on(p, MiB, s0);
  ck_assert_ptr_ne(b, a); /* the peer is not done */
  cudasim_release(s1);
  void *c = test_alloc_on(p, MiB, s0);
  ck_assert_ptr_eq(c, a); /* now it is */
  CK_SPOOL(spool_record_stream(p, c, s1));
  CK_SPOOL(spool_free(p, c, NULL)); /* device 1's legacy stream frees device 0's memory */
  CK_SPOOL(spool_free(p, b, s0));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  CK_CUDA(cudaSetDevice(0));
  test_pool_destroy(p);
  test_stream_destroy(s0);
  test_stream_destroy(s1);
}
END_TEST
#endif

/* Data: a buffer written on s1, read on s2 after a wait, freed on s1 with s2 recorded; every
 * later allocation sees the pool's own contents, and s2 read what s1 wrote. */
START_TEST(handoff_data_after_free) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  cudaEvent_t ev;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  unsigned char host[4096];
  for (int round = 0; round < 20; round++) {
    unsigned char *a = test_alloc_on(p, sizeof host, s1);
    CK_CUDA(cudaMemsetAsync(a, round + 1, sizeof host, s1));
    CK_CUDA(cudaEventRecord(ev, s1));
    CK_CUDA(cudaStreamWaitEvent(s2, ev, 0));
    CK_CUDA(cudaMemcpyAsync(host, a, sizeof host, cudaMemcpyDeviceToHost, s2));
    CK_SPOOL(spool_record_stream(p, a, s2));
    CK_SPOOL(spool_free(p, a, s1));
    void *b = test_alloc_on(p, sizeof host, s1); /* the next owner writes at once */
    CK_CUDA(cudaMemsetAsync(b, 0xFF, sizeof host, s1));
    CK_CUDA(cudaStreamSynchronize(s2));
    for (size_t k = 0; k < sizeof host; k++) ck_assert_uint_eq(host[k], (unsigned)(round + 1));
    CK_SPOOL(spool_free(p, b, s1));
  }
  CK_CUDA(cudaEventDestroy(ev));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------------- */

/* Threads on their own streams hand buffers off to one shared reader stream while they use
 * scopes and batches: every call succeeds, nothing is lost, and (under ThreadSanitizer) the
 * hand-off table, the hand-off stream's cache and the scopes are touched under their locks. */
typedef struct handoff_job {
  spool_pool *pool;
  cudaStream_t reader;
  int failures;
  char first[256];
} handoff_job;

static void note(handoff_job *j, spool_status st) {
  if (st == SPOOL_OK || j->failures++) return;
  snprintf(j->first, sizeof j->first, "%s", spool_last_error());
}

static void *handoff_worker(void *arg) {
  handoff_job *j = arg;
  cudaStream_t s = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    j->failures++;
    return NULL;
  }
  size_t sizes[3] = {100, 2000, 30000};
  for (int i = 0; i < 100; i++) {
    void *a = NULL, *parts[3];
    spool_scope *sc = NULL;
    note(j, spool_alloc(j->pool, &a, 4096 + (size_t)i * 64, s));
    note(j, spool_record_stream(j->pool, a, j->reader));
    note(j, spool_scope_begin(j->pool, s, &sc));
    void *piece = NULL;
    note(j, spool_scope_alloc(sc, &piece, 1000));
    note(j, spool_alloc_batch(j->pool, s, 3, sizes, parts, 0));
    note(j, spool_free(j->pool, a, s)); /* through the hand-off */
    note(j, spool_free(j->pool, parts[0], s));
    note(j, spool_scope_end(sc));
  }
  note(j, spool_stream_release(j->pool, s));
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess)
    j->failures++;
  return NULL;
}

START_TEST(handoff_threads) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t reader = test_stream_create();
  enum { T = 4 };
  handoff_job jobs[T];
  pthread_t t[T];
  for (int i = 0; i < T; i++) {
    jobs[i] = (handoff_job){p, reader, 0, ""};
    ck_assert_int_eq(pthread_create(&t[i], NULL, handoff_worker, &jobs[i]), 0);
  }
  for (int i = 0; i < T; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < T; i++)
    ck_assert_msg(jobs[i].failures == 0, "thread %d: %d failures; first: %s", i,
                  jobs[i].failures, jobs[i].first);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.allocs, st.frees);
  test_pool_destroy(p);
  test_stream_destroy(reader);
}
END_TEST

/* ---- the race on the GPU --------------------------------------------------------------------- */

#ifndef SPOOL_TEST_SIM
/* s2 runs a kernel that waits 200 ms, then checks that a still holds what s1 wrote. Meanwhile
 * a is freed on s1 and s1 takes 1 MiB again and overwrites it. Returns how many elements the
 * kernel found changed; *reused says whether s1 got a back while s2's kernel still ran. */
static unsigned race(bool handoff, bool *reused) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  const size_t n = MiB / 4;
  unsigned *bad = NULL, found = 0;
  CK_CUDA(cudaMalloc((void **)&bad, sizeof *bad));
  CK_CUDA(cudaMemset(bad, 0, sizeof *bad));
  cudaEvent_t filled;
  CK_CUDA(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  uint32_t *a = test_alloc_on(p, n * 4, s1);
  CK_CUDA(test_kernel_fill(a, n, 77, s1));
  CK_CUDA(cudaEventRecord(filled, s1));
  CK_CUDA(cudaStreamWaitEvent(s2, filled, 0));
  CK_CUDA(test_kernel_hold_then_count(a, n, 77, 200, bad, s2));
  if (handoff) CK_SPOOL(spool_record_stream(p, a, s2));
  CK_SPOOL(spool_free(p, a, s1));
  void *b = test_alloc_on(p, n * 4, s1);
  CK_CUDA(cudaMemsetAsync(b, 0xFF, n * 4, s1));
  *reused = b == a && cudaStreamQuery(s2) == cudaErrorNotReady;
  (void)cudaGetLastError(); /* cudaErrorNotReady is not an error */
  CK_CUDA(cudaStreamSynchronize(s1));
  CK_CUDA(cudaStreamSynchronize(s2));
  CK_CUDA(cudaMemcpy(&found, bad, sizeof found, cudaMemcpyDeviceToHost));
  CK_SPOOL(spool_free(p, b, s1));
  CK_CUDA(cudaEventDestroy(filled));
  CK_CUDA(cudaFree(bad));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  return found;
}

START_TEST(handoff_race_on_gpu) {
  if (!test_kernels_available()) {
    printf("handoff_race_on_gpu: no kernels in this build (nvcc missing or sanitized); "
           "skipped\n");
    return;
  }
  bool reused = false;
  unsigned unsafe_bad = race(false, &reused);
  printf("handoff_race_on_gpu: without hand-off: block reused while in use: %s, %u of %zu "
         "elements overwritten under the reader\n", reused ? "yes" : "no", unsafe_bad, MiB / 4);
  ck_assert_msg(reused, "without the hand-off the stream's cache should hand a back at once");
  ck_assert_uint_gt(unsafe_bad, 0);
  for (int i = 0; i < 5; i++) {
    unsigned safe_bad = race(true, &reused);
    printf("handoff_race_on_gpu: with spool_record_stream, round %d: reused while in use: %s, "
           "%u elements overwritten\n", i, reused ? "yes" : "no", safe_bad);
    ck_assert(!reused);
    ck_assert_uint_eq(safe_bad, 0);
  }
  fflush(stdout);
}
END_TEST
#endif

static Suite *suite(void) {
  Suite *su = suite_create("handoff");
  TCase *tc = test_tcase("handoff");
  tcase_add_test(tc, handoff_record_stream_errors);
  tcase_add_test(tc, handoff_needs_tracking);
  tcase_add_test(tc, handoff_own_stream_is_plain);
  tcase_add_test(tc, handoff_refused_under_capture);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, handoff_record_stream_uncached);
  tcase_add_test(tc, handoff_record_stream_cached);
  tcase_add_test(tc, handoff_free_after_event);
  tcase_add_test(tc, handoff_failure_frees_nothing);
  tcase_add_test(tc, handoff_stream_of_another_device);
#endif
  tcase_add_test(tc, handoff_data_after_free);
  tcase_add_test(tc, handoff_threads);
#ifndef SPOOL_TEST_SIM
  tcase_add_test(tc, handoff_race_on_gpu);
#endif
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
