/* check_track: what tracking does besides refusing frees, reporting leaks and poisoning (those are
 * check_refusals, check_leaks and check_poison): track=off, the bounded graveyard, and double and
 * cross-thread frees from several threads at once.
 *
 * Built twice: check_track_sim (cudasim, SPOOL_TEST_SIM) and check_track_gpu (real CUDA). Tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too: they never hand the driver a
 * pointer it does not own and never read freed memory. */
#include "test_track.h"

#include <pthread.h>

/* ---- track=off ---------------------------------------------------------------------------------- */

START_TEST(track_off_counts_only) {
  char path[64], text[400];
  temp_path(path);
  /* cache=off: the stream caches know their buffers' sizes whatever the track level */
  snprintf(text, sizeof text, "track=off, cache=off, report=%s", path);
  spool_pool *p = pool_with(text);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(SPOOL_ALLOC(p, &a, 1 * MiB, s));
  CK_SPOOL(spool_alloc_tagged(p, &b, 2 * MiB, s, "untracked"));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, 0); /* not known without the table */
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.bytes_allocated, 3 * MiB);
  CK_SPOOL(spool_free(p, a, s));
  check_counts(p, 0, 1, 2, 1, 0);

  /* A leak: reported as a count only, and left allocated. */
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  CK_LAST_ERROR_HAS("1 buffer was still allocated");
  CK_LAST_ERROR_HAS("not freed");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 1);
#endif
  char *report = slurp_path(path);
  ck_assert_ptr_nonnull(report);
  CK_TEXT_HAS(report, "1 live buffers");
  CK_TEXT_HAS(report, "track=off");
  CK_TEXT_LACKS(report, "untracked");
  free(report);
  unlink(path);
  /* CUDA lets an allocation outlive its destroyed pool: the caller gives it back. */
  CK_CUDA(cudaFreeAsync(b, s));
  test_stream_destroy(s);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* What track=off does not catch goes to the driver: undefined on a real device, an error in the
 * simulation. */
