/* check_host_faults: every host allocation spool makes in a workload, failed in turn. The
 * executable is linked with --wrap for malloc, calloc, realloc and aligned_alloc, so spool's
 * calls of them come here (cudasim's own, inside a simulated call, pass untouched). A clean run
 * of each workload below counts spool's allocations (allocations and frees on two streams and
 * across them, many small blocks, a batch, the hand-off, a scope, stats, the reports, trim, a
 * stream's release; and a pool's creation); then, for each of them, a fresh run makes
 * exactly that one fail and checks what spool promises of a call that ran out of host memory:
 *  - it returns SPOOL_OK (spool did without) or SPOOL_ERR_HOST_OOM with a message that says so;
 *    a failed allocation hands out NULL;
 *  - the heap's invariants hold after every call (spool__heap_check);
 *  - everything the workload was handed can be freed afterwards, after which bytes_in_use and
 *    buffers_in_use are 0 and spool_pool_destroy returns SPOOL_OK.
 * Sim only: the hook and the heap check are the test build's. */
#include "test_main.h"

#include "internal.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);

/* ---- the hook ------------------------------------------------------------------------------ */

static bool counting; /* inside a spool call of the workload: its allocations are counted */
static long seen;     /* spool's allocations in the run so far */
static long fail_at;  /* the one to fail (1 = the first), 0: none */

/* A spool call of the workload, its allocations counted (Check's own, between the calls, are
 * not: a test that failed in Check would test nothing). */
#define COUNTED(call)                                                                         \
  __extension__({                                                                             \
    counting = true;                                                                          \
    spool_status counted_st_ = (call);                                                        \
    counting = false;                                                                         \
    counted_st_;                                                                              \
  })

/* Whether this allocation is the one to fail. */
static bool fails(void) {
  if (!counting || cudasim_inside()) return false;
  return ++seen == fail_at;
}

void *__wrap_malloc(size_t size) { return fails() ? NULL : __real_malloc(size); }
void *__wrap_calloc(size_t n, size_t size) { return fails() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t size) { return fails() ? NULL : __real_realloc(p, size); }
void *__wrap_aligned_alloc(size_t align, size_t size) {
  return fails() ? NULL : __real_aligned_alloc(align, size);
}

/* ---- a workload run ------------------------------------------------------------------------ */

#define HELD_MAX 400
#define MANY 300 /* small blocks: more records than one slab holds */

typedef struct run {
  spool_pool *pool;
  cudaStream_t s1, s2;
  cudaEvent_t ev; /* for spool_free_after */
  void *held[HELD_MAX];
  cudaStream_t on[HELD_MAX]; /* the stream each was allocated on */
  int n;
  long host_ooms; /* calls that returned SPOOL_ERR_HOST_OOM */
} run;

static void heap_ok(const run *r, const char *after) {
  char why[256];
  ck_assert_msg(spool__heap_check(r->pool, why, sizeof why), "after %s: heap: %s", after, why);
}

/* A call of the workload: SPOOL_OK, or SPOOL_ERR_HOST_OOM that says what ran short. */
static void judged(run *r, spool_status st, const char *what) {
  if (st == SPOOL_ERR_HOST_OOM) {
    r->host_ooms++;
    ck_assert_msg(strstr(spool_last_error(), "host memory") != NULL,
                  "%s: SPOOL_ERR_HOST_OOM without saying so: %s", what, spool_last_error());
  } else {
    ck_assert_msg(st == SPOOL_OK, "%s returned %s, expected SPOOL_OK or SPOOL_ERR_HOST_OOM: %s",
                  what, spool_status_name(st), spool_last_error());
  }
  heap_ok(r, what);
}

static void alloc_on(run *r, size_t size, cudaStream_t s) {
  void *p = TEST_SENTINEL;
  spool_status st = COUNTED(spool_alloc(r->pool, &p, size, s));
  judged(r, st, "spool_alloc");
  if (st != SPOOL_OK) {
    ck_assert_ptr_null(p);
    return;
  }
  ck_assert_int_lt(r->n, HELD_MAX);
  r->held[r->n] = p;
  r->on[r->n++] = s;
}

/* Frees held[i] on s (its own stream or another); a refused free keeps it held. */
static void free_on(run *r, int i, cudaStream_t s) {
  spool_status st = COUNTED(spool_free(r->pool, r->held[i], s));
  judged(r, st, "spool_free");
  if (st != SPOOL_OK) return;
  r->held[i] = r->held[--r->n];
  r->on[i] = r->on[r->n];
}

