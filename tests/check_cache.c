/* check_cache: the per-stream fronts of the heap (src/front.c, src/heap.c): hits, size classes,
 * the cross-stream rule, capture bypass, per-thread and legacy streams, limits, flushes, stream
 * release, stats, and what tracking says about front blocks. The heap under them has its own
 * suite (check_heap).
 *
 * Built twice: check_cache_sim (cudasim) and check_cache_gpu (real CUDA). Tests outside
 * `#ifdef SPOOL_TEST_SIM` must hold on a real device too. Timing is the benchmark's business
 * (bench/), never a test's. */
#include "test_main.h"

#include <pthread.h>
#include <stdatomic.h>

#ifdef SPOOL_TEST_SIM
#include "../src/front.h" /* the quarantine ring, checked directly */
#endif

static spool_pool *pool_with(const char *text) {
  spool_config cfg = test_config();
  if (text) CK_SPOOL(spool_config_parse(&cfg, text));
  return test_pool_create(&cfg);
}

static void *alloc_on(spool_pool *p, size_t size, cudaStream_t s) {
  void *ptr = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &ptr, size, s));
  ck_assert_ptr_nonnull(ptr);
  ck_assert_ptr_ne(ptr, TEST_SENTINEL);
  return ptr;
}

/* Front hits, heap allocations, and the bytes the streams' fronts hold. */
static void check_cache_stats(spool_pool *p, uint64_t hits, uint64_t misses, uint64_t front) {
  spool_stats st = test_stats(p);
  ck_assert_msg(st.cache_hits == hits && st.cache_misses == misses && st.bytes_front == front,
                "hits %" PRIu64 " misses %" PRIu64 " front %" PRIu64 ", expected %" PRIu64
                " %" PRIu64 " %" PRIu64, st.cache_hits, st.cache_misses, st.bytes_front, hits,
                misses, front);
}

/* ---- hits and size classes ------------------------------------------------------------------ */

START_TEST(cache_hit_on_same_stream) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, MiB, s);
  check_cache_stats(p, 0, 1, 0);
  CK_SPOOL(spool_free(p, a, s));
  check_cache_stats(p, 0, 1, MiB);
  void *b = alloc_on(p, MiB, s);
  ck_assert_ptr_eq(a, b); /* stream order makes the reuse safe: no CUDA call needed */
  check_cache_stats(p, 1, 1, 0);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, MiB);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.frees, 1);
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* The fit of a stream that holds its buffers long (front_brief=off makes every stream such a
 * one; see cache_brief_stream_* for the others). */
