/* The trace (config key `trace`, SPOOL_TRACE): what a pool records and what the reader of
 * tools/ gets back from the file. */
#include "test_main.h"

#include <pthread.h>
#include <unistd.h>

#include "trace_stats.h"

/* A fresh path for this process and name (sim suites fork per test). */
static const char *trace_path(const char *name, char buf[256]) {
  snprintf(buf, 256, "/tmp/spool_check_trace_%ld_%s.sptr", (long)getpid(), name);
  unlink(buf);
  return buf;
}

static spool_pool *traced_pool(const char *path, const char *more) {
  spool_config cfg = test_config();
  char text[512];
  snprintf(text, sizeof text, "trace=\"%s\"%s%s", path, more ? "," : "", more ? more : "");
  CK_SPOOL(spool_config_parse(&cfg, text));
  return test_pool_create(&cfg);
}

static void load(const char *path, tf_trace *t) {
  char err[TF_ERR];
  ck_assert_msg(tf_load(path, t, err) == 0, "tf_load: %s", err);
}

/* The first event of kind after index from, or NULL. */
static const tf_event *next_of(const tf_trace *t, int kind, size_t *from) {
  for (size_t i = *from; i < t->n; i++)
    if (t->ev[i].kind == kind) return *from = i + 1, &t->ev[i];
  return NULL;
}

static const tf_event *first_of(const tf_trace *t, int kind) {
  size_t i = 0;
  return next_of(t, kind, &i);
}

/* Events of kind. */
static size_t count_of(const tf_trace *t, int kind) {
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) n += t->ev[i].kind == kind;
  return n;
}

/* Events of the program's calls: all but the heap's chunks. */
static size_t calls_of(const tf_trace *t) {
  return t->n - count_of(t, SPOOL_TRACE_CHUNK_ALLOC) - count_of(t, SPOOL_TRACE_CHUNK_FREE);
}

static ts_stats stats_of(const tf_trace *t) {
  ts_stats st;
  char err[TF_ERR];
  ck_assert_msg(ts_compute(t, &st, err) == 0, "%s", err);
  return st;
}

static const tf_event *free_of(const tf_trace *t, const void *ptr) {
  for (size_t i = 0; i < t->n; i++)
    if (t->ev[i].kind == SPOOL_TRACE_FREE && t->ev[i].ptr == (uintptr_t)ptr) return &t->ev[i];
  return NULL;
}

