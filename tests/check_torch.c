/* check_torch: the PyTorch plug-in's C entry points (plugin/spool_torch.h), as PyTorch calls them:
 * alloc and free on several devices and from another current device, record_stream, empty_cache,
 * the memory-fraction limit, out of memory, the config, the statistics JSON.
 *
 * What the plug-in would throw is caught by a test thrower (spool__torch_set_throw) that records
 * it: C cannot catch C++ exceptions. check_torch_throw (C++) checks the real throw.
 *
 * Built twice: check_torch_sim (cudasim) and check_torch_gpu (real CUDA, the plug-in's own
 * objects). Tests that need two devices print why and pass on a one-GPU machine. */
#include "test_main.h"

#include "spool_torch.h"

#include <math.h>
#include <pthread.h>

/* ---- what would have been thrown ------------------------------------------------------------ */

static struct {
  int calls;
  int oom;
  char function[64];
  char message[1024];
} thrown;

static void record_throw(int oom, const char *function, const char *file, int line,
                         const char *message) {
  (void)file;
  (void)line;
  thrown.calls++;
  thrown.oom = oom;
  snprintf(thrown.function, sizeof thrown.function, "%s", function);
  snprintf(thrown.message, sizeof thrown.message, "%s", message);
}

static void torch_setup(void) {
  memset(&thrown, 0, sizeof thrown);
  spool__torch_set_throw(record_throw);
}

/* Leaves the plug-in as loaded; the tests that end normally check it in torch_end. */
static void torch_teardown(void) { (void)spool__torch_forget(); }

/* The end of a test: nothing was thrown unexpectedly, no buffer was left, pools destroyed. */
static void torch_end(void) {
  ck_assert_msg(thrown.calls == 0, "unexpected throw from %s: %s", thrown.function,
                thrown.message);
  int s = spool__torch_forget();
  ck_assert_msg(s == SPOOL_OK, "spool__torch_forget: %s", spool_torch_last_error());
  spool__torch_set_throw(record_throw); /* forget restored the real one */
}

#define CK_THROWN(is_oom, word)                                                               \
  do {                                                                                        \
    ck_assert_msg(thrown.calls == 1, "%d throws, expected 1", thrown.calls);                  \
    ck_assert_int_eq(thrown.oom, (is_oom));                                                   \
    ck_assert_msg(strstr(thrown.message, (word)) != NULL, "thrown \"%s\" lacks \"%s\"",       \
                  thrown.message, (word));                                                    \
    thrown.calls = 0;                                                                         \
  } while (0)

#define CK_TORCH_ERROR_HAS(word)                                                              \
  ck_assert_msg(strstr(spool_torch_last_error(), (word)) != NULL,                             \
                "spool_torch_last_error \"%s\" lacks \"%s\"", spool_torch_last_error(), (word))

/* ---- helpers --------------------------------------------------------------------------------- */

/* The plug-in's JSON for device, which must be there. */
static const char *stats_of(int device) {
  static char buf[4096];
  int s = spool_torch_stats_json(device, buf, sizeof buf);
  ck_assert_msg(s == SPOOL_OK, "spool_torch_stats_json(%d): %s", device,
                spool_torch_last_error());
  return buf;
}

/* The number at "key": in json; the key must be there. */
static uint64_t json_u64(const char *json, const char *key) {
  char pattern[80];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(json, pattern);
  ck_assert_msg(at != NULL, "no %s in %s", key, json);
  return strtoull(at + strlen(pattern), NULL, 10);
}

static uint64_t stat_of(int device, const char *key) { return json_u64(stats_of(device), key); }

static void *torch_alloc(size_t size, int device, cudaStream_t s) {
  void *p = spool_torch_alloc(size, device, s);
  ck_assert_msg(p != NULL, "spool_torch_alloc(%zu, %d) failed: %s", size, device, thrown.message);
  return p;
}

static int current_device(void) {
  int d = -1;
  CK_CUDA(cudaGetDevice(&d));
  return d;
}

static int pointer_device(const void *p) {
  struct cudaPointerAttributes a;
  CK_CUDA(cudaPointerGetAttributes(&a, p));
  return a.device;
}

/* ---- allocation ------------------------------------------------------------------------------ */