START_TEST(cache_size_classes) {
  spool_pool *p = pool_with("front_brief=off");
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 1000, s); /* 1000 bytes take 1 KiB: the heap places at 512 B */
  CK_SPOOL(spool_free(p, a, s));
  check_cache_stats(p, 0, 1, KiB);
  void *b = alloc_on(p, 700, s); /* the same class: the same block */
  ck_assert_ptr_eq(a, b);
  CK_SPOOL(spool_free(p, b, s));
  /* An empty class borrows from the nearest front block up to twice its size, never more. */
  void *c = alloc_on(p, 300, s); /* class 512 B: takes the 1 KiB block */
  ck_assert_ptr_eq(c, a);
  CK_SPOOL(spool_free(p, c, s));
  /* A new chunk: the front's blocks go into the heap first (they may merge into what is
   * asked). Past front_limit (1 MiB) the front keeps one block of the size the stream allocated
   * last, whatever its size, while the stream asks that size again. */
  void *d = alloc_on(p, 5 * MiB + 1, s);
  CK_SPOOL(spool_free(p, d, s));
  check_cache_stats(p, 2, 2, 5 * MiB + 512);
  void *d2 = alloc_on(p, 5 * MiB + 1, s); /* the same size: a hit */
  ck_assert_ptr_eq(d2, d);
  CK_SPOOL(spool_free(p, d2, s));
  check_cache_stats(p, 3, 2, 5 * MiB + 512);
  void *e = alloc_on(p, 600 * KiB, s); /* another size: a miss, and d goes into the heap */
  check_cache_stats(p, 3, 3, 0);
  CK_SPOOL(spool_free(p, e, s)); /* within front_limit: into the front */
  check_cache_stats(p, 3, 3, 600 * KiB);
  void *f = alloc_on(p, 5 * MiB + 1, s); /* from the heap, where d merged back */
  ck_assert_ptr_eq(f, d);
  check_cache_stats(p, 3, 4, 600 * KiB);
  CK_SPOOL(spool_free(p, f, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* ---- streams of brief buffers -------------------------------------------------------------- */

/* A stream that frees each buffer before its next allocation, of ever-changing sizes, keeps its
 * largest block in its front and serves every size down to 1/128 of it from there: a hit each. */
START_TEST(cache_brief_stream_serves_smaller_sizes_from_its_largest_block) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *big = alloc_on(p, 8 * MiB, s);
  CK_SPOOL(spool_free(p, big, s)); /* past front_limit, within the stream's peak in use */
  check_cache_stats(p, 0, 1, 8 * MiB);
  const size_t sizes[] = {5 * MiB, 300 * KiB, 64 * KiB + 1, 2 * MiB, 8 * MiB};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *q = alloc_on(p, sizes[i], s);
    ck_assert_ptr_eq(q, big);
    CK_SPOOL(spool_free(p, q, s));
  }
  check_cache_stats(p, 5, 1, 8 * MiB);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A block more than 128 times the size asked is left alone (it ages out of the front if the
 * stream no longer asks sizes near it), and so is every larger block with front_brief=off. */
START_TEST(cache_brief_stream_leaves_a_far_larger_block_alone) {
  for (int off = 0; off < 2; off++) {
    spool_pool *p = pool_with(off ? "front_brief=off" : NULL);
    cudaStream_t s = test_stream_create();
    void *big = alloc_on(p, 8 * MiB, s);
    CK_SPOOL(spool_free(p, big, s));
    void *q = alloc_on(p, off ? MiB : 32 * KiB, s); /* 8x (off) or 256x smaller: a miss */
    ck_assert_uint_eq(test_stats(p).cache_misses, 2);
    ck_assert_uint_eq(test_stats(p).cache_hits, 0);
    CK_SPOOL(spool_free(p, q, s));
    test_pool_destroy(p);
    test_stream_destroy(s);
  }
}
END_TEST

/* A stream with more than four buffers live is no brief one, whatever their lives: a block
 * that would outlive its need could pin memory many times its size. It takes front blocks
 * within twice the size asked, and its front keeps to front_limit. */
START_TEST(cache_stream_holding_many_buffers_takes_blocks_within_twice_the_size) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *live[5];
  for (int i = 0; i < 5; i++) live[i] = alloc_on(p, 4 * KiB, s);
  void *big = alloc_on(p, 8 * MiB, s);
  CK_SPOOL(spool_free(p, big, s)); /* the size asked last: kept, the one block past the limit */
  check_cache_stats(p, 0, 6, 8 * MiB);
  void *q = alloc_on(p, MiB, s); /* 8x smaller: a miss, and the kept block goes to the heap */
  check_cache_stats(p, 0, 7, 0);
  CK_SPOOL(spool_free(p, q, s));
  for (int i = 0; i < 5; i++) CK_SPOOL(spool_free(p, live[i], s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A brief stream's front keeps, past front_limit, up to the stream's own peak of bytes in use:
 * its working set, ready; front_brief=off keeps it to front_limit and the one block of the
 * size asked last. */
START_TEST(cache_brief_front_keeps_the_working_set_past_front_limit) {
  for (int off = 0; off < 2; off++) {
    spool_pool *p = pool_with(off ? "front_brief=off" : NULL);
    cudaStream_t s = test_stream_create();
    for (int round = 0; round < 3; round++) {
      void *a = alloc_on(p, 3 * MiB, s), *b = alloc_on(p, 2 * MiB, s);
      CK_SPOOL(spool_free(p, a, s));
      CK_SPOOL(spool_free(p, b, s));
    }
    spool_stats st = test_stats(p);
    ck_assert_uint_eq(st.bytes_front, off ? 2 * MiB : 5 * MiB);
    ck_assert_uint_eq(st.cache_hits, off ? 0 : 4); /* off: each round misses both */
    test_pool_destroy(p);
    test_stream_destroy(s);
  }
}
END_TEST

/* A brief stream that asks a size up to twice its largest front block puts that block back into
 * the heap before it takes a new one (it may merge into what is asked): its front grows by
 * replacing, not by keeping every step. */
START_TEST(cache_brief_stream_replaces_a_block_it_outgrows) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  CK_SPOOL(spool_free(p, alloc_on(p, 4 * MiB, s), s));
  check_cache_stats(p, 0, 1, 4 * MiB);
  void *q = alloc_on(p, 6 * MiB, s);
  check_cache_stats(p, 0, 2, 0);
  CK_SPOOL(spool_free(p, q, s));
  check_cache_stats(p, 0, 2, 6 * MiB);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A brief stream's small request that no small-band range serves takes the top of the leftover
 * ending one of its own large chunks, when no request of that chunk's band would fit the
 * leftover (here half a MiB; the band starts above 1 MiB): on a GPU a small-band chunk would
 * reserve a pool segment of its own. A larger leftover is left to its band, and so is every
 * leftover with front_brief=off. */
START_TEST(cache_brief_small_request_takes_a_large_chunks_unusable_leftover) {
  const size_t big[] = {31 * MiB + 512 * KiB, 20 * MiB, 31 * MiB + 512 * KiB};
  for (int i = 0; i < 3; i++) {
    spool_pool *p = pool_with(i == 2 ? "front_brief=off" : NULL);
    cudaStream_t s = test_stream_create();
    void *a = alloc_on(p, big[i], s);
    CK_SPOOL(spool_free(p, a, s)); /* into the front: far larger than 4 KiB asks */
    void *b = alloc_on(p, 4 * KiB, s);
    bool leftover = i == 0;
    ck_assert_uint_eq(test_stats(p).chunk_allocs, leftover ? 1 : 2);
    if (leftover) ck_assert_ptr_eq(b, (char *)a + 32 * MiB - 4 * KiB);
    CK_SPOOL(spool_free(p, b, s));
    test_pool_destroy(p);
    test_stream_destroy(s);
  }
}
END_TEST

/* A brief stream seldom misses, so it would seldom reach fence_every heap operations: its miss
 * records its fence at once, and what it left in the heap (here the rest of its new chunk)
 * serves another stream once that fence has passed, without a chunk of its own. */
START_TEST(cache_brief_stream_miss_fences_what_it_leaves_in_the_heap) {
  spool_pool *p = pool_with("fence_every=65536");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = alloc_on(p, 512 * KiB, s1); /* a 2 MiB chunk; its rest pending on s1 */
  ck_assert_uint_eq(test_stats(p).fences, 1);
  CK_CUDA(cudaStreamSynchronize(s1));
  void *b = alloc_on(p, 512 * KiB, s2);
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 1);
  ck_assert_ptr_eq(b, (char *)a + 512 * KiB);
  CK_SPOOL(spool_free(p, a, s1));
  CK_SPOOL(spool_free(p, b, s2));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* ---- across streams ------------------------------------------------------------------------ */

/* Heap operations on s (front misses and frees past front_limit=0): sizes that alternate
 * between 3 and 4 MiB, each freed at once. Enough of them for s to record a fence. */
static void heap_ops_on(spool_pool *p, cudaStream_t s) {
  for (int i = 0; i < 40; i++) CK_SPOOL(spool_free(p, alloc_on(p, (size_t)(3 + i % 2) * MiB, s), s));
}

/* What s1 freed goes to another stream only once an event recorded on s1 after the free has
 * completed. s1 records one every few heap operations; a stream that needs memory asks the
 * fences of the others before it takes a new chunk. */
START_TEST(cache_other_stream_waits_for_fence) {
  spool_pool *p = pool_with("front_limit=0");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create(), s3 = test_stream_create();
  void *a = alloc_on(p, MiB, s1), *x = alloc_on(p, 2 * MiB, s1);
  CK_SPOOL(spool_free(p, a, s1)); /* not the size allocated last: into the heap, s1's */
  void *b = alloc_on(p, MiB, s2); /* no fence yet: a new chunk */
  ck_assert_ptr_ne(a, b);
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 3);
  heap_ops_on(p, s1);                 /* records a fence after a's free */
  CK_CUDA(cudaStreamSynchronize(s1)); /* the fence completes */
  void *c = alloc_on(p, MiB, s3);
  ck_assert_ptr_eq(a, c); /* a's chunk, all free and shared now */
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 3);
  ck_assert_uint_ge(test_stats(p).fences, 1);
  CK_SPOOL(spool_free(p, b, s2));
  CK_SPOOL(spool_free(p, c, s3));
  CK_SPOOL(spool_free(p, x, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  test_stream_destroy(s3);
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* While s1's work is not done, what it freed stays out of other streams' reach, however often
 * they ask. */
START_TEST(cache_fence_not_passed_keeps_block) {
  spool_pool *p = pool_with("front_limit=0");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = alloc_on(p, MiB, s1), *x = alloc_on(p, 2 * MiB, s1);
  cudasim_hold(s1);
  CK_SPOOL(spool_free(p, a, s1));
  heap_ops_on(p, s1); /* the fence waits behind s1's held work */
  void *got[4];
  for (int i = 0; i < 4; i++) got[i] = alloc_on(p, MiB, s2);
  for (int i = 0; i < 4; i++) ck_assert_ptr_ne(got[i], a);
  cudasim_release(s1);
  CK_CUDA(cudaStreamSynchronize(s1));
  void *c = alloc_on(p, MiB, s2);
  ck_assert_ptr_eq(c, a);
  for (int i = 0; i < 4; i++) CK_SPOOL(spool_free(p, got[i], s2));
  CK_SPOOL(spool_free(p, c, s2));
  CK_SPOOL(spool_free(p, x, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST
#endif

/* Freed on another stream than its own: the freeing stream's cache takes it. */
START_TEST(cache_free_on_other_stream) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = alloc_on(p, 256 * KiB, s1);
  CK_CUDA(cudaStreamSynchronize(s1)); /* the user orders s1's use before the free on s2 */
  CK_SPOOL(spool_free(p, a, s2));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.bytes_front, 256 * KiB);
  void *b = alloc_on(p, 256 * KiB, s2);
  ck_assert_ptr_eq(a, b);
  /* and a second free of the same pointer is caught in its new cache */
  CK_SPOOL(spool_free(p, b, s2));
  CK_STATUS(spool_free(p, b, s1), SPOOL_ERR_DOUBLE_FREE);
  CK_LAST_ERROR_HAS("already freed");
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* ---- finding a stream's front ------------------------------------------------------------- */

/* A thread keeps a few streams' fronts at hand; one cycling over more streams than that still
 * finds each stream's own front, and its blocks, every time. */
START_TEST(cache_thread_cycling_over_many_streams_hits_on_each) {
  enum { STREAMS = 13, ROUNDS = 4 };
  spool_pool *p = pool_with(NULL);
  cudaStream_t s[STREAMS];
  void *first[STREAMS];
  for (int i = 0; i < STREAMS; i++) s[i] = test_stream_create();
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < STREAMS; i++) {
      void *a = alloc_on(p, 64 * KiB, s[i]);
      if (r == 0) first[i] = a;
      ck_assert_msg(a == first[i], "round %d, stream %d: %p, its block is %p", r, i, a,
                    first[i]);
      CK_SPOOL(spool_free(p, a, s[i]));
    }
  }
  check_cache_stats(p, (uint64_t)STREAMS * (ROUNDS - 1), STREAMS, (uint64_t)STREAMS * 64 * KiB);
  test_pool_destroy(p);
  for (int i = 0; i < STREAMS; i++) test_stream_destroy(s[i]);
}
END_TEST

/* Two pools on one stream: each keeps its own front for it, and a pool's block never serves the
 * other pool (nor is it freed through it). */
START_TEST(cache_two_pools_on_one_stream_keep_their_own_fronts) {
  spool_pool *a = pool_with(NULL), *b = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *x = alloc_on(a, MiB, s);
  CK_SPOOL(spool_free(a, x, s));
  void *y = alloc_on(b, MiB, s);
  ck_assert_ptr_ne(x, y);
  check_cache_stats(b, 0, 1, 0);
  void *z = alloc_on(a, MiB, s);
  ck_assert_ptr_eq(z, x);
  check_cache_stats(a, 1, 1, 0);
  CK_STATUS(spool_free(b, z, s), SPOOL_ERR_WRONG_POOL);
  CK_SPOOL(spool_free(a, z, s));
  CK_SPOOL(spool_free(b, y, s));
  test_pool_destroy(a);
  test_pool_destroy(b);
  test_stream_destroy(s);
}
END_TEST

/* ---- the legacy and per-thread streams --------------------------------------------------- */

START_TEST(cache_legacy_stream_one_cache) {
  spool_pool *p = pool_with(NULL);
  void *a = alloc_on(p, 8 * KiB, NULL);
  CK_SPOOL(spool_free(p, a, cudaStreamLegacy)); /* the same stream under its other name */
  void *b = alloc_on(p, 8 * KiB, NULL);
  ck_assert_ptr_eq(a, b);
  check_cache_stats(p, 1, 1, 0);
  CK_SPOOL(spool_free(p, b, NULL));
  CK_CUDA(cudaDeviceSynchronize());
  test_pool_destroy(p);
}
END_TEST

typedef struct per_thread_arg {
  spool_pool *pool;
  void *first, *second;
  spool_status s1, s2;
  char error[512]; /* the thread's spool_last_error */
} per_thread_arg;

/* Allocates twice on this thread's per-thread stream, freeing in between. */
static void *per_thread_body(void *arg) {
  per_thread_arg *a = arg;
  a->s1 = spool_alloc(a->pool, &a->first, 32 * KiB, cudaStreamPerThread);
  if (a->s1 == SPOOL_OK) a->s1 = spool_free(a->pool, a->first, cudaStreamPerThread);
  if (a->s1 == SPOOL_OK)
    a->s2 = spool_alloc(a->pool, &a->second, 32 * KiB, cudaStreamPerThread);
  snprintf(a->error, sizeof a->error, "%s", spool_last_error());
  return NULL;
}

/* cudaStreamPerThread is one handle and a different stream in every thread: a block cached by
 * one thread is not another thread's to take at once. */
START_TEST(cache_per_thread_streams_are_distinct) {
  spool_pool *p = pool_with(NULL);
  void *mine = alloc_on(p, 32 * KiB, cudaStreamPerThread);
  CK_SPOOL(spool_free(p, mine, cudaStreamPerThread));
  per_thread_arg a = {.pool = p};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, per_thread_body, &a), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  /* A fresh thread: its first CUDA call is spool's capture check (no context current yet). */
  ck_assert_msg(a.s1 == SPOOL_OK && a.s2 == SPOOL_OK, "thread: %s, %s: %s",
                spool_status_name(a.s1), spool_status_name(a.s2), a.error);
  ck_assert_ptr_ne(a.first, mine); /* the other thread did not take this thread's block */
  ck_assert_ptr_eq(a.second, a.first); /* but reused its own */
  void *again = alloc_on(p, 32 * KiB, cudaStreamPerThread);
  ck_assert_ptr_eq(again, mine);
  CK_SPOOL(spool_free(p, again, cudaStreamPerThread));
  CK_SPOOL(spool_free(p, a.second, cudaStreamPerThread));
  CK_CUDA(cudaDeviceSynchronize());
  test_pool_destroy(p); /* flushes the other (ended) thread's cache through the legacy stream */
}
END_TEST

/* ---- capture --------------------------------------------------------------------------------- */

static void capture_round(spool_pool *p, cudaStream_t s, void *cached, bool expect_hit) {
  void *in = NULL;
  cudaGraph_t graph = NULL;
  CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  spool_status st = spool_alloc(p, &in, 64 * KiB, s);
  spool_status fs = st == SPOOL_OK ? spool_free(p, in, s) : SPOOL_OK;
  CK_CUDA(cudaStreamEndCapture(s, &graph));
  CK_STATUS(st, SPOOL_OK);
  CK_STATUS(fs, SPOOL_OK);
  if (expect_hit) ck_assert_ptr_eq(in, cached);
  else ck_assert_ptr_ne(in, cached);
  ck_assert_ptr_nonnull(graph);
  CK_CUDA(cudaGraphDestroy(graph));
}

START_TEST(cache_bypassed_under_capture) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 64 * KiB, s);
  CK_SPOOL(spool_free(p, a, s));
  capture_round(p, s, a, false); /* a reused pointer would be baked into the graph */
  check_cache_stats(p, 0, 1, 64 * KiB);
  void *b = alloc_on(p, 64 * KiB, s); /* after the capture the cache serves again */
  ck_assert_ptr_eq(a, b);
  check_cache_stats(p, 1, 1, 0);
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* A buffer the cache served, freed inside a capture (the default asks at the free too): refused,
 * the capture intact, and the buffer still the caller's to free after it. */
START_TEST(cache_free_under_capture_refused) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 64 * KiB, s);
  cudaGraph_t graph = NULL;
  CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  spool_status st = spool_free(p, a, s);
  CK_CUDA(cudaStreamEndCapture(s, &graph));
  CK_STATUS(st, SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("after cudaStreamEndCapture");
  CK_CUDA(cudaGraphDestroy(graph));
  spool_stats before = test_stats(p);
  ck_assert_uint_eq(before.buffers_in_use, 1);
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* capture_check=off skips the question: then the cache serves even under capture (the trade-off
 * the README states), which shows that the check is what keeps it out. */
START_TEST(cache_capture_check_off_serves_under_capture) {
  spool_pool *p = pool_with("capture_check=off");
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 64 * KiB, s);
  CK_SPOOL(spool_free(p, a, s));
  capture_round(p, s, a, true);
  void *b = alloc_on(p, 64 * KiB, s);
  ck_assert_ptr_eq(a, b);
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* ---- bounds ------------------------------------------------------------------------------- */

START_TEST(cache_front_limit_sends_frees_to_heap) {
  spool_pool *p = pool_with("front_limit=1MiB, front_brief=off");
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, MiB, s), *b = alloc_on(p, MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s)); /* the front is full: b goes into the heap */
  check_cache_stats(p, 0, 2, MiB);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.frees, 2);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_ge(st.bytes_cached, 2 * MiB); /* the heap holds b, ready */
  void *c = alloc_on(p, MiB, s);
  ck_assert_ptr_eq(c, a);
  CK_SPOOL(spool_free(p, c, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

START_TEST(cache_heap_max_block_skips_heap) {
  spool_pool *p = pool_with("heap_max_block=1MiB");
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 2 * MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  check_cache_stats(p, 0, 0, 0);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, 1);
  ck_assert_uint_eq(st.frees, 1);
  ck_assert_uint_eq(st.chunk_allocs, 0);
  void *b = alloc_on(p, MiB, s); /* at the limit: the heap's */
  CK_SPOOL(spool_free(p, b, s));
  check_cache_stats(p, 0, 1, MiB);
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

START_TEST(cache_off_never_caches) {
  spool_pool *p = pool_with("cache=off");
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  void *b = alloc_on(p, MiB, s);
  CK_SPOOL(spool_free(p, b, s));
  check_cache_stats(p, 0, 0, 0);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.frees, 2);
  ck_assert_uint_eq(st.bytes_in_use_peak, MiB);
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* ---- flushes -------------------------------------------------------------------------------- */

START_TEST(cache_flushed_by_trim) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 4 * MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  CK_CUDA(cudaStreamSynchronize(s));
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 4 * MiB); /* the cache holds it */
  CK_SPOOL(spool_trim(p, 0));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0)); /* the frees are done now: the pool gives it all back */
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_cached, 0);
  ck_assert_uint_eq(st.cache_flushes, 1);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