START_TEST(trace_records_every_kind_of_event_with_its_fields) {
  char path[256];
  trace_path("kinds", path);
  spool_pool *p = traced_pool(path, NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = NULL, *b = NULL, *c = NULL, *parts[3];
  int line = __LINE__ + 1;
  CK_SPOOL(SPOOL_ALLOC(p, &a, 1000, s1));
  CK_SPOOL(spool_alloc_tagged(p, &b, 3 * MiB, s1, "weights"));
  size_t sizes[3] = {100, 200, 300};
  CK_SPOOL(spool_alloc_batch(p, s2, 3, sizes, parts, 0));
  CK_SPOOL(spool_free(p, a, s1));
  CK_SPOOL(spool_record_stream(p, b, s2));
  CK_SPOOL(spool_free(p, b, s1));
  c = test_alloc_on(p, 4096, s2);
  cudaEvent_t ev;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK_CUDA(cudaEventRecord(ev, s2));
  CK_SPOOL(spool_free_after(p, c, s1, ev));
  spool_scope *sc;
  void *piece;
  CK_SPOOL(spool_scope_begin(p, s1, &sc));
  CK_SPOOL(spool_scope_alloc(sc, &piece, 512));
  CK_SPOOL(spool_scope_end(sc));
  CK_SPOOL(spool_free(p, parts[0], s2));
  CK_SPOOL(spool_trim(p, 12345));
  CK_SPOOL(spool_stream_release(p, s2));
  CK_SPOOL(spool_trace_flush(p));
#ifdef SPOOL_TEST_SIM
  void *big = NULL; /* an allocation the device cannot hold: an out-of-memory record */
  CK_STATUS(spool_alloc(p, &big, CUDASIM_DEFAULT_CAPACITY * 2, s1), SPOOL_ERR_OOM);
#endif
  test_pool_destroy(p);
  CK_CUDA(cudaEventDestroy(ev));

  tf_trace t;
  load(path, &t);
  ck_assert(t.ended);
  ck_assert_ptr_nonnull(strstr(t.config, "release_threshold"));
  size_t at = 0;
  const tf_event *e = next_of(&t, SPOOL_TRACE_ALLOC, &at);
  ck_assert_ptr_nonnull(e);
  ck_assert_uint_eq(e->ptr, (uintptr_t)a);
  ck_assert_uint_eq(e->size, 1000);
  ck_assert_uint_eq(e->stream, (uintptr_t)s1);
  ck_assert_int_ge(e->site, 0);
  ck_assert_ptr_nonnull(strstr(t.sites[e->site].text, "check_trace.c"));
  ck_assert_int_eq(t.sites[e->site].line, line);
  e = next_of(&t, SPOOL_TRACE_ALLOC, &at);
  ck_assert_uint_eq(e->size, 3 * MiB);
  ck_assert(t.sites[e->site].tag);
  ck_assert_str_eq(t.sites[e->site].text, "weights");
  e = next_of(&t, SPOOL_TRACE_ALLOC, &at);
  ck_assert_uint_eq(e->aux, 3); /* the batch, one allocation of its members */
  ck_assert_uint_eq(e->ptr, (uintptr_t)parts[0]);
  ck_assert_uint_eq(e->stream, (uintptr_t)s2);
  e = free_of(&t, a);
  ck_assert_ptr_nonnull(e);
  ck_assert_uint_eq(e->stream, (uintptr_t)s1);
  ck_assert_uint_eq(e->status, SPOOL_OK);
  e = first_of(&t, SPOOL_TRACE_RECORD_STREAM);
  ck_assert_uint_eq(e->ptr, (uintptr_t)b);
  ck_assert_uint_eq(e->stream, (uintptr_t)s2);
  ck_assert_ptr_nonnull(free_of(&t, b));
  e = free_of(&t, c);
  ck_assert_ptr_nonnull(e);
  ck_assert(e->flags & SPOOL_TRACE_AFTER);
  ck_assert_uint_eq(e->stream, (uintptr_t)s1);
  const tf_event *begin = first_of(&t, SPOOL_TRACE_SCOPE_BEGIN);
  const tf_event *end = first_of(&t, SPOOL_TRACE_SCOPE_END);
  ck_assert_ptr_nonnull(begin);
  ck_assert_ptr_nonnull(end);
  ck_assert_uint_eq(begin->aux, end->aux);
  ck_assert_uint_lt(begin->seq, end->seq);
  e = first_of(&t, SPOOL_TRACE_TRIM);
  ck_assert_uint_eq(e->size, 12345);
  e = first_of(&t, SPOOL_TRACE_STREAM_RELEASE);
  ck_assert_uint_eq(e->stream, (uintptr_t)s2);
  ck_assert_ptr_nonnull(first_of(&t, SPOOL_TRACE_FLUSH));
  /* the heap's first chunk comes before the allocation it was taken for */
  ck_assert_uint_eq(t.ev[0].kind, SPOOL_TRACE_CHUNK_ALLOC);
  ck_assert_uint_ge(t.ev[0].size, 2 * MiB);
  ck_assert_uint_eq(t.ev[1].kind, SPOOL_TRACE_ALLOC);
  e = first_of(&t, SPOOL_TRACE_CHUNK_FREE); /* every chunk was all free at the trim */
  ck_assert_ptr_nonnull(e);
  ck_assert_uint_lt(e->seq, first_of(&t, SPOOL_TRACE_TRIM)->seq);
  e = first_of(&t, SPOOL_TRACE_END);
  ck_assert_uint_eq(e->aux, 0); /* every buffer was freed */
  ck_assert_uint_ge(e->size, 3 * MiB + 1000); /* the peak bytes in use */
  if (TEST_SIM) {
    int ooms = 0;
    for (size_t i = 0; i < t.n; i++)
      ooms += t.ev[i].kind == SPOOL_TRACE_ALLOC && t.ev[i].status == SPOOL_ERR_OOM;
    ck_assert_int_eq(ooms, 1);
  }
  for (size_t i = 1; i < t.n; i++) ck_assert_uint_lt(t.ev[i - 1].seq, t.ev[i].seq);
  tf_free(&t);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  unlink(path);
}
END_TEST

START_TEST(trace_keeps_full_blocks_written_before_the_pool_is_gone) {
  char path[256];
  trace_path("crash", path);
  spool_pool *p = traced_pool(path, NULL);
  cudaStream_t s = test_stream_create();
  /* well over two blocks' worth of records, never flushed: as a process that dies here */
  enum { PAIRS = 3000 };
  for (int i = 0; i < PAIRS; i++) CK_SPOOL(spool_free(p, test_alloc_on(p, 256, s), s));
  tf_trace t;
  load(path, &t);
  ck_assert(!t.ended);
  ck_assert_uint_ge(t.blocks, 2);
  size_t per_block = SPOOL_TRACE_BLOCK_PAYLOAD / sizeof(spool_trace_record);
  ck_assert_uint_ge(t.n, t.blocks * per_block * 9 / 10); /* blocks are written full */
  ck_assert_uint_lt(calls_of(&t), 2 * PAIRS);
  tf_free(&t);
  test_pool_destroy(p);
  load(path, &t); /* the destroy wrote the rest */
  ck_assert(t.ended);
  ck_assert_uint_eq(calls_of(&t), 2 * PAIRS + 1);
  tf_free(&t);
  test_stream_destroy(s);
  unlink(path);
}
END_TEST

START_TEST(trace_to_a_file_that_cannot_be_written_fails_the_create) {
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "trace=/nonexistent-dir/x.sptr"));
  spool_pool *p = TEST_SENTINEL;
  CK_STATUS(spool_pool_create(&p, &cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS("/nonexistent-dir/x.sptr");
  CK_LAST_ERROR_HAS("No such file");
}
END_TEST

START_TEST(trace_env_names_a_file_per_pool_with_its_number) {
  char pattern[256], path[2][256];
  snprintf(pattern, sizeof pattern, "/tmp/spool_check_trace_%ld_env_%%n.sptr", (long)getpid());
  setenv("SPOOL_TRACE", pattern, 1);
  spool_pool *p1 = test_pool_create(NULL), *p2 = test_pool_create(NULL);
  unsetenv("SPOOL_TRACE");
  cudaStream_t s = test_stream_create();
  void *x = test_alloc_on(p2, 777, s);
  CK_SPOOL(spool_free(p2, x, s));
  test_pool_destroy(p1);
  test_pool_destroy(p2);
  /* the two files differ by the pools' numbers, which follow each other */
  int found = 0;
  for (unsigned n = 1; n < 100000 && found < 2; n++) {
    char name[256];
    snprintf(name, sizeof name, "/tmp/spool_check_trace_%ld_env_%u.sptr", (long)getpid(), n);
    if (access(name, R_OK) == 0) snprintf(path[found++], 256, "%s", name);
  }
  ck_assert_int_eq(found, 2);
  tf_trace t1, t2;
  load(path[0], &t1);
  load(path[1], &t2);
  ck_assert_uint_eq(calls_of(&t1), 1); /* the end record only */
  ck_assert_uint_eq(calls_of(&t2), 3);
  ck_assert_uint_eq(first_of(&t2, SPOOL_TRACE_ALLOC)->size, 777);
  tf_free(&t1);
  tf_free(&t2);
  unlink(path[0]);
  unlink(path[1]);
  test_stream_destroy(s);
}
END_TEST

enum { THREADS = 4, THREAD_PAIRS = 2000 };
typedef struct worker { spool_pool *p; cudaStream_t s; } worker;

static void *work(void *arg) {
  worker *w = arg;
  for (int i = 0; i < THREAD_PAIRS; i++) {
    void *x = NULL;
    if (spool_alloc(w->p, &x, 512 + (size_t)(i % 7) * 1024, w->s) != SPOOL_OK) return arg;
    if (spool_free(w->p, x, w->s) != SPOOL_OK) return arg;
  }
  return NULL;
}

START_TEST(trace_of_threads_numbers_every_event_once_in_order) {
  char path[256];
  trace_path("threads", path);
  spool_pool *p = traced_pool(path, NULL);
  worker w[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){p, test_stream_create()};
    ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    void *bad = &w[i];
    ck_assert_int_eq(pthread_join(th[i], &bad), 0);
    ck_assert_ptr_null(bad);
  }
  test_pool_destroy(p);
  tf_trace t;
  load(path, &t);
  ck_assert_uint_eq(calls_of(&t), 2 * THREADS * THREAD_PAIRS + 1);
  for (size_t i = 0; i < t.n; i++) ck_assert_uint_eq(t.ev[i].seq, i + 1);
  ts_stats st = stats_of(&t);
  ck_assert_uint_eq(st.allocs, THREADS * THREAD_PAIRS);
  ck_assert_uint_eq(st.frees, THREADS * THREAD_PAIRS);
  ck_assert_uint_eq(st.bad_frees, 0); /* a free always comes before the reuse of its address */
  ck_assert_uint_eq(st.nstreams, THREADS);
  tf_free(&t);
  for (int i = 0; i < THREADS; i++) test_stream_destroy(w[i].s);
  unlink(path);
}
END_TEST

