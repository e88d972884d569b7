/* check_heap: the stream-ordered heap under the fronts (src/chunks.c): blocks split off chunks
 * and merged back with their neighbours, chunks going back to the pool, allocations that fit the
 * device exactly, the out-of-memory retry seeing what a handler freed, peaks across streams,
 * the refusals of a free, and a randomized run against a model of what must hold.
 *
 * Built twice: check_heap_sim (cudasim) and check_heap_gpu (real CUDA). Tests outside
 * `#ifdef SPOOL_TEST_SIM` must hold on a real device too. */
#include "test_main.h"

#ifdef SPOOL_TEST_SIM
#include "../src/internal.h" /* spool__heap_check: the heap's own invariants */
#endif

static void heap_ok(spool_pool *p) {
#ifdef SPOOL_TEST_SIM
  char why[256];
  ck_assert_msg(spool__heap_check(p, why, sizeof why), "heap: %s", why);
#else
  (void)p;
#endif
}

#define AT(base, off) ((void *)((char *)(base) + (off)))

/* ---- split and merge ------------------------------------------------------------------------ */

/* Blocks are cut off one chunk side by side; freed ones merge, and a larger request is served
 * in place. front_limit=0 and a last allocation of another size send every free into the heap. */
START_TEST(heap_frees_merge_and_serve_larger_in_place) {
  spool_pool *p = test_pool_with("front_limit=0");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 256 * KiB, s), *b = test_alloc_on(p, 256 * KiB, s);
  void *c = test_alloc_on(p, 256 * KiB, s), *d = test_alloc_on(p, 4 * KiB, s);
  ck_assert_ptr_eq(b, AT(a, 256 * KiB)); /* one chunk, in address order */
  ck_assert_ptr_eq(c, AT(a, 512 * KiB));
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  heap_ok(p);
  void *e = test_alloc_on(p, 512 * KiB, s); /* a and b, merged */
  ck_assert_ptr_eq(e, a);
  void *x = test_alloc_on(p, 8 * KiB, s);   /* another size last: e's free goes into the heap */
  CK_SPOOL(spool_free(p, e, s));
  CK_SPOOL(spool_free(p, c, s)); /* merges with e's range before it */
  heap_ok(p);
  void *f = test_alloc_on(p, 768 * KiB, s);
  ck_assert_ptr_eq(f, a);
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 1);
  CK_SPOOL(spool_free(p, x, s));
  CK_SPOOL(spool_free(p, f, s));
  CK_SPOOL(spool_free(p, d, s));
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A free range between two freed neighbours joins both into one. */
START_TEST(heap_middle_free_joins_both_neighbours) {
  spool_pool *p = test_pool_with("front_limit=0");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 128 * KiB, s), *b = test_alloc_on(p, 128 * KiB, s);
  void *c = test_alloc_on(p, 128 * KiB, s), *keep = test_alloc_on(p, 8 * KiB, s);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, c, s));
  CK_SPOOL(spool_free(p, b, s));
  heap_ok(p);
  spool_stats st = test_stats(p);
  ck_assert_uint_ge(st.largest_free_block, 384 * KiB);
  void *d = test_alloc_on(p, 384 * KiB, s);
  ck_assert_ptr_eq(d, a);
  CK_SPOOL(spool_free(p, d, s));
  CK_SPOOL(spool_free(p, keep, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Frees past the front's bound wait for the stream's next miss (or the free that finds eight
 * waiting): freed for every purpose but placement (counted idle, refused a second time), then
 * in the heap, merged. */
START_TEST(heap_frees_past_the_front_wait_for_the_next_miss) {
  enum { N = 9 }; /* the outbox holds 8 */
#ifdef SPOOL_TEST_SIM
  _Static_assert(N == SPOOL__OUTBOX + 1, "the ninth free finds the outbox full");
#endif
  spool_pool *p = test_pool_with("front_limit=0");
  cudaStream_t s = test_stream_create();
  void *b[N];
  for (int i = 0; i < N; i++) b[i] = test_alloc_on(p, 160 * KiB, s);
  void *last = test_alloc_on(p, 512 * KiB, s); /* another size last: no free stays in the front */
  ck_assert_ptr_eq(b[N - 1], AT(b[0], (size_t)(N - 1) * 160 * KiB)); /* side by side */
  for (int i = 0; i < N - 1; i++) CK_SPOOL(spool_free(p, b[i], s));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_front, 0);
  ck_assert_uint_ge(st.bytes_cached, (size_t)(N - 1) * 160 * KiB); /* idle, waiting */
  ck_assert_uint_le(st.largest_free_block, 96 * KiB); /* the chunk's rest: none merged yet */
  CK_STATUS(spool_free(p, b[0], s), SPOOL_ERR_DOUBLE_FREE);
  heap_ok(p);
  CK_SPOOL(spool_free(p, b[N - 1], s)); /* the ninth: all of them into the heap, merged */
  ck_assert_uint_ge(test_stats(p).largest_free_block, (size_t)N * 160 * KiB);
  heap_ok(p);
  void *one = test_alloc_on(p, 800 * KiB, s);
  ck_assert_ptr_eq(one, b[0]);
  void *tiny = test_alloc_on(p, 4 * KiB, s); /* another size last */
  CK_SPOOL(spool_free(p, one, s)); /* waits */
  void *again = test_alloc_on(p, 800 * KiB, s); /* a miss: one's block goes in first */
  ck_assert_ptr_eq(again, b[0]);
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 1);
  CK_SPOOL(spool_free(p, again, s));
  CK_SPOOL(spool_free(p, tiny, s));
  CK_SPOOL(spool_free(p, last, s));
  CK_SPOOL(spool_trim(p, 0)); /* what waits goes into the heap, and the chunk back */
  st = test_stats(p);
  ck_assert_uint_eq(st.bytes_cached, 0);
  ck_assert_uint_eq(st.bytes_heap, 0);
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Sizes up to 1 MiB, up to 32 MiB and beyond take chunks of their own band: a small block never
 * pins a large chunk. */
START_TEST(heap_bands_keep_small_blocks_out_of_large_chunks) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *small = test_alloc_on(p, 4 * KiB, s);
  ck_assert_uint_eq(test_stats(p).bytes_heap, 2 * MiB);
  void *mid = test_alloc_on(p, 3 * MiB, s);
  ck_assert_uint_eq(test_stats(p).bytes_heap, 2 * MiB + 32 * MiB);
  void *big = test_alloc_on(p, 40 * MiB + 1, s); /* a chunk of its own, rounded to 2 MiB */
  ck_assert_uint_eq(test_stats(p).bytes_heap, 2 * MiB + 32 * MiB + 42 * MiB);
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 3);
  CK_SPOOL(spool_free(p, small, s));
  CK_SPOOL(spool_free(p, mid, s));
  CK_SPOOL(spool_free(p, big, s));
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- chunks going back ---------------------------------------------------------------------- */

