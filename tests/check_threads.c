/* check_threads: many host threads on one pool. Workers allocate and free random sizes on their
 * own streams and on one shared stream, hand buffers to each other through a queue (allocated in
 * one thread, freed in another), and free across streams after an event; monitors read stats,
 * write reports, trim and reset peaks meanwhile. At the end the counters are exact and nothing
 * is left: no leak at destroy, and (sim) no simulated allocation after it. Plus a race of two
 * threads freeing the same pointer, and threads each with a pool of their own.
 *
 * Built twice: check_threads_sim (cudasim, SPOOL_TEST_SIM; scripts/test also runs it under TSan)
 * and check_threads_gpu (real CUDA). Worker threads never call ck_assert (Check's assertions
 * belong to the test's thread, the more so with CK_NOFORK): they record the first failure, and
 * the test asserts on it after the join. SPOOL_TEST_THREADS_OPS sets the operations per worker
 * (default 2000).
 */
#include "test_main.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>

#define NWORKERS 8
#define NMONITORS 2
#define LIVE_MAX 24            /* live buffers a worker holds at most */
#define QUEUE_CAP 128          /* buffers in transit between threads */
#define SIZE_MAX_BYTES (1 * MiB)
#define TOUCH_MAX ((size_t)4096) /* bytes written by cudaMemsetAsync at each buffer's start */
#define DEFAULT_OPS 2000

/* ---- shared state ---------------------------------------------------------------------------- */

typedef struct buf {
  void *p;
  size_t n;
  cudaStream_t stream; /* the stream it was allocated on, and its memset queued on */
  unsigned char mark;  /* the byte its first TOUCH_MAX bytes hold */
} buf;

typedef struct shared {
  spool_pool *pool;
  cudaStream_t shared_stream;
  cudaStream_t own[NWORKERS];
  long ops;

  pthread_mutex_t qlock; /* the queue of buffers handed from one thread to another */
  buf queue[QUEUE_CAP];
  int qhead, qcount;

  atomic_int workers_running;
  atomic_ullong allocs, frees, bytes, handed, cross_stream, monitor_rounds;

  pthread_mutex_t elock; /* the first failure, for the test's thread to assert on */
  int failed;
  char error[768];
} shared;

static void record(shared *sh, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&sh->elock);
  if (!sh->failed) {
    sh->failed = 1;
    snprintf(sh->error, sizeof sh->error, "line %d: %s (spool_last_error: %s)", line, msg,
             spool_last_error());
  }
  pthread_mutex_unlock(&sh->elock);
}

static int has_failed(shared *sh) {
  pthread_mutex_lock(&sh->elock);
  int f = sh->failed;
  pthread_mutex_unlock(&sh->elock);
  return f;
}

/* In a thread: on failure, record it and leave the function with -1. */
#define T_CHECK(sh, cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      record((sh), __LINE__, __VA_ARGS__);                                                    \
      return -1;                                                                              \
    }                                                                                         \
  } while (0)
#define T_CUDA(sh, call)                                                                      \
  do {                                                                                        \
    cudaError_t t_e_ = (call);                                                                \
    T_CHECK(sh, t_e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorName(t_e_));                \
  } while (0)