START_TEST(cache_stream_release) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *keep = alloc_on(p, MiB, s);
  void *a = alloc_on(p, MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_stream_release(p, s));
  check_cache_stats(p, 0, 2, 0);
  ck_assert_uint_eq(test_stats(p).cache_flushes, 1);
  CK_SPOOL(spool_stream_release(p, s)); /* again: nothing cached, nothing to do */
  cudaStream_t never = test_stream_create();
  CK_SPOOL(spool_stream_release(p, never)); /* a stream spool never saw */
  test_stream_destroy(s);
  CK_SPOOL(spool_free(p, keep, never)); /* a live buffer of the released stream stays valid */
  CK_STATUS(spool_stream_release(NULL, never), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_stream_release(p, never));
  test_stream_destroy(never);
  test_pool_destroy(p);
}
END_TEST

START_TEST(cache_destroy_gives_blocks_back) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  for (int i = 0; i < 8; i++) CK_SPOOL(spool_free(p, alloc_on(p, (size_t)(i + 1) * 100 * KiB, s),
                                                  s));
  ck_assert_uint_gt(test_stats(p).bytes_cached, 0);
  CK_SPOOL(spool_pool_destroy(p)); /* cached blocks are not leaks */
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
  test_stream_destroy(s);
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* A full quarantine ring that has wrapped round grows and still reads oldest first: the
 * entries past its end before the growth follow the others. */
