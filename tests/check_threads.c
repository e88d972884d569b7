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

/* ---- two pools' locks at once ------------------------------------------------------------------
 * For the TSan gate: every path that holds a pool's lock and then another's, or the registry's
 * lock and then a pool's, at the same time as the others. Two threads free each other's buffers
 * through the wrong pool (refused: the refusal walks the registry and locks the other pool,
 * while that pool's own thread allocates and frees in it), then through the right one; a third
 * thread creates and destroys a pool over and over (the registry changes under the walks), and
 * frees through it and into it the wrong way; (sim only) a fourth allocates on a full device, so
 * that the out-of-memory path trims every pool of the device (registry, then pool handles) and
 * calls a handler that frees and trims. Everything is counted, so the counters are exact. */
#define XP_ROUNDS 40
#define XP_BUFS 16
#define XP_THIRD_MIN 20   /* rounds of the third pool at least ... */
#define XP_THIRD_MAX 400  /* ... and at most */
#define XP_OOM_ROUNDS 40
#define XP_OOM_SIZE (2 * MiB)

typedef struct xpool {
  shared *sh; /* the first failure; own[0..2]: the streams of pools 0, 1 and the third */
  spool_pool *pool[2];
  void *pinned[2];                 /* live in pool i from start to end */
  void *bufs[2][XP_BUFS];          /* this round's buffers of pool i */
  pthread_barrier_t barrier;       /* the two cross threads */
  atomic_int busy;                 /* cross and OOM threads still running */
  unsigned long long third_wrong[2]; /* refused frees the third thread made through pool i */
  unsigned long long third_rounds;
  /* sim: the OOM thread */
  spool_pool *full;                /* on device 1, which has room for 2 of its buffers */
  cudaStream_t full_stream;
  void *held[2];
  int handler_slot;                /* the buffer the handler gives back next */
  int handler_calls;
} xpool;

/* In a thread that must go on (the other thread waits at a barrier): record, do not return. */
#define X_CHECK(sh, cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) record((sh), __LINE__, __VA_ARGS__);                                         \
  } while (0)
#define X_STATUS(sh, call, want)                                                              \
  do {                                                                                        \
    spool_status x_st_ = (call);                                                              \
    X_CHECK(sh, x_st_ == (want), "%s returned %s, expected %s", #call,                        \
            spool_status_name(x_st_), spool_status_name(want));                               \
  } while (0)

static size_t xp_size(int k) { return 512 + (size_t)k * 256; }

typedef struct xp_arg {
  xpool *x;
  int id;
} xp_arg;

static void *xp_cross(void *arg) {
  xp_arg *a = arg;
  xpool *x = a->x;
  shared *sh = x->sh;
  int me = a->id, other = 1 - me;
  cudaStream_t mine = sh->own[me], theirs = sh->own[other];
  for (int r = 0; r < XP_ROUNDS; r++) {
    for (int k = 0; k < XP_BUFS; k++) {
      x->bufs[me][k] = NULL;
      X_STATUS(sh, spool_alloc(x->pool[me], &x->bufs[me][k], xp_size(k), mine), SPOOL_OK);
    }
    pthread_barrier_wait(&x->barrier);
    /* The other pool's buffers: refused by this pool (start and inside), then freed by theirs
     * on the stream they were allocated on, while the other thread does the same to ours. */
    for (int k = 0; k < XP_BUFS; k++) {
      char *b = x->bufs[other][k];
      X_STATUS(sh, spool_free(x->pool[me], b, mine), SPOOL_ERR_WRONG_POOL);
      X_STATUS(sh, spool_free(x->pool[me], b + xp_size(k) - 1, mine), SPOOL_ERR_WRONG_POOL);
      X_STATUS(sh, spool_free(x->pool[other], b, theirs), SPOOL_OK);
    }
    pthread_barrier_wait(&x->barrier);
  }
  atomic_fetch_sub(&x->busy, 1);
  return NULL;
}

