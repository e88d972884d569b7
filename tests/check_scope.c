/* check_scope: scopes (src/scope.c): bump allocation from chunks taken on the scope's stream,
 * chunks given back at the end (and found again in the stream's cache by the next scope),
 * nesting, the errors of a scope ended twice or ended before its children, pieces refused by
 * spool_free, the leak report, the data in the pieces, and the capture-state rule.
 * (Scopes inside a graph capture and their replay: check_capture.)
 *
 * Built twice: check_scope_sim (cudasim) and check_scope_gpu (real CUDA). */
#include "test_main.h"

#include <pthread.h>

static spool_scope *begin(spool_pool *p, cudaStream_t s) {
  spool_scope *sc = (spool_scope *)TEST_SENTINEL;
  CK_SPOOL(spool_scope_begin(p, s, &sc));
  ck_assert_ptr_nonnull(sc);
  ck_assert_ptr_ne(sc, TEST_SENTINEL);
  return sc;
}

static void *piece(spool_scope *sc, size_t size) {
  void *ptr = TEST_SENTINEL;
  CK_SPOOL(spool_scope_alloc(sc, &ptr, size));
  ck_assert_ptr_nonnull(ptr);
  ck_assert_ptr_ne(ptr, TEST_SENTINEL);
  ck_assert_uint_eq((uintptr_t)ptr % 256, 0);
  return ptr;
}

/* ---- bump allocation ---------------------------------------------------------------------- */

/* A thousand small temporaries: one chunk, one allocation from the pool; the next scope on the
 * stream finds the chunk in the stream's cache. */
START_TEST(scope_many_small_pieces_one_chunk) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  for (int round = 0; round < 2; round++) {
    spool_scope *sc = begin(p, s);
    ck_assert_ptr_eq(spool_scope_stream(sc), s);
    char *prev = NULL;
    for (int i = 0; i < 1000; i++) {
      char *q = piece(sc, 1000); /* 1000 bytes take 1 KiB: 256-aligned pieces */
      if (prev) ck_assert_uint_eq((uintptr_t)(q - prev), KiB);
      prev = q;
    }
    spool_stats st = test_stats(p);
    ck_assert_uint_eq(st.buffers_in_use, 1); /* one chunk */
    ck_assert_uint_eq(st.bytes_in_use, MiB);
    ck_assert_uint_eq(st.allocs, (uint64_t)round + 1);
    ck_assert_uint_eq(st.cache_hits, (uint64_t)round); /* the second round's chunk: a hit */
    CK_SPOOL(spool_scope_end(sc));
    st = test_stats(p);
    ck_assert_uint_eq(st.buffers_in_use, 0);
    ck_assert_uint_eq(st.bytes_front, MiB); /* the chunk, ready for the next scope */
    ck_assert_uint_eq(st.bytes_heap, 2 * MiB); /* in the heap's one 2 MiB chunk */
  }
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMallocFromPoolAsync"), 1);
#endif
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Chunks double (1, 2, 4 MiB ...); a request larger than the next chunk gets a chunk of its own
 * size; zero bytes is NULL. */