START_TEST(cache_quarantine_ring_grows_in_order) {
  spool__scache *c = spool__zalloc_aligned(sizeof *c);
  ck_assert_ptr_nonnull(c);
  for (uint32_t round = 0; round < 3; round++) {
    uint32_t cap = c->quar_cap;
    if (cap) { /* full, its oldest at an offset */
      c->quar_head = cap / 2 + round;
      c->quar_count = cap;
      for (uint32_t i = 0; i < cap; i++) c->quar[(c->quar_head + i) % cap] = 0x1000 * (i + 1);
    }
    ck_assert(spool__quar_grow(c));
    ck_assert_uint_eq(c->quar_cap, cap ? 2 * cap : 16);
    for (uint32_t i = 0; i < c->quar_count; i++)
      ck_assert_uint_eq(c->quar[(c->quar_head + i) % c->quar_cap], 0x1000 * (i + 1));
  }
  free(c->quar);
  free(c);
}
END_TEST

/* A destroyed pool's lookup slots go to the next pool's streams: none is left to stand between
 * a stream and its own slot, and each stream of the new pool is found in the slot it was given
 * first (its own, the slots being empty again). */
START_TEST(cache_destroyed_pools_slots_are_freed_for_the_next_pool) {
  enum { STREAMS = SPOOL__FRONT_SLOTS };
  cudaStream_t s[STREAMS];
  for (int i = 0; i < STREAMS; i++) s[i] = test_stream_create();
  spool_pool *a = pool_with(NULL);
  uint64_t a_id = a->id;
  for (int i = 0; i < STREAMS; i++) CK_SPOOL(spool_free(a, alloc_on(a, 4 * KiB, s[i]), s[i]));
  test_pool_destroy(a);
  spool_pool *b = pool_with(NULL);
  CK_SPOOL(spool_free(b, alloc_on(b, 4 * KiB, s[0]), s[0]));
  for (unsigned i = 0; i < SPOOL__FRONT_SLOTS; i++)
    ck_assert_uint_ne(spool__front_slots[i].pool, a_id);
  const spool__front_slot *home = &spool__front_slots[stream_slot(key_of(s[0]))];
  ck_assert_uint_eq(home->pool, b->id);
  ck_assert_ptr_eq(home->stream, key_of(s[0]));
  test_pool_destroy(b);
  for (int i = 0; i < STREAMS; i++) test_stream_destroy(s[i]);
}
END_TEST

