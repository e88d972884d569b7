/* check_capture: spool inside CUDA stream capture, in global and relaxed mode. Allocations,
 * batches and scopes captured into a graph become graph allocations that the graph frees, and
 * the graph replays with the data checked after every launch (1000 launches on a GPU, 50 in
 * cudasim); a free during a capture of memory allocated outside it is refused with
 * SPOOL_ERR_INVALID on every path (the capture stays intact, the buffer stays the caller's);
 * running out of memory during a capture makes no pool or synchronize call.
 *
 * Built twice: check_capture_sim (cudasim models capture, graphs and graph memory nodes) and
 * check_capture_gpu (real CUDA). */
#include "test_capture.h"

#include <pthread.h>

#ifdef SPOOL_TEST_SIM
#define REPLAYS 50
#else
#define REPLAYS 1000
#endif

#define BYTES (64 * KiB)

/* What the captured work allocates its temporaries with. */
typedef enum { WITH_ALLOC, WITH_BATCH, WITH_SCOPE, WITH_NESTED_SCOPES } with;

static void copy(void *dst, const void *src, cudaStream_t s) {
  CK_CUDA(cudaMemcpyAsync(dst, src, BYTES, cudaMemcpyDeviceToDevice, s));
}

/* The captured work: src -> t1 -> t2 -> dst through two temporaries that are freed in the graph,
 * so every launch moves the data through graph allocations. */
static void captured_work(spool_pool *p, cudaStream_t s, with how, const void *src, void *dst) {
  void *t1 = NULL, *t2 = NULL;
  spool_scope *outer = NULL, *inner = NULL;
  size_t sizes[2] = {BYTES, BYTES};
  void *sub[2];
  switch (how) {
  case WITH_ALLOC:
    t1 = test_alloc_on(p, BYTES, s);
    t2 = test_alloc_on(p, BYTES, s);
    break;
  case WITH_BATCH:
    CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, sub, 0));
    t1 = sub[0], t2 = sub[1];
    break;
  case WITH_SCOPE:
  case WITH_NESTED_SCOPES:
    CK_SPOOL(spool_scope_begin(p, s, &outer));
    CK_SPOOL(spool_scope_alloc(outer, &t1, BYTES));
    if (how == WITH_NESTED_SCOPES) CK_SPOOL(spool_scope_begin(p, s, &inner));
    CK_SPOOL(spool_scope_alloc(inner ? inner : outer, &t2, BYTES));
    break;
  }
  copy(t1, src, s);
  copy(t2, t1, s);
  copy(dst, t2, s);
  switch (how) {
  case WITH_ALLOC:
    CK_SPOOL(spool_free(p, t2, s));
    CK_SPOOL(spool_free(p, t1, s));
    break;
  case WITH_BATCH:
    CK_SPOOL(spool_free(p, sub[0], s));
    break;
  case WITH_SCOPE:
  case WITH_NESTED_SCOPES:
    if (inner) CK_SPOOL(spool_scope_end(inner));
    CK_SPOOL(spool_scope_end(outer));
    break;
  }
}

static void check_bytes(const unsigned char *host, unsigned char want, int launch) {
  for (size_t k = 0; k < BYTES; k++)
    if (host[k] != want)
      ck_abort_msg("launch %d: byte %zu is 0x%02X, expected 0x%02X", launch, k, host[k], want);
}

/* Captures the work in mode, then replays the graph REPLAYS times, each with new input. */
static void replay(enum cudaStreamCaptureMode mode, with how) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *src = test_alloc_on(p, BYTES, s), *dst = test_alloc_on(p, BYTES, s);
  unsigned char *host = malloc(BYTES);
  ck_assert_ptr_nonnull(host);
#ifdef SPOOL_TEST_SIM
  long attrs = cudasim_calls("cudaMemPoolGetAttribute") + cudasim_calls("cudaMemPoolSetAttribute");
  long trims = cudasim_calls("cudaMemPoolTrimTo");
#endif
  cudaGraph_t graph = NULL;
  begin_capture(s, mode);
  captured_work(p, s, how, src, dst);
  CK_CUDA(end_capture(s, &graph));
  ck_assert_ptr_nonnull(graph);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMemPoolGetAttribute") +
                       cudasim_calls("cudaMemPoolSetAttribute"), attrs);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolTrimTo"), trims);