#define T_SPOOL(sh, call)                                                                     \
  do {                                                                                        \
    spool_status t_st_ = (call);                                                              \
    T_CHECK(sh, t_st_ == SPOOL_OK, "%s returned %s", #call, spool_status_name(t_st_));        \
  } while (0)

static long ops_per_worker(void) {
  const char *s = getenv("SPOOL_TEST_THREADS_OPS");
  long n = s ? strtol(s, NULL, 10) : 0;
  return n > 0 ? n : DEFAULT_OPS;
}

static void shared_init(shared *sh, spool_pool *pool) {
  memset(sh, 0, sizeof *sh);
  sh->pool = pool;
  sh->ops = ops_per_worker();
  pthread_mutex_init(&sh->qlock, NULL);
  pthread_mutex_init(&sh->elock, NULL);
  sh->shared_stream = test_stream_create();
  for (int i = 0; i < NWORKERS; i++) sh->own[i] = test_stream_create();
}

static void shared_fini(shared *sh) {
  test_stream_destroy(sh->shared_stream);
  for (int i = 0; i < NWORKERS; i++) test_stream_destroy(sh->own[i]);
  pthread_mutex_destroy(&sh->qlock);
  pthread_mutex_destroy(&sh->elock);
}

static int queue_push(shared *sh, buf b) {
  int ok = 0;
  pthread_mutex_lock(&sh->qlock);
  if (sh->qcount < QUEUE_CAP) {
    sh->queue[(sh->qhead + sh->qcount) % QUEUE_CAP] = b;
    sh->qcount++;
    ok = 1;
  }
  pthread_mutex_unlock(&sh->qlock);
  return ok;
}

static int queue_pop(shared *sh, buf *b) {
  int ok = 0;
  pthread_mutex_lock(&sh->qlock);
  if (sh->qcount > 0) {
    *b = sh->queue[sh->qhead];
    sh->qhead = (sh->qhead + 1) % QUEUE_CAP;
    sh->qcount--;
    ok = 1;
  }
  pthread_mutex_unlock(&sh->qlock);
  return ok;
}

/* ---- the workers ----------------------------------------------------------------------------- */

static size_t touched(const buf *b) { return b->n < TOUCH_MAX ? b->n : TOUCH_MAX; }

/* The first and last touched byte still hold the buffer's mark: no other live buffer overlapped
 * it. Read in stream order on the buffer's own stream. */
static int verify(shared *sh, const buf *b) {
  unsigned char got[2] = {0, 0};
  T_CUDA(sh, cudaMemcpyAsync(&got[0], b->p, 1, cudaMemcpyDeviceToHost, b->stream));
  T_CUDA(sh, cudaMemcpyAsync(&got[1], (const unsigned char *)b->p + touched(b) - 1, 1,
                             cudaMemcpyDeviceToHost, b->stream));
  T_CUDA(sh, cudaStreamSynchronize(b->stream));
  T_CHECK(sh, got[0] == b->mark && got[1] == b->mark,
          "buffer %p (%zu bytes) holds 0x%02x..0x%02x, not its mark 0x%02x: overwritten while "
          "live", b->p, b->n, got[0], got[1], b->mark);
  return 0;
}

/* Frees b on its own stream, or (cross) on `other` after an event orders the two streams. */
static int free_buf(shared *sh, const buf *b, cudaStream_t other, cudaEvent_t ev, int cross,
                    int variant) {
  if (verify(sh, b) != 0) return -1;
  cudaStream_t s = b->stream;
  if (cross && other != b->stream) {
    T_CUDA(sh, cudaEventRecord(ev, b->stream));
    T_CUDA(sh, cudaStreamWaitEvent(other, ev, 0));
    s = other;
    atomic_fetch_add(&sh->cross_stream, 1);
  }
  if (variant)
    T_SPOOL(sh, SPOOL_FREE(sh->pool, b->p, s));
  else
    T_SPOOL(sh, spool_free(sh->pool, b->p, s));
  atomic_fetch_add(&sh->frees, 1);
  return 0;
}

typedef struct worker_arg {
  shared *sh;
  int id;
} worker_arg;

static int work(shared *sh, int id) {
  uint64_t rng = 0x9E3779B97F4A7C15u ^ ((uint64_t)(id + 1) * 0xD1B54A32D192ED03u);
  cudaStream_t own = sh->own[id];
  cudaEvent_t ev = NULL;
  buf live[LIVE_MAX], b;
  int nlive = 0;
  T_CUDA(sh, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

  for (long i = 0; i < sh->ops && !has_failed(sh); i++) {
    unsigned r = (unsigned)(test_rand(&rng) % 100);
    if (nlive < LIVE_MAX && (nlive == 0 || r < 45)) { /* allocate */
      b.stream = test_rand(&rng) % 3 == 0 ? sh->shared_stream : own;
      b.n = test_rand_size(&rng, SIZE_MAX_BYTES);
      b.p = NULL;
      b.mark = (unsigned char)(1 + test_rand(&rng) % 255);
      switch (test_rand(&rng) % 3) {
      case 0: T_SPOOL(sh, spool_alloc(sh->pool, &b.p, b.n, b.stream)); break;
      case 1: T_SPOOL(sh, SPOOL_ALLOC(sh->pool, &b.p, b.n, b.stream)); break;
      default: T_SPOOL(sh, spool_alloc_tagged(sh->pool, &b.p, b.n, b.stream, "check_threads"));
      }
      T_CHECK(sh, b.p != NULL, "allocation of %zu bytes gave NULL", b.n);
      T_CUDA(sh, cudaMemsetAsync(b.p, b.mark, touched(&b), b.stream));
      atomic_fetch_add(&sh->allocs, 1);
      atomic_fetch_add(&sh->bytes, (unsigned long long)b.n);
      live[nlive++] = b;
    } else if (r < 60 && nlive > 0) { /* hand one to whichever thread pops it */
      int k = (int)(test_rand(&rng) % (uint64_t)nlive);
      if (queue_push(sh, live[k])) {
        live[k] = live[--nlive];
        atomic_fetch_add(&sh->handed, 1);
      }
    } else if (r < 75) { /* free one another thread allocated (or this one, earlier) */
      if (queue_pop(sh, &b) &&
          free_buf(sh, &b, own, ev, test_rand(&rng) % 4 == 0, (int)(test_rand(&rng) % 2)) != 0)
        break;
    } else if (nlive > 0) { /* free one of its own, sometimes on the other stream */
      int k = (int)(test_rand(&rng) % (uint64_t)nlive);
      b = live[k];
      live[k] = live[--nlive];
      cudaStream_t other = b.stream == own ? sh->shared_stream : own;
      if (free_buf(sh, &b, other, ev, test_rand(&rng) % 4 == 0, (int)(test_rand(&rng) % 2)) != 0)
        break;
    }
  }
  while (nlive > 0) {
    b = live[--nlive];
    if (free_buf(sh, &b, own, ev, 0, 0) != 0) break;
  }
  T_CUDA(sh, cudaStreamSynchronize(own));
  T_CUDA(sh, cudaEventDestroy(ev));
  return 0;
}

static void *worker(void *arg) {
  worker_arg *a = arg;
  (void)work(a->sh, a->id);
  atomic_fetch_sub(&a->sh->workers_running, 1);
  return NULL;
}

/* ---- the monitors ---------------------------------------------------------------------------- */

static int monitor_round(shared *sh, int id, unsigned long long round, FILE *out) {
  spool_stats st;
  memset(&st, 0xEE, sizeof st);
  T_SPOOL(sh, spool_stats_get(sh->pool, &st));
  T_CHECK(sh, st.size == sizeof st, "stats size %zu", st.size);
  /* One snapshot of the library's counters is consistent, whatever runs meanwhile. */
  T_CHECK(sh, st.allocs >= st.frees && st.allocs - st.frees == st.buffers_in_use,
          "allocs %llu - frees %llu != buffers_in_use %llu", (unsigned long long)st.allocs,
          (unsigned long long)st.frees, (unsigned long long)st.buffers_in_use);
  T_CHECK(sh, st.buffers_in_use_peak >= st.buffers_in_use && st.bytes_in_use_peak >= st.bytes_in_use,
          "a peak below its current value (buffers %llu/%llu, bytes %llu/%llu)",
          (unsigned long long)st.buffers_in_use, (unsigned long long)st.buffers_in_use_peak,
          (unsigned long long)st.bytes_in_use, (unsigned long long)st.bytes_in_use_peak);
  T_CHECK(sh, st.bytes_allocated >= st.bytes_in_use, "bytes_allocated %llu < bytes_in_use %llu",
          (unsigned long long)st.bytes_allocated, (unsigned long long)st.bytes_in_use);
  T_CHECK(sh, st.alloc_failures == 0 && st.bad_frees == 0,
          "alloc_failures %llu, bad_frees %llu", (unsigned long long)st.alloc_failures,
          (unsigned long long)st.bad_frees);
  if (id == 0) {
    if (round % 4 == 0) T_SPOOL(sh, spool_report(sh->pool, out));
  } else {
    if (round % 2 == 0) T_SPOOL(sh, spool_trim(sh->pool, 0));
    if (round % 8 == 1) T_SPOOL(sh, spool_stats_reset_peaks(sh->pool));
  }
  return 0;
}

typedef struct monitor_arg {
  shared *sh;
  int id;
  FILE *out;
} monitor_arg;

static void *monitor(void *arg) {
  monitor_arg *a = arg;
  unsigned long long round = 0;
  while (atomic_load(&a->sh->workers_running) > 0 && !has_failed(a->sh)) {
    if (monitor_round(a->sh, a->id, round++, a->out) != 0) break;
    atomic_fetch_add(&a->sh->monitor_rounds, 1);
    sched_yield();
  }
  return NULL;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static const spool_track track_levels[] = {SPOOL_TRACK_COUNTS, SPOOL_TRACK_FULL, SPOOL_TRACK_OFF};

/* Workers on their own streams and a shared one, buffers freed by other threads and on other
 * streams, monitors meanwhile; loop over the tracking levels. */
START_TEST(threads_alloc_free_monitor) {
  spool_config cfg = test_config();
  cfg.track = track_levels[_i];
  spool_pool *pool = test_pool_create(&cfg);
  shared *sh = calloc(1, sizeof *sh);
  ck_assert_ptr_nonnull(sh);
  shared_init(sh, pool);
  FILE *out = tmpfile();
  ck_assert_ptr_nonnull(out);

  pthread_t w[NWORKERS], m[NMONITORS];
  worker_arg wa[NWORKERS];
  monitor_arg ma[NMONITORS];
  atomic_store(&sh->workers_running, NWORKERS);
  for (int i = 0; i < NMONITORS; i++) {
    ma[i] = (monitor_arg){sh, i, out};
    ck_assert_int_eq(pthread_create(&m[i], NULL, monitor, &ma[i]), 0);
  }
  for (int i = 0; i < NWORKERS; i++) {
    wa[i] = (worker_arg){sh, i};
    ck_assert_int_eq(pthread_create(&w[i], NULL, worker, &wa[i]), 0);
  }
  for (int i = 0; i < NWORKERS; i++) ck_assert_int_eq(pthread_join(w[i], NULL), 0);
  for (int i = 0; i < NMONITORS; i++) ck_assert_int_eq(pthread_join(m[i], NULL), 0);
  ck_assert_msg(!sh->failed, "%s", sh->error);

  /* What is still in transit: freed by this thread, on the stream each was allocated on. */
  buf b;
  cudaEvent_t ev;
  CK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  while (queue_pop(sh, &b)) ck_assert_int_eq(free_buf(sh, &b, b.stream, ev, 0, 0), 0);
  ck_assert_msg(!sh->failed, "%s", sh->error);
  CK_CUDA(cudaEventDestroy(ev));
  CK_CUDA(cudaStreamSynchronize(sh->shared_stream));

  unsigned long long allocs = atomic_load(&sh->allocs), frees = atomic_load(&sh->frees);
  ck_assert_uint_eq(allocs, frees);
  ck_assert_uint_gt(allocs, (unsigned long long)NWORKERS * (unsigned long long)sh->ops / 4);
  ck_assert_uint_gt(atomic_load(&sh->handed), 0);
  ck_assert_uint_gt(atomic_load(&sh->cross_stream), 0);
  ck_assert_uint_gt(atomic_load(&sh->monitor_rounds), 0);
  ck_assert_int_gt(ftell(out), 0); /* the reports were written */
  fclose(out);

  spool_stats st = test_stats(pool);
  ck_assert_uint_eq(st.allocs, allocs);
  ck_assert_uint_eq(st.frees, frees);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.bytes_allocated, atomic_load(&sh->bytes));
  ck_assert_uint_eq(st.alloc_failures, 0);
  ck_assert_uint_eq(st.bad_frees, 0); /* (no peak check: a monitor may have reset them last) */

  test_pool_destroy(pool); /* SPOOL_OK: no leaks */
  shared_fini(sh);
  free(sh);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif
}
END_TEST

/* Two threads free the same pointer at once, many times: exactly one free succeeds, the other
 * is refused before it reaches the driver, and the counters say so. */
#define RACE_ROUNDS 200

typedef struct race {
  shared *sh;
  pthread_barrier_t start, done;
  void *p;
  spool_status got[2];
  int stop;
} race;

typedef struct race_arg {
  race *r;
  int id;
} race_arg;

static void *racer(void *arg) {
  race_arg *a = arg;
  race *r = a->r;
  for (;;) {
    pthread_barrier_wait(&r->start);
    if (r->stop) break;
    r->got[a->id] = spool_free(r->sh->pool, r->p, r->sh->shared_stream);
    pthread_barrier_wait(&r->done);
  }
  return NULL;
}

START_TEST(threads_double_free_race) {
  spool_config cfg = test_config();
  cfg.track = SPOOL_TRACK_COUNTS;
  spool_pool *pool = test_pool_create(&cfg);
  shared *sh = calloc(1, sizeof *sh);
  race *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(sh);
  ck_assert_ptr_nonnull(r);
  shared_init(sh, pool);
  r->sh = sh;
  ck_assert_int_eq(pthread_barrier_init(&r->start, NULL, 3), 0);
  ck_assert_int_eq(pthread_barrier_init(&r->done, NULL, 3), 0);
  pthread_t t[2];
  race_arg ra[2] = {{r, 0}, {r, 1}};
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, racer, &ra[i]), 0);

  int bad = 0, twice = 0, never = 0;
  spool_status refused = SPOOL_OK;
  for (int round = 0; round < RACE_ROUNDS; round++) {
    r->p = NULL;
    if (spool_alloc(pool, &r->p, 256 + (size_t)round, sh->shared_stream) != SPOOL_OK) bad++;
    pthread_barrier_wait(&r->start);
    pthread_barrier_wait(&r->done);
    int ok = (r->got[0] == SPOOL_OK) + (r->got[1] == SPOOL_OK);
    if (ok == 2) twice++;
    if (ok == 0) never++;
    if (ok == 1) refused = r->got[0] == SPOOL_OK ? r->got[1] : r->got[0];
  }
  r->stop = 1;
  pthread_barrier_wait(&r->start);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  pthread_barrier_destroy(&r->start);
  pthread_barrier_destroy(&r->done);

  ck_assert_int_eq(bad, 0);
  ck_assert_msg(twice == 0, "%d of %d pointers were freed twice", twice, RACE_ROUNDS);
  ck_assert_msg(never == 0, "%d of %d pointers were not freed at all", never, RACE_ROUNDS);
  ck_assert_msg(refused != SPOOL_OK && refused != SPOOL_ERR_INVALID,
                "the second free returned %s", spool_status_name(refused));
  CK_CUDA(cudaStreamSynchronize(sh->shared_stream));
  spool_stats st = test_stats(pool);
  ck_assert_uint_eq(st.allocs, RACE_ROUNDS);
  ck_assert_uint_eq(st.frees, RACE_ROUNDS);
  ck_assert_uint_eq(st.bad_frees, RACE_ROUNDS);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  test_pool_destroy(pool);
  shared_fini(sh);
  free(r);
  free(sh);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
}
END_TEST