/* Out of memory, the caches go back first: a block cached on s1 makes room for s2. */
START_TEST(cache_flushed_on_oom) {
  cudasim_set_capacity(0, 8 * MiB);
  spool_pool *p = pool_with(NULL);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = alloc_on(p, 6 * MiB, s1);
  CK_SPOOL(spool_free(p, a, s1));
  void *b = alloc_on(p, 5 * MiB, s2); /* another class, and the device is full */
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_cached, 0);
  ck_assert_uint_ge(st.cache_flushes, 1);
  ck_assert_uint_eq(st.oom_recoveries, 1);
  CK_SPOOL(spool_free(p, b, s2));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* Poisoning fails (an injected cudaMemsetAsync failure): the allocation fails and its block
 * stays cached; the free fails and its buffer stays live; nothing is lost either way. */
START_TEST(cache_poison_failures_lose_nothing) {
  spool_pool *p = pool_with("poison=on, quarantine=0");
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 4096, s);
  CK_SPOOL(spool_free(p, a, s));
  spool_stats before = test_stats(p);
  cudasim_fail("cudaMemsetAsync", 1, cudaErrorUnknown);
  void *b = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p, &b, 4096, s), SPOOL_ERR_CUDA);
  ck_assert_ptr_null(b);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_cached, before.bytes_cached);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.alloc_failures, 1);
  b = alloc_on(p, 4096, s); /* the block is still there */
  ck_assert_ptr_eq(b, a);
  cudasim_fail("cudaMemsetAsync", 1, cudaErrorUnknown);
  CK_STATUS(spool_free(p, b, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("stays allocated");
  st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.bytes_front, 0);
  CK_SPOOL(spool_free(p, b, s)); /* and can be freed after */
  ck_assert_uint_eq(test_stats(p).buffers_in_use, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A stream destroyed before spool_stream_release: the capture checks at the next allocation and
 * the next free on it find out. */
START_TEST(cache_destroyed_stream_is_named) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, MiB, s), *b = TEST_SENTINEL;
  test_stream_destroy(s);
  CK_STATUS(spool_alloc(p, &b, MiB, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("destroyed");
  ck_assert_ptr_null(b);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("destroyed");
  cudaStream_t t = test_stream_create();
  CK_SPOOL(spool_free(p, a, t));
  test_pool_destroy(p);
  test_stream_destroy(t);
}
END_TEST
#endif

/* ---- what tracking says about cached blocks --------------------------------------------- */

START_TEST(cache_double_free_names_first_free) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(SPOOL_ALLOC(p, &a, 3000, s));
  CK_SPOOL(SPOOL_FREE(p, a, s));
  spool_stats before = test_stats(p);
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_DOUBLE_FREE);
  CK_LAST_ERROR_HAS("check_cache.c");
  CK_LAST_ERROR_HAS("already freed");
  spool_stats after = test_stats(p);
  ck_assert_uint_eq(after.bad_frees, before.bad_frees + 1);
  ck_assert_uint_eq(after.bytes_cached, before.bytes_cached); /* nothing changed */
  ck_assert_uint_eq(after.frees, before.frees);
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

START_TEST(cache_interior_and_wrong_pool) {
  spool_pool *p = pool_with(NULL), *q = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = alloc_on(p, 4096, s);
  CK_STATUS(spool_free(p, (char *)a + 512, s), SPOOL_ERR_INTERIOR_POINTER);
  CK_LAST_ERROR_HAS("512 bytes into");
  CK_STATUS(spool_free(q, a, s), SPOOL_ERR_WRONG_POOL);
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(q);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

START_TEST(cache_leak_report_lists_cached_path_buffers) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL;
  CK_SPOOL(SPOOL_ALLOC(p, &a, 5000, s));
  CK_SPOOL(spool_alloc_tagged(p, &b, 7000, s, "scratch"));
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  CK_SPOOL(spool_leaks(p, f));
  char text[4096] = {0};
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  ck_assert_uint_gt(n, 0);
  ck_assert_msg(strstr(text, "2 live buffers") && strstr(text, "check_cache.c") &&
                    strstr(text, "tag 'scratch'"),
                "leak report:\n%s", text);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

START_TEST(cache_poison_in_stream_order) {
  spool_pool *p = pool_with("poison=on, quarantine=0"); /* reuse at once */
  cudaStream_t s = test_stream_create();
  unsigned char host[512];
  void *a = alloc_on(p, sizeof host, s);
  CK_CUDA(cudaMemsetAsync(a, 0x11, sizeof host, s));
  CK_SPOOL(spool_free(p, a, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaMemcpy(host, a, sizeof host, cudaMemcpyDeviceToHost)); /* cached: still mapped */
  ck_assert_uint_eq(host[0], 0xDD);
  ck_assert_uint_eq(host[sizeof host - 1], 0xDD);
  void *b = alloc_on(p, sizeof host, s);
  ck_assert_ptr_eq(a, b);
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaMemcpy(host, b, sizeof host, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(host[0], 0xA5);
  ck_assert_uint_eq(host[sizeof host - 1], 0xA5);
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* ---- stats ---------------------------------------------------------------------------------- */

START_TEST(cache_peaks_exact_on_one_stream) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *v[100];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 100; i++) v[i] = alloc_on(p, 1000, s);
    for (int i = 0; i < 100; i++) CK_SPOOL(spool_free(p, v[i], s));
  }
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 100 * 1000);
  ck_assert_uint_eq(st.buffers_in_use_peak, 100);
  ck_assert_uint_eq(st.cache_hits, 200);
  ck_assert_uint_eq(st.cache_misses, 100);
  CK_SPOOL(spool_stats_reset_peaks(p));
  void *one = alloc_on(p, 10, s);
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use_peak, 10);
  ck_assert_uint_eq(st.buffers_in_use_peak, 1);
  CK_SPOOL(spool_free(p, one, s));
  char json[2048];
  CK_SPOOL(spool_stats_json(p, json, sizeof json));
  /* 10 bytes (class 512 B) takes a cached 1 KiB block: within twice the size, a hit */
  ck_assert_msg(strstr(json, "\"cache_hits\":201") && strstr(json, "\"cache_misses\":100"),
                "%s", json);
  test_pool_destroy(p); /* before the stream: its cache frees on it */
  test_stream_destroy(s);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------------- */

enum { THREADS = 8, ROUNDS = 2000 };

typedef struct worker {
  spool_pool *pool;
  cudaStream_t stream;
  uint64_t seed;
  spool_status status;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  void *live[4] = {0};
  for (int i = 0; i < ROUNDS && w->status == SPOOL_OK; i++) {
    int k = (int)(test_rand(&w->seed) % 4);
    if (live[k]) w->status = spool_free(w->pool, live[k], w->stream);
    live[k] = NULL;
    if (w->status == SPOOL_OK)
      w->status = spool_alloc(w->pool, &live[k], 4 * KiB + test_rand(&w->seed) % (28 * KiB),
                              w->stream);
  }
  for (int k = 0; k < 4; k++)
    if (live[k] && w->status == SPOOL_OK) w->status = spool_free(w->pool, live[k], w->stream);
  return NULL;
}

START_TEST(cache_threads_own_streams) {
  spool_pool *p = pool_with(NULL);
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){p, test_stream_create(), (uint64_t)i * 7919 + 1, SPOOL_OK};
    ck_assert_int_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < THREADS; i++) CK_STATUS(w[i].status, SPOOL_OK);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, (uint64_t)THREADS * ROUNDS);
  ck_assert_uint_eq(st.frees, st.allocs);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.cache_hits + st.cache_misses, st.allocs);
  ck_assert_uint_gt(st.cache_hits, st.cache_misses);
  ck_assert_uint_le(st.buffers_in_use_peak, 4 * THREADS);
  for (int i = 0; i < THREADS; i++) {
    CK_SPOOL(spool_stream_release(p, w[i].stream));
    test_stream_destroy(w[i].stream);
  }
  ck_assert_uint_eq(test_stats(p).bytes_cached, 0);
  test_pool_destroy(p);
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* Ownership handed back and forth: threads share two streams (each cache is taken from its
 * owner again and again) next to their own, a reader takes stats all the while (it takes every
 * cache from its owner), and every buffer carries its owner's stamp at both ends, checked before
 * its free: cudasim's device memory is host memory, so a block handed to two threads at once
 * would show as a broken stamp. */