/* A chunk whose blocks are all free goes back to the pool once it has waited chunk_idle heap
 * allocations; the chunk still in use stays. */
START_TEST(heap_idle_chunk_goes_back) {
  spool_pool *p = test_pool_with("chunk_idle=16, front_limit=0");
  cudaStream_t s = test_stream_create();
  void *mid = test_alloc_on(p, 3 * MiB, s);
  CK_SPOOL(spool_free(p, mid, s));
  test_small_band_misses(p, s);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.chunk_frees, 1);
  ck_assert_uint_eq(st.bytes_heap, 2 * MiB);
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* An idle chunk still pending on another stream (no fence of that stream has passed) stays,
 * and holds nothing back: a chunk that became idle after it, the stream's own, goes back. */
START_TEST(heap_idle_chunk_pending_elsewhere_stays_and_holds_nothing_back) {
  spool_pool *p = test_pool_with("chunk_idle=16, front_limit=0, fence_every=65536");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 3 * MiB, s1), *b = test_alloc_on(p, 3 * MiB, s2);
  CK_SPOOL(spool_free(p, a, s1));
  void *x = test_alloc_on(p, 8 * KiB, s1); /* a miss of another size: a goes into the heap */
  CK_SPOOL(spool_free(p, b, s2));
  test_small_band_misses(p, s2); /* b goes in, then the looks */
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.chunk_allocs, 4); /* a's and b's 32 MiB, a small one each */
  ck_assert_uint_eq(st.chunk_frees, 1);  /* b's */
  ck_assert_uint_eq(st.bytes_heap, 32 * MiB + 2 * 2 * MiB);
  heap_ok(p);
  CK_SPOOL(spool_free(p, x, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}
END_TEST

/* The end of a test on two streams: the heap checked, b freed on s2 and x on s1, all gone. */
static void end_two_streams(spool_pool *p, cudaStream_t s1, void *b, cudaStream_t s2, void *x) {
  heap_ok(p);
  CK_SPOOL(spool_free(p, b, s2));
  CK_SPOOL(spool_free(p, x, s1));
  test_pool_destroy(p);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
}

/* A 16 MiB block freed on one stream, and the rest of its chunk pending there too: with
 * fence_bytes the free records the stream's fence at once, so another stream's 16 MiB request is
 * served from that chunk once the first stream's work is done; without it, the other stream
 * cannot know that yet and takes a chunk of its own. */
START_TEST(heap_large_free_reaches_another_stream_with_fence_bytes) {
  for (int with = 0; with < 2; with++) {
    spool_pool *p = test_pool_with(with ? "fence_bytes=8MiB, front_limit=0" : "front_limit=0");
    cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
    void *a = test_alloc_on(p, 16 * MiB, s1);
    void *x = test_alloc_on(p, 8 * KiB, s1); /* another size last: a's free goes to the heap */
    CK_SPOOL(spool_free(p, a, s1));
    CK_CUDA(cudaStreamSynchronize(s1)); /* what was queued before the free is done */
    void *b = test_alloc_on(p, 16 * MiB, s2);
    spool_stats st = test_stats(p);
    ck_assert_uint_eq(st.chunk_allocs, with ? 2 : 3); /* a's chunk and x's, and one for b */
    if (with) ck_assert_msg(b == a || b == AT(a, 16 * MiB), "b %p not in a's chunk %p", b, a);
    ck_assert_uint_ge(st.fences, with ? 1 : 0);
    end_two_streams(p, s1, b, s2, x);
  }
}
END_TEST

/* A stream keeps the block of the size it asked last in its front even past front_limit (a
 * loop of one large size stays on the hit path); its first miss of another size puts it back
 * into the heap, where it merges with the rest of its chunk. Once the stream's fence has
 * passed, another stream's large request fits in that chunk instead of taking a new one. */
START_TEST(heap_large_front_block_returns_on_a_miss_of_another_size) {
  spool_pool *p = test_pool_with("fence_every=1");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 16 * MiB, s1);
  CK_SPOOL(spool_free(p, a, s1)); /* into s1's front: the size it asked last */
  void *x = test_alloc_on(p, 8 * KiB, s1); /* another size: a goes back into the heap */
  CK_CUDA(cudaStreamSynchronize(s1));
  void *b = test_alloc_on(p, 20 * MiB, s2);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.chunk_allocs, 2); /* a's chunk, served b; and x's */
  ck_assert_msg(b == a, "b %p not at the start of a's chunk %p", b, a);
  end_two_streams(p, s1, b, s2, x);
}
END_TEST