/* Threads each with a pool of their own, created, used and destroyed at the same time. */
static int own_pool(shared *sh, int id) {
  spool_config cfg;
  spool_config_init(&cfg);
  cfg.track = track_levels[id % 3];
  spool_pool *pool = NULL;
  cudaStream_t s = sh->own[id];
  void *live[8] = {NULL};
  uint64_t rng = (uint64_t)id * 7919u + 17u;
  T_SPOOL(sh, spool_pool_create(&pool, &cfg));
  for (long i = 0; i < sh->ops / 4; i++) {
    int k = (int)(test_rand(&rng) % 8);
    if (live[k] == NULL) {
      T_SPOOL(sh, spool_alloc(pool, &live[k], test_rand_size(&rng, 256 * KiB), s));
    } else {
      T_SPOOL(sh, spool_free(pool, live[k], s));
      live[k] = NULL;
    }
  }
  for (int k = 0; k < 8; k++) T_SPOOL(sh, spool_free(pool, live[k], s));
  T_CUDA(sh, cudaStreamSynchronize(s));
  spool_stats st;
  T_SPOOL(sh, spool_stats_get(pool, &st));
  T_CHECK(sh, st.allocs == st.frees && st.buffers_in_use == 0 && st.bytes_in_use == 0,
          "pool %d: allocs %llu, frees %llu, buffers_in_use %llu, bytes_in_use %llu", id,
          (unsigned long long)st.allocs, (unsigned long long)st.frees,
          (unsigned long long)st.buffers_in_use, (unsigned long long)st.bytes_in_use);
  T_SPOOL(sh, spool_pool_destroy(pool));
  return 0;
}

static void *own_pool_thread(void *arg) {
  worker_arg *a = arg;
  (void)own_pool(a->sh, a->id);
  return NULL;
}

START_TEST(threads_pool_each) {
  shared *sh = calloc(1, sizeof *sh);
  ck_assert_ptr_nonnull(sh);
  shared_init(sh, NULL);
  pthread_t t[NWORKERS];
  worker_arg wa[NWORKERS];
  for (int i = 0; i < NWORKERS; i++) {
    wa[i] = (worker_arg){sh, i};
    ck_assert_int_eq(pthread_create(&t[i], NULL, own_pool_thread, &wa[i]), 0);
  }
  for (int i = 0; i < NWORKERS; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  ck_assert_msg(!sh->failed, "%s", sh->error);
  shared_fini(sh);
  free(sh);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif
}
END_TEST

static Suite *threads_suite(void) {
  Suite *s = suite_create("threads");
  TCase *tc = test_tcase("threads");
  tcase_add_loop_test(tc, threads_alloc_free_monitor, 0,
                      (int)(sizeof track_levels / sizeof track_levels[0]));
  tcase_add_test(tc, threads_double_free_race);
  tcase_add_test(tc, threads_pool_each);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_main(threads_suite()); }