START_TEST(trace_marks_the_calls_made_under_a_capture) {
  char path[256];
  trace_path("capture", path);
  spool_pool *p = traced_pool(path, NULL);
  cudaStream_t s = test_stream_create();
  CK_SPOOL(spool_free(p, test_alloc_on(p, 4096, s), s)); /* before: not captured */
  cudaGraph_t graph;
  CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void *in_graph = test_alloc_on(p, 8192, s);
  CK_SPOOL(spool_free(p, in_graph, s));
  CK_CUDA(cudaStreamEndCapture(s, &graph));
  CK_CUDA(cudaGraphDestroy(graph));
  CK_SPOOL(spool_free(p, test_alloc_on(p, 4096, s), s)); /* after: not captured */
  test_pool_destroy(p);
  tf_trace t;
  load(path, &t);
  size_t at = 0;
  ck_assert(!(next_of(&t, SPOOL_TRACE_ALLOC, &at)->flags & SPOOL_TRACE_CAPTURING));
  const tf_event *e = next_of(&t, SPOOL_TRACE_ALLOC, &at);
  ck_assert_uint_eq(e->size, 8192);
  ck_assert(e->flags & SPOOL_TRACE_CAPTURING);
  ck_assert(free_of(&t, in_graph)->flags & SPOOL_TRACE_CAPTURING);
  ck_assert(!(next_of(&t, SPOOL_TRACE_ALLOC, &at)->flags & SPOOL_TRACE_CAPTURING));
  ts_stats st = stats_of(&t);
  ck_assert_uint_eq(st.captures, 1);
  ck_assert_uint_eq(st.captured, 1);
  tf_free(&t);
  test_stream_destroy(s);
  unlink(path);
}
END_TEST