/* spool_trim gives back every chunk with nothing in use, and the pool's reservation with it. */
START_TEST(heap_trim_returns_free_chunks_and_keeps_used_ones) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *keep = test_alloc_on(p, 4 * KiB, s);
  for (int i = 0; i < 8; i++) CK_SPOOL(spool_free(p, test_alloc_on(p, (size_t)(i + 1) * 5 * MiB, s), s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_heap, 2 * MiB); /* keep's chunk */
  ck_assert_uint_eq(st.bytes_front, 0);
  ck_assert_uint_le(st.bytes_reserved, 32 * MiB); /* the pool's own rounding at most */
  CK_SPOOL(spool_free(p, keep, s));
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_uint_eq(test_stats(p).bytes_heap, 0);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- exact at the edges ----------------------------------------------------------------------- */

#ifdef SPOOL_TEST_SIM
/* An allocation that fits what the device allows never fails for the heap's rounding: the
 * band's chunk does not fit, the request alone does. */
START_TEST(sim_request_that_fits_the_device_succeeds) {
  cudasim_set_capacity(0, 42 * MiB);
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 41 * MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_trim(p, 0));
  void *b = test_alloc_on(p, 20 * MiB, s); /* its band's 32 MiB chunk */
  void *c = test_alloc_on(p, 10 * MiB, s); /* the rest of it */
  void *d = test_alloc_on(p, 9 * MiB, s);  /* a second 32 MiB chunk would not fit: 9 MiB alone */
  ck_assert_uint_eq(test_stats(p).ooms, 0);
  ck_assert_uint_eq(test_stats(p).bytes_heap, 41 * MiB);
  CK_SPOOL(spool_free(p, b, s));
  CK_SPOOL(spool_free(p, c, s));
  CK_SPOOL(spool_free(p, d, s));
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* Near the device's limit a small request that its band cannot place (no room for a 2 MiB
 * chunk, nor for its own 512 bytes in a new segment) takes the top of a larger band's free
 * range, out of the way of that band's blocks, rather than fail. */
