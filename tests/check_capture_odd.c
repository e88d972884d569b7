/* check_capture_odd: captures that do not end in a launched graph, and captures over two
 * streams. A capture the caller abandons (cudaStreamEndCapture failing after an invalidation,
 * a graph destroyed without a launch, an executable graph never launched) leaves spool's
 * bookkeeping as if its graph had run and freed nothing: the caller frees what it allocated in
 * the capture, with spool_free, spool_scope_end or a batch's first pointer, those frees succeed,
 * nothing stays in use, nothing is refused afterwards and destroy finds no leak. A second
 * stream that joins a capture (an event recorded in it, waited for with cudaStreamWaitEvent) is
 * captured too: spool takes the capture path there as well (graph allocations, never a cached
 * block, outside memory refused).
 *
 * Built twice: check_capture_odd_sim (cudasim models invalidation, the graph allocations of an
 * abandoned capture and joined streams) and check_capture_odd_gpu (real CUDA). */
#include "test_capture.h"

#define BYTES (64 * KiB)

/* What a capture allocated with each of spool's ways: a buffer, a batch and a scope. */
typedef struct captured {
  void *buf;
  void *batch[2];
  spool_scope *scope;
} captured;

static captured allocate_in_capture(spool_pool *p, cudaStream_t s) {
  captured c = {0};
  c.buf = test_alloc_on(p, BYTES, s);
  size_t sizes[2] = {BYTES, BYTES};
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, c.batch, 4096));
  CK_SPOOL(spool_scope_begin(p, s, &c.scope));
  void *t = NULL;
  CK_SPOOL(spool_scope_alloc(c.scope, &t, BYTES));
  CK_CUDA(cudaMemsetAsync(c.buf, 1, BYTES, s));
  CK_CUDA(cudaMemsetAsync(t, 2, BYTES, s));
  return c;
}

/* The caller gives back what the capture allocated, after the capture: every free succeeds and
 * the pool holds nothing in use; it allocates and frees on s as before. */
static void free_after_capture(spool_pool *p, cudaStream_t s, captured *c) {
  CK_SPOOL(spool_free(p, c->buf, s));
  CK_SPOOL(spool_free(p, c->batch[0], s));
  CK_SPOOL(spool_scope_end(c->scope));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  void *again = test_alloc_on(p, BYTES, s);
  CK_CUDA(cudaMemsetAsync(again, 3, BYTES, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_free(p, again, s));
}

static void destroy_clean(spool_pool *p, cudaStream_t s) {
  CK_SPOOL(spool_pool_destroy(p)); /* no leak: SPOOL_ERR_LEAKS would say otherwise */
  test_stream_destroy(s);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
#endif
}

/* ---- abandoned captures ------------------------------------------------------------------- */

/* How a capture ends without its graph running, or (LAUNCHED_ONCE) the ordinary case next to
 * them: launched once, its allocations live until freed after it. */
typedef enum {
  INVALIDATED,      /* a synchronize of the capturing stream is refused and invalidates the
                       capture; its end fails with cudaErrorStreamCaptureInvalidated */
  FREE_INVALIDATED, /* the same, with a free tried in the invalidated capture */
  GRAPH_DESTROYED,
  EXEC_DESTROYED,
  LAUNCHED_ONCE,
} ending;

static void end_without_running(cudaStream_t s, ending how, const captured *c) {
  cudaGraph_t graph = TEST_SENTINEL;
  if (how == INVALIDATED || how == FREE_INVALIDATED) {
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    spool_pool *p = NULL;
    CK_SPOOL(spool_pool_of(c->buf, &p));
    if (how == FREE_INVALIDATED) ck_assert_int_ne(spool_free(p, c->buf, s), SPOOL_OK);
    ck_assert_int_eq(end_capture(s, &graph), cudaErrorStreamCaptureInvalidated);
    ck_assert_ptr_null(graph);
    (void)cudaGetLastError();
    return;
  }
  CK_CUDA(end_capture(s, &graph));
  if (how == LAUNCHED_ONCE) {
    ck_assert_uint_eq(launch_once_and_read(graph, s, c->buf), 1);
    return;
  }
  cudaGraphExec_t exec = NULL;
  if (how == EXEC_DESTROYED) CK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  if (exec) CK_CUDA(cudaGraphExecDestroy(exec));
  CK_CUDA(cudaGraphDestroy(graph));
}

static void capture_ending(ending how) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  begin_capture(s, cudaStreamCaptureModeGlobal);
  captured c = allocate_in_capture(p, s);
  end_without_running(s, how, &c);
  free_after_capture(p, s, &c);
  destroy_clean(p, s);
}

/* cudaStreamEndCapture fails after an invalidation, without a graph; whether or not a free
 * was tried inside the invalidated capture, the caller frees everything after its end. */
START_TEST(invalidated_capture_leaves_nothing_in_use) {
  capture_ending(INVALIDATED);
  capture_ending(FREE_INVALIDATED);
}
END_TEST

/* The capture ends well, but its graph is destroyed without a launch, instantiated or not. */
START_TEST(unlaunched_graph_leaves_nothing_in_use) {
  capture_ending(GRAPH_DESTROYED);
  capture_ending(EXEC_DESTROYED);
}
END_TEST