START_TEST(scope_chunks_grow) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
  void *z = TEST_SENTINEL;
  CK_SPOOL(spool_scope_alloc(sc, &z, 0));
  ck_assert_ptr_null(z);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0); /* nothing taken yet */
  (void)piece(sc, MiB - 256);                          /* fills the 1 MiB chunk */
  (void)piece(sc, 1);                                  /* a 2 MiB chunk */
  char *big = piece(sc, 10 * MiB);                     /* past the 4 MiB that would be next */
  char *small = piece(sc, 1); /* still in the 2 MiB chunk: the big one has its own */
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 3);
  ck_assert(small < big || small >= big + 10 * MiB);
  (void)piece(sc, 4 * MiB - 256); /* the next chunk is 4 MiB: the 10 MiB one did not double it */
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 4);
  ck_assert_uint_eq(test_stats(p).bytes_in_use, MiB + 2 * MiB + 10 * MiB + 256 + 4 * MiB);
  CK_SPOOL(spool_scope_end(sc));
  sc = begin(p, s);
  st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  CK_SPOOL(spool_scope_end(sc));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Reserved memory stays bounded: a thousand scopes of the same shape reserve what the first one
 * did (their chunks come back from the stream's front and the heap); a front_limit smaller than
 * a scope's chunks sends the rest into the heap at the end, unless the stream is a brief one
 * (front_brief), whose front keeps its working set, the three chunks; spool_trim gives
 * everything back. */
static void scopes_bounded(const char *config, bool brief) {
  spool_pool *p = test_pool_with(config);
  cudaStream_t s = test_stream_create();
  size_t first_reserved = 0;
  for (int round = 0; round < 1000; round++) {
    spool_scope *sc = begin(p, s);
    for (int i = 0; i < 12; i++) (void)piece(sc, (size_t)(i + 1) * 40 * KiB); /* 3.05 MiB */
    ck_assert_uint_eq(test_stats(p).buffers_in_use, 3);                     /* 1, 2, 4 MiB */
    CK_SPOOL(spool_scope_end(sc));
    spool_stats st = test_stats(p);
    ck_assert_uint_eq(st.buffers_in_use, 0);
    /* the limit, or the one block a front always keeps (the 4 MiB chunk, freed first); a
     * brief stream's front: all three */
    ck_assert_uint_le(st.bytes_front, brief ? 7 * MiB : 4 * MiB);
    if (round == 0) first_reserved = st.bytes_reserved;
    ck_assert_uint_le(st.bytes_reserved_peak, first_reserved + 4 * MiB);
  }
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0)); /* the flushed chunks' frees are done now */
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_cached, 0);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}

START_TEST(scope_memory_bounded_and_returned) {
  scopes_bounded("front_limit=2MiB, front_brief=off", false);
  scopes_bounded("front_limit=2MiB", true);
}
END_TEST

/* ---- nesting and misuse ------------------------------------------------------------------- */

START_TEST(scope_nesting_child_ends_first) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *outer = begin(p, s);
  (void)piece(outer, 100);
  spool_scope *inner = begin(p, s);
  (void)piece(inner, 100);
  (void)piece(outer, 100); /* the parent may still allocate */
  CK_STATUS(spool_scope_end(outer), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("1 open child scope");
  CK_LAST_ERROR_HAS("nothing was ended");
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 2); /* both chunks still live */
  CK_SPOOL(spool_scope_end(inner));
  CK_SPOOL(spool_scope_end(outer));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Scopes on other streams are not children: each ends on its own. */
START_TEST(scope_other_stream_not_a_child) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  spool_scope *a = begin(p, s1);
  spool_scope *b = begin(p, s2);
  (void)piece(a, 10);
  (void)piece(b, 10);
  CK_SPOOL(spool_scope_end(a));
  CK_SPOOL(spool_scope_end(b));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

START_TEST(scope_ended_twice) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
  (void)piece(sc, 100);
  CK_SPOOL(spool_scope_end(sc));
  CK_STATUS(spool_scope_end(sc), SPOOL_ERR_SCOPE_ENDED);
  CK_LAST_ERROR_HAS("already ended");
  void *q = TEST_SENTINEL;
  CK_STATUS(spool_scope_alloc(sc, &q, 16), SPOOL_ERR_SCOPE_ENDED);
  ck_assert_ptr_null(q);
  ck_assert_ptr_null(spool_scope_stream(sc));
  /* A stale pointer stays detectable while later scopes come and go. */
  for (int i = 0; i < 10; i++) CK_SPOOL(spool_scope_end(begin(p, s)));
  CK_STATUS(spool_scope_end(sc), SPOOL_ERR_SCOPE_ENDED);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