START_TEST(sim_small_request_at_the_limit_takes_a_larger_bands_free_range) {
  cudasim_set_capacity(0, 32 * MiB);
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 20 * MiB, s); /* all the device holds: one 32 MiB chunk */
  void *b = test_alloc_on(p, 4 * KiB, s);
  ck_assert_ptr_eq(b, AT(a, 32 * MiB - 4 * KiB));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.chunk_allocs, 1);
  ck_assert_uint_eq(st.alloc_failures, 0);
  void *c = test_alloc_on(p, 11 * MiB, s); /* the band's own block still fits below it */
  ck_assert_ptr_eq(c, AT(a, 20 * MiB));
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  CK_SPOOL(spool_free(p, c, s));
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* The same with max_size: a pool limited to 42 MiB serves 41 MiB. */
START_TEST(sim_request_that_fits_max_size_succeeds) {
  spool_pool *p = test_pool_with("max_size=42MiB");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 41 * MiB, s);
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* A full pool still finds the one free range that fits, however many smaller ranges of its size
 * class a fit meets first. One 2 MiB chunk (max_size) holds a 72 KiB range, then five of 65 KiB
 * freed after it (a class's list runs newest first; no fence moves any of them), each between
 * kept blocks, and is full otherwise: a request of 70 KiB takes the 72 KiB range. */
START_TEST(sim_full_pool_finds_the_range_that_fits_behind_smaller_ones) {
  spool_pool *p = test_pool_with("max_size=2MiB, front_limit=0, fence_every=65536");
  cudaStream_t s = test_stream_create();
  enum { RANGES = 6 };
  void *free_later[RANGES], *keep[RANGES];
  for (int i = 0; i < RANGES; i++) {
    free_later[i] = test_alloc_on(p, (i == 0 ? 72 : 65) * KiB, s);
    keep[i] = test_alloc_on(p, 4 * KiB, s);
  }
  /* the rest of the chunk: 2048 - 76 - 5 * 69 KiB */
  void *fill1 = test_alloc_on(p, 1024 * KiB, s), *fill2 = test_alloc_on(p, 603 * KiB, s);
  ck_assert_uint_eq(test_stats(p).chunk_allocs, 1);
  for (int i = 0; i < RANGES; i++) CK_SPOOL(spool_free(p, free_later[i], s));
  heap_ok(p);
  void *x = NULL;
  CK_SPOOL(spool_alloc(p, &x, 70 * KiB, s));
  ck_assert_ptr_eq(x, free_later[0]);
  heap_ok(p);
  CK_SPOOL(spool_free(p, x, s));
  for (int i = 0; i < RANGES; i++) CK_SPOOL(spool_free(p, keep[i], s));
  CK_SPOOL(spool_free(p, fill1, s));
  CK_SPOOL(spool_free(p, fill2, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

typedef struct handler_state {
  cudaStream_t stream;
  void *held;
  int calls;
} handler_state;

static int free_held(spool_pool *p, size_t size, cudaStream_t stream, void *user) {
  (void)size;
  (void)stream;
  handler_state *h = user;
  h->calls++;
  if (!h->held) return false;
  spool_status s = spool_free(p, h->held, h->stream);
  h->held = NULL;
  return s == SPOOL_OK;
}

/* The out-of-memory handler frees a buffer: the retry sees that memory. */
START_TEST(sim_retry_after_handler_sees_what_it_freed) {
  spool_pool *p = test_pool_with("max_size=64MiB, oom_retries=1");
  cudaStream_t s = test_stream_create();
  handler_state h = {s, test_alloc_on(p, 48 * MiB, s), 0};
  CK_SPOOL(spool_set_oom_handler(p, free_held, &h));
  void *b = test_alloc_on(p, 48 * MiB, s);
  ck_assert_int_eq(h.calls, 1);
  ck_assert_uint_eq(test_stats(p).oom_recoveries, 1);
  CK_SPOOL(spool_free(p, b, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* The message of an allocation that does not fit names the bytes asked, what the heap holds
 * idle per stream and its largest free block. */
START_TEST(sim_oom_message_names_idle_bytes_and_largest_block) {
  cudasim_set_capacity(0, 16 * MiB);
  spool_pool *p = test_pool_with("oom_retries=0");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 12 * MiB, s);
  void *b = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p, &b, 10 * MiB + 3, s), SPOOL_ERR_OOM);
  ck_assert_ptr_null(b);
  CK_LAST_ERROR_HAS("asked 10.00 MiB");
  CK_LAST_ERROR_HAS("largest free block");
  CK_LAST_ERROR_HAS("idle per stream");
  CK_SPOOL(spool_free(p, a, s));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST
#endif

/* ---- stats across streams --------------------------------------------------------------------- */

/* Six streams, one 16 MiB temporary live at a time: the peak stays within 1 MiB per stream of
 * what was ever live at once. */
START_TEST(heap_peak_holds_across_streams) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s[6];
  for (int i = 0; i < 6; i++) s[i] = test_stream_create();
  for (int round = 0; round < 20; round++)
    for (int i = 0; i < 6; i++) {
      void *t = test_alloc_on(p, 16 * MiB, s[i]);
      CK_SPOOL(spool_free(p, t, s[i]));
    }
  spool_stats st = test_stats(p);
  ck_assert_uint_ge(st.bytes_in_use_peak, 16 * MiB);
  ck_assert_uint_le(st.bytes_in_use_peak, 16 * MiB + 6 * MiB);
  test_pool_destroy(p);
  for (int i = 0; i < 6; i++) test_stream_destroy(s[i]);
}
END_TEST

/* Past the pool's 32 share slots a stream's front publishes into the pool's totals instead: forty streams,
 * one 16 MiB temporary live at a time, and the peak still holds, within 1 MiB per stream. */
enum { STREAMS_PAST_SHARES = 40 };
#ifdef SPOOL_TEST_SIM
_Static_assert(STREAMS_PAST_SHARES > SPOOL__SHARES, "the test must pass the share slots");
#endif

START_TEST(heap_peak_holds_across_more_streams_than_share_slots) {
  enum { N = STREAMS_PAST_SHARES };
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s[N];
  for (int i = 0; i < N; i++) s[i] = test_stream_create();
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < N; i++) {
      void *t = test_alloc_on(p, 16 * MiB, s[i]);
      CK_SPOOL(spool_free(p, t, s[i]));
    }
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_ge(st.bytes_in_use_peak, 16 * MiB);
  ck_assert_uint_le(st.bytes_in_use_peak, 16 * MiB + N * MiB);
  test_pool_destroy(p);
  for (int i = 0; i < N; i++) test_stream_destroy(s[i]);
}
END_TEST

/* The buffer count's peak across streams: within 8 buffers per other stream of what was ever
 * live at once, and exact where one stream's buffers are all freed before another's come. */
START_TEST(heap_buffer_peak_holds_across_streams) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s[6];
  void *t[3];
  for (int i = 0; i < 6; i++) s[i] = test_stream_create();
  for (int k = 0; k < 3; k++) t[k] = test_alloc_on(p, 4 * KiB, s[0]);
  for (int k = 0; k < 3; k++) CK_SPOOL(spool_free(p, t[k], s[0]));
  t[0] = test_alloc_on(p, 4 * KiB, s[1]);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.buffers_in_use_peak, 3);
  CK_SPOOL(spool_free(p, t[0], s[1]));
  for (int round = 0; round < 20; round++)
    for (int i = 0; i < 6; i++) {
      for (int k = 0; k < 3; k++) t[k] = test_alloc_on(p, 4 * KiB, s[i]);
      for (int k = 0; k < 3; k++) CK_SPOOL(spool_free(p, t[k], s[i]));
    }
  st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_ge(st.buffers_in_use_peak, 3);
  ck_assert_uint_le(st.buffers_in_use_peak, 3 + 5 * 8);
  test_pool_destroy(p);
  for (int i = 0; i < 6; i++) test_stream_destroy(s[i]);
}
END_TEST

/* Streams that hold many buffers at once, freed before the stats are read: the peak is what
 * was live at once within 8 buffers per other stream, and never above it. */
START_TEST(heap_buffer_peak_of_streams_holding_many_at_once) {
  enum { STREAMS = 3, EACH = 50 };
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s[STREAMS];
  static void *t[STREAMS][EACH];
  for (int i = 0; i < STREAMS; i++) s[i] = test_stream_create();
  for (int k = 0; k < EACH; k++)
    for (int i = 0; i < STREAMS; i++) t[i][k] = test_alloc_on(p, 4 * KiB + (size_t)k * 512, s[i]);
  for (int k = 0; k < EACH; k++)
    for (int i = 0; i < STREAMS; i++) CK_SPOOL(spool_free(p, t[i][k], s[i]));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_ge(st.buffers_in_use_peak, STREAMS * EACH - (STREAMS - 1) * 8);
  ck_assert_uint_le(st.buffers_in_use_peak, STREAMS * EACH);
  test_pool_destroy(p);
  for (int i = 0; i < STREAMS; i++) test_stream_destroy(s[i]);
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* Streams that each hold one small buffer at a time write nothing pool-wide after their first
 * allocation (threads on their own streams then share no written line), and the peak still
 * holds: within 8 buffers per other stream. */
static uint64_t published_buffers(spool_pool *p) { return spool__totals_buffers(p); }

START_TEST(sim_one_buffer_streams_publish_nothing_after_their_first) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s[2] = {test_stream_create(), test_stream_create()};
  for (int i = 0; i < 2; i++) CK_SPOOL(spool_free(p, test_alloc_on(p, 4 * KiB, s[i]), s[i]));
  uint64_t published = published_buffers(p);
  for (int pair = 0; pair < 300; pair++)
    for (int i = 0; i < 2; i++) {
      void *v = test_alloc_on(p, (size_t)(4 + pair % 5) * KiB, s[i]);
      ck_assert_uint_eq(published_buffers(p), published);
      CK_SPOOL(spool_free(p, v, s[i]));
      ck_assert_uint_eq(published_buffers(p), published);
    }
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_ge(st.buffers_in_use_peak, 1);
  ck_assert_uint_le(st.buffers_in_use_peak, 2);
  test_pool_destroy(p);
  for (int i = 0; i < 2; i++) test_stream_destroy(s[i]);
}
END_TEST
#endif

/* The report and the JSON say what each stream holds idle. */
START_TEST(heap_report_lists_streams) {
  spool_pool *p = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  CK_SPOOL(spool_free(p, test_alloc_on(p, 64 * KiB, s), s));
  char buf[8192];
  FILE *f = fmemopen(buf, sizeof buf, "w");
  ck_assert_ptr_nonnull(f);
  CK_SPOOL(spool_report(p, f));
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "heap:"));
  ck_assert_ptr_nonnull(strstr(buf, "in its front"));
  ck_assert_ptr_nonnull(strstr(buf, "largest free block"));
  CK_SPOOL(spool_stats_json(p, buf, sizeof buf));
  ck_assert_ptr_nonnull(strstr(buf, "\"streams\":[{\"stream\":"));
  ck_assert_ptr_nonnull(strstr(buf, "\"bytes_front\":65536"));
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------------------------- */