/* The ordinary case beside them: the allocations a launch made live are freed after it. */
START_TEST(graph_launched_once_then_freed_after_it) { capture_ending(LAUNCHED_ONCE); }
END_TEST

/* Nobody frees what an abandoned capture allocated: destroy reports the leaks and finds no
 * memory to give back (the graph never ran), so it succeeds in freeing them. */
START_TEST(abandoned_capture_leaks_are_freed_at_destroy) {
  spool_pool *p = test_pool_with("report=/dev/null");
  cudaStream_t s = test_stream_create();
  begin_capture(s, cudaStreamCaptureModeGlobal);
  captured c = allocate_in_capture(p, s);
  end_without_running(s, GRAPH_DESTROYED, &c);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  CK_LAST_ERROR_HAS("freed now");
  test_stream_destroy(s);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
}
END_TEST

/* ---- a second stream joining the capture ------------------------------------------------- */

/* s2 joins s1's capture through an event; an allocation there is a graph allocation (the block
 * s2's cache holds is not handed out), outside memory freed there is refused, a buffer of the
 * capture is freed on either stream, and after s2 joins back the graph runs. */
START_TEST(joined_stream_takes_the_capture_path) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *cached = test_alloc_on(p, BYTES, s2);
  CK_SPOOL(spool_free(p, cached, s2)); /* s2's front holds it */
  void *outside = test_alloc_on(p, 2 * BYTES, s2);
  cudaEvent_t fork, join;
  CK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  spool_stats before = test_stats(p);
  begin_capture(s1, cudaStreamCaptureModeGlobal);
  void *a = test_alloc_on(p, BYTES, s1);
  CK_CUDA(cudaEventRecord(fork, s1));
  CK_CUDA(cudaStreamWaitEvent(s2, fork, 0));
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CK_CUDA(cudaStreamIsCapturing(s2, &cs));
  ck_assert_int_eq(cs, cudaStreamCaptureStatusActive);
  void *b = test_alloc_on(p, BYTES, s2);
  ck_assert_ptr_ne(b, cached);
  CK_CUDA(cudaMemsetAsync(b, 5, BYTES, s2));
  CK_CUDA(cudaMemcpyAsync(a, b, BYTES, cudaMemcpyDeviceToDevice, s2));
  spool_status refused = spool_free(p, outside, s2);
  CK_SPOOL(spool_free(p, b, s2));
  CK_CUDA(cudaEventRecord(join, s2));
  CK_CUDA(cudaStreamWaitEvent(s1, join, 0));
  cudaGraph_t graph = NULL;
  CK_CUDA(end_capture(s1, &graph));
  CK_STATUS(refused, SPOOL_ERR_INVALID);
  spool_stats during = test_stats(p);
  ck_assert_uint_eq(during.cache_hits, before.cache_hits); /* no cached block in the graph */
  ck_assert_uint_eq(launch_once_and_read(graph, s1, a), 5);
  CK_SPOOL(spool_free(p, a, s1));
  CK_SPOOL(spool_free(p, outside, s2));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  CK_CUDA(cudaEventDestroy(fork));
  CK_CUDA(cudaEventDestroy(join));
  test_stream_destroy(s2);
  destroy_clean(p, s1);
}
END_TEST

/* A joined stream's capture is abandoned with its origin's: its allocations are freed after. */
START_TEST(joined_stream_in_an_abandoned_capture) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  cudaEvent_t fork;
  CK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  begin_capture(s1, cudaStreamCaptureModeGlobal);
  CK_CUDA(cudaEventRecord(fork, s1));
  CK_CUDA(cudaStreamWaitEvent(s2, fork, 0));
  captured c = allocate_in_capture(p, s2);
  /* s2 never joins back: the end fails (unjoined work) and ends the capture */
  cudaGraph_t graph = TEST_SENTINEL;
  ck_assert_int_ne(end_capture(s1, &graph), cudaSuccess);
  (void)cudaGetLastError();
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  CK_CUDA(cudaStreamIsCapturing(s2, &cs));
  ck_assert_int_eq(cs, cudaStreamCaptureStatusNone);
  free_after_capture(p, s2, &c);
  CK_CUDA(cudaEventDestroy(fork));
  test_stream_destroy(s2);
  destroy_clean(p, s1);
}
END_TEST

/* One test case of the suite: the usual fixture, a capture left open ended after each test. */
static void add_tcase(Suite *su, const char *name, const TTest *const *tests, size_t n) {
  TCase *tc = test_capture_tcase(name);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(su, tc);
}

int main(void) {
  Suite *su = suite_create("capture_odd");
  const TTest *abandoned[] = {invalidated_capture_leaves_nothing_in_use,
                              unlaunched_graph_leaves_nothing_in_use,
                              graph_launched_once_then_freed_after_it,
                              abandoned_capture_leaks_are_freed_at_destroy};
  const TTest *joined[] = {joined_stream_takes_the_capture_path,
                           joined_stream_in_an_abandoned_capture};
  add_tcase(su, "abandoned", abandoned, sizeof abandoned / sizeof abandoned[0]);
  add_tcase(su, "joined", joined, sizeof joined / sizeof joined[0]);
  return test_main(su);
}