START_TEST(scope_bad_arguments) {
  spool_pool *p = test_pool_with(NULL);
  spool_scope *sc = (spool_scope *)TEST_SENTINEL;
  CK_STATUS(spool_scope_begin(NULL, NULL, &sc), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(sc);
  CK_STATUS(spool_scope_begin(p, NULL, NULL), SPOOL_ERR_INVALID);
  void *q = TEST_SENTINEL;
  CK_STATUS(spool_scope_alloc(NULL, &q, 1), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(q);
  sc = begin(p, NULL); /* the legacy stream is a stream too */
  CK_STATUS(spool_scope_alloc(sc, NULL, 1), SPOOL_ERR_INVALID);
  CK_STATUS(spool_scope_alloc(sc, &q, SIZE_MAX), SPOOL_ERR_INVALID);
  CK_STATUS(spool_scope_end(NULL), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_scope_end(sc));
  test_pool_destroy(p);
}
END_TEST

/* No piece is a chunk's start: spool_free of any piece is refused and frees nothing. */
START_TEST(scope_piece_free_refused) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
  void *first = piece(sc, 64), *second = piece(sc, 64);
  CK_STATUS(spool_free(p, first, s), SPOOL_ERR_INTERIOR_POINTER);
  CK_LAST_ERROR_HAS("memory of a scope");
  CK_LAST_ERROR_HAS("spool_scope_end");
  CK_STATUS(spool_free(p, second, s), SPOOL_ERR_INTERIOR_POINTER);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  CK_SPOOL(spool_scope_end(sc));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A scope left open at destroy: its chunks are leaks, listed under the scope's tag. */
START_TEST(scope_open_at_destroy_is_a_leak) {
  char path[] = "/tmp/spool_scope_leakXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  spool_config cfg = test_config();
  snprintf(cfg.report, sizeof cfg.report, "%s", path);
  spool_pool *p = test_pool_create(&cfg);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
  (void)piece(sc, 4096);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  FILE *f = fdopen(fd, "r");
  ck_assert_ptr_nonnull(f);
  char text[4096] = {0};
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  remove(path);
  ck_assert_uint_gt(n, 0);
  ck_assert_msg(strstr(text, "spool_scope chunk") != NULL, "report: %s", text);
  test_stream_destroy(s);
}
END_TEST

/* Nesting is per thread: a scope begun by a thread that never ended it has no children from
 * threads that come after (a thread-local's address would name the next thread, given the same
 * stack, as the same thread). */
typedef struct thread_job {
  spool_pool *pool;
  cudaStream_t stream;
  spool_scope *scope;
  spool_status status;
} thread_job;

static void *begin_and_leave(void *arg) {
  thread_job *j = arg;
  j->status = spool_scope_begin(j->pool, j->stream, &j->scope);
  return NULL;
}

START_TEST(scope_threads_never_nest) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  thread_job jobs[2] = {{p, s, NULL, SPOOL_STATUS_COUNT}, {p, s, NULL, SPOOL_STATUS_COUNT}};
  for (int i = 0; i < 2; i++) { /* one after the other: the second may reuse the first's stack */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, begin_and_leave, &jobs[i]), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    CK_STATUS(jobs[i].status, SPOOL_OK);
  }
  CK_SPOOL(spool_scope_end(jobs[0].scope)); /* no child: the second thread's is its own */
  CK_SPOOL(spool_scope_end(jobs[1].scope));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A chunk that cannot be had fails the allocation and nothing else: the scope stays open and
 * usable, and ends with nothing to free. */
START_TEST(scope_failed_chunk_leaves_scope_usable) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
#ifdef SPOOL_TEST_SIM
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorLaunchFailure);
  void *q = TEST_SENTINEL;
  CK_STATUS(spool_scope_alloc(sc, &q, 100), SPOOL_ERR_CUDA);
  ck_assert_ptr_null(q);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
#endif
  (void)piece(sc, 100);
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 1);
  CK_SPOOL(spool_scope_end(sc));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- data ------------------------------------------------------------------------------------ */