/* A buffer freed into the heap, freed again: a double free; a pointer inside a live heap buffer:
 * an interior pointer; one of another pool: named. Nothing changes in the heap. */
START_TEST(heap_refusals_kept) {
  spool_pool *p = test_pool_with("front_limit=0"), *q = test_pool_with(NULL);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 64 * KiB, s), *b = test_alloc_on(p, 64 * KiB, s), *c = test_alloc_on(p, 4 * KiB, s);
  CK_SPOOL(spool_free(p, a, s)); /* into the heap: not the size allocated last */
  CK_STATUS(spool_free(p, a, s), SPOOL_ERR_DOUBLE_FREE);
  CK_STATUS(spool_free(p, AT(b, 256), s), SPOOL_ERR_INTERIOR_POINTER);
  CK_STATUS(spool_free(q, b, s), SPOOL_ERR_WRONG_POOL);
  heap_ok(p);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 2);
  ck_assert_uint_eq(st.bad_frees, 2);
  CK_SPOOL(spool_free(p, b, s));
  CK_SPOOL(spool_free(p, c, s));
  test_pool_destroy(q);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST

/* ---- randomized, against a model -------------------------------------------------------------- */

enum { MODEL_SLOTS = 64, MODEL_STREAMS = 3, MODEL_OPS = 6000 };