START_TEST(alloc_free_counts) {
  cudaStream_t s = test_stream_create();
  ck_assert_ptr_null(spool_torch_alloc(0, 0, s)); /* an empty tensor: no pool, nothing thrown */
  ck_assert_int_eq(spool_torch_stats_json(0, (char[64]){0}, 64), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("no pool on device 0 yet");
  void *a = torch_alloc(3 * MiB, 0, s);
  void *b = torch_alloc(1000, 0, s);
  ck_assert_int_eq(pointer_device(a), 0);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 3 * MiB + 1000);
  ck_assert_uint_eq(stat_of(0, "bytes_in_use"), 3 * MiB + 1000);
  ck_assert_uint_eq(stat_of(0, "allocs"), 2);
  spool_torch_free(a, 3 * MiB, 0, s);
  spool_torch_free(b, 1000, 0, s);
  spool_torch_free(NULL, 0, 0, s);
  const char *json = stats_of(0);
  ck_assert_uint_eq(json_u64(json, "torch_bytes_in_use"), 0);
  ck_assert_uint_eq(json_u64(json, "frees"), 2);
  ck_assert_uint_eq(json_u64(json, "free_failures"), 0);
  ck_assert_ptr_nonnull(strstr(json, "\"torch_limit\":null"));
  CK_CUDA(cudaStreamSynchronize(s));
  test_stream_destroy(s);
  torch_end();
}
END_TEST

/* PyTorch passes the device; the current device may be another, and after the call it is what it
 * was. A free of a legacy-stream buffer from another current device goes to the buffer's device
 * (NULL means the current device's legacy stream, so the plug-in switches first). */
START_TEST(alloc_free_several_devices) {
  NEED_DEVICES(2); /* cudasim: 2 devices; a GPU machine: up to 3 of its own */
  int n = test_device_count() < 3 ? test_device_count() : 3;
  cudaStream_t s[3];
  void *p[3];
  for (int d = 0; d < n; d++) {
    s[d] = test_stream_on(d);
    p[d] = torch_alloc(2 * MiB, d, s[d]);
    ck_assert_int_eq(current_device(), 0);
    ck_assert_int_eq(pointer_device(p[d]), d);
  }
  CK_CUDA(cudaSetDevice(n - 1));
  void *legacy = torch_alloc(4 * KiB, 0, NULL); /* device 0's legacy stream */
  ck_assert_int_eq(pointer_device(legacy), 0);
  ck_assert_int_eq(current_device(), n - 1);
  spool_torch_free(legacy, 4 * KiB, 0, NULL);
  ck_assert_int_eq(current_device(), n - 1);
  for (int d = 0; d < n; d++) {
    ck_assert_uint_eq(stat_of(d, "torch_bytes_in_use"), 2 * MiB);
    spool_torch_free(p[d], 2 * MiB, d, s[d]);
    ck_assert_uint_eq(stat_of(d, "frees"), d == 0 ? 2 : 1);
    ck_assert_uint_eq(stat_of(d, "torch_bytes_in_use"), 0);
  }
  CK_CUDA(cudaSetDevice(0));
  for (int d = 0; d < n; d++) {
    CK_CUDA(cudaSetDevice(d));
    test_stream_destroy(s[d]);
  }
  CK_CUDA(cudaSetDevice(0));
  torch_end();
}
END_TEST

START_TEST(alloc_bad_device_throws) {
  ck_assert_ptr_null(spool_torch_alloc(64, SPOOL_TORCH_MAX_DEVICES, NULL));
  CK_THROWN(0, "out of range");
  ck_assert_ptr_null(spool_torch_alloc(64, -1, NULL));
  CK_THROWN(0, "device -1");
  spool_torch_init(1);
  ck_assert_ptr_null(spool_torch_alloc(64, 99, NULL));
  CK_THROWN(0, "PyTorch sees 1");
  torch_end();
}
END_TEST

/* Concurrent first allocations (autograd's threads) make one pool, and every buffer is counted. */
#define THREADS 8
#define PER_THREAD 200

static void *alloc_loop(void *arg) {
  cudaStream_t s = (cudaStream_t)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    size_t size = (size_t)(i % 7 + 1) * 4 * KiB;
    void *p = spool_torch_alloc(size, 0, s);
    if (!p) return (void *)1;
    spool_torch_free(p, size, 0, s);
  }
  return NULL;
}

START_TEST(threads_share_one_pool) {
  pthread_t t[THREADS];
  cudaStream_t s[THREADS];
  for (int i = 0; i < THREADS; i++) {
    s[i] = test_stream_create();
    ck_assert_int_eq(pthread_create(&t[i], NULL, alloc_loop, s[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    void *failed = NULL;
    ck_assert_int_eq(pthread_join(t[i], &failed), 0);
    ck_assert_ptr_null(failed);
  }
  const char *json = stats_of(0);
  ck_assert_uint_eq(json_u64(json, "allocs"), THREADS * PER_THREAD);
  ck_assert_uint_eq(json_u64(json, "frees"), THREADS * PER_THREAD);
  ck_assert_uint_eq(json_u64(json, "torch_bytes_in_use"), 0);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 1);
#endif
  for (int i = 0; i < THREADS; i++) test_stream_destroy(s[i]);
  torch_end();
}
END_TEST

/* A free spool refuses is written to stderr and counted, never thrown (PyTorch frees in
 * destructors); the pointer stays allocated. */
START_TEST(free_failure_counted_not_thrown) {
  cudaStream_t s = test_stream_create();
  char *a = torch_alloc(1 * MiB, 0, s);
  spool_torch_free(a + 256, 1 * MiB, 0, s); /* inside the buffer */
  spool_torch_free(a, 1 * MiB, 5, s);       /* device 5 has no pool */
  ck_assert_int_eq(thrown.calls, 0);
  ck_assert_uint_eq(stat_of(0, "free_failures"), 2);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 1 * MiB);
  spool_torch_free(a, 1 * MiB, 0, s);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 0);
  test_stream_destroy(s);
  torch_end();
}
END_TEST