/* A pool created, used the wrong way round, and destroyed, again and again. */
static int xp_third_round(xpool *x, unsigned long long r) {
  shared *sh = x->sh;
  cudaStream_t s = sh->own[2];
  spool_config cfg;
  spool_config_init(&cfg);
  cfg.track = r % 2 ? SPOOL_TRACK_FULL : SPOOL_TRACK_COUNTS;
  spool_pool *c = NULL;
  T_SPOOL(sh, spool_pool_create(&c, &cfg));
  void *b = NULL;
  T_SPOOL(sh, spool_alloc(c, &b, 4096, s));
  spool_status st = spool_free(c, x->pinned[r % 2], s);
  T_CHECK(sh, st == SPOOL_ERR_WRONG_POOL, "pinned buffer through the third pool: %s",
          spool_status_name(st));
  st = spool_free(c, (char *)x->pinned[(r + 1) % 2] + 8, s);
  T_CHECK(sh, st == SPOOL_ERR_WRONG_POOL, "inside the pinned buffer through the third pool: %s",
          spool_status_name(st));
  /* The third pool's buffer through pool 0 or 1: their lock, then the registry and this one's. */
  st = spool_free(x->pool[r % 2], b, s);
  T_CHECK(sh, st == SPOOL_ERR_WRONG_POOL, "third pool's buffer through pool %d: %s", (int)(r % 2),
          spool_status_name(st));
  x->third_wrong[r % 2]++;
  T_SPOOL(sh, spool_free(c, b, s));
  T_SPOOL(sh, spool_pool_destroy(c));
  return 0;
}

static void *xp_third(void *arg) {
  xpool *x = arg;
  for (unsigned long long r = 0; r < XP_THIRD_MAX && !has_failed(x->sh); r++) {
    if (r >= XP_THIRD_MIN && atomic_load(&x->busy) == 0) break;
    if (xp_third_round(x, r) != 0) break;
    x->third_rounds = r + 1;
  }
  return NULL;
}

#ifdef SPOOL_TEST_SIM
/* Gives back the older of the two buffers held and trims; no asserts here (spool runs it). */
static int xp_handler(spool_pool *pool, size_t bytes, cudaStream_t stream, void *user) {
  xpool *x = user;
  x->handler_calls++;
  void **slot = &x->held[x->handler_slot];
  X_CHECK(x->sh, bytes == XP_OOM_SIZE, "handler asked for %zu bytes", bytes);
  X_STATUS(x->sh, spool_free(pool, *slot, stream), SPOOL_OK);
  *slot = NULL;
  X_STATUS(x->sh, spool_trim(pool, 0), SPOOL_OK);
  return 1;
}

static void *xp_oom(void *arg) {
  xpool *x = arg;
  for (int r = 0; r < XP_OOM_ROUNDS && !has_failed(x->sh); r++) {
    void *z = NULL;
    spool_status st = spool_alloc(x->full, &z, XP_OOM_SIZE, x->full_stream);
    X_CHECK(x->sh, st == SPOOL_OK && z != NULL, "round %d: allocation after the handler: %s", r,
            spool_status_name(st));
    x->held[x->handler_slot] = z;
    x->handler_slot = 1 - x->handler_slot;
  }
  atomic_fetch_sub(&x->busy, 1);
  return NULL;
}
#endif