typedef struct model_buf {
  char *p;
  size_t size;
  int stream;
} model_buf;

static int by_address(const void *x, const void *y) {
  const model_buf *a = x, *b = y;
  return a->p < b->p ? -1 : a->p > b->p;
}

/* No two live buffers overlap, and the pool counts what the model holds. */
static void model_check(spool_pool *p, const model_buf *live, uint64_t op) {
  model_buf sorted[MODEL_SLOTS];
  int n = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < MODEL_SLOTS; i++)
    if (live[i].p) sorted[n++] = live[i], bytes += live[i].size;
  qsort(sorted, (size_t)n, sizeof *sorted, by_address);
#ifdef SPOOL_TEST_SIM
  char why[256];
  ck_assert_msg(spool__heap_check(p, why, sizeof why), "op %llu: heap: %s",
                (unsigned long long)op, why);
#endif
  for (int i = 1; i < n; i++)
    ck_assert_msg(sorted[i - 1].p + sorted[i - 1].size <= sorted[i].p,
                  "op %llu: %p (%zu bytes) overlaps %p", (unsigned long long)op,
                  (void *)sorted[i - 1].p, sorted[i - 1].size, (void *)sorted[i].p);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, bytes);
  ck_assert_uint_eq(st.buffers_in_use, (uint64_t)n);
}