enum { OWN_THREADS = 6, OWN_ROUNDS = 20000 };

typedef struct owner_worker {
  spool_pool *pool;
  cudaStream_t own, shared[2];
  uint64_t seed, id;
  long broken;
  spool_status status;
} owner_worker;

typedef struct stamped {
  uint64_t *p;
  size_t words;
  uint64_t stamp;
  cudaStream_t stream;
} stamped;

static void stamp_check(owner_worker *w, const stamped *b) {
  if (b->p[0] != b->stamp || b->p[b->words - 1] != b->stamp) w->broken++;
}

static cudaStream_t pick(owner_worker *w) {
  uint64_t r = test_rand(&w->seed) % 4;
  return r < 2 ? w->shared[r] : w->own;
}

static void *owner_work(void *arg) {
  owner_worker *w = arg;
  stamped live[4] = {{0}};
  for (uint64_t i = 0; i < OWN_ROUNDS && w->status == SPOOL_OK; i++) {
    stamped *b = &live[test_rand(&w->seed) % 4];
    if (b->p) {
      stamp_check(w, b);
      w->status = spool_free(w->pool, b->p, test_rand(&w->seed) % 2 ? b->stream : pick(w));
      b->p = NULL;
    }
    if (w->status != SPOOL_OK) break;
    size_t bytes = 64 + (size_t)(test_rand(&w->seed) % (8 * KiB));
    b->stream = pick(w);
    w->status = spool_alloc(w->pool, (void **)&b->p, bytes, b->stream);
    if (w->status != SPOOL_OK) break;
    b->words = bytes / sizeof(uint64_t);
    b->stamp = w->id << 32 | i;
    b->p[0] = b->p[b->words - 1] = b->stamp;
  }
  for (int k = 0; k < 4; k++)
    if (live[k].p && w->status == SPOOL_OK) {
      stamp_check(w, &live[k]);
      w->status = spool_free(w->pool, live[k].p, live[k].stream);
    }
  return NULL;
}