/* ---- out of memory --------------------------------------------------------------------------- */

/* spool's own out-of-memory message, as c10::OutOfMemoryError would carry it. */
START_TEST(oom_throws_spool_message) {
  ck_assert_int_eq(spool_torch_configure("max_size=64MiB, cache=off"), SPOOL_OK);
  cudaStream_t s = test_stream_create();
  void *a = torch_alloc(32 * MiB, 0, s);
  ck_assert_ptr_null(spool_torch_alloc(128 * MiB, 0, s));
  CK_THROWN(1, "spool_alloc: out of device memory: asked 128.00 MiB");
  ck_assert_ptr_nonnull(strstr(thrown.message, "limit 64.00 MiB"));
  ck_assert_str_eq(thrown.function, "spool_torch_alloc");
  ck_assert_str_eq(spool_torch_last_error(), thrown.message);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 32 * MiB); /* the failure counted nothing */
  ck_assert_uint_eq(stat_of(0, "ooms"), 1);
  void *b = torch_alloc(16 * MiB, 0, s); /* still usable */
  spool_torch_free(a, 32 * MiB, 0, s);
  spool_torch_free(b, 16 * MiB, 0, s);
  test_stream_destroy(s);
  torch_end();
}
END_TEST

/* The ctypes entry: the same pool and counters, failures returned and nothing thrown. */
START_TEST(try_alloc_returns_status) {
  ck_assert_int_eq(spool_torch_configure("max_size=64MiB, cache=off"), SPOOL_OK);
  cudaStream_t s = test_stream_create();
  void *a = (void *)1;
  ck_assert_int_eq(spool_torch_try_alloc(&a, 0, 0, s), SPOOL_OK);
  ck_assert_ptr_null(a);
  ck_assert_int_eq(spool_torch_try_alloc(&a, 32 * MiB, 0, s), SPOOL_OK);
  ck_assert_ptr_nonnull(a);
  void *b = (void *)1;
  ck_assert_int_eq(spool_torch_try_alloc(&b, 128 * MiB, 0, s), SPOOL_ERR_OOM);
  ck_assert_ptr_null(b);
  CK_TORCH_ERROR_HAS("spool_alloc: out of device memory: asked 128.00 MiB");
  ck_assert_int_eq(spool_torch_try_alloc(&b, 64, -1, s), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("device -1");
  ck_assert_int_eq(spool_torch_try_alloc(NULL, 64, 0, s), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 32 * MiB);
  spool_torch_free(a, 32 * MiB, 0, s);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 0);
  test_stream_destroy(s);
  torch_end(); /* and nothing was thrown */
}
END_TEST

/* The device's total memory, as the plug-in reads it. */
static uint64_t device_total(int device) {
  size_t free_b = 0, total_b = 0;
  int saved = current_device();
  CK_CUDA(cudaSetDevice(device));
  CK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  CK_CUDA(cudaSetDevice(saved));
  return total_b;
}

START_TEST(memory_fraction_limits_tensors) {
  cudaStream_t s = test_stream_create();
  uint64_t total = device_total(0);
  double fraction = (double)(256 * MiB) / (double)total;
  spool_torch_set_memory_fraction(fraction, 0);
  void *a = torch_alloc(200 * MiB, 0, s); /* the pool is made here: the limit came first */
  uint64_t limit = stat_of(0, "torch_limit");
  ck_assert_uint_eq(limit, (uint64_t)(fraction * (double)total));
  ck_assert_ptr_null(spool_torch_alloc(100 * MiB, 0, s));
  CK_THROWN(1, "torch.cuda.set_per_process_memory_fraction");
  ck_assert_ptr_nonnull(strstr(thrown.message, "asked 100.00 MiB on device 0, where tensors hold "
                                               "200.00 MiB"));
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 200 * MiB);
  spool_torch_free(a, 200 * MiB, 0, s);
  void *b = torch_alloc(100 * MiB, 0, s); /* fits again */
  spool_torch_set_memory_fraction(0.0, 0); /* nothing more */
  ck_assert_ptr_null(spool_torch_alloc(1, 0, s));
  CK_THROWN(1, "out of device memory");
  spool_torch_set_memory_fraction(1.0, 0);
  spool_torch_free(b, 100 * MiB, 0, s);
  test_stream_destroy(s);
  torch_end();
}
END_TEST