/* slots: buffers live at most (up to MODEL_SLOTS), over all streams. */
static void model_run(const char *conf, uint64_t seed, unsigned slots) {
  spool_pool *p = test_pool_with(conf);
  cudaStream_t s[MODEL_STREAMS];
  for (int i = 0; i < MODEL_STREAMS; i++) s[i] = test_stream_create();
  model_buf live[MODEL_SLOTS] = {{0}};
  for (uint64_t op = 0; op < MODEL_OPS; op++) {
    uint64_t r = test_rand(&seed);
    model_buf *b = &live[r % slots];
    int k = (int)((r >> 8) % MODEL_STREAMS);
    if (b->p) {
      /* most frees on the buffer's own stream; some on another, ordered by a synchronize */
      int fs = (r >> 16) % 8 ? b->stream : k;
      if (fs != b->stream) CK_CUDA(cudaStreamSynchronize(s[b->stream]));
      CK_SPOOL(spool_free(p, b->p, s[fs]));
      if ((r >> 20) % 16 == 0) CK_STATUS(spool_free(p, b->p, s[fs]), SPOOL_ERR_DOUBLE_FREE);
      b->p = NULL;
    } else {
      size_t size = (r >> 24) % 4 ? test_rand_size(&seed, 2 * MiB) : test_rand_size(&seed, 40 * MiB);
      if (size == 0) size = 1;
      b->p = test_alloc_on(p, size, s[k]);
      b->size = size;
      b->stream = k;
    }
    if ((r >> 32) % 512 == 0) CK_CUDA(cudaStreamSynchronize(s[k]));
    if ((r >> 41) % 1024 == 0) CK_SPOOL(spool_trim(p, 0));
    if ((r >> 51) % 2048 == 0) CK_SPOOL(spool_stream_release(p, s[k]));
    if (op % 16 == 0 || TEST_SIM) model_check(p, live, op);
  }
  model_check(p, live, MODEL_OPS);
  for (int i = 0; i < MODEL_SLOTS; i++)
    if (live[i].p) CK_SPOOL(spool_free(p, live[i].p, s[live[i].stream]));
  CK_CUDA(cudaDeviceSynchronize());
  CK_SPOOL(spool_trim(p, 0));
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.bytes_heap, 0); /* every chunk went back */
  test_pool_destroy(p);
  for (int i = 0; i < MODEL_STREAMS; i++) test_stream_destroy(s[i]);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
}

START_TEST(heap_random_operations_keep_every_invariant) {
  model_run(NULL, 0x5EED0001, MODEL_SLOTS);
  model_run("front_limit=0, chunk_idle=0", 0x5EED0002, MODEL_SLOTS);
  model_run("front_limit=64MiB, chunk_idle=4", 0x5EED0003, MODEL_SLOTS);
  model_run(NULL, 0x5EED0004, 6); /* a few live per stream: brief fronts (front_brief) */
}
END_TEST

