/* check_pool: creating, configuring, adopting and destroying pools (spool_pool_*).
 *
 * Built twice: check_pool_sim (cudasim, SPOOL_TEST_SIM) and check_pool_gpu (real CUDA). Tests
 * outside `#ifdef SPOOL_TEST_SIM` must hold on a real device too. */
#include "test_main.h"

/* ---- helpers ------------------------------------------------------------------------------- */

/* A create that must fail with want, leaving *pool NULL and a message behind. */
static void expect_create_fails(const spool_config *cfg, spool_status want) {
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_create(&p, cfg), want);
  ck_assert_ptr_null(p);
  ck_assert_msg(spool_last_error()[0] != '\0', "no message for a failed create");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_stream_count(), 0);
#endif
}

static cudaMemPool_t make_cuda_pool(int device) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t h = NULL;
  CK_CUDA(cudaMemPoolCreate(&h, &props));
  ck_assert_ptr_nonnull(h);
  return h;
}

/* Allocates and frees through spool on a fresh stream: the pool works. */
static void check_pool_usable(spool_pool *p, size_t size) {
  cudaStream_t s = test_stream_create();
  void *ptr = NULL;
  CK_SPOOL(spool_alloc(p, &ptr, size, s));
  ck_assert_ptr_nonnull(ptr);
  CK_CUDA(cudaMemsetAsync(ptr, 0x3C, size, s));
  CK_SPOOL(spool_free(p, ptr, s));
  test_stream_destroy(s);
}

typedef struct pool_settings {
  uint64_t threshold;
  int reuse[3];
} pool_settings;

static const enum cudaMemPoolAttr REUSE[3] = {cudaMemPoolReuseFollowEventDependencies,
                                              cudaMemPoolReuseAllowOpportunistic,
                                              cudaMemPoolReuseAllowInternalDependencies};

static pool_settings read_settings(cudaMemPool_t h) {
  pool_settings s;
  s.threshold = test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold);
  for (int i = 0; i < 3; i++) s.reuse[i] = test_pool_attr_int(h, REUSE[i]);
  return s;
}

static void write_settings(cudaMemPool_t h, const pool_settings *s) {
  test_pool_set_attr_u64(h, cudaMemPoolAttrReleaseThreshold, s->threshold);
  for (int i = 0; i < 3; i++) {
    int v = s->reuse[i];
    CK_CUDA(cudaMemPoolSetAttribute(h, REUSE[i], &v));
  }
}

/* ---- defaults and knobs ---------------------------------------------------------------------- */

START_TEST(config_init_defaults) {
  spool_config cfg = test_config();
  ck_assert_int_eq(cfg.device, 0);
  ck_assert_uint_eq(cfg.release_threshold, UINT64_MAX);
  ck_assert_uint_eq(cfg.reserve, 0);
  ck_assert_uint_eq(cfg.max_size, 0);
  ck_assert(cfg.reuse_follow_event_dependencies);
  ck_assert(cfg.reuse_allow_opportunistic);
  ck_assert(cfg.reuse_allow_internal_dependencies);
  ck_assert_int_eq(cfg.peer_access_count, 0);
  ck_assert_int_eq(cfg.pool, SPOOL_POOL_OWN);
}
END_TEST

START_TEST(create_defaults) {
  spool_config cfg = test_config();
  spool_pool *p = test_pool_create(&cfg);
  cudaMemPool_t h = spool_pool_handle(p);
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(spool_pool_device(p), 0);
  const spool_config *got = spool_pool_config(p);
  ck_assert_ptr_nonnull(got);
  ck_assert_uint_eq(got->release_threshold, UINT64_MAX);
  ck_assert_int_eq(got->pool, SPOOL_POOL_OWN);
  /* Defaults as CUDA sees them: keep everything, every reuse policy on. */
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), UINT64_MAX);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(test_pool_attr_int(h, REUSE[i]), 1);
  /* A fresh pool without reserve holds nothing and has counted nothing. */
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_reserved, 0);
  ck_assert_uint_eq(st.bytes_in_use, 0);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  ck_assert_uint_eq(st.allocs, 0);
  ck_assert_uint_eq(st.frees, 0);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 1);
#endif
  check_pool_usable(p, 1 * MiB);
  test_pool_destroy(p);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_stream_count(), 0);
#endif
}
END_TEST

START_TEST(create_release_threshold) {
  static const uint64_t values[] = {0, 1, 1 * MiB, 32 * MiB, (uint64_t)3 * GiB + 17, UINT64_MAX};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    spool_config cfg = test_config();
    cfg.release_threshold = values[i];
    spool_pool *p = test_pool_create(&cfg);
    ck_assert_uint_eq(test_pool_attr_u64(spool_pool_handle(p), cudaMemPoolAttrReleaseThreshold),
                      values[i]);
    ck_assert_uint_eq(spool_pool_config(p)->release_threshold, values[i]);
    test_pool_destroy(p);
  }
}
END_TEST

START_TEST(create_reserve) {
  /* Default threshold (keep all) and an explicit one larger than reserve. Threshold == reserve
   * only in the sim: a real pool may round a 64 MiB reservation up and then give it all back at
   * the priming synchronize. */
#ifdef SPOOL_TEST_SIM
  static const uint64_t thresholds[] = {UINT64_MAX, 128 * MiB, 64 * MiB};
#else
  static const uint64_t thresholds[] = {UINT64_MAX, 128 * MiB};
#endif
  for (size_t i = 0; i < sizeof thresholds / sizeof thresholds[0]; i++) {
    spool_config cfg = test_config();
    cfg.reserve = 64 * MiB;
    cfg.release_threshold = thresholds[i];
    spool_pool *p = test_pool_create(&cfg);
    spool_stats st = test_stats(p);
    ck_assert_msg(st.bytes_reserved >= 64 * MiB, "threshold %" PRIu64 ": reserved %" PRIu64,
                  thresholds[i], st.bytes_reserved);
    /* Priming is not use. */
    ck_assert_uint_eq(st.bytes_in_use, 0);
    ck_assert_uint_eq(st.buffers_in_use, 0);
    ck_assert_uint_eq(st.allocs, 0);
    ck_assert_uint_eq(st.frees, 0);
#ifdef SPOOL_TEST_SIM
    ck_assert_int_eq(cudasim_stream_count(), 0); /* the priming stream is gone */
    ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
    /* The first allocation finds the memory ready. */
    cudaStream_t s = test_stream_create();
    void *ptr = NULL;
    CK_SPOOL(spool_alloc(p, &ptr, 32 * MiB, s));
    ck_assert_uint_eq(test_stats(p).bytes_reserved, st.bytes_reserved);
    CK_SPOOL(spool_free(p, ptr, s));
    test_stream_destroy(s);
    test_pool_destroy(p);
  }
}
END_TEST

