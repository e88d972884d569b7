/* check_multi: several devices: one pool per device, the stream-device rule of
 * spool_alloc, the pointer-to-pool lookup, peer access (spool_pool_set_access, the config's
 * peer_access, the report), kernels of one device on another device's pool memory, and the
 * refusal of a kernel without access (in a child process on a GPU, where the fault sticks).
 *
 * Built as check_multi_sim (cudasim models several devices: every test runs) and
 * check_multi_gpu (tests that need two devices print why and pass on a one-GPU machine; run
 * them on a two-GPU machine). */
#include "test_multi.h"

/* ---- one pool per device --------------------------------------------------------------------- */

START_TEST(create_all_every_device) {
#ifdef SPOOL_TEST_SIM
  cudasim_set_device_count(3);
#endif
  int n = test_device_count();
  spool_pool *pools[SPOOL_MAX_PEERS];
  for (int i = 0; i < SPOOL_MAX_PEERS; i++) pools[i] = (spool_pool *)TEST_SENTINEL;
  int count = -1;
  CK_SPOOL(spool_pools_create_all(pools, SPOOL_MAX_PEERS, &count, NULL));
  ck_assert_int_eq(count, n);
  for (int d = 0; d < n; d++) {
    ck_assert_int_eq(spool_pool_device(pools[d]), d);
    cudaStream_t s = test_stream_on(d);
    char *ptr = test_alloc(pools[d], 1 * MiB, s);
    spool_pool *found = (spool_pool *)TEST_SENTINEL;
    CK_SPOOL(spool_pool_of(ptr, &found));
    ck_assert_ptr_eq(found, pools[d]);
    CK_SPOOL(spool_pool_of(ptr + 1000, &found)); /* inside the buffer */
    ck_assert_ptr_eq(found, pools[d]);
    CK_SPOOL(spool_free(pools[d], ptr, s));
    test_stream_destroy(s);
  }
  for (int i = n; i < SPOOL_MAX_PEERS; i++) ck_assert_ptr_null(pools[i]);
  CK_SPOOL(spool_pools_destroy_all(pools, count));
  for (int i = 0; i < n; i++) ck_assert_ptr_null(pools[i]);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_pool_count(), 0);
#endif
}
END_TEST