START_TEST(sim_track_off_unchecked) {
  spool_pool *p = pool_with("track=off, cache=off"); /* a cache would know the pointer */
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 4096, s));
  CK_SPOOL(spool_free(p, a, s));
  long frees = cudasim_calls("cudaFreeAsync");
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorInvalidValue");
  CK_LAST_ERROR_HAS("track=off");
  CK_LAST_ERROR_PTR(a);
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees + 1);
  int on_stack = 0;
  CK_STATUS(spool_free(p, &on_stack, s), SPOOL_ERR_CUDA);
  ck_assert_int_eq(cudasim_calls("cudaFreeAsync"), frees + 2);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess); /* spool cleared what it reported */
  /* Not counted as refused frees: spool did not refuse them. */
  check_counts(p, 0, 0, 1, 1, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

/* ---- the graveyard is bounded ------------------------------------------------------------------ */

/* count frees of 1 KiB buffers on s, none at the address x. */
static void churn(spool_pool *p, cudaStream_t s, int count, const void *x) {
  for (int i = 0; i < count; i++) {
    void *c = NULL;
    CK_SPOOL(spool_alloc(p, &c, 1024, s));
    ck_assert_ptr_ne(c, x);
    CK_SPOOL(spool_free(p, c, s));
  }
}

START_TEST(sim_graveyard_bounded) {
  enum { GRAVES = 4096 }; /* the documented memory of the last 4096 frees */
  /* cache=off: a cached block is remembered as long as it is cached; this is the graveyard */
  spool_pool *p = pool_with("track=counts, cache=off");
  cudaStream_t s = test_stream_create();
  /* x (256 B, a 512-byte block) first in a fresh segment, a live neighbour after it: x's block
   * cannot merge with free space, and the 1 KiB churn never fits in it, so x's address is not
   * handed out. */
  void *x = NULL, *guard = NULL;
  CK_SPOOL(spool_alloc(p, &x, 256, s));
  CK_SPOOL(spool_alloc(p, &guard, 256, s));
  CK_SPOOL(spool_free(p, x, s));

  /* x plus 4095 later frees: x is still remembered. */
  churn(p, s, GRAVES - 1, x);
  expect_refused(p, x, s, SPOOL_ERR_DOUBLE_FREE);
  CK_LAST_ERROR_HAS("allocation #1 ");
  /* One more free pushes it out: it is unknown now. */
  churn(p, s, 1, x);
  expect_refused(p, x, s, SPOOL_ERR_UNKNOWN_POINTER);
  CK_LAST_ERROR_HAS("too long ago");

  /* The address handed out and freed again: a second free of the old pointer is a double free
   * of the new buffer, which the graveyard remembers. */
  void *y = NULL;
  CK_SPOOL(spool_alloc(p, &y, 256, s));
  ck_assert_ptr_eq(y, x);
  uint64_t y_seq = test_stats(p).allocs;
  CK_SPOOL(spool_free(p, y, s));
  churn(p, s, GRAVES - 1, x);
  expect_refused(p, x, s, SPOOL_ERR_DOUBLE_FREE);
  char want[64];
  snprintf(want, sizeof want, "allocation #%" PRIu64 " ", y_seq);
  CK_LAST_ERROR_HAS(want);
  churn(p, s, 1, x);
  expect_refused(p, x, s, SPOOL_ERR_UNKNOWN_POINTER);

  CK_SPOOL(spool_free(p, guard, s));
  check_counts(p, 0, 0, 3 + 2 * GRAVES, 3 + 2 * GRAVES, 4);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#endif /* SPOOL_TEST_SIM */

/* ---- threads -------------------------------------------------------------------------------- */

enum { THREADS = 8, PER_THREAD = 64, ALL = THREADS * PER_THREAD };

typedef struct shared {
  spool_pool *pool;
  void *ptrs[ALL];
  pthread_barrier_t barrier;
} shared;

typedef struct worker {
  shared *sh;
  int id;
  cudaStream_t stream;
  int alloc_errors, ok, interior, doubles, other;
  spool_status first_other;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  /* 1: each thread allocates its share. */
  for (int i = 0; i < PER_THREAD; i++) {
    size_t size = 256 + (size_t)((w->id * PER_THREAD + i) % 7) * 1000;
    if (spool_alloc(sh->pool, &sh->ptrs[w->id * PER_THREAD + i], size, w->stream) != SPOOL_OK)
      w->alloc_errors++;
  }
  pthread_barrier_wait(&sh->barrier);
  /* 2: every thread tries to free every buffer by an interior pointer: all refused. */
  for (int k = 0; k < ALL; k++) {
    char *q = sh->ptrs[(k + w->id * PER_THREAD) % ALL];
    spool_status s = spool_free(sh->pool, q + 1, w->stream);
    if (s == SPOOL_ERR_INTERIOR_POINTER) w->interior++;
    else if (w->other++ == 0) w->first_other = s;
  }
  pthread_barrier_wait(&sh->barrier);
  /* 3: every thread frees every buffer, the others' first: one free wins, the rest are double
   * frees (no allocations meanwhile, so no address is handed out again). */
  for (int k = 0; k < ALL; k++) {
    void *q = sh->ptrs[(k + (w->id + 1) * PER_THREAD) % ALL];
    spool_status s = spool_free(sh->pool, q, w->stream);
    if (s == SPOOL_OK) w->ok++;
    else if (s == SPOOL_ERR_DOUBLE_FREE) w->doubles++;
    else if (w->other++ == 0) w->first_other = s;
  }
  return NULL;
}

START_TEST(threads_cross_and_double_frees) {
  shared sh;
  memset(&sh, 0, sizeof sh);
  sh.pool = pool_with("track=counts");
  ck_assert_int_eq(pthread_barrier_init(&sh.barrier, NULL, THREADS), 0);
  worker w[THREADS];
  pthread_t tid[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.sh = &sh, .id = i, .stream = test_stream_create()};
  }
  for (int i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_create(&tid[i], NULL, work, &w[i]), 0);
  for (int i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_join(tid[i], NULL), 0);
  pthread_barrier_destroy(&sh.barrier);

  int ok = 0, interior = 0, doubles = 0;
  for (int i = 0; i < THREADS; i++) {
    ck_assert_int_eq(w[i].alloc_errors, 0);
    ck_assert_msg(w[i].other == 0, "thread %d: %d unexpected statuses, the first %s", i,
                  w[i].other, spool_status_name(w[i].first_other));
    ck_assert_int_eq(w[i].interior, ALL);
    ok += w[i].ok;
    interior += w[i].interior;
    doubles += w[i].doubles;
  }
  ck_assert_int_eq(ok, ALL);
  ck_assert_int_eq(doubles, ALL * (THREADS - 1));
  check_counts(sh.pool, 0, 0, ALL, ALL, (uint64_t)interior + (uint64_t)doubles);
  for (int i = 0; i < THREADS; i++) {
    CK_SPOOL(spool_stream_release(sh.pool, w[i].stream)); /* its cached blocks go back */
    test_stream_destroy(w[i].stream);
  }
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
  test_pool_destroy(sh.pool);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *track_suite(void) {
  Suite *s = suite_create("track");
  TCase *tc = test_tcase("track_off");
  tcase_add_test(tc, track_off_counts_only);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_track_off_unchecked);
#endif
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("graveyard");
  tcase_add_test(tc, sim_graveyard_bounded);
  suite_add_tcase(s, tc);
#endif

  tc = test_tcase("threads");
  tcase_add_test(tc, threads_cross_and_double_frees);
  suite_add_tcase(s, tc);
  return s;
  return s;
}

int main(void) { return test_main(track_suite()); }