#ifdef SPOOL_TEST_SIM
/* Fences are the driver's event calls (cheaper than the runtime's, and silent): a fence that
 * cannot be recorded, either way, costs the caller nothing, not even its last CUDA error. */
static void fence_pairs(spool_pool *p, cudaStream_t s, int n) {
  for (int i = 0; i < n; i++) {
    void *a = test_alloc_on(p, 64 * KiB, s);
    void *b = test_alloc_on(p, 8 * KiB, s); /* another size last: a's free goes to the heap */
    CK_SPOOL(spool_free(p, a, s));
    CK_SPOOL(spool_free(p, b, s));
  }
}

START_TEST(sim_fences_use_the_driver_and_leave_the_last_error_alone) {
  spool_pool *p = test_pool_with("fence_every=1, front_limit=0");
  cudaStream_t s = test_stream_create();
  long runtime = cudasim_calls("cudaEventRecord"), driver = cudasim_calls("cuEventRecord");
  fence_pairs(p, s, 4);
  ck_assert_int_gt(cudasim_calls("cuEventRecord"), driver);
  ck_assert_int_gt(cudasim_calls("cuEventQuery"), 0);
  ck_assert_int_eq(cudasim_calls("cudaEventRecord"), runtime);
  uint64_t fences = test_stats(p).fences;
  ck_assert_uint_gt(fences, 0);
  for (int n = 1; n <= 8; n++) { /* the driver's record fails, then the runtime's too */
    cudasim_fail("cuEventRecord", n, cudaErrorLaunchFailure);
    cudasim_fail("cudaEventRecord", n, cudaErrorLaunchFailure);
  }
  fence_pairs(p, s, 4);
  ck_assert_int_eq(cudaPeekAtLastError(), cudaSuccess);
  heap_ok(p);
  test_pool_destroy(p);
  test_stream_destroy(s);
}
END_TEST
#endif

static Suite *heap_suite(void) {
  Suite *s = suite_create("heap");
  TCase *tc = test_tcase("heap");
  tcase_add_test(tc, heap_frees_merge_and_serve_larger_in_place);
  tcase_add_test(tc, heap_middle_free_joins_both_neighbours);
  tcase_add_test(tc, heap_bands_keep_small_blocks_out_of_large_chunks);
  tcase_add_test(tc, heap_idle_chunk_goes_back);
  tcase_add_test(tc, heap_idle_chunk_pending_elsewhere_stays_and_holds_nothing_back);
  tcase_add_test(tc, heap_trim_returns_free_chunks_and_keeps_used_ones);
  tcase_add_test(tc, heap_large_free_reaches_another_stream_with_fence_bytes);
  tcase_add_test(tc, heap_large_front_block_returns_on_a_miss_of_another_size);
  tcase_add_test(tc, heap_peak_holds_across_streams);
  tcase_add_test(tc, heap_peak_holds_across_more_streams_than_share_slots);
  tcase_add_test(tc, heap_buffer_peak_holds_across_streams);
  tcase_add_test(tc, heap_frees_past_the_front_wait_for_the_next_miss);
  tcase_add_test(tc, heap_buffer_peak_of_streams_holding_many_at_once);
  tcase_add_test(tc, heap_report_lists_streams);
  tcase_add_test(tc, heap_refusals_kept);
  tcase_add_test(tc, heap_random_operations_keep_every_invariant);
  suite_add_tcase(s, tc);
#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim");
  tcase_add_test(tc, sim_request_that_fits_the_device_succeeds);
  tcase_add_test(tc, sim_small_request_at_the_limit_takes_a_larger_bands_free_range);
  tcase_add_test(tc, sim_request_that_fits_max_size_succeeds);
  tcase_add_test(tc, sim_full_pool_finds_the_range_that_fits_behind_smaller_ones);
  tcase_add_test(tc, sim_retry_after_handler_sees_what_it_freed);
  tcase_add_test(tc, sim_one_buffer_streams_publish_nothing_after_their_first);
  tcase_add_test(tc, sim_oom_message_names_idle_bytes_and_largest_block);
  tcase_add_test(tc, sim_fences_use_the_driver_and_leave_the_last_error_alone);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(heap_suite()); }