START_TEST(create_all_peer_access) {
  NEED_DEVICES(2);
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "peer_access=[0,1]")); /* each pool skips its own device */
  spool_pool *pools[SPOOL_MAX_PEERS];
  int count = 0;
  CK_SPOOL(spool_pools_create_all(pools, SPOOL_MAX_PEERS, &count, &cfg));
  ck_assert_int_ge(count, 2);
  spool_access m = SPOOL_ACCESS_NONE;
  CK_SPOOL(spool_pool_get_access(pools[0], 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ_WRITE);
  CK_SPOOL(spool_pool_get_access(pools[1], 0, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ_WRITE);
  CK_SPOOL(spool_pools_destroy_all(pools, count));
}
END_TEST

START_TEST(create_all_arguments) {
  spool_pool *pools[SPOOL_MAX_PEERS];
  int count = -1, n = test_device_count();
  CK_STATUS(spool_pools_create_all(NULL, 4, &count, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pools_create_all(pools, 4, NULL, NULL), SPOOL_ERR_INVALID);
  for (int i = 0; i < n; i++) pools[i] = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pools_create_all(pools, n - 1, &count, NULL), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS(n == 1 ? "there is 1 device" : "devices");
  ck_assert_int_eq(count, 0);
  for (int i = 0; i < n - 1; i++) ck_assert_ptr_null(pools[i]);
  setenv("SPOOL_CONF", "bogus=1", 1); /* cfg NULL reads SPOOL_CONF */
  CK_STATUS(spool_pools_create_all(pools, SPOOL_MAX_PEERS, &count, NULL), SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("spool_pools_create_all");
  CK_LAST_ERROR_HAS("bogus");
  unsetenv("SPOOL_CONF");
  CK_SPOOL(spool_pools_destroy_all(NULL, 0));
  CK_STATUS(spool_pools_destroy_all(NULL, 1), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pools_destroy_all(pools, -1), SPOOL_ERR_INVALID);
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(sim_create_all_undone) {
  /* The third device fails: the two pools made before it are destroyed, all slots NULL. */
  cudasim_set_device_count(3);
  cudasim_set_pools_supported(2, 0);
  spool_pool *pools[4];
  int count = -1;
  CK_STATUS(spool_pools_create_all(pools, 4, &count, NULL), SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("device 2 of 3");
  CK_LAST_ERROR_HAS("memory pools");
  ck_assert_int_eq(count, 0);
  for (int i = 0; i < 4; i++) ck_assert_ptr_null(pools[i]);
  ck_assert_int_eq(cudasim_pool_count(), 0);
}
END_TEST

START_TEST(sim_destroy_all_keeps_first_failure) {
  cudasim_set_device_count(2);
  spool_pool *pools[2];
  int count = 0;
  CK_SPOOL(spool_pools_create_all(pools, 2, &count, NULL));
  cudasim_fail("cudaMemPoolDestroy", 1, cudaErrorUnknown);
  CK_STATUS(spool_pools_destroy_all(pools, count), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("device 0");
  ck_assert_ptr_null(pools[0]);
  ck_assert_ptr_null(pools[1]);
}
END_TEST
#endif

/* ---- the stream's device --------------------------------------------------------------------- */

START_TEST(alloc_on_stream_of_other_device) {
  NEED_DEVICES(2);
  spool_pool *p0 = test_pool_on(0), *p1 = test_pool_on(1);
  cudaStream_t s1 = test_stream_on(1);
#ifdef SPOOL_TEST_SIM
  long before = cudasim_calls("cudaMallocFromPoolAsync");
#endif
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p0, &ptr, 1 * MiB, s1), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(ptr);
  CK_LAST_ERROR_HAS("belongs to device 1");
  CK_LAST_ERROR_HAS("lives on device 0");
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMallocFromPoolAsync"), before); /* nothing reached CUDA */
#endif
  spool_stats st = test_stats(p0);
  ck_assert_uint_eq(st.alloc_failures, 1);
  ck_assert_uint_eq(st.buffers_in_use, 0);
  /* The special handles are the current device's streams. */
  CK_CUDA(cudaSetDevice(1));
  cudaStream_t special[3] = {NULL, cudaStreamLegacy, cudaStreamPerThread};
  for (int i = 0; i < 3; i++) {
    CK_STATUS(spool_alloc(p0, &ptr, 4096, special[i]), SPOOL_ERR_INVALID);
    void *q = test_alloc(p1, 4096, special[i]); /* device 1's pool takes them */
    CK_SPOOL(spool_free(p1, q, special[i]));
  }
  CK_CUDA(cudaSetDevice(0));
  for (int i = 0; i < 3; i++) {
    ptr = test_alloc(p0, 4096, special[i]);
    CK_SPOOL(spool_free(p0, ptr, special[i]));
  }
  ptr = test_alloc(p1, 4096, s1);
  CK_SPOOL(spool_free(p1, ptr, s1));
  CK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  test_stream_destroy(s1);
  test_pool_destroy(p1);
  test_pool_destroy(p0);
}
END_TEST

START_TEST(alloc_on_streams_of_its_device) {
  spool_pool *p = test_pool_on(0);
  cudaStream_t own = test_stream_on(0);
  cudaStream_t streams[4] = {own, NULL, cudaStreamLegacy, cudaStreamPerThread};
  for (int i = 0; i < 4; i++) {
    void *ptr = test_alloc(p, 1000, streams[i]);
    CK_SPOOL(spool_free(p, ptr, streams[i]));
  }
  CK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  test_stream_destroy(own);
  test_pool_destroy(p);
}
END_TEST

/* ---- from a pointer to its pool -------------------------------------------------------------- */

START_TEST(pool_of_pointer) {
  spool_pool *a = test_pool_on(0), *b = test_pool_on(0);
  spool_config off_cfg = test_config();
  off_cfg.track = SPOOL_TRACK_OFF;
  off_cfg.cache = false; /* a stream cache knows its buffers whatever the track level */
  spool_pool *off = test_pool_create(&off_cfg);
  cudaStream_t s = test_stream_on(0);
  char *pa = test_alloc(a, 4096, s), *pb = test_alloc(b, 1000, s);
  void *po = test_alloc(off, 512, s);
  spool_pool *found = NULL;
  CK_SPOOL(spool_pool_of(pa, &found));
  ck_assert_ptr_eq(found, a);
  CK_SPOOL(spool_pool_of(pa + 4095, &found)); /* last byte */
  ck_assert_ptr_eq(found, a);
  CK_SPOOL(spool_pool_of(pb, &found));
  ck_assert_ptr_eq(found, b);
  /* track=off: the pool does not know its buffers; CUDA still knows the memory's device */
  found = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_of(po, &found), SPOOL_ERR_UNKNOWN_POINTER);
  ck_assert_ptr_null(found);
  CK_LAST_ERROR_HAS("device memory of device 0");
  CK_LAST_ERROR_HAS("track=off");
  int host = 0;
  CK_STATUS(spool_pool_of(&host, &found), SPOOL_ERR_UNKNOWN_POINTER);
  CK_LAST_ERROR_HAS("does not know it as device memory");
  CK_STATUS(spool_pool_of(NULL, &found), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pool_of(pa, NULL), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_free(a, pa, s));
  CK_STATUS(spool_pool_of(pa, &found), SPOOL_ERR_UNKNOWN_POINTER); /* freed: no pool's now */
  CK_SPOOL(spool_free(b, pb, s));
  CK_SPOOL(spool_free(off, po, s));
  test_stream_destroy(s);
  test_pool_destroy(off);
  test_pool_destroy(b);
  test_pool_destroy(a);
}
END_TEST

/* ---- peer access: arguments and bookkeeping -------------------------------------------------- */

START_TEST(set_access_arguments) {
  spool_pool *p = test_pool_on(0);
  int n = test_device_count();
  CK_STATUS(spool_pool_set_access(NULL, 0, SPOOL_ACCESS_READ_WRITE), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pool_set_access(p, 0, (spool_access)7), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("mode is 7");
  CK_STATUS(spool_pool_set_access(p, -1, SPOOL_ACCESS_READ_WRITE), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("no device -1");
  CK_STATUS(spool_pool_set_access(p, n, SPOOL_ACCESS_READ_WRITE), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("visible");
#ifdef SPOOL_TEST_SIM
  long calls = cudasim_calls("cudaMemPoolSetAccess");
#endif
  CK_SPOOL(spool_pool_set_access(p, 0, SPOOL_ACCESS_READ_WRITE)); /* the owner has it */
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAccess"), calls); /* CUDA never asked */
#endif
  CK_STATUS(spool_pool_set_access(p, 0, SPOOL_ACCESS_NONE), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("always has read-write access");
  CK_STATUS(spool_pool_set_access(p, 0, SPOOL_ACCESS_READ), SPOOL_ERR_INVALID);
  spool_access m = SPOOL_ACCESS_NONE;
  CK_SPOOL(spool_pool_get_access(p, 0, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ_WRITE);
  CK_STATUS(spool_pool_get_access(NULL, 0, &m), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pool_get_access(p, 0, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pool_get_access(p, n, &m), SPOOL_ERR_INVALID);
  test_pool_destroy(p);
}
END_TEST

START_TEST(set_access_peer) {
  NEED_DEVICES(2);
  spool_pool *p = test_pool_on(0);
  spool_access m = SPOOL_ACCESS_READ_WRITE;
  CK_SPOOL(spool_pool_get_access(p, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_NONE);
  char *text = test_report_text(p);
  CK_TEXT_HAS(text, "access:    device 0 read-write (owner); others none");
  free(text);
  CK_SPOOL(spool_pool_set_access(p, 1, SPOOL_ACCESS_READ_WRITE));
  CK_SPOOL(spool_pool_get_access(p, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ_WRITE);
  text = test_report_text(p);
  CK_TEXT_HAS(text, "device 0 read-write (owner), device 1 read-write");
  free(text);
  CK_SPOOL(spool_pool_set_access(p, 1, SPOOL_ACCESS_NONE));
  CK_SPOOL(spool_pool_get_access(p, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_NONE);
#ifdef SPOOL_TEST_SIM
  long calls = cudasim_calls("cudaMemPoolSetAccess");
  CK_SPOOL(spool_pool_set_access(p, 1, SPOOL_ACCESS_NONE)); /* already none: nothing to do */
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAccess"), calls);
#endif
  test_pool_destroy(p);
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(sim_set_access_not_a_peer) {
  cudasim_set_device_count(2);
  cudasim_set_can_access_peer(1, 0, 0);
  spool_pool *p = test_pool_on(0);
  long calls = cudasim_calls("cudaMemPoolSetAccess");
  CK_STATUS(spool_pool_set_access(p, 1, SPOOL_ACCESS_READ_WRITE), SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("cudaDeviceCanAccessPeer");
  CK_LAST_ERROR_HAS("device 1 cannot access the memory of device 0");
  ck_assert_int_eq(cudasim_calls("cudaMemPoolSetAccess"), calls);
  CK_SPOOL(spool_pool_set_access(p, 1, SPOOL_ACCESS_NONE)); /* none needs no peer */
  spool_access m = SPOOL_ACCESS_READ_WRITE;
  CK_SPOOL(spool_pool_get_access(p, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_NONE);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_set_access_cuda_refuses) {
  cudasim_set_device_count(2);
  spool_pool *p = test_pool_on(0);
  cudasim_fail("cudaMemPoolSetAccess", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_set_access(p, 1, SPOOL_ACCESS_READ_WRITE), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaErrorUnknown");
  spool_access m = SPOOL_ACCESS_READ_WRITE;
  CK_SPOOL(spool_pool_get_access(p, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_NONE); /* as it was */
  /* A driver that will not map read-only: said plainly, as unsupported. */
  cudasim_fail("cudaMemPoolSetAccess", 1, cudaErrorInvalidValue);
  CK_STATUS(spool_pool_set_access(p, 1, SPOOL_ACCESS_READ), SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("read-only");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess); /* spool cleared what it reported */
  cudasim_fail("cudaMemPoolGetAccess", 1, cudaErrorUnknown);
  CK_STATUS(spool_pool_get_access(p, 1, &m), SPOOL_ERR_CUDA);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_report_survives_access_failure) {
  cudasim_set_device_count(2);
  spool_pool *p = test_pool_on(0);
  CK_STATUS(spool_alloc(NULL, NULL, 1, NULL), SPOOL_ERR_INVALID);
  char before[1024];
  snprintf(before, sizeof before, "%s", spool_last_error());
  cudasim_fail("cudaMemPoolGetAccess", 1, cudaErrorUnknown);
  char *text = test_report_text(p);
  CK_TEXT_HAS(text, "device 1 unknown");
  free(text);
  ck_assert_str_eq(spool_last_error(), before); /* the report kept the caller's last error */
  test_pool_destroy(p);
}
END_TEST
#endif

START_TEST(create_with_peer_access) {
  NEED_DEVICES(2);
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "device=0, peer_access=[1]"));
  spool_pool *p = test_pool_create(&cfg);
  spool_access m = SPOOL_ACCESS_NONE;
  CK_SPOOL(spool_pool_get_access(p, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ_WRITE);
  char *text = test_report_text(p);
  CK_TEXT_HAS(text, "peer_access=[1]");
  CK_TEXT_HAS(text, "device 1 read-write");
  free(text);
  test_pool_destroy(p);
}
END_TEST

START_TEST(report_shows_device_access_ipc) {
  spool_pool *p = test_pool_on(0);
  char *text = test_report_text(p);
  CK_TEXT_HAS(text, "on device 0");
  CK_TEXT_HAS(text, "access:    device 0 read-write (owner)");
  CK_TEXT_HAS(text, "ipc:       none");
  free(text);
  test_pool_destroy(p);
}
END_TEST

/* ---- kernels across devices ------------------------------------------------------------------ */

#define VALUES ((size_t)1 << 20) /* 4 MiB of uint32_t */

/* A kernel on device 1 reads and writes a buffer of device 0's pool; copies across devices. */
START_TEST(peer_kernel_reads_and_writes) {
  NEED_DEVICES(2);
  NEED_KERNELS();
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "device=0, peer_access=[1]"));
  spool_pool *p0 = test_pool_create(&cfg), *p1 = test_pool_on(1);
  cudaStream_t s0 = test_stream_on(0), s1 = test_stream_on(1);
  uint32_t *buf = test_alloc(p0, VALUES * sizeof(uint32_t), s0);
  CK_CUDA(test_kernel_fill(buf, VALUES, 42, s0));
  CK_CUDA(cudaStreamSynchronize(s0));
  CK_CUDA(test_kernel_add(buf, VALUES, 7, s1)); /* device 1 on device 0's memory */
  CK_CUDA(cudaStreamSynchronize(s1));
  test_expect_values(buf, VALUES, 49, s0);
  /* device 1's kernel loads from device 0's pool into its own pool */
  uint32_t *dst = test_alloc(p1, VALUES * sizeof(uint32_t), s1);
  CK_CUDA(test_kernel_copy(dst, buf, VALUES, s1));
  CK_CUDA(cudaStreamSynchronize(s1));
  test_expect_values(dst, VALUES, 49, s1);
  /* and a copy engine's peer copy between the two pools */
  CK_CUDA(test_kernel_fill(dst, VALUES, 1000, s1));
  /* With device 1 current: device 0 has no access to p1, and the H200 refused the copy
   * (cudaErrorInvalidValue) with device 0 current although s1 is device 1's stream. */
  CK_CUDA(cudaSetDevice(1));
  CK_CUDA(cudaMemcpyAsync(buf, dst, VALUES * sizeof(uint32_t), cudaMemcpyDeviceToDevice, s1));
  CK_CUDA(cudaStreamSynchronize(s1));
  CK_CUDA(cudaSetDevice(0));
  test_expect_values(buf, VALUES, 1000, s0);
  CK_SPOOL(spool_free(p1, dst, s1));
  CK_SPOOL(spool_free(p0, buf, s0));
  test_stream_destroy(s1);
  test_stream_destroy(s0);
  test_pool_destroy(p1);
  test_pool_destroy(p0);
}
END_TEST

/* Without access the kernel is refused: an error, not a hang, and the data stays as it was. On
 * a GPU the fault sticks to device 1's context, so it happens in a child process. */
START_TEST(peer_kernel_refused_without_access) {
  NEED_DEVICES(2);
  NEED_KERNELS();
#ifdef SPOOL_TEST_SIM
  spool_pool *p0 = test_pool_on(0);
  cudaStream_t s0 = test_stream_on(0), s1 = test_stream_on(1);
  uint32_t *buf = test_alloc(p0, VALUES * sizeof(uint32_t), s0);
  CK_CUDA(test_kernel_fill(buf, VALUES, 42, s0));
  ck_assert_int_eq(test_kernel_add(buf, VALUES, 7, s1), cudaErrorIllegalAddress);
  test_expect_values(buf, VALUES, 42, s0);
  CK_SPOOL(spool_pool_set_access(p0, 1, SPOOL_ACCESS_READ_WRITE)); /* now it may */
  CK_CUDA(test_kernel_add(buf, VALUES, 7, s1));
  test_expect_values(buf, VALUES, 49, s0);
  CK_SPOOL(spool_pool_set_access(p0, 1, SPOOL_ACCESS_NONE)); /* and no more */
  ck_assert_int_eq(test_kernel_add(buf, VALUES, 7, s1), cudaErrorIllegalAddress);
  CK_SPOOL(spool_free(p0, buf, s0));
  test_stream_destroy(s1);
  test_stream_destroy(s0);
  test_pool_destroy(p0);
#endif
  int rc = test_run_child("peer_fault", "none");
  ck_assert_msg(rc == 0, "ipc_child peer_fault none exited %d (2: the write went through, 3: "
                "device 0 unusable, 4: data changed, -1: hung and was killed)", rc);
}
END_TEST

START_TEST(peer_read_only) {
  NEED_DEVICES(2);
  NEED_KERNELS();
  spool_pool *p0 = test_pool_on(0), *p1 = test_pool_on(1);
  spool_status s = spool_pool_set_access(p0, 1, SPOOL_ACCESS_READ);
  if (s == SPOOL_ERR_UNSUPPORTED) {
    printf("skipped %s: %s\n", __func__, spool_last_error());
    test_pool_destroy(p1);
    test_pool_destroy(p0);
    return;
  }
  CK_SPOOL(s);
  spool_access m = SPOOL_ACCESS_NONE;
  CK_SPOOL(spool_pool_get_access(p0, 1, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ);
  char *text = test_report_text(p0);
  CK_TEXT_HAS(text, "device 1 read-only");
  free(text);
  cudaStream_t s0 = test_stream_on(0), s1 = test_stream_on(1);
  uint32_t *buf = test_alloc(p0, VALUES * sizeof(uint32_t), s0);
  uint32_t *dst = test_alloc(p1, VALUES * sizeof(uint32_t), s1);
  CK_CUDA(test_kernel_fill(buf, VALUES, 5, s0));
  CK_CUDA(cudaStreamSynchronize(s0));
  CK_CUDA(test_kernel_copy(dst, buf, VALUES, s1)); /* device 1 reads device 0's memory */
  CK_CUDA(cudaStreamSynchronize(s1));
  test_expect_values(dst, VALUES, 5, s1);
  CK_SPOOL(spool_free(p1, dst, s1));
  CK_SPOOL(spool_free(p0, buf, s0));
  test_stream_destroy(s1);
  test_stream_destroy(s0);
  test_pool_destroy(p1);
  test_pool_destroy(p0);
  /* Writing is refused (in a child: the fault sticks on a GPU). */
  int rc = test_run_child("peer_fault", "ro");
  ck_assert_msg(rc == 0 || rc == 77, "ipc_child peer_fault ro exited %d", rc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("multi");
  TCase *tc = test_tcase("create_all");
  tcase_add_test(tc, create_all_every_device);
  tcase_add_test(tc, create_all_peer_access);
  tcase_add_test(tc, create_all_arguments);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_create_all_undone);
  tcase_add_test(tc, sim_destroy_all_keeps_first_failure);
#endif
  suite_add_tcase(s, tc);

  tc = test_tcase("streams");
  tcase_add_test(tc, alloc_on_stream_of_other_device);
  tcase_add_test(tc, alloc_on_streams_of_its_device);
  tcase_add_test(tc, pool_of_pointer);
  suite_add_tcase(s, tc);

  tc = test_tcase("access");
  tcase_add_test(tc, set_access_arguments);
  tcase_add_test(tc, set_access_peer);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_set_access_not_a_peer);
  tcase_add_test(tc, sim_set_access_cuda_refuses);
  tcase_add_test(tc, sim_report_survives_access_failure);
#endif
  tcase_add_test(tc, create_with_peer_access);
  tcase_add_test(tc, report_shows_device_access_ipc);
  suite_add_tcase(s, tc);

  tc = test_tcase("kernels");
  tcase_add_test(tc, peer_kernel_reads_and_writes);
  tcase_add_test(tc, peer_kernel_refused_without_access);
  tcase_add_test(tc, peer_read_only);
  suite_add_tcase(s, tc);
  return test_main(s);
}