START_TEST(scope_pieces_hold_their_data) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  enum { N = 40 };
  spool_scope *sc = begin(p, s);
  unsigned char *pieces[N];
  size_t sizes[N];
  uint64_t rng = 5;
  for (int i = 0; i < N; i++) {
    sizes[i] = test_rand_size(&rng, 256 * KiB);
    pieces[i] = piece(sc, sizes[i]);
    CK_CUDA(cudaMemsetAsync(pieces[i], i + 1, sizes[i], s));
  }
  unsigned char *host = malloc(256 * KiB);
  ck_assert_ptr_nonnull(host);
  for (int i = 0; i < N; i++) {
    CK_CUDA(cudaMemcpyAsync(host, pieces[i], sizes[i], cudaMemcpyDeviceToHost, s));
    CK_CUDA(cudaStreamSynchronize(s));
    for (size_t k = 0; k < sizes[i]; k++)
      ck_assert_msg(host[k] == (unsigned char)(i + 1), "piece %d byte %zu", i, k);
  }
  free(host);
  CK_SPOOL(spool_scope_end(sc));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- capture state --------------------------------------------------------------------------- */

/* A scope begun outside a capture neither allocates new chunks nor ends inside one (its chunks
 * are not the graph's to free); the capture stays intact and the scope ends after it. */
START_TEST(scope_crossing_a_capture_refused) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
  (void)piece(sc, MiB - 256); /* the chunk is full */
  cudaGraph_t graph = NULL;
  void *q = TEST_SENTINEL;
  CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  spool_status as = spool_scope_alloc(sc, &q, 64);
  spool_status es = spool_scope_end(sc);
  CK_CUDA(cudaStreamEndCapture(s, &graph)); /* the capture is intact */
  CK_STATUS(as, SPOOL_ERR_INVALID);
  CK_STATUS(es, SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(graph);
  CK_CUDA(cudaGraphDestroy(graph));
  CK_SPOOL(spool_scope_end(sc));
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Nor does it hand out a piece of a chunk it already has, inside a capture: the graph would use
 * memory the scope frees at its end, outside the capture, before the graph ever runs. */
START_TEST(scope_piece_inside_a_capture_refused) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  spool_scope *sc = begin(p, s);
  (void)piece(sc, 64); /* the chunk has room left */
  cudaGraph_t graph = NULL;
  void *q = TEST_SENTINEL;
  CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  spool_status as = spool_scope_alloc(sc, &q, 64);
  CK_CUDA(cudaStreamEndCapture(s, &graph));
  CK_STATUS(as, SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("capture state it began in");
  ck_assert_ptr_null(q);
  ck_assert_ptr_nonnull(graph);
  CK_CUDA(cudaGraphDestroy(graph));
  (void)piece(sc, 64); /* after the capture: fine again */
  CK_SPOOL(spool_scope_end(sc));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("scope");
  TCase *tc = test_tcase("scope");
  tcase_add_test(tc, scope_many_small_pieces_one_chunk);
  tcase_add_test(tc, scope_chunks_grow);
  tcase_add_test(tc, scope_memory_bounded_and_returned);
  tcase_add_test(tc, scope_nesting_child_ends_first);
  tcase_add_test(tc, scope_other_stream_not_a_child);
  tcase_add_test(tc, scope_ended_twice);
  tcase_add_test(tc, scope_bad_arguments);
  tcase_add_test(tc, scope_piece_free_refused);
  tcase_add_test(tc, scope_open_at_destroy_is_a_leak);
  tcase_add_test(tc, scope_threads_never_nest);
  tcase_add_test(tc, scope_failed_chunk_leaves_scope_usable);
  tcase_add_test(tc, scope_pieces_hold_their_data);
  tcase_add_test(tc, scope_crossing_a_capture_refused);
  tcase_add_test(tc, scope_piece_inside_a_capture_refused);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