typedef struct reader {
  spool_pool *pool;
  atomic_int stop;
  long reads;
} reader;

static void *read_stats(void *arg) {
  reader *r = arg;
  spool_stats st;
  while (!atomic_load(&r->stop))
    if (spool_stats_get(r->pool, &st) == SPOOL_OK) r->reads++;
  return NULL;
}

START_TEST(cache_owners_handed_back_and_forth) {
  spool_pool *p = pool_with(NULL);
  cudaStream_t shared[2] = {test_stream_create(), test_stream_create()};
  owner_worker w[OWN_THREADS];
  pthread_t t[OWN_THREADS], rt;
  reader r = {.pool = p};
  atomic_init(&r.stop, 0);
  ck_assert_int_eq(pthread_create(&rt, NULL, read_stats, &r), 0);
  for (int i = 0; i < OWN_THREADS; i++) {
    w[i] = (owner_worker){p, test_stream_create(), {shared[0], shared[1]},
                          (uint64_t)i * 104729 + 7, (uint64_t)i + 1, 0, SPOOL_OK};
    ck_assert_int_eq(pthread_create(&t[i], NULL, owner_work, &w[i]), 0);
  }
  for (int i = 0; i < OWN_THREADS; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  atomic_store(&r.stop, 1);
  ck_assert_int_eq(pthread_join(rt, NULL), 0);
  for (int i = 0; i < OWN_THREADS; i++) {
    CK_STATUS(w[i].status, SPOOL_OK);
    ck_assert_msg(w[i].broken == 0, "thread %d: %ld stamps broken", i, w[i].broken);
  }
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.allocs, (uint64_t)OWN_THREADS * OWN_ROUNDS);
  ck_assert_uint_eq(st.frees, st.allocs);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_int_gt(r.reads, 0);
  test_pool_destroy(p);
  for (int i = 0; i < OWN_THREADS; i++) test_stream_destroy(w[i].own);
  test_stream_destroy(shared[0]);
  test_stream_destroy(shared[1]);
}
END_TEST
#endif