START_TEST(memory_fraction_arguments) {
  spool_torch_set_memory_fraction(1.5, 0);
  CK_THROWN(0, "fraction 1.5 is not between 0 and 1");
  spool_torch_set_memory_fraction(NAN, 0);
  CK_THROWN(0, "is not between 0 and 1");
  spool_torch_set_memory_fraction(0.5, -2);
  CK_THROWN(0, "device -2 is out of range");
#ifdef SPOOL_TEST_SIM
  cudasim_fail("cudaMemGetInfo", 1, cudaErrorUnknown);
  spool_torch_set_memory_fraction(0.5, 0);
  CK_THROWN(0, "cudaMemGetInfo on device 0 failed: cudaErrorUnknown");
  CK_CUDA(cudaGetLastError()); /* reported, so cleared */
#endif
  torch_end();
}
END_TEST

/* ---- record_stream --------------------------------------------------------------------------- */

/* A buffer recorded on another stream is not reused until that stream's work is done; without
 * the record, the freeing stream's cache hands it out again at once. */
START_TEST(record_stream_defers_reuse) {
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = torch_alloc(1 * MiB, 0, s1);
  spool_torch_free(a, 1 * MiB, 0, s1);
  void *b = torch_alloc(1 * MiB, 0, s1);
  ck_assert_ptr_eq(a, b); /* the control: reused at once */
#ifdef SPOOL_TEST_SIM
  cudasim_hold(s2); /* s2's work stays pending: a kernel still reading b */
#endif
  spool_torch_record_stream(b, s2);
  spool_torch_record_stream(NULL, s2); /* an empty tensor: nothing */
  spool_torch_free(b, 1 * MiB, 0, s1);
  void *c = torch_alloc(1 * MiB, 0, s1);
#ifdef SPOOL_TEST_SIM
  ck_assert_ptr_ne(c, b);
  cudasim_release(s2);
#endif
  spool_torch_free(c, 1 * MiB, 0, s1);
  CK_CUDA(cudaDeviceSynchronize());
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  torch_end();
}
END_TEST

START_TEST(record_stream_errors_throw) {
  cudaStream_t s = test_stream_create();
  int local = 0;
  spool_torch_record_stream(&local, s);
  CK_THROWN(0, "spool_torch_record_stream: spool_pool_of");
  ck_assert_str_eq(thrown.function, "spool_torch_record_stream");
  char *a = torch_alloc(1 * MiB, 0, s);
  spool_torch_record_stream(a + 512, s); /* its pool is found, but it is no buffer's start */
  CK_THROWN(0, "spool_torch_record_stream: spool_record_stream");
  spool_torch_free(a, 1 * MiB, 0, s);
  test_stream_destroy(s);
  torch_end();
}
END_TEST

START_TEST(record_stream_needs_tracking) {
  ck_assert_int_eq(spool_torch_configure("track=off, cache=off"), SPOOL_OK);
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = torch_alloc(1 * MiB, 0, s1);
  spool_torch_record_stream(a, s2);
  CK_THROWN(0, "spool_torch_record_stream");
  spool_torch_free(a, 1 * MiB, 0, s1);
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  torch_end();
}
END_TEST

/* ---- empty_cache ----------------------------------------------------------------------------- */

START_TEST(empty_cache_gives_memory_back) {
  cudaStream_t s = test_stream_create();
  void *keep = torch_alloc(8 * MiB, 0, s);
  void *p[8];
  for (int i = 0; i < 8; i++) p[i] = torch_alloc(16 * MiB, 0, s);
  for (int i = 0; i < 8; i++) spool_torch_free(p[i], 16 * MiB, 0, s);
  uint64_t before = stat_of(0, "bytes_reserved");
  ck_assert_uint_ge(before, 8 * MiB + 8 * 16 * MiB); /* the heap holds the freed ones */
  spool_torch_empty_cache();
  const char *json = stats_of(0);
  uint64_t after = json_u64(json, "bytes_reserved");
  ck_assert_uint_lt(after, before);
  ck_assert_uint_ge(after, 8 * MiB); /* the live buffer stays */
#ifdef SPOOL_TEST_SIM
  ck_assert_uint_eq(after, 32 * MiB); /* the heap chunk the live buffer sits in */
#endif
  ck_assert_uint_eq(json_u64(json, "bytes_front"), 0);
  /* what stays idle is the rest of the live buffer's chunk */
  ck_assert_uint_le(json_u64(json, "bytes_cached"), json_u64(json, "bytes_heap") - 8 * MiB);
  ck_assert_uint_ge(json_u64(json, "trims"), 1);
  CK_CUDA(cudaMemsetAsync(keep, 1, 8 * MiB, s));
  spool_torch_free(keep, 8 * MiB, 0, s);
  spool_torch_empty_cache();
  ck_assert_uint_eq(stat_of(0, "bytes_reserved"), 0); /* freed in stream order, then synchronized */
  test_stream_destroy(s);
  torch_end();
}
END_TEST