START_TEST(create_reserve_contradictions) {
  spool_config cfg = test_config();
  cfg.reserve = 64 * MiB;
  cfg.release_threshold = 32 * MiB; /* the first synchronize would give it back */
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("reserve");

  cfg = test_config();
  cfg.reserve = 128 * MiB;
  cfg.max_size = 64 * MiB;
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("reserve");
}
END_TEST

START_TEST(create_reserve_too_large) {
  /* More than any device has (the sim's device has 16 GiB; an H200 141 GB). */
  spool_config cfg = test_config();
  cfg.reserve = (uint64_t)1 << 40;
  expect_create_fails(&cfg, SPOOL_ERR_OOM);
  /* Nothing is stuck: the next pool works. */
  cfg = test_config();
  spool_pool *p = test_pool_create(&cfg);
  check_pool_usable(p, 4 * MiB);
  test_pool_destroy(p);
}
END_TEST

START_TEST(create_max_size) {
  spool_config cfg = test_config();
  cfg.max_size = 64 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = TEST_SENTINEL;
  CK_SPOOL(spool_alloc(p, &a, 40 * MiB, s));
  ck_assert_ptr_nonnull(a);
  /* 80 MiB live would exceed the 64 MiB limit. */
  CK_STATUS(spool_alloc(p, &b, 40 * MiB, s), SPOOL_ERR_OOM);
  ck_assert_ptr_null(b);
  CK_LAST_ERROR_HAS("asked");
  CK_LAST_ERROR_HAS("40.00 MiB");
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.bytes_in_use, 40 * MiB);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.ooms, 1);
  ck_assert_uint_le(st.bytes_reserved, 64 * MiB);
  /* Still usable: free the first, and the same size fits again. */
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_alloc(p, &b, 40 * MiB, s));
  ck_assert_ptr_nonnull(b);
  CK_CUDA(cudaMemsetAsync(b, 0, 40 * MiB, s));
  CK_SPOOL(spool_free(p, b, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(create_reuse_flags) {
  /* Each flag off on its own, then all off: CUDA reads back exactly what was asked. */
  for (int off = 0; off <= 3; off++) {
    spool_config cfg = test_config();
    bool want[3] = {true, true, true};
    for (int i = 0; i < 3; i++) want[i] = !(off == i || off == 3);
    cfg.reuse_follow_event_dependencies = want[0];
    cfg.reuse_allow_opportunistic = want[1];
    cfg.reuse_allow_internal_dependencies = want[2];
    spool_pool *p = test_pool_create(&cfg);
    for (int i = 0; i < 3; i++)
      ck_assert_msg(test_pool_attr_int(spool_pool_handle(p), REUSE[i]) == (want[i] ? 1 : 0),
                    "case %d: reuse attribute %d is not %d", off, i, want[i]);
    check_pool_usable(p, 1 * MiB);
    test_pool_destroy(p);
  }
}
END_TEST

/* ---- peer access --------------------------------------------------------------------------- */

START_TEST(peer_access_self_skipped) {
  spool_config cfg = test_config();
  cfg.peer_access[0] = 0; /* the owning device: always has access, never passed to CUDA */
  cfg.peer_access_count = 1;
  spool_pool *p = test_pool_create(&cfg);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAccess"), 0);
#else
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 0};
  CK_CUDA(cudaMemPoolGetAccess(&flags, spool_pool_handle(p), &loc));
  ck_assert_int_eq(flags, cudaMemAccessFlagsProtReadWrite);
#endif
  check_pool_usable(p, 1 * MiB);
  test_pool_destroy(p);
}
END_TEST

START_TEST(peer_access_no_such_device) {
  /* The header: a peer that is no device is SPOOL_ERR_CONFIG. */
  int n = test_device_count();
  spool_config cfg = test_config();
  cfg.peer_access[0] = n;
  cfg.peer_access_count = 1;
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  char name[32];
  snprintf(name, sizeof name, "device %d", n);
  CK_LAST_ERROR_HAS(name);
#ifdef SPOOL_TEST_SIM
  /* Checked before anything is created. */
  ck_assert_int_eq(cudasim_calls("cudaMemPoolCreate"), 0);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAttribute"), 0);
#endif
  cfg.peer_access[0] = 1000;
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  /* Negative ordinals and duplicates are rejected by validation. */
  cfg.peer_access[0] = -1;
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  cfg.peer_access[0] = 0;
  cfg.peer_access[1] = 0;
  cfg.peer_access_count = 2;
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
}
END_TEST

#ifndef SPOOL_TEST_SIM
/* Real peers, where the machine has them. */
START_TEST(peer_access_gpu_peers) {
  int n = test_device_count();
  int can = 0;
  if (n >= 2) CK_CUDA(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (!can) { /* one device, or no peer access: covered by the sim */
    fprintf(stderr, "peer_access_gpu_peers: checked nothing: %s\n",
            n < 2 ? "only one device is present" : "device 1 cannot access device 0");
    return;
  }
  spool_config cfg = test_config();
  cfg.peer_access[0] = 1;
  cfg.peer_access_count = 1;
  spool_pool *p = test_pool_create(&cfg);
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 1};
  CK_CUDA(cudaMemPoolGetAccess(&flags, spool_pool_handle(p), &loc));
  ck_assert_int_eq(flags, cudaMemAccessFlagsProtReadWrite);
  check_pool_usable(p, 1 * MiB);
  test_pool_destroy(p);
}
END_TEST
#endif

#ifdef SPOOL_TEST_SIM
START_TEST(sim_peer_access_two_devices) {
  cudasim_set_device_count(2);
  spool_config cfg = test_config();
  cfg.peer_access[0] = 1;
  cfg.peer_access[1] = 0; /* self, skipped */
  cfg.peer_access_count = 2;
  spool_pool *p = test_pool_create(&cfg);
  ck_assert_int_ge(cudasim_calls("cudaMemPoolSetAccess"), 1);
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 1};
  CK_CUDA(cudaMemPoolGetAccess(&flags, spool_pool_handle(p), &loc));
  ck_assert_int_eq(flags, cudaMemAccessFlagsProtReadWrite);
  check_pool_usable(p, 1 * MiB);
  test_pool_destroy(p);
  ck_assert_int_eq(cudasim_pool_count(), 0);

  /* A peer that cannot reach device 0's memory. */
  cudasim_set_can_access_peer(1, 0, 0);
  cfg.peer_access_count = 1;
  expect_create_fails(&cfg, SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("1");
}
END_TEST
#endif

/* ---- the device's default pool, adopted pools ------------------------------------------------ */

START_TEST(default_pool) {
  cudaMemPool_t def = NULL;
  CK_CUDA(cudaDeviceGetDefaultMemPool(&def, 0));
  ck_assert_ptr_nonnull(def);
  pool_settings before = read_settings(def); /* put back at the end: the device is shared */

  spool_config cfg = test_config();
  cfg.pool = SPOOL_POOL_DEFAULT;
  cfg.release_threshold = 256 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  ck_assert_ptr_eq(spool_pool_handle(p), def);
  ck_assert_int_eq(spool_pool_device(p), 0);
  ck_assert_uint_eq(test_pool_attr_u64(def, cudaMemPoolAttrReleaseThreshold), 256 * MiB);
  check_pool_usable(p, 2 * MiB);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0); /* no pool of its own */
#endif
  test_pool_destroy(p);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMemPoolDestroy"), 0);
#endif
  /* Alive and usable by cudaMallocAsync; settings stay as spool set them. */
  ck_assert_uint_eq(test_pool_attr_u64(def, cudaMemPoolAttrReleaseThreshold), 256 * MiB);
  cudaStream_t s = test_stream_create();
  void *ptr = NULL;
  CK_CUDA(cudaMallocAsync(&ptr, 4 * MiB, s));
  ck_assert_ptr_nonnull(ptr);
  CK_CUDA(cudaMemsetAsync(ptr, 1, 4 * MiB, s));
  CK_CUDA(cudaFreeAsync(ptr, s));
  test_stream_destroy(s);
  write_settings(def, &before);
  CK_CUDA(cudaMemPoolTrimTo(def, 0));
}
END_TEST