static Suite *cache_suite(void) {
  Suite *s = suite_create("cache");
  TCase *tc = test_tcase("hits");
  tcase_add_test(tc, cache_hit_on_same_stream);
  tcase_add_test(tc, cache_size_classes);
  tcase_add_test(tc, cache_other_stream_waits_for_fence);
  tcase_add_test(tc, cache_free_on_other_stream);
  tcase_add_test(tc, cache_legacy_stream_one_cache);
  tcase_add_test(tc, cache_thread_cycling_over_many_streams_hits_on_each);
  tcase_add_test(tc, cache_two_pools_on_one_stream_keep_their_own_fronts);
  tcase_add_test(tc, cache_per_thread_streams_are_distinct);
  tcase_add_test(tc, cache_bypassed_under_capture);
  tcase_add_test(tc, cache_capture_check_off_serves_under_capture);
  tcase_add_test(tc, cache_free_under_capture_refused);
  suite_add_tcase(s, tc);
  tc = test_tcase("brief");
  tcase_add_test(tc, cache_brief_stream_serves_smaller_sizes_from_its_largest_block);
  tcase_add_test(tc, cache_brief_stream_leaves_a_far_larger_block_alone);
  tcase_add_test(tc, cache_stream_holding_many_buffers_takes_blocks_within_twice_the_size);
  tcase_add_test(tc, cache_brief_front_keeps_the_working_set_past_front_limit);
  tcase_add_test(tc, cache_brief_stream_replaces_a_block_it_outgrows);
  tcase_add_test(tc, cache_brief_stream_miss_fences_what_it_leaves_in_the_heap);
  tcase_add_test(tc, cache_brief_small_request_takes_a_large_chunks_unusable_leftover);
  suite_add_tcase(s, tc);
  tc = test_tcase("bounds");
  tcase_add_test(tc, cache_front_limit_sends_frees_to_heap);
  tcase_add_test(tc, cache_heap_max_block_skips_heap);
  tcase_add_test(tc, cache_off_never_caches);
  tcase_add_test(tc, cache_flushed_by_trim);
  tcase_add_test(tc, cache_stream_release);
  tcase_add_test(tc, cache_destroy_gives_blocks_back);
  suite_add_tcase(s, tc);
  tc = test_tcase("tracking");
  tcase_add_test(tc, cache_double_free_names_first_free);
  tcase_add_test(tc, cache_interior_and_wrong_pool);
  tcase_add_test(tc, cache_leak_report_lists_cached_path_buffers);
  tcase_add_test(tc, cache_poison_in_stream_order);
  tcase_add_test(tc, cache_peaks_exact_on_one_stream);
  tcase_add_test(tc, cache_threads_own_streams);
  suite_add_tcase(s, tc);
#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim");
  tcase_add_test(tc, cache_fence_not_passed_keeps_block);
  tcase_add_test(tc, cache_flushed_on_oom);
  tcase_add_test(tc, cache_destroyed_stream_is_named);
  tcase_add_test(tc, cache_poison_failures_lose_nothing);
  tcase_add_test(tc, cache_quarantine_ring_grows_in_order);
  tcase_add_test(tc, cache_destroyed_pools_slots_are_freed_for_the_next_pool);
  tcase_add_test(tc, cache_owners_handed_back_and_forth);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(cache_suite()); }