/* Before any allocation there is nothing to do; with several devices every pool is trimmed. */
START_TEST(empty_cache_every_device) {
  spool_torch_empty_cache();
  ck_assert_int_eq(thrown.calls, 0);
  NEED_DEVICES(2);
  cudaStream_t s0 = test_stream_on(0), s1 = test_stream_on(1);
  spool_torch_free(torch_alloc(32 * MiB, 0, s0), 32 * MiB, 0, s0);
  spool_torch_free(torch_alloc(32 * MiB, 1, s1), 32 * MiB, 1, s1);
  ck_assert_uint_gt(stat_of(1, "bytes_reserved"), 0);
  spool_torch_empty_cache();
  ck_assert_int_eq(current_device(), 0);
  ck_assert_uint_eq(stat_of(0, "bytes_reserved"), 0);
  ck_assert_uint_eq(stat_of(1, "bytes_reserved"), 0);
  test_stream_destroy(s0);
  CK_CUDA(cudaSetDevice(1));
  test_stream_destroy(s1);
  CK_CUDA(cudaSetDevice(0));
  torch_end();
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(empty_cache_failure_throws) {
  spool_torch_free(torch_alloc(1 * MiB, 0, NULL), 1 * MiB, 0, NULL);
  cudasim_fail("cudaDeviceSynchronize", 1, cudaErrorLaunchFailure);
  spool_torch_empty_cache();
  CK_THROWN(0, "cudaDeviceSynchronize on device 0 failed: cudaErrorLaunchFailure");
  ck_assert_str_eq(thrown.function, "spool_torch_empty_cache");
  spool_torch_empty_cache(); /* the next one works */
  ck_assert_uint_eq(stat_of(0, "bytes_reserved"), 0);
  torch_end();
}
END_TEST
#endif

/* ---- config ---------------------------------------------------------------------------------- */

START_TEST(configure_errors) {
  ck_assert_int_eq(spool_torch_configure("bogus=1"), SPOOL_ERR_CONFIG);
  CK_TORCH_ERROR_HAS("unknown key 'bogus'");
  ck_assert_int_eq(spool_torch_configure("reserve=2GiB, max_size=1GiB"), SPOOL_ERR_CONFIG);
  CK_TORCH_ERROR_HAS("reserve");
  setenv("SPOOL_CONF", "relase_threshold=1", 1);
  ck_assert_int_eq(spool_torch_configure(NULL), SPOOL_ERR_CONFIG);
  CK_TORCH_ERROR_HAS("SPOOL_CONF line 1");
  unsetenv("SPOOL_CONF");
  ck_assert_int_eq(spool_torch_configure(""), SPOOL_OK);
  spool_torch_free(torch_alloc(4 * KiB, 0, NULL), 4 * KiB, 0, NULL);
  ck_assert_int_eq(spool_torch_configure("cache=off"), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("the pools exist already");
  torch_end();
}
END_TEST

/* SPOOL_CONF, then the text on top: here the limit from one and the retries from the other. */
START_TEST(configure_layers_env_then_text) {
  setenv("SPOOL_CONF", "max_size=64MiB, oom_retries=5", 1);
  ck_assert_int_eq(spool_torch_configure("oom_retries=0, cache=off"), SPOOL_OK);
  unsetenv("SPOOL_CONF"); /* read at configure */
  ck_assert_ptr_null(spool_torch_alloc(128 * MiB, 0, NULL));
  CK_THROWN(1, "after 0 retries");
  ck_assert_ptr_nonnull(strstr(thrown.message, "limit 64.00 MiB"));
  torch_end();
}
END_TEST

/* Without spool_torch_configure the first allocation reads SPOOL_CONF; a bad one fails it with
 * the config's message (not as out of memory), and the next allocation tries again. */
START_TEST(config_from_env_at_first_alloc) {
  setenv("SPOOL_CONF", "bogus=1", 1);
  ck_assert_ptr_null(spool_torch_alloc(4 * KiB, 0, NULL));
  CK_THROWN(0, "making the pool of device 0 failed");
  ck_assert_ptr_nonnull(strstr(thrown.message, "SPOOL_CONF line 1: unknown key 'bogus'"));
  setenv("SPOOL_CONF", "max_size=64MiB", 1);
  spool_torch_free(torch_alloc(4 * KiB, 0, NULL), 4 * KiB, 0, NULL);
  unsetenv("SPOOL_CONF");
  ck_assert_ptr_null(spool_torch_alloc(128 * MiB, 0, NULL));
  CK_THROWN(1, "limit 64.00 MiB");
  torch_end();
}
END_TEST

/* The plug-in's defaults: caches that keep every freed block, as PyTorch's allocator does;
 * SPOOL_CONF and the text still go on top. */
static const spool_config *config_of(void *p) {
  spool_pool *pool = NULL;
  ck_assert_int_eq(spool_pool_of(p, &pool), SPOOL_OK);
  return spool_pool_config(pool);
}

START_TEST(config_plugin_defaults) {
  void *p = torch_alloc(4 * KiB, 0, NULL);
  ck_assert_uint_eq(config_of(p)->chunk_idle, 1000000); /* the plug-in's own */
  ck_assert_uint_eq(config_of(p)->front_limit, SPOOL_FRONT_LIMIT_DEFAULT);
  ck_assert_uint_eq(config_of(p)->heap_max_block, SPOOL_HEAP_MAX_BLOCK_LIMIT);
  ck_assert(config_of(p)->cache);
  spool_torch_free(p, 4 * KiB, 0, NULL);
  torch_end();
  setenv("SPOOL_CONF", "front_limit=1GiB", 1);
  ck_assert_int_eq(spool_torch_configure("heap_max_block=64MiB"), SPOOL_OK);
  unsetenv("SPOOL_CONF");
  p = torch_alloc(4 * KiB, 0, NULL);
  ck_assert_uint_eq(config_of(p)->front_limit, (uint64_t)1 << 30);
  ck_assert_uint_eq(config_of(p)->heap_max_block, (uint64_t)64 << 20);
  spool_torch_free(p, 4 * KiB, 0, NULL);
  torch_end();
}
END_TEST

/* The config's device is ignored: each device gets its own pool. */
START_TEST(config_device_ignored) {
  ck_assert_int_eq(spool_torch_configure("device=3"), SPOOL_OK);
  void *p = torch_alloc(4 * KiB, 0, NULL);
  ck_assert_int_eq(pointer_device(p), 0);
  spool_torch_free(p, 4 * KiB, 0, NULL);
  torch_end();
}
END_TEST

/* ---- statistics JSON ------------------------------------------------------------------------- */

START_TEST(stats_json_arguments) {
  char buf[4096];
  ck_assert_int_eq(spool_torch_stats_json(0, NULL, 10), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_torch_stats_json(0, buf, 0), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_torch_stats_json(SPOOL_TORCH_MAX_DEVICES, buf, sizeof buf),
                   SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("out of range");
  void *p = torch_alloc(4 * KiB, 0, NULL);
  const char *json = stats_of(0);
  size_t need = strlen(json) + 1;
  ck_assert_int_eq(json[0], '{');
  ck_assert_int_eq(json[need - 2], '}');
  ck_assert_ptr_null(strstr(json, "}{"));
  ck_assert_int_eq(spool_torch_stats_json(0, buf, need), SPOOL_OK);
  ck_assert_int_eq(spool_torch_stats_json(0, buf, need - 1), SPOOL_ERR_INVALID);
  ck_assert_str_eq(buf, "");
  CK_TORCH_ERROR_HAS("the JSON needs");
  ck_assert_int_eq(spool_torch_stats_json(0, buf, 40), SPOOL_ERR_INVALID); /* spool's part */
  CK_TORCH_ERROR_HAS("spool_torch_stats_json: spool_stats_json");
  spool_torch_free(p, 4 * KiB, 0, NULL);
  ck_assert_str_eq(spool_torch_version(), spool_version_string());
  torch_end();
}
END_TEST

/* ---- what the allocator class for PyTorch reads (python/spool/_torch_native.cpp) ------------- */

static spool_torch_counters counters_of(int device) {
  spool_torch_counters c = {.size = sizeof c};
  int s = spool_torch_counters_get(device, &c);
  ck_assert_msg(s == SPOOL_OK, "spool_torch_counters_get(%d): %s", device,
                spool_torch_last_error());
  return c;
}

/* The counters are spool's stats: PyTorch's memory_stats() must agree with spool.torch.stats(). */
START_TEST(counters_are_spools_stats) {
  spool_torch_counters c = counters_of(0); /* no pool yet: zeros, as PyTorch reports */
  ck_assert_uint_eq(c.size, sizeof c);
  ck_assert_uint_eq(c.allocs + c.bytes_reserved + c.bytes_reserved_peak, 0);
  cudaStream_t s = test_stream_create();
  void *a = torch_alloc(3 * MiB, 0, s);
  void *b = torch_alloc(1000, 0, s);
  spool_torch_free(b, 1000, 0, s);
  c = counters_of(0);
  const char *json = stats_of(0);
  ck_assert_uint_eq(c.bytes_in_use, 3 * MiB);
  ck_assert_uint_eq(c.bytes_in_use_peak, 3 * MiB + 1000);
  ck_assert_uint_eq(c.bytes_allocated, 3 * MiB + 1000);
  ck_assert_uint_eq(c.buffers_in_use, 1);
  ck_assert_uint_eq(c.allocs, 2);
  ck_assert_uint_eq(c.frees, 1);
  ck_assert_uint_eq(c.torch_bytes_in_use, 3 * MiB);
  ck_assert_uint_eq(c.bytes_reserved, json_u64(json, "bytes_reserved"));
  ck_assert_uint_eq(c.bytes_reserved_peak, json_u64(json, "bytes_reserved_peak"));
  ck_assert_uint_eq(c.largest_free_block, json_u64(json, "largest_free_block"));
  ck_assert_uint_eq(c.chunk_allocs, json_u64(json, "chunk_allocs"));
  ck_assert_int_eq(spool_torch_reset_peaks(0), SPOOL_OK);
  c = counters_of(0);
  ck_assert_uint_eq(c.bytes_in_use_peak, 3 * MiB);
  ck_assert_uint_eq(c.bytes_reserved_peak, c.bytes_reserved);
  spool_torch_free(a, 3 * MiB, 0, s);
  CK_CUDA(cudaStreamSynchronize(s));
  test_stream_destroy(s);
  torch_end();
}
END_TEST

START_TEST(counters_arguments) {
  spool_torch_counters c = {.size = sizeof c - 1};
  ck_assert_int_eq(spool_torch_counters_get(0, &c), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("sizeof(spool_torch_counters)");
  ck_assert_int_eq(spool_torch_counters_get(0, NULL), SPOOL_ERR_INVALID);
  c.size = sizeof c;
  ck_assert_int_eq(spool_torch_counters_get(-1, &c), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("out of range");
  ck_assert_int_eq(spool_torch_reset_peaks(SPOOL_TORCH_MAX_DEVICES), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_torch_reset_peaks(0), SPOOL_OK); /* no pool: nothing to reset */
  ck_assert_int_eq(spool_torch_cache_info(0, NULL), SPOOL_ERR_INVALID);
  torch_end();
}
END_TEST

/* C code in the process gets the frameworks' pool: spool_alloc on it is counted with their
 * buffers, and the frameworks' next allocation does not make another pool. */
START_TEST(c_code_shares_the_frameworks_pool) {
  cudaStream_t s = test_stream_create();
  spool_pool *pool = NULL;
  ck_assert_int_eq(spool_torch_pool(0, &pool), SPOOL_OK); /* made here, before any tensor */
  ck_assert_ptr_nonnull(pool);
  void *c_buf = NULL;
  CK_SPOOL(spool_alloc(pool, &c_buf, 5 * MiB, s));
  void *tensor = torch_alloc(3 * MiB, 0, s);
  spool_pool *again = NULL;
  ck_assert_int_eq(spool_torch_pool(0, &again), SPOOL_OK);
  ck_assert_ptr_eq(again, pool);
  spool_torch_counters c = counters_of(0);
  ck_assert_uint_eq(c.buffers_in_use, 2);
  ck_assert_uint_eq(c.bytes_in_use, 8 * MiB);
  ck_assert_uint_eq(stat_of(0, "torch_bytes_in_use"), 3 * MiB); /* the fraction counts tensors */
  CK_SPOOL(spool_free(pool, c_buf, s));
  spool_torch_free(tensor, 3 * MiB, 0, s);
  ck_assert_uint_eq(counters_of(0).buffers_in_use, 0);
  test_stream_destroy(s);
  torch_end();
}
END_TEST

START_TEST(pool_arguments) {
  spool_pool *pool = (spool_pool *)&pool;
  ck_assert_int_eq(spool_torch_pool(-1, &pool), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("spool_torch_pool: device -1 is out of range");
  ck_assert_ptr_null(pool);
  ck_assert_int_eq(spool_torch_pool(0, NULL), SPOOL_ERR_INVALID);
  CK_TORCH_ERROR_HAS("out is NULL");
  setenv("SPOOL_CONF", "max_size=nonsense", 1); /* making the pool fails: its status, no pool */
  ck_assert_int_eq(spool_torch_pool(0, &pool), SPOOL_ERR_CONFIG);
  unsetenv("SPOOL_CONF");
  ck_assert_ptr_null(pool);
  torch_end();
}
END_TEST

/* cuDNN's benchmark bounds its workspaces by cacheInfo: the device's free memory to start with,
 * as PyTorch's allocator answers; then no more than max_size and the memory fraction leave. */
START_TEST(cache_info_bounds_what_could_be_served) {
  /* The device's free memory, read between two readings of ours: other processes (ctest -j)
   * may allocate or free meanwhile, so it lies between them rather than equal to one. */
  size_t largest = 0, before = 0, free_b = 0, total_b = 0;
  CK_CUDA(cudaMemGetInfo(&before, &total_b));
  ck_assert_int_eq(spool_torch_cache_info(0, &largest), SPOOL_OK);
  CK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  ck_assert_uint_ge(largest, before < free_b ? before : free_b);
  ck_assert_uint_le(largest, before > free_b ? before : free_b);
  largest = 5 * MiB; /* the caller's guess is kept when nothing caps it */
  ck_assert_int_eq(spool_torch_cache_info(0, &largest), SPOOL_OK);
  ck_assert_uint_eq(largest, 5 * MiB);
  ck_assert_int_eq(spool_torch_configure("max_size=256MiB"), SPOOL_OK);
  cudaStream_t s = test_stream_create();
  void *a = torch_alloc(1 * MiB, 0, s);
  spool_torch_free(a, 1 * MiB, 0, s); /* idle now, in a heap chunk */
  CK_CUDA(cudaStreamSynchronize(s));
  spool_torch_counters c = counters_of(0);
  ck_assert_uint_gt(c.largest_free_block, 0);
  largest = 0;
  ck_assert_int_eq(spool_torch_cache_info(0, &largest), SPOOL_OK);
  ck_assert_uint_eq(largest, 256 * MiB - c.bytes_reserved > c.largest_free_block
                                 ? 256 * MiB - c.bytes_reserved : c.largest_free_block);
  spool_torch_set_memory_fraction((double)(64 * MiB) / (double)total_b, 0);
  largest = 0;
  ck_assert_int_eq(spool_torch_cache_info(0, &largest), SPOOL_OK);
  ck_assert_uint_le(largest, 64 * MiB);
  ck_assert_uint_ge(largest, 64 * MiB - 1);
  test_stream_destroy(s);
  torch_end();
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------- */

static TCase *torch_tcase(const char *name) {
  TCase *tc = test_tcase(name);
  tcase_add_checked_fixture(tc, torch_setup, torch_teardown);
  return tc;
}

static Suite *torch_suite(void) {
  Suite *s = suite_create("torch");
  TCase *tc = torch_tcase("alloc");
  tcase_add_test(tc, alloc_free_counts);
  tcase_add_test(tc, alloc_free_several_devices);
  tcase_add_test(tc, alloc_bad_device_throws);
  tcase_add_test(tc, threads_share_one_pool);
  tcase_add_test(tc, free_failure_counted_not_thrown);
  suite_add_tcase(s, tc);
  tc = torch_tcase("oom");
  tcase_add_test(tc, oom_throws_spool_message);
  tcase_add_test(tc, try_alloc_returns_status);
  tcase_add_test(tc, memory_fraction_limits_tensors);
  tcase_add_test(tc, memory_fraction_arguments);
  suite_add_tcase(s, tc);
  tc = torch_tcase("record_stream");
  tcase_add_test(tc, record_stream_defers_reuse);
  tcase_add_test(tc, record_stream_errors_throw);
  tcase_add_test(tc, record_stream_needs_tracking);
  suite_add_tcase(s, tc);
  tc = torch_tcase("empty_cache");
  tcase_add_test(tc, empty_cache_gives_memory_back);
  tcase_add_test(tc, empty_cache_every_device);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, empty_cache_failure_throws);
#endif
  suite_add_tcase(s, tc);
  tc = torch_tcase("config");
  tcase_add_test(tc, configure_errors);
  tcase_add_test(tc, configure_layers_env_then_text);
  tcase_add_test(tc, config_from_env_at_first_alloc);
  tcase_add_test(tc, config_device_ignored);
  tcase_add_test(tc, config_plugin_defaults);
  tcase_add_test(tc, stats_json_arguments);
  suite_add_tcase(s, tc);
  tc = torch_tcase("native_class");
  tcase_add_test(tc, counters_are_spools_stats);
  tcase_add_test(tc, counters_arguments);
  tcase_add_test(tc, cache_info_bounds_what_could_be_served);
  tcase_add_test(tc, c_code_shares_the_frameworks_pool);
  tcase_add_test(tc, pool_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_main(torch_suite()); }