START_TEST(default_pool_max_size) {
  spool_config cfg = test_config();
  cfg.pool = SPOOL_POOL_DEFAULT;
  cfg.max_size = 64 * MiB; /* fixed when a pool is created: not for the default pool */
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("max_size");
}
END_TEST

START_TEST(default_pool_max_size_max) {
  /* max_size=max means no limit: nothing to fix at creation, so the default pool takes it. */
  cudaMemPool_t def = NULL;
  CK_CUDA(cudaDeviceGetDefaultMemPool(&def, 0));
  pool_settings before = read_settings(def); /* put back at the end: the device is shared */
  spool_config cfg = test_config();
  cfg.pool = SPOOL_POOL_DEFAULT;
  cfg.max_size = UINT64_MAX;
  cfg.release_threshold = 8 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  ck_assert_ptr_eq(spool_pool_handle(p), def);
  ck_assert_uint_eq(test_pool_attr_u64(def, cudaMemPoolAttrReleaseThreshold), 8 * MiB);
  check_pool_usable(p, 2 * MiB);
  test_pool_destroy(p);
  write_settings(def, &before);
  CK_CUDA(cudaMemPoolTrimTo(def, 0));

  /* ... while a real limit is still refused, the default pool untouched. */
  cfg.max_size = 64 * MiB;
  expect_create_fails(&cfg, SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("max_size");
  ck_assert_uint_eq(test_pool_attr_u64(def, cudaMemPoolAttrReleaseThreshold), before.threshold);

  /* The same for a caller's pool adopted with max_size=max. */
  cudaMemPool_t h = make_cuda_pool(0);
  cfg = test_config();
  cfg.max_size = UINT64_MAX;
  CK_SPOOL(spool_pool_adopt(&p, h, &cfg));
  ck_assert_ptr_eq(spool_pool_handle(p), h);
  check_pool_usable(p, 1 * MiB);
  test_pool_destroy(p);
  CK_CUDA(cudaMemPoolDestroy(h));
}
END_TEST

START_TEST(adopt_caller_pool) {
  cudaMemPool_t h = make_cuda_pool(0);
  spool_config cfg = test_config();
  cfg.release_threshold = 16 * MiB;
  cfg.reuse_allow_opportunistic = false;
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_SPOOL(spool_pool_adopt(&p, h, &cfg));
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_eq(spool_pool_handle(p), h);
  ck_assert_int_eq(spool_pool_device(p), 0);
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 16 * MiB);
  ck_assert_int_eq(test_pool_attr_int(h, cudaMemPoolReuseAllowOpportunistic), 0);
  check_pool_usable(p, 3 * MiB);
  test_pool_destroy(p);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 1); /* still the caller's */
  ck_assert_int_eq(cudasim_calls("cudaMemPoolDestroy"), 0);
#endif
  /* Settings changed on an adopted pool stay changed. */
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 16 * MiB);
  /* The caller can still allocate from it, and destroy it. */
  cudaStream_t s = test_stream_create();
  void *ptr = NULL;
  CK_CUDA(cudaMallocFromPoolAsync(&ptr, 2 * MiB, h, s));
  ck_assert_ptr_nonnull(ptr);
  CK_CUDA(cudaMemsetAsync(ptr, 7, 2 * MiB, s));
  CK_CUDA(cudaFreeAsync(ptr, s));
  test_stream_destroy(s);
  CK_CUDA(cudaMemPoolDestroy(h));
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
#endif
}
END_TEST

START_TEST(adopt_errors) {
  cudaMemPool_t h = make_cuda_pool(0);
  spool_config cfg = test_config();
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_adopt(NULL, h, &cfg), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pool_adopt(&p, NULL, &cfg), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(p);
  cfg.max_size = 64 * MiB;
  p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_adopt(&p, h, &cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS("max_size");
  /* cfg NULL: the defaults. */
  CK_SPOOL(spool_pool_adopt(&p, h, NULL));
  ck_assert_ptr_eq(spool_pool_handle(p), h);
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), UINT64_MAX);
  test_pool_destroy(p);
  CK_CUDA(cudaMemPoolDestroy(h));
}
END_TEST

/* The header: for spool_pool_adopt "cfg->device and cfg->pool are ignored, the device is the
 * pool's location". A pool on device 1 adopted with the default config (device 0). */
/* CUDA cannot tell where a pool lives, so the caller says it with cfg->device: the right
 * device is accepted, a wrong one is refused before anything is changed. */
static void adopt_on_device_1(void) {
  cudaMemPool_t h = make_cuda_pool(1);
  spool_config cfg = test_config();
  cfg.pool = SPOOL_POOL_DEFAULT; /* ignored by adopt */
  cfg.release_threshold = 5 * MiB;
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_adopt(&p, h, &cfg), SPOOL_ERR_CONFIG); /* cfg.device is 0 */
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS("device=0");
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 0);

  cfg.device = 1;
  CK_SPOOL(spool_pool_adopt(&p, h, &cfg));
  ck_assert_ptr_eq(spool_pool_handle(p), h);
  ck_assert_int_eq(spool_pool_device(p), 1);
  ck_assert_int_eq(spool_pool_config(p)->device, 1);
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 5 * MiB);
  test_pool_destroy(p);
  CK_CUDA(cudaMemPoolDestroy(h));
}