#endif
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 2); /* src and dst: the graph freed its own */
  cudaGraphExec_t exec = NULL;
  CK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < REPLAYS; i++) {
    unsigned char v = (unsigned char)(1 + i % 250);
    CK_CUDA(cudaMemsetAsync(src, v, BYTES, s));
    CK_CUDA(cudaMemsetAsync(dst, 0, BYTES, s));
    CK_CUDA(cudaGraphLaunch(exec, s));
    CK_CUDA(cudaMemcpyAsync(host, dst, BYTES, cudaMemcpyDeviceToHost, s));
    CK_CUDA(cudaStreamSynchronize(s));
    check_bytes(host, v, i);
  }
  CK_CUDA(cudaGraphExecDestroy(exec));
  CK_CUDA(cudaGraphDestroy(graph));
  free(host);
  CK_SPOOL(spool_free(p, src, s));
  CK_SPOOL(spool_free(p, dst, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}

START_TEST(capture_alloc_global) { replay(cudaStreamCaptureModeGlobal, WITH_ALLOC); }
END_TEST
START_TEST(capture_alloc_relaxed) { replay(cudaStreamCaptureModeRelaxed, WITH_ALLOC); }
END_TEST
START_TEST(capture_batch_global) { replay(cudaStreamCaptureModeGlobal, WITH_BATCH); }
END_TEST
START_TEST(capture_batch_relaxed) { replay(cudaStreamCaptureModeRelaxed, WITH_BATCH); }
END_TEST
START_TEST(capture_scope_global) { replay(cudaStreamCaptureModeGlobal, WITH_SCOPE); }
END_TEST
START_TEST(capture_scope_relaxed) { replay(cudaStreamCaptureModeRelaxed, WITH_SCOPE); }
END_TEST
START_TEST(capture_nested_scopes_global) {
  replay(cudaStreamCaptureModeGlobal, WITH_NESTED_SCOPES);
}
END_TEST
START_TEST(capture_nested_scopes_relaxed) {
  replay(cudaStreamCaptureModeRelaxed, WITH_NESTED_SCOPES);
}
END_TEST

/* ---- freeing outside memory inside a capture ----------------------------------------------- */

/* cfg and size pick the path the buffer took: the pool's table (cache=off, or past
 * heap_max_block) or the heap. The free is refused, the
 * capture completes, the graph launches, and the buffer is freed after the capture. */
static void outside_free_refused(const char *cfg, size_t size, enum cudaStreamCaptureMode mode) {
  spool_pool *p = test_pool_with(cfg);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, size, s);
  cudaGraph_t graph = NULL;
  begin_capture(s, mode);
  CK_CUDA(cudaMemsetAsync(a, 7, size, s)); /* the graph uses a */
  spool_status st = spool_free(p, a, s);
  CK_CUDA(end_capture(s, &graph)); /* intact */
  CK_STATUS(st, SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("allocated outside the capture");
  CK_LAST_ERROR_HAS("nothing was freed");
  ck_assert_ptr_nonnull(graph);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  ck_assert_uint_eq(launch_once_and_read(graph, s, a), 7);
  CK_SPOOL(spool_free(p, a, s)); /* after the capture: the ordinary free */
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}

START_TEST(capture_outside_free_uncached) {
  outside_free_refused("cache=off", 4 * KiB, cudaStreamCaptureModeGlobal);
  outside_free_refused("cache=off", 4 * KiB, cudaStreamCaptureModeRelaxed);
}
END_TEST

START_TEST(capture_outside_free_large) {
  outside_free_refused("heap_max_block=1MiB", 2 * MiB, cudaStreamCaptureModeGlobal);
}
END_TEST

START_TEST(capture_outside_free_cached) {
  outside_free_refused(NULL, 4 * KiB, cudaStreamCaptureModeGlobal);
  outside_free_refused(NULL, 4 * KiB, cudaStreamCaptureModeRelaxed);
  outside_free_refused("track=full", 4 * KiB, cudaStreamCaptureModeGlobal);
  outside_free_refused("track=off", 4 * KiB, cudaStreamCaptureModeGlobal);
}
END_TEST

/* A buffer a stream cache served, freed during a capture of another stream, with the default
 * track=counts: the capture check the free makes anyway sees it, and the free is refused (moved
 * into the capturing stream's cache, the block would be handed out before the graph ran). */
START_TEST(capture_outside_free_other_stream) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s1);
  cudaGraph_t graph = NULL;
  begin_capture(s2, cudaStreamCaptureModeGlobal);
  CK_CUDA(cudaMemsetAsync(a, 5, 4 * KiB, s2)); /* the graph uses a */
  spool_status st = spool_free(p, a, s2);
  CK_CUDA(end_capture(s2, &graph)); /* intact */
  CK_STATUS(st, SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("allocated outside the capture");
  ck_assert_ptr_nonnull(graph);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  void *b = test_alloc_on(p, 4 * KiB, s2); /* not a: it was never freed */
  ck_assert_ptr_ne(b, a);
  CK_SPOOL(spool_free(p, b, s2));
  CK_CUDA(cudaGraphDestroy(graph));
  CK_SPOOL(spool_free(p, a, s1));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* A batch freed during a capture it was not allocated in: refused the same way. */
START_TEST(capture_outside_batch_free) {
  spool_pool *p = test_pool_with("cache=off");
  cudaStream_t s = test_stream_create();
  size_t sizes[] = {256, 256};
  void *sub[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, sub, 0));
  cudaGraph_t graph = NULL;
  begin_capture(s, cudaStreamCaptureModeGlobal);
  spool_status st = spool_free(p, sub[0], s);
  CK_CUDA(end_capture(s, &graph));
  CK_STATUS(st, SPOOL_ERR_INVALID);
  CK_CUDA(cudaGraphDestroy(graph));
  CK_SPOOL(spool_free(p, sub[0], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- other threads during a global-mode capture ---------------------------------------------- */

typedef struct admin_job {
  spool_pool *pool;
  spool_status stats, reset, trim;
} admin_job;

static void *admin(void *arg) {
  admin_job *j = arg;
  spool_stats st;
  j->stats = spool_stats_get(j->pool, &st);
  j->reset = spool_stats_reset_peaks(j->pool);
  j->trim = spool_trim(j->pool, 0);
  return NULL;
}

/* Stats, peak resets and trims on another thread read and write the pool's attributes; in the
 * thread's default (global) mode that would invalidate this thread's global-mode capture. spool
 * makes those calls in relaxed mode: the capture survives. (Nothing is cached, so the trim has
 * nothing to synchronize for: a synchronize invalidates captures whatever the mode.) */
START_TEST(capture_other_thread_pool_calls) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s);
  cudaGraph_t graph = NULL;
  begin_capture(s, cudaStreamCaptureModeGlobal);
  CK_CUDA(cudaMemsetAsync(a, 3, 4 * KiB, s));
  admin_job job = {p, SPOOL_STATUS_COUNT, SPOOL_STATUS_COUNT, SPOOL_STATUS_COUNT};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, admin, &job), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  CK_CUDA(end_capture(s, &graph));
  ck_assert_ptr_nonnull(graph);
  CK_STATUS(job.stats, SPOOL_OK);
  CK_STATUS(job.reset, SPOOL_OK);
  CK_STATUS(job.trim, SPOOL_OK);
  CK_CUDA(cudaGraphDestroy(graph));
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

#ifdef SPOOL_TEST_SIM
static void *raw_attribute(void *arg) {
  uint64_t v = 0;
  (void)cudaMemPoolGetAttribute(spool_pool_handle(arg), cudaMemPoolAttrReservedMemCurrent, &v);
  (void)cudaGetLastError();
  return NULL;
}

/* The same call made directly, in the global mode: the capture is invalidated (what the test
 * above shows spool avoiding). */
START_TEST(capture_other_thread_raw_call_invalidates) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 4 * KiB, s);
  cudaGraph_t graph = NULL;
  begin_capture(s, cudaStreamCaptureModeGlobal);
  CK_CUDA(cudaMemsetAsync(a, 3, 4 * KiB, s));
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, raw_attribute, p), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(end_capture(s, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  ck_assert_ptr_null(graph);
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST
#endif

#ifdef SPOOL_TEST_SIM
/* Out of memory during a global-mode capture: no trim, no attribute, no synchronize (each
 * would invalidate the capture); the retry still happens. */
START_TEST(capture_oom_makes_no_pool_calls) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *warm = test_alloc_on(p, 4 * KiB, s);
  CK_SPOOL(spool_free(p, warm, s)); /* something cached: a flush would synchronize */
  long trims = cudasim_calls("cudaMemPoolTrimTo");
  long syncs = cudasim_calls("cudaDeviceSynchronize");
  long attrs = cudasim_calls("cudaMemPoolGetAttribute");
  cudaGraph_t graph = NULL;
  void *in = NULL;
  begin_capture(s, cudaStreamCaptureModeGlobal);
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  spool_status st = spool_alloc(p, &in, 4 * KiB, s);
  spool_status fs = st == SPOOL_OK ? spool_free(p, in, s) : SPOOL_OK;
  CK_CUDA(end_capture(s, &graph));
  CK_STATUS(st, SPOOL_OK); /* the retry succeeded */
  CK_STATUS(fs, SPOOL_OK);
  ck_assert_ptr_nonnull(graph);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolTrimTo"), trims);
  ck_assert_int_eq(cudasim_calls("cudaDeviceSynchronize"), syncs);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolGetAttribute"), attrs);
  CK_CUDA(cudaGraphDestroy(graph));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST
#endif

static Suite *suite(void) {
  Suite *su = suite_create("capture");
  TCase *tc = test_capture_tcase("replay");
  tcase_add_test(tc, capture_alloc_global);
  tcase_add_test(tc, capture_alloc_relaxed);
  tcase_add_test(tc, capture_batch_global);
  tcase_add_test(tc, capture_batch_relaxed);
  tcase_add_test(tc, capture_scope_global);
  tcase_add_test(tc, capture_scope_relaxed);
  tcase_add_test(tc, capture_nested_scopes_global);
  tcase_add_test(tc, capture_nested_scopes_relaxed);
  suite_add_tcase(su, tc);
  tc = test_capture_tcase("outside");
  tcase_add_test(tc, capture_outside_free_uncached);
  tcase_add_test(tc, capture_outside_free_large);
  tcase_add_test(tc, capture_outside_free_cached);
  tcase_add_test(tc, capture_outside_batch_free);
  tcase_add_test(tc, capture_outside_free_other_stream);
  tcase_add_test(tc, capture_other_thread_pool_calls);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, capture_other_thread_raw_call_invalidates);
  tcase_add_test(tc, capture_oom_makes_no_pool_calls);
#endif
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