/* The position in big[0..n) of the chunk given back at ptr (a block cut from its start), or -1. */
static int chunk_index(void *const *big, int n, uint64_t ptr) {
  for (int i = 0; i < n; i++)
    if ((uintptr_t)big[i] == ptr) return i;
  return -1;
}

/* Chunks that went idle go back to the pool newest first, in whatever order they emptied (the
 * order of cudaFreeAsync calls decides where the pool puts later chunks), and the trace shows
 * each as it goes. n: chunks, emptied in a scrambled order; a look sorts a few itself and walks
 * every chunk for more. Each look gives back what has been idle long enough by then: its run
 * of chunk events, uninterrupted by the caller's, is newest first. */
static void idle_chunks_go_back_newest_first(int n, const char *name) {
  char path[256];
  trace_path(name, path);
  spool_pool *p = traced_pool(path, "chunk_idle=16, front_limit=0");
  cudaStream_t s = test_stream_create();
  void *big[32];
  ck_assert_int_le(n, 32);
  for (int i = 0; i < n; i++) big[i] = test_alloc_on(p, 20 * MiB, s); /* a chunk each */
  void *x = test_alloc_on(p, 8 * KiB, s); /* another size last: the frees go into the heap */
  for (int i = 0; i < n; i++) CK_SPOOL(spool_free(p, big[i * 7 % n], s));
  test_small_band_misses(p, s);
  ck_assert_uint_eq(test_stats(p).chunk_frees, (uint64_t)n);
  CK_SPOOL(spool_free(p, x, s));
  CK_SPOOL(spool_trace_flush(p));
  tf_trace t;
  load(path, &t);
  int gone = 0, last = n; /* the chunk given back last in this run */
  bool seen[32] = {false};
  for (size_t i = 0; i < t.n; i++) {
    const tf_event *e = &t.ev[i];
    if (e->kind != SPOOL_TRACE_CHUNK_FREE) {
      if (e->kind == SPOOL_TRACE_ALLOC || e->kind == SPOOL_TRACE_FREE) last = n;
      continue;
    }
    if (e->size != 32 * MiB) continue;
    int k = chunk_index(big, n, e->ptr);
    ck_assert_msg(k >= 0 && !seen[k], "chunk event %zu: not one of the big chunks, or twice", i);
    ck_assert_msg(k < last, "chunk %d went back after chunk %d in the same look", k, last);
    seen[k] = true;
    last = k;
    gone++;
  }
  ck_assert_int_eq(gone, n);
  tf_free(&t);
  test_pool_destroy(p);
  test_stream_destroy(s);
  unlink(path);
}