/* Sizes over the heap's bands, the uncached path (above heap_max_block) and the fronts. */
static const size_t SIZES[] = {512,      4 * KiB, 64 * KiB, 700 * KiB, 1 * MiB,
                               3 * MiB,  8 * KiB, 40 * MiB, 256,       2 * MiB,
                               96 * KiB, 12 * MiB};
#define NSIZES (sizeof SIZES / sizeof *SIZES)

/* What keeps records of its own: a batch, the hand-off (spool_record_stream, spool_free_after)
 * and a scope. */
static void extras(run *r) {
  size_t sizes[4] = {4 * KiB, 0, 64 * KiB, 1 * MiB};
  void *ptrs[4];
  spool_status st = COUNTED(spool_alloc_batch(r->pool, r->s1, 4, sizes, ptrs, 4096));
  judged(r, st, "spool_alloc_batch");
  if (st == SPOOL_OK) {
    r->held[r->n] = ptrs[0];
    r->on[r->n++] = r->s1;
  }
  if (r->n) {
    judged(r, COUNTED(spool_record_stream(r->pool, r->held[0], r->s2)), "spool_record_stream");
    free_on(r, 0, r->on[0]);
  }
  if (r->n) {
    int last = r->n - 1;
    CK_CUDA(cudaEventRecord(r->ev, r->s2));
    st = COUNTED(spool_free_after(r->pool, r->held[last], r->on[last], r->ev));
    judged(r, st, "spool_free_after");
    if (st == SPOOL_OK) r->n--;
  }
  spool_scope *sc = NULL;
  st = COUNTED(spool_scope_begin(r->pool, r->s1, &sc));
  judged(r, st, "spool_scope_begin");
  if (st != SPOOL_OK) return;
  for (int i = 0; i < 3; i++) {
    void *q = TEST_SENTINEL;
    judged(r, COUNTED(spool_scope_alloc(sc, &q, 300 * KiB)), "spool_scope_alloc");
  }
  st = COUNTED(spool_scope_end(sc));
  judged(r, st, "spool_scope_end");
  if (st != SPOOL_OK) CK_SPOOL(spool_scope_end(sc)); /* the one failure is spent */
}

/* Allocations on two streams, frees on their own stream and on the other, a second round that
 * hits and misses the fronts, many small blocks carved side by side, stats, a trim and a
 * stream's release. */
static void workload(run *r) {
  for (size_t i = 0; i < 24; i++) alloc_on(r, SIZES[i % NSIZES], i % 2 ? r->s2 : r->s1);
  int first = r->n;
  for (int i = 0; i < MANY; i++) alloc_on(r, 4 * KiB + (size_t)(i % 7) * 512, r->s1);
  for (int i = r->n - 1; i >= first; i--) free_on(r, i, r->s1);
  for (int i = r->n - 1; i >= 0; i -= 2) {
    cudaStream_t other = r->on[i] == r->s1 ? r->s2 : r->s1;
    free_on(r, i, i % 4 == 1 ? other : r->on[i]);
  }
  for (size_t i = 0; i < 16; i++) alloc_on(r, SIZES[(i * 5) % NSIZES], i % 3 ? r->s1 : r->s2);
  spool_stats st;
  st.size = sizeof st;
  judged(r, COUNTED(spool_stats_get(r->pool, &st)), "spool_stats_get");
  FILE *sink = fopen("/dev/null", "w");
  ck_assert_ptr_nonnull(sink);
  judged(r, COUNTED(spool_report(r->pool, sink)), "spool_report");
  judged(r, COUNTED(spool_leaks(r->pool, sink)), "spool_leaks");
  fclose(sink);
  char json[8192];
  judged(r, COUNTED(spool_stats_json(r->pool, json, sizeof json)), "spool_stats_json");
  extras(r);
  judged(r, COUNTED(spool_trim(r->pool, 0)), "spool_trim");
  for (int i = r->n - 1; i >= 0; i -= 3) free_on(r, i, r->on[i]);
  judged(r, COUNTED(spool_stream_release(r->pool, r->s2)), "spool_stream_release");
}