#ifdef SPOOL_TEST_SIM
START_TEST(sim_adopt_names_the_device) {
  cudasim_set_device_count(2);
  adopt_on_device_1();
}
END_TEST
#else
START_TEST(gpu_adopt_names_the_device) {
  if (test_device_count() < 2) { /* needs a second device; covered by the sim */
    fprintf(stderr, "gpu_adopt_names_the_device: checked nothing: only one device is present\n");
    return;
  }
  adopt_on_device_1();
}
END_TEST
#endif

/* ---- arguments, environment, devices, destroy -------------------------------------------------- */

START_TEST(null_arguments) {
  spool_config cfg = test_config();
  CK_STATUS(spool_pool_create(NULL, &cfg), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("NULL");
  CK_STATUS(spool_pool_create(NULL, NULL), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_pool_destroy(NULL));
  ck_assert_ptr_null(spool_pool_handle(NULL));
  ck_assert_int_eq(spool_pool_device(NULL), -1);
  ck_assert_ptr_null(spool_pool_config(NULL));
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMemPoolCreate"), 0);
#endif
}
END_TEST

START_TEST(config_from_env) {
  ck_assert_int_eq(setenv("SPOOL_CONF", "release_threshold=1MiB, reuse_allow_opportunistic=off", 1),
                   0);
  spool_pool *p = test_pool_create(NULL);
  cudaMemPool_t h = spool_pool_handle(p);
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 1 * MiB);
  ck_assert_int_eq(test_pool_attr_int(h, cudaMemPoolReuseAllowOpportunistic), 0);
  ck_assert_int_eq(test_pool_attr_int(h, cudaMemPoolReuseFollowEventDependencies), 1);
  ck_assert_uint_eq(spool_pool_config(p)->release_threshold, 1 * MiB);
  test_pool_destroy(p);

  /* A given cfg is used as it is: SPOOL_CONF applies only to cfg NULL. */
  spool_config cfg = test_config();
  p = test_pool_create(&cfg);
  ck_assert_uint_eq(test_pool_attr_u64(spool_pool_handle(p), cudaMemPoolAttrReleaseThreshold),
                    UINT64_MAX);
  test_pool_destroy(p);

  /* A bad SPOOL_CONF: a config error naming the variable and the key. */
  ck_assert_int_eq(setenv("SPOOL_CONF", "release_treshold=1MiB", 1), 0);
  expect_create_fails(NULL, SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("SPOOL_CONF");
  CK_LAST_ERROR_HAS("release_treshold");
  ck_assert_int_eq(setenv("SPOOL_CONF", "reserve=lots", 1), 0);
  expect_create_fails(NULL, SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("reserve");
  /* ... but not when a cfg is given. */
  p = test_pool_create(&cfg);
  test_pool_destroy(p);
  ck_assert_int_eq(unsetenv("SPOOL_CONF"), 0);
}
END_TEST

START_TEST(invalid_device) {
  int n = test_device_count();
  spool_config cfg = test_config();
  cfg.device = n;
  expect_create_fails(&cfg, SPOOL_ERR_NO_DEVICE);
  char num[16];
  snprintf(num, sizeof num, "%d", n);
  CK_LAST_ERROR_HAS(num);
  cfg.device = 1000;
  expect_create_fails(&cfg, SPOOL_ERR_NO_DEVICE);
  CK_LAST_ERROR_HAS("1000");
  /* A negative ordinal is no device either (validation may call it a config error). */
  cfg.device = -1;
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  spool_status s = spool_pool_create(&p, &cfg);
  ck_assert_msg(s == SPOOL_ERR_NO_DEVICE || s == SPOOL_ERR_CONFIG, "device -1: %s",
                spool_status_name(s));
  ck_assert_ptr_null(p);
}
END_TEST

/* The caller's current device is the same after create and destroy, success or failure. */
static void check_current_device_kept(void) {
  int n = test_device_count();
  int current = n >= 2 ? 1 : 0;
  CK_CUDA(cudaSetDevice(current));
  spool_config cfg = test_config();
  cfg.device = 0;
  cfg.reserve = 8 * MiB; /* priming runs on device 0 */
  spool_pool *p = test_pool_create(&cfg);
  int dev = -1;
  CK_CUDA(cudaGetDevice(&dev));
  ck_assert_int_eq(dev, current);
  void *ptr = NULL;
  CK_CUDA(cudaSetDevice(0)); /* a stream of the pool's device: spool refuses others */
  cudaStream_t s0 = test_stream_create();
  CK_CUDA(cudaSetDevice(current));
  CK_SPOOL(spool_alloc(p, &ptr, 1 * MiB, s0));
  /* destroy with a leak: the sweep works on device 0 too */
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  CK_CUDA(cudaGetDevice(&dev));
  ck_assert_int_eq(dev, current);
  test_stream_destroy(s0);
  cfg.device = n; /* failure */
  expect_create_fails(&cfg, SPOOL_ERR_NO_DEVICE);
  CK_CUDA(cudaGetDevice(&dev));
  ck_assert_int_eq(dev, current);
  CK_CUDA(cudaSetDevice(0));
}

START_TEST(current_device_kept) { check_current_device_kept(); }
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(sim_current_device_kept_two_devices) {
  cudasim_set_device_count(2);
  check_current_device_kept();
  /* And a pool on device 1 while device 0 is current. */
  spool_config cfg = test_config();
  cfg.device = 1;
  cfg.reserve = 4 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  ck_assert_int_eq(spool_pool_device(p), 1);
  int dev = -1;
  CK_CUDA(cudaGetDevice(&dev));
  ck_assert_int_eq(dev, 0);
  test_pool_destroy(p);
}
END_TEST
#endif

/* A pool destroyed twice: the second call is a status, never a use of freed memory. */
START_TEST(destroy_twice_refused) {
  spool_pool *p = test_pool_with(NULL);
  CK_SPOOL(spool_pool_destroy(p));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("not a live pool");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
}
END_TEST

START_TEST(destroy_with_leaks) {
  spool_config cfg = test_config();
  spool_pool *p = test_pool_create(&cfg);
  cudaStream_t s = test_stream_create();
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  CK_SPOOL(spool_alloc(p, &a, 1000, s));
  CK_SPOOL(spool_alloc(p, &b, 3 * MiB, s));
  CK_SPOOL(spool_alloc(p, &c, 12345, s));
  CK_SPOOL(spool_alloc(p, &d, 64, s));
  CK_SPOOL(spool_free(p, d, s)); /* one freed: not a leak */
  CK_CUDA(cudaMemsetAsync(b, 0, 3 * MiB, s));
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
  CK_LAST_ERROR_HAS("3");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif
  test_stream_destroy(s);
  /* The device is fine afterwards. */
  p = test_pool_create(&cfg);
  check_pool_usable(p, 1 * MiB);
  test_pool_destroy(p);
}
END_TEST

START_TEST(destroy_leaks_stream_gone) {
  /* The buffers' stream is destroyed before the pool: the sweep must not use it. */
  spool_config cfg = test_config();
  spool_pool *p = test_pool_create(&cfg);
  cudaStream_t s = test_stream_create();
  void *a = NULL;
  CK_SPOOL(spool_alloc(p, &a, 2 * MiB, s));
  test_stream_destroy(s);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_LEAKS);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif
}
END_TEST

START_TEST(many_pools) {
  /* Several pools side by side are independent. */
  spool_pool *p[4];
  cudaStream_t s = test_stream_create();
  void *ptr[4];
  for (int i = 0; i < 4; i++) {
    spool_config cfg = test_config();
    cfg.release_threshold = (uint64_t)(i + 1) * MiB;
    p[i] = test_pool_create(&cfg);
    CK_SPOOL(spool_alloc(p[i], &ptr[i], (size_t)(i + 1) * 1000, s));
  }
  for (int i = 0; i < 4; i++) /* before any is destroyed */
    ck_assert_ptr_ne(spool_pool_handle(p[i]), spool_pool_handle(p[(i + 1) % 4]));
  for (int i = 0; i < 4; i++) {
    spool_stats st = test_stats(p[i]);
    ck_assert_uint_eq(st.buffers_in_use, 1);
    ck_assert_uint_eq(st.bytes_in_use, (uint64_t)(i + 1) * 1000);
    CK_SPOOL(spool_free(p[i], ptr[i], s));
    test_pool_destroy(p[i]);
  }
  test_stream_destroy(s);
}
END_TEST

/* ---- sim only: environments a real machine cannot be turned into ----------------------------- */

#ifdef SPOOL_TEST_SIM
START_TEST(sim_no_device) {
  cudasim_set_device_count(0);
  spool_config cfg = test_config();
  expect_create_fails(&cfg, SPOOL_ERR_NO_DEVICE);
  expect_create_fails(NULL, SPOOL_ERR_NO_DEVICE);
}
END_TEST

START_TEST(sim_no_driver) {
  cudasim_set_driver_version(0);
  spool_config cfg = test_config();
  expect_create_fails(&cfg, SPOOL_ERR_NO_DEVICE);
  CK_LAST_ERROR_HAS("driver");
}
END_TEST

START_TEST(sim_old_driver) {
  spool_config cfg = test_config();
  cudasim_set_driver_version(11010);
  expect_create_fails(&cfg, SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("11.1");
  cudasim_set_driver_version(11020); /* the first with memory pools */
  spool_pool *p = test_pool_create(&cfg);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_max_size_needs_12_2) {
  spool_config cfg = test_config();
  cfg.max_size = 64 * MiB;
  cudasim_set_driver_version(12010);
  expect_create_fails(&cfg, SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("max_size");
  cfg.max_size = 0; /* without max_size the old driver is fine */
  spool_pool *p = test_pool_create(&cfg);
  test_pool_destroy(p);
  cudasim_set_driver_version(12020);
  cfg.max_size = 64 * MiB;
  p = test_pool_create(&cfg);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_pools_unsupported) {
  cudasim_set_pools_supported(0, 0);
  spool_config cfg = test_config();
  expect_create_fails(&cfg, SPOOL_ERR_UNSUPPORTED);
  cfg.pool = SPOOL_POOL_DEFAULT;
  expect_create_fails(&cfg, SPOOL_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(sim_reserve_beyond_capacity) {
  cudasim_set_capacity(0, 64 * MiB);
  spool_config cfg = test_config();
  cfg.reserve = 128 * MiB;
  expect_create_fails(&cfg, SPOOL_ERR_OOM);
  CK_LAST_ERROR_HAS("reserve");
  cfg.reserve = 32 * MiB;
  spool_pool *p = test_pool_create(&cfg);
  ck_assert_uint_ge(test_stats(p).bytes_reserved, 32 * MiB);
  test_pool_destroy(p);
}
END_TEST

/* ---- sim only: a failure injected at every CUDA call create makes --------------------------- */

typedef enum variant { OWN, DEFAULT_POOL, ADOPT } variant;
static const char *const VARIANT_NAME[] = {"own", "default", "adopt"};

/* Every knob that makes a CUDA call: two devices, a peer, reserve, a limit, non-default flags. */
static spool_config full_config(variant v) {
  spool_config cfg = test_config();
  cfg.release_threshold = 64 * MiB;
  cfg.reserve = 4 * MiB;
  cfg.max_size = v == OWN ? 1 * GiB : 0;
  cfg.reuse_allow_opportunistic = false;
  cfg.peer_access[0] = 1;
  cfg.peer_access_count = 1;
  cfg.pool = v == DEFAULT_POOL ? SPOOL_POOL_DEFAULT : SPOOL_POOL_OWN;
  return cfg;
}

static spool_status status_of(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation: return SPOOL_ERR_OOM;
    case cudaErrorNotSupported: return SPOOL_ERR_UNSUPPORTED;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return SPOOL_ERR_NO_DEVICE;
    default: return SPOOL_ERR_CUDA;
  }
}

typedef struct injection {
  long hit;          /* 1 when the armed call happened */
  bool fired;        /* the armed failure was consumed by the create (cudasim_armed() == 0) */
  spool_status got;
} injection;

/* A fresh simulated machine with two devices, current device 1; the adopt variant makes the
 * caller's pool first. Then the nth next call of api fails with err, and the pool is created.
 * Checks everything a failed create promises. */
static injection inject_create(variant v, const char *api, int nth, cudaError_t err,
                               spool_status want, bool want_strict) {
  cudasim_reset();
  cudasim_set_device_count(2);
  CK_CUDA(cudaSetDevice(1));
  cudaMemPool_t caller = NULL;
  pool_settings caller_before = {0, {0, 0, 0}};
  if (v == ADOPT) {
    caller = make_cuda_pool(0);
    caller_before = read_settings(caller);
  }
  spool_config cfg = full_config(v);
  long before = cudasim_calls(api);
  cudasim_fail(api, nth, err);
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  injection r;
  r.got = v == ADOPT ? spool_pool_adopt(&p, caller, &cfg) : spool_pool_create(&p, &cfg);
  r.fired = cudasim_armed() == 0;
  r.hit = cudasim_calls(api) - before >= nth;
  ck_assert_msg(r.hit == r.fired, "%s: %s call %d: reached %ld, yet the failure %s",
                VARIANT_NAME[v], api, nth, r.hit, r.fired ? "fired" : "did not fire");
  const char *ctx = VARIANT_NAME[v];
  if (!r.hit) {
    ck_assert_msg(r.got == SPOOL_OK, "%s: %s call %d not reached, yet create returned %s: %s",
                  ctx, api, nth, spool_status_name(r.got), spool_last_error());
    ck_assert_ptr_nonnull(p);
    (void)spool_pool_destroy(p); /* the armed failure may still strike here */
    return r;
  }
  if (r.got == SPOOL_OK && !want_strict) { /* a failure the library may absorb */
    ck_assert_ptr_nonnull(p);
    CK_SPOOL(spool_pool_destroy(p));
    return r;
  }
  ck_assert_msg(r.got == want || (!want_strict && r.got == SPOOL_ERR_NO_DEVICE),
                "%s: %s call %d failing with %s: create returned %s, expected %s; last error: %s",
                ctx, api, nth, cudaGetErrorName(err), spool_status_name(r.got),
                spool_status_name(want), spool_last_error());
  ck_assert_msg(p == NULL, "%s: %s call %d: *pool not NULL after a failure", ctx, api, nth);
  const char *msg = spool_last_error();
  ck_assert_msg(msg[0] != '\0', "%s: %s call %d: no message", ctx, api, nth);
  if (r.got == SPOOL_ERR_CUDA)
    ck_assert_msg(strstr(msg, cudaGetErrorName(err)) != NULL,
                  "%s: %s call %d: message \"%s\" lacks the CUDA error name", ctx, api, nth, msg);
  /* Nothing left behind. */
  ck_assert_msg(cudasim_pool_count() == (v == ADOPT ? 1 : 0),
                "%s: %s call %d: %d pools left", ctx, api, nth, cudasim_pool_count());
  ck_assert_msg(cudasim_live_allocations() == 0, "%s: %s call %d: %ld allocations left", ctx, api,
                nth, cudasim_live_allocations());
  ck_assert_msg(cudasim_stream_count() == 0, "%s: %s call %d: %d streams left", ctx, api, nth,
                cudasim_stream_count());
  if (strcmp(api, "cudaSetDevice") != 0) {
    int dev = -1;
    CK_CUDA(cudaGetDevice(&dev));
    ck_assert_msg(dev == 1, "%s: %s call %d: current device is %d, was 1", ctx, api, nth, dev);
  }
  if (v == ADOPT) {
    /* An adopted pool gets its old settings back. */
    pool_settings now = read_settings(caller);
    ck_assert_msg(now.threshold == caller_before.threshold, "%s: %s call %d: threshold %" PRIu64
                  " not restored to %" PRIu64, ctx, api, nth, now.threshold,
                  caller_before.threshold);
    for (int i = 0; i < 3; i++)
      ck_assert_msg(now.reuse[i] == caller_before.reuse[i],
                    "%s: %s call %d: reuse attribute %d not restored", ctx, api, nth, i);
    enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtReadWrite;
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 1};
    CK_CUDA(cudaMemPoolGetAccess(&flags, caller, &loc));
    ck_assert_msg(flags == cudaMemAccessFlagsProtNone, "%s: %s call %d: peer access not restored",
                  ctx, api, nth);
  }
  return r;
}

START_TEST(sim_create_failure_table) {
  /* Calls create is known to make, the error injected and the status the header promises. */
  static const struct {
    const char *api;
    cudaError_t err;
    spool_status want;
    bool must_be_called;
  } table[] = {
      {"cudaDriverGetVersion", cudaErrorUnknown, SPOOL_ERR_CUDA, true},
      {"cudaDriverGetVersion", cudaErrorInsufficientDriver, SPOOL_ERR_NO_DEVICE, true},
      {"cudaGetDeviceCount", cudaErrorNoDevice, SPOOL_ERR_NO_DEVICE, true},
      {"cudaGetDeviceCount", cudaErrorInsufficientDriver, SPOOL_ERR_NO_DEVICE, true},
      {"cudaDeviceGetAttribute", cudaErrorUnknown, SPOOL_ERR_CUDA, true},
      {"cudaDeviceGetAttribute", cudaErrorNotSupported, SPOOL_ERR_UNSUPPORTED, true},
      {"cudaDeviceCanAccessPeer", cudaErrorUnknown, SPOOL_ERR_CUDA, true},
      {"cudaMemPoolCreate", cudaErrorMemoryAllocation, SPOOL_ERR_OOM, true},
      {"cudaMemPoolCreate", cudaErrorNotSupported, SPOOL_ERR_UNSUPPORTED, true},
      {"cudaMemPoolCreate", cudaErrorInvalidValue, SPOOL_ERR_CUDA, true},
      {"cudaMemPoolSetAttribute", cudaErrorInvalidValue, SPOOL_ERR_CUDA, true},
      {"cudaMemPoolSetAttribute", cudaErrorMemoryAllocation, SPOOL_ERR_OOM, true},
      {"cudaMemPoolSetAccess", cudaErrorUnknown, SPOOL_ERR_CUDA, true},
      {"cudaMemPoolSetAccess", cudaErrorMemoryAllocation, SPOOL_ERR_OOM, true},
      {"cudaMallocFromPoolAsync", cudaErrorMemoryAllocation, SPOOL_ERR_OOM, true},
      {"cudaMallocFromPoolAsync", cudaErrorUnknown, SPOOL_ERR_CUDA, true},
      {"cudaFreeAsync", cudaErrorUnknown, SPOOL_ERR_CUDA, true},
      {"cudaStreamSynchronize", cudaErrorUnknown, SPOOL_ERR_CUDA, false},
      {"cudaSetDevice", cudaErrorUnknown, SPOOL_ERR_CUDA, false},
      {"cudaGetDevice", cudaErrorUnknown, SPOOL_ERR_CUDA, false},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    injection r = inject_create(OWN, table[i].api, 1, table[i].err, table[i].want, true);
    ck_assert_msg(r.hit || !table[i].must_be_called, "create never called %s", table[i].api);
    if (r.hit) ck_assert_int_eq(r.got, table[i].want);
    /* A row whose failure never fires tests nothing: every row must strike. */
    ck_assert_msg(cudasim_calls(table[i].api) > 0, "row %zu: create never called %s", i,
                  table[i].api);
    ck_assert_msg(r.fired, "row %zu: the failure injected at %s (%s) never fired", i,
                  table[i].api, cudaGetErrorName(table[i].err));
  }
}
END_TEST

/* Every call of every API create might make fails in turn (n = 1, 2, ... until create no longer
 * reaches the nth call), for each way to get a pool: covers every call without knowing the
 * order. */
static void fail_every_call(variant v) {
  static const char *const apis[] = {
      "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetDeviceCount", "cudaGetDevice",
      "cudaSetDevice", "cudaDeviceGetAttribute", "cudaGetDeviceProperties",
      "cudaDeviceCanAccessPeer", "cudaDeviceGetDefaultMemPool", "cudaDeviceGetMemPool",
      "cudaMemPoolCreate", "cudaMemPoolSetAttribute", "cudaMemPoolGetAttribute",
      "cudaMemPoolSetAccess", "cudaMemPoolGetAccess", "cudaStreamCreate",
      "cudaStreamCreateWithFlags", "cudaMallocFromPoolAsync", "cudaMallocAsync", "cudaFreeAsync",
      "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamDestroy", "cudaMemPoolTrimTo",
      "cudaMemGetInfo", "cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventSynchronize",
      "cudaEventDestroy", "cudaGetLastError"};
  static const cudaError_t errs[] = {cudaErrorMemoryAllocation, cudaErrorUnknown};
  long fired = 0; /* APIs create never calls may be listed, but some failure must strike */
  for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++) {
    for (size_t e = 0; e < sizeof errs / sizeof errs[0]; e++) {
      /* cudaGetDeviceCount in the device check means "no device" whatever the error: spool
       * documents NO_DEVICE there, so it is accepted next to the mapped status. */
      bool strict = strcmp(apis[a], "cudaGetDeviceCount") != 0 &&
                    strcmp(apis[a], "cudaGetLastError") != 0;
      int nth = 1;
      for (; nth <= 64; nth++) {
        injection r = inject_create(v, apis[a], nth, errs[e], status_of(errs[e]), strict);
        if (!r.hit) break;
        fired += r.fired;
      }
      ck_assert_msg(nth <= 64, "%s: create calls %s more than 64 times", VARIANT_NAME[v],
                    apis[a]);
    }
  }
  ck_assert_msg(fired > 0, "%s: no injected failure ever fired", VARIANT_NAME[v]);
}

START_TEST(sim_create_fail_every_call_own) { fail_every_call(OWN); }
END_TEST

START_TEST(sim_create_fail_every_call_default) { fail_every_call(DEFAULT_POOL); }
END_TEST

START_TEST(sim_create_fail_every_call_adopt) { fail_every_call(ADOPT); }
END_TEST

/* ---- sim only: peers that are no device, on adopted pools ----------------------------------- */

/* peer_access naming device `peer`, which does not exist: refused before the adopted pool (a
 * caller's, then the default pool) is touched. */
static void check_adopt_peer_no_such_device(int peer) {
  char name[32];
  snprintf(name, sizeof name, "device %d", peer);
  cudaMemPool_t h = make_cuda_pool(0);
  test_pool_set_attr_u64(h, cudaMemPoolAttrReleaseThreshold, 7 * MiB);
  cudaMemPool_t def = NULL;
  CK_CUDA(cudaDeviceGetDefaultMemPool(&def, 0));
  test_pool_set_attr_u64(def, cudaMemPoolAttrReleaseThreshold, 3 * MiB);

  spool_config cfg = test_config();
  cfg.release_threshold = 64 * MiB;
  cfg.reserve = 4 * MiB;
  cfg.reuse_allow_opportunistic = false;
  cfg.peer_access[0] = peer;
  cfg.peer_access_count = 1;
  long set_attr = cudasim_calls("cudaMemPoolSetAttribute");
  long set_access = cudasim_calls("cudaMemPoolSetAccess");
  long mallocs = cudasim_calls("cudaMallocFromPoolAsync");

  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_adopt(&p, h, &cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS(name);
  CK_LAST_ERROR_HAS("peer_access");
  ck_assert_uint_eq(test_pool_attr_u64(h, cudaMemPoolAttrReleaseThreshold), 7 * MiB);
  ck_assert_int_eq(test_pool_attr_int(h, cudaMemPoolReuseAllowOpportunistic), 1);

  cfg.pool = SPOOL_POOL_DEFAULT;
  p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_create(&p, &cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS(name);
  ck_assert_uint_eq(test_pool_attr_u64(def, cudaMemPoolAttrReleaseThreshold), 3 * MiB);
  ck_assert_int_eq(test_pool_attr_int(def, cudaMemPoolReuseAllowOpportunistic), 1);

  /* Nothing was set, nothing primed. */
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAttribute"), set_attr);
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAccess"), set_access);
  ck_assert_int_eq(cudasim_calls("cudaMallocFromPoolAsync"), mallocs);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pool_count(), 1); /* the caller's */
  CK_CUDA(cudaMemPoolDestroy(h));
}

START_TEST(sim_adopt_peer_no_such_device) {
  check_adopt_peer_no_such_device(5); /* one device */
  cudasim_reset();
  cudasim_set_device_count(2);
  check_adopt_peer_no_such_device(2);
}
END_TEST

/* ---- sim only: priming whose free fails ------------------------------------------------------- */

/* cudaFreeAsync of the priming allocation fails once: create fails, and the library's fallback
 * (cudaFree) leaves no allocation behind, in its own pool or in the caller's. */
static void check_prime_free_fails(variant v) {
  const char *ctx = VARIANT_NAME[v];
  cudaMemPool_t caller = NULL;
  pool_settings before = {0, {0, 0, 0}};
  if (v == ADOPT) caller = make_cuda_pool(0);
  if (v == DEFAULT_POOL) CK_CUDA(cudaDeviceGetDefaultMemPool(&caller, 0));
  if (caller) before = read_settings(caller);
  spool_config cfg = test_config(); /* release_threshold max: the pool keeps what is freed */
  cfg.reserve = 4 * MiB;
  cfg.pool = v == DEFAULT_POOL ? SPOOL_POOL_DEFAULT : SPOOL_POOL_OWN;
  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  spool_status got = v == ADOPT ? spool_pool_adopt(&p, caller, &cfg) : spool_pool_create(&p, &cfg);
  ck_assert_msg(got == SPOOL_ERR_CUDA, "%s: create returned %s; last error: %s", ctx,
                spool_status_name(got), spool_last_error());
  ck_assert_ptr_null(p);
  ck_assert_int_eq(cudasim_armed(), 0);
  CK_LAST_ERROR_HAS("cudaFreeAsync");
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  ck_assert_msg(strstr(spool_last_error(), "stay allocated") == NULL,
                "%s: the fallback worked, yet the message says: %s", ctx, spool_last_error());
  ck_assert_int_eq(cudasim_calls("cudaFree"), 1); /* the fallback */
  ck_assert_msg(cudasim_live_allocations() == 0, "%s: %ld allocations left", ctx,
                cudasim_live_allocations());
  ck_assert_int_eq(cudasim_pool_count(), v == ADOPT ? 1 : 0);
  ck_assert_int_eq(cudasim_stream_count(), 0);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  if (caller) {
    pool_settings now = read_settings(caller);
    ck_assert_uint_eq(now.threshold, before.threshold);
    /* The caller's pool holds no live block: a trim gives everything back, and it works. */
    CK_CUDA(cudaMemPoolTrimTo(caller, 0));
    ck_assert_uint_eq(test_pool_attr_u64(caller, cudaMemPoolAttrUsedMemCurrent), 0);
    ck_assert_uint_eq(test_pool_attr_u64(caller, cudaMemPoolAttrReservedMemCurrent), 0);
    if (v == ADOPT) CK_CUDA(cudaMemPoolDestroy(caller));
  }
}

START_TEST(sim_prime_free_fails_own) { check_prime_free_fails(OWN); }
END_TEST

START_TEST(sim_prime_free_fails_adopt) { check_prime_free_fails(ADOPT); }
END_TEST

START_TEST(sim_prime_free_fails_default) { check_prime_free_fails(DEFAULT_POOL); }
END_TEST

START_TEST(sim_prime_both_frees_fail) {
  /* cudaFreeAsync and the cudaFree fallback both fail: the message says what stays. */
  static const variant variants[] = {OWN, ADOPT};
  for (size_t i = 0; i < 2; i++) {
    cudasim_reset();
    cudaMemPool_t caller = variants[i] == ADOPT ? make_cuda_pool(0) : NULL;
    spool_config cfg = test_config();
    cfg.reserve = 4 * MiB;
    cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
    cudasim_fail("cudaFree", 1, cudaErrorUnknown);
    spool_pool *p = (spool_pool *)TEST_SENTINEL;
    spool_status got =
        caller ? spool_pool_adopt(&p, caller, &cfg) : spool_pool_create(&p, &cfg);
    ck_assert_msg(got == SPOOL_ERR_CUDA, "%s: create returned %s; last error: %s",
                  VARIANT_NAME[variants[i]], spool_status_name(got), spool_last_error());
    ck_assert_ptr_null(p);
    ck_assert_int_eq(cudasim_armed(), 0);
    CK_LAST_ERROR_HAS("cudaFreeAsync");
    CK_LAST_ERROR_HAS("cudaFree also failed");
    CK_LAST_ERROR_HAS("4.00 MiB");
    CK_LAST_ERROR_HAS("stay allocated");
  }
}
END_TEST

START_TEST(sim_prime_both_frees_fail_last_error) {
  /* The cudaFree fallback's failure is reported too (in the message): the runtime's last error
   * is cleared after it as after every failure spool reports. */
  spool_config cfg = test_config();
  cfg.reserve = 4 * MiB;
  cudasim_fail("cudaFreeAsync", 1, cudaErrorUnknown);
  cudasim_fail("cudaFree", 1, cudaErrorInvalidValue);
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_create(&p, &cfg), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("stay allocated");
  cudaError_t last = cudaGetLastError();
  ck_assert_msg(last == cudaSuccess, "cudaGetLastError() after the create: %s",
                cudaGetErrorName(last));
}
END_TEST

START_TEST(sim_destroy_failures) {
  /* cudaMemPoolDestroy failing: SPOOL_ERR_CUDA, and the spool pool is gone all the same. */
  spool_config cfg = test_config();
  spool_pool *p = test_pool_create(&cfg);
  cudasim_fail("cudaMemPoolDestroy", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_destroy(p), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
}
END_TEST
#endif /* SPOOL_TEST_SIM */

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *pool_suite(void) {
  Suite *s = suite_create("pool");
  TCase *tc = test_tcase("create");
  tcase_add_test(tc, config_init_defaults);
  tcase_add_test(tc, create_defaults);
  tcase_add_test(tc, create_release_threshold);
  tcase_add_test(tc, create_reserve);
  tcase_add_test(tc, create_reserve_contradictions);
  tcase_add_test(tc, create_reserve_too_large);
  tcase_add_test(tc, create_max_size);
  tcase_add_test(tc, create_reuse_flags);
  tcase_add_test(tc, many_pools);
  suite_add_tcase(s, tc);

  tc = test_tcase("peers");
  tcase_add_test(tc, peer_access_self_skipped);
  tcase_add_test(tc, peer_access_no_such_device);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_peer_access_two_devices);
#else
  tcase_add_test(tc, peer_access_gpu_peers);
#endif
  suite_add_tcase(s, tc);

  tc = test_tcase("adopt");
  tcase_add_test(tc, default_pool);
  tcase_add_test(tc, default_pool_max_size);
  tcase_add_test(tc, default_pool_max_size_max);
  tcase_add_test(tc, adopt_caller_pool);
  tcase_add_test(tc, adopt_errors);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_adopt_names_the_device);
#else
  tcase_add_test(tc, gpu_adopt_names_the_device);
#endif
  suite_add_tcase(s, tc);

  tc = test_tcase("arguments");
  tcase_add_test(tc, null_arguments);
  tcase_add_test(tc, config_from_env);
  tcase_add_test(tc, invalid_device);
  tcase_add_test(tc, current_device_kept);
  tcase_add_test(tc, destroy_twice_refused);
  tcase_add_test(tc, destroy_with_leaks);
  tcase_add_test(tc, destroy_leaks_stream_gone);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_current_device_kept_two_devices);
#endif
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim_environment");
  tcase_add_test(tc, sim_no_device);
  tcase_add_test(tc, sim_no_driver);
  tcase_add_test(tc, sim_old_driver);
  tcase_add_test(tc, sim_max_size_needs_12_2);
  tcase_add_test(tc, sim_pools_unsupported);
  tcase_add_test(tc, sim_reserve_beyond_capacity);
  suite_add_tcase(s, tc);

  tc = test_tcase("sim_failures");
  tcase_add_test(tc, sim_create_failure_table);
  tcase_add_test(tc, sim_create_fail_every_call_own);
  tcase_add_test(tc, sim_create_fail_every_call_default);
  tcase_add_test(tc, sim_create_fail_every_call_adopt);
  tcase_add_test(tc, sim_destroy_failures);
  tcase_add_test(tc, sim_adopt_peer_no_such_device);
  tcase_add_test(tc, sim_prime_free_fails_own);
  tcase_add_test(tc, sim_prime_free_fails_adopt);
  tcase_add_test(tc, sim_prime_free_fails_default);
  tcase_add_test(tc, sim_prime_both_frees_fail);
  tcase_add_test(tc, sim_prime_both_frees_fail_last_error);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) { return test_main(pool_suite()); }