START_TEST(trace_shows_idle_chunks_going_back_newest_first) {
  idle_chunks_go_back_newest_first(3, "idle3");
}
END_TEST

START_TEST(trace_shows_many_idle_chunks_going_back_newest_first) {
  idle_chunks_go_back_newest_first(20, "idle20");
}
END_TEST

START_TEST(trace_off_writes_no_file) {
  spool_pool *p = test_pool_with(NULL);
  ck_assert_str_eq(spool_pool_config(p)->trace, "");
  CK_SPOOL(spool_trace_flush(p)); /* nothing to flush: fine */
  test_pool_destroy(p);
  CK_STATUS(spool_trace_flush(NULL), SPOOL_ERR_INVALID);
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("trace");
  TCase *tc = test_tcase("trace");
  tcase_add_test(tc, trace_records_every_kind_of_event_with_its_fields);
  tcase_add_test(tc, trace_keeps_full_blocks_written_before_the_pool_is_gone);
  tcase_add_test(tc, trace_to_a_file_that_cannot_be_written_fails_the_create);
  tcase_add_test(tc, trace_env_names_a_file_per_pool_with_its_number);
  tcase_add_test(tc, trace_of_threads_numbers_every_event_once_in_order);
  tcase_add_test(tc, trace_marks_the_calls_made_under_a_capture);
  tcase_add_test(tc, trace_off_writes_no_file);
  tcase_add_test(tc, trace_shows_idle_chunks_going_back_newest_first);
  tcase_add_test(tc, trace_shows_many_idle_chunks_going_back_newest_first);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_main(suite()); }