/* One run with the fail_at-th allocation failed (0: none); returns spool's allocations. */
static long one_run(const char *config, long nth, long *host_ooms) {
  run r = {0};
  r.pool = test_pool_with(config);
  r.s1 = test_stream_create();
  r.s2 = test_stream_create();
  CK_CUDA(cudaEventCreateWithFlags(&r.ev, cudaEventDisableTiming));
  seen = 0;
  fail_at = nth;
  workload(&r);
  long made = seen;
  fail_at = 0;
  for (int i = 0; i < r.n; i++) CK_SPOOL(spool_free(r.pool, r.held[i], r.on[i]));
  heap_ok(&r, "the frees after the run");
  spool_stats st = test_stats(r.pool);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  test_pool_destroy(r.pool);
  CK_CUDA(cudaEventDestroy(r.ev));
  test_stream_destroy(r.s1);
  test_stream_destroy(r.s2);
  *host_ooms = r.host_ooms;
  return made;
}

static const char *const CONFIGS[] = {
    NULL,                            /* the defaults */
    "front_limit=0, chunk_idle=0",   /* every free into the heap, chunks back at once */
    "poison=on, quarantine=4",       /* the quarantine ring */
    "track=full",                    /* sites and clocks */
};
#define NCONFIGS (sizeof CONFIGS / sizeof *CONFIGS)

START_TEST(every_failed_host_allocation_leaves_the_pool_whole) {
  const char *config = CONFIGS[_i];
  long ooms = 0, reported = 0;
  long made = one_run(config, 0, &ooms);
  ck_assert_int_eq(ooms, 0);
  ck_assert_int_gt(made, 0); /* the workload makes host allocations: the sweep has work */
  for (long k = 1; k <= made; k++) {
    one_run(config, k, &ooms);
    reported += ooms;
  }
  printf("host fault sweep: %-30s %3ld allocations failed in turn, %3ld reported as "
         "SPOOL_ERR_HOST_OOM, the rest done without; all ok\n",
         config ? config : "defaults", made, reported);
  fflush(stdout);
}
END_TEST

/* A pool that cannot be made for want of host memory is not made, and leaves nothing behind:
 * no pool in cudasim, and the next create succeeds. */
START_TEST(a_pool_create_without_host_memory_leaves_nothing) {
  long made = -1;
  for (long k = 0; k == 0 || k <= made; k++) { /* k 0: the clean run, which counts */
    spool_config cfg = test_config();
    spool_pool *p = TEST_SENTINEL;
    seen = 0;
    fail_at = k;
    spool_status st = COUNTED(spool_pool_create(&p, &cfg));
    fail_at = 0;
    if (k == 0) {
      made = seen;
      ck_assert_int_gt(made, 0);
    }
    if (st == SPOOL_OK) {
      test_pool_destroy(p);
      continue;
    }
    CK_STATUS(st, SPOOL_ERR_HOST_OOM);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(cudasim_pool_count(), 0);
  }
  printf("host fault sweep: spool_pool_create              %3ld allocations failed in turn\n",
         made);
  fflush(stdout);
}
END_TEST

/* A carve that finds no host memory for its block's record (the slab of records is full and a
 * new one cannot be had) leaves the range it was cutting as it was, its chunk still listed as
 * empty, and the allocation is served from a new chunk. The sweep over k puts the full slab at
 * the carve of an empty chunk for one k at least. */
START_TEST(a_carve_without_host_memory_leaves_its_chunk_as_it_was) {
  for (int k = 240; k <= 272; k++) {
    run r = {0};
    r.pool = test_pool_with("front_limit=0, chunk_idle=1000000");
    r.s1 = test_stream_create();
    void *a = test_alloc_on(r.pool, 3 * MiB, r.s1);
    CK_SPOOL(spool_free(r.pool, a, r.s1)); /* its chunk: one free range, listed as empty */
    for (int i = 0; i < k; i++) alloc_on(&r, 4 * KiB, r.s1); /* records, one by one */
    seen = 0;
    fail_at = 1;
    alloc_on(&r, 3 * MiB, r.s1); /* carves the empty chunk, unless its record fails */
    fail_at = 0;
    heap_ok(&r, "the carve");
    for (int i = 0; i < r.n; i++) CK_SPOOL(spool_free(r.pool, r.held[i], r.on[i]));
    heap_ok(&r, "the frees");
    test_pool_destroy(r.pool);
    test_stream_destroy(r.s1);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("host_faults");
  TCase *tc = test_tcase("sweep");
  tcase_add_loop_test(tc, every_failed_host_allocation_leaves_the_pool_whole, 0, (int)NCONFIGS);
  tcase_add_test(tc, a_carve_without_host_memory_leaves_its_chunk_as_it_was);
  tcase_add_test(tc, a_pool_create_without_host_memory_leaves_nothing);
  suite_add_tcase(s, tc);
  return test_main(s);
}