START_TEST(threads_two_pools_locks) {
#ifdef SPOOL_TEST_SIM
  cudasim_set_device_count(2);
  cudasim_set_capacity(1, 2 * XP_OOM_SIZE);
#endif
  xpool *x = calloc(1, sizeof *x);
  shared *sh = calloc(1, sizeof *sh);
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(sh);
  shared_init(sh, NULL);
  x->sh = sh;
  spool_config cfg = test_config();
  cfg.track = SPOOL_TRACK_COUNTS;
  x->pool[0] = test_pool_create(&cfg);
  cfg.track = SPOOL_TRACK_FULL;
  x->pool[1] = test_pool_create(&cfg);
  for (int i = 0; i < 2; i++) CK_SPOOL(spool_alloc(x->pool[i], &x->pinned[i], 4096, sh->own[i]));
  ck_assert_int_eq(pthread_barrier_init(&x->barrier, NULL, 2), 0);
  int threads = 2;
#ifdef SPOOL_TEST_SIM
  spool_config fc = test_config();
  fc.device = 1;
  fc.track = SPOOL_TRACK_COUNTS;
  x->full = test_pool_create(&fc);
  CK_CUDA(cudaSetDevice(1));
  x->full_stream = test_stream_create();
  CK_CUDA(cudaSetDevice(0));
  for (int i = 0; i < 2; i++)
    CK_SPOOL(spool_alloc(x->full, &x->held[i], XP_OOM_SIZE, x->full_stream));
  void *none = TEST_SENTINEL; /* the device is full now */
  CK_STATUS(spool_alloc(x->full, &none, XP_OOM_SIZE, x->full_stream), SPOOL_ERR_OOM);
  ck_assert_ptr_null(none);
  CK_SPOOL(spool_set_oom_handler(x->full, xp_handler, x));
  threads++;
#endif
  atomic_store(&x->busy, threads);

  pthread_t cross[2], third;
  xp_arg ca[2] = {{x, 0}, {x, 1}};
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(pthread_create(&cross[i], NULL, xp_cross, &ca[i]), 0);
  ck_assert_int_eq(pthread_create(&third, NULL, xp_third, x), 0);
#ifdef SPOOL_TEST_SIM
  pthread_t oom;
  ck_assert_int_eq(pthread_create(&oom, NULL, xp_oom, x), 0);
  ck_assert_int_eq(pthread_join(oom, NULL), 0);
#endif
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(cross[i], NULL), 0);
  ck_assert_int_eq(pthread_join(third, NULL), 0);
  pthread_barrier_destroy(&x->barrier);
  ck_assert_msg(!sh->failed, "%s", sh->error);
  ck_assert_uint_ge(x->third_rounds, XP_THIRD_MIN);
  ck_assert_uint_eq(x->third_wrong[0] + x->third_wrong[1], x->third_rounds);

  const uint64_t n = (uint64_t)XP_ROUNDS * XP_BUFS;
  uint64_t bytes = 4096;
  for (int k = 0; k < XP_BUFS; k++) bytes += (uint64_t)XP_ROUNDS * xp_size(k);
  for (int i = 0; i < 2; i++) {
    spool_stats st = test_stats(x->pool[i]);
    ck_assert_uint_eq(st.allocs, n + 1);
    ck_assert_uint_eq(st.frees, n);
    ck_assert_uint_eq(st.buffers_in_use, 1);
    ck_assert_uint_eq(st.bytes_in_use, 4096);
    ck_assert_uint_eq(st.bytes_allocated, bytes);
    ck_assert_uint_eq(st.bad_frees, 2 * n + x->third_wrong[i]);
    ck_assert_uint_eq(st.alloc_failures, 0);
    CK_SPOOL(spool_free(x->pool[i], x->pinned[i], sh->own[i]));
    CK_CUDA(cudaStreamSynchronize(sh->own[i]));
    test_pool_destroy(x->pool[i]); /* SPOOL_OK: no leaks */
  }
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(x->handler_calls, XP_OOM_ROUNDS);
  spool_stats st = test_stats(x->full);
  ck_assert_uint_eq(st.allocs, 2 + XP_OOM_ROUNDS);
  ck_assert_uint_eq(st.frees, XP_OOM_ROUNDS);
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.bytes_in_use, 2 * XP_OOM_SIZE);
  ck_assert_uint_eq(st.oom_handler_calls, XP_OOM_ROUNDS);
  ck_assert_uint_eq(st.oom_retries, 1 + XP_OOM_ROUNDS);    /* the one that failed above too */
  ck_assert_uint_eq(st.oom_recoveries, XP_OOM_ROUNDS);
  ck_assert_uint_eq(st.ooms, 1);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.trims, XP_OOM_ROUNDS);
  ck_assert_uint_eq(st.bad_frees, 0);
  for (int i = 0; i < 2; i++) CK_SPOOL(spool_free(x->full, x->held[i], x->full_stream));
  test_stream_destroy(x->full_stream);
  test_pool_destroy(x->full);
#endif
  shared_fini(sh);
  free(sh);
  free(x);
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
  tcase_add_test(tc, threads_two_pools_locks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_main(threads_suite()); }
