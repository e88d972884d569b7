/* check_ipc: pools shared between processes: the ipc key, shareable pools and the
 * rules CUDA imposes on them (never shrink, no allocation under capture, imported pools cannot
 * allocate), spool_pool_export / spool_pool_import with the descriptor passed over a Unix domain
 * socket (SCM_RIGHTS), spool_export_pointer / spool_import_pointer, and two real processes.
 *
 * check_ipc_sim: cudasim shares pools within one process only (its state is the process's own),
 * so the round trip there passes the descriptor through a socket to the same process; the
 * two-process test runs in check_ipc_gpu only. A GPU whose driver cannot share pools through
 * file descriptors makes the tests that need one print why and pass. */
#include "test_multi.h"

/* A shareable pool (ipc=posix_fd on top of extra), or NULL where the GPU cannot share pools:
 * then the test prints why and does nothing more. cudasim always can. */
static spool_pool *shareable_pool(const char *extra, const char *test) {
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "ipc=posix_fd"));
  if (extra) CK_SPOOL(spool_config_parse(&cfg, extra));
  spool_pool *p = NULL;
  spool_status s = spool_pool_create(&p, &cfg);
  if (!TEST_SIM && s == SPOOL_ERR_UNSUPPORTED) {
    printf("skipped %s: %s\n", test, spool_last_error());
    return NULL;
  }
  CK_SPOOL(s);
  return p;
}
#define SHAREABLE_OR_SKIP(var, extra)                                                         \
  spool_pool *var = shareable_pool((extra), __func__);                                        \
  if (!var) return

/* ---- the config key -------------------------------------------------------------------------- */

START_TEST(config_ipc_key) {
  spool_config cfg = test_config();
  ck_assert_int_eq(cfg.ipc, SPOOL_IPC_NONE);
  CK_SPOOL(spool_config_parse(&cfg, "ipc=posix_fd"));
  ck_assert_int_eq(cfg.ipc, SPOOL_IPC_POSIX_FD);
  CK_SPOOL(spool_config_validate(&cfg));
  char text[1024];
  CK_SPOOL(spool_config_format(&cfg, text, sizeof text));
  ck_assert_ptr_nonnull(strstr(text, "ipc=posix_fd\n"));
  CK_SPOOL(spool_config_parse(&cfg, "ipc=NONE"));
  ck_assert_int_eq(cfg.ipc, SPOOL_IPC_NONE);
  CK_STATUS(spool_config_parse(&cfg, "ipc=fd"), SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("ipc: expected none or posix_fd, got 'fd'");
  CK_STATUS(spool_config_parse(&cfg, "ipx=none"), SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("did you mean 'ipc'?");
  /* CUDA never shrinks a shareable pool: a lower threshold would be a promise it breaks */
  CK_SPOOL(spool_config_parse(&cfg, "ipc=posix_fd, release_threshold=1GiB"));
  CK_STATUS(spool_config_validate(&cfg), SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("release_threshold=max");
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_create(&p, &cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_null(p);
  CK_SPOOL(spool_config_parse(&cfg, "release_threshold=max, pool=default"));
  CK_STATUS(spool_config_validate(&cfg), SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("pool=own");
  cfg.pool = SPOOL_POOL_OWN;
  cfg.ipc = (spool_ipc)9;
  CK_STATUS(spool_config_validate(&cfg), SPOOL_ERR_CONFIG);
  CK_LAST_ERROR_HAS("ipc is 9");
}
END_TEST

/* ---- shareable pools ------------------------------------------------------------------------- */

START_TEST(shareable_pool_basics) {
  SHAREABLE_OR_SKIP(p, NULL);
  cudaStream_t s = test_stream_on(0);
  void *buf = test_alloc(p, 1 * MiB, s);
  CK_SPOOL(spool_free(p, buf, s));
  CK_CUDA(cudaStreamSynchronize(s));
  uint64_t reserved = test_stats(p).bytes_reserved;
  CK_STATUS(spool_trim(p, 0), SPOOL_ERR_UNSUPPORTED); /* CUDA never gives it back */
  CK_LAST_ERROR_HAS("never gives an IPC pool's memory back");
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.trims, 0);
  ck_assert_uint_eq(st.bytes_reserved, reserved);
  int fd1 = -1, fd2 = -1;
  CK_SPOOL(spool_pool_export(p, &fd1));
  CK_SPOOL(spool_pool_export(p, &fd2));
  ck_assert_int_ge(fd1, 0);
  ck_assert_int_ne(fd1, fd2);
  ck_assert_int_ne(fcntl(fd1, F_GETFD) & FD_CLOEXEC, 0); /* children do not inherit it */
  char *text = test_report_text(p);
  CK_TEXT_HAS(text, "ipc:       shareable (posix_fd, never shrinks); exported 2 times");
  free(text);
  close(fd1);
  close(fd2);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(sim_shareable_unsupported) {
  spool_config cfg = test_config();
  cfg.ipc = SPOOL_IPC_POSIX_FD;
  cudasim_set_ipc_supported(0, 0);
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_create(&p, &cfg), SPOOL_ERR_UNSUPPORTED);
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS("cudaDevAttrMemoryPoolSupportedHandleTypes is 0x0");
  ck_assert_int_eq(cudasim_pool_count(), 0);
  cudasim_set_ipc_supported(0, 1);
  cudasim_set_driver_version(11020);
  CK_STATUS(spool_pool_create(&p, &cfg), SPOOL_ERR_UNSUPPORTED);
  CK_LAST_ERROR_HAS("11.3");
  ck_assert_int_eq(cudasim_pool_count(), 0);
}
END_TEST
#endif

START_TEST(adopted_pool_cannot_be_shareable) {
  cudaMemPool_t def = NULL;
  CK_CUDA(cudaDeviceGetDefaultMemPool(&def, 0));
  spool_config cfg = test_config();
  cfg.ipc = SPOOL_IPC_POSIX_FD;
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_adopt(&p, def, &cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_null(p);
  CK_LAST_ERROR_HAS("adopted pool");
}
END_TEST

START_TEST(ordinary_pool_cannot_share) {
  spool_pool *p = test_pool_on(0);
  cudaStream_t s = test_stream_on(0);
  void *buf = test_alloc(p, 4096, s);
  int fd = 1234;
  CK_STATUS(spool_pool_export(p, &fd), SPOOL_ERR_UNSUPPORTED);
  ck_assert_int_eq(fd, -1);
  CK_LAST_ERROR_HAS("ipc=posix_fd");
  spool_ipc_pointer x;
  CK_STATUS(spool_export_pointer(p, buf, &x), SPOOL_ERR_UNSUPPORTED);
  memset(&x, 0, sizeof x);
  void *got = TEST_SENTINEL;
  CK_STATUS(spool_import_pointer(p, &x, &got), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(got);
  CK_LAST_ERROR_HAS("not made by spool_pool_import");
  CK_STATUS(spool_pool_export(NULL, &fd), SPOOL_ERR_INVALID);
  CK_STATUS(spool_pool_export(p, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_export_pointer(NULL, buf, &x), SPOOL_ERR_INVALID);
  CK_STATUS(spool_export_pointer(p, NULL, &x), SPOOL_ERR_INVALID);
  CK_STATUS(spool_export_pointer(p, buf, NULL), SPOOL_ERR_INVALID);
  CK_STATUS(spool_import_pointer(NULL, &x, &got), SPOOL_ERR_INVALID);
  CK_STATUS(spool_import_pointer(p, NULL, &got), SPOOL_ERR_INVALID);
  CK_STATUS(spool_import_pointer(p, &x, NULL), SPOOL_ERR_INVALID);
  CK_SPOOL(spool_free(p, buf, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(export_pointer_checks) {
  SHAREABLE_OR_SKIP(p, NULL);
  spool_pool *other = test_pool_on(0);
  cudaStream_t s = test_stream_on(0);
  char *buf = test_alloc(p, 4096, s);
  void *foreign = test_alloc(other, 4096, s);
  spool_ipc_pointer x;
  memset(&x, 0xEE, sizeof x);
  spool_ipc_pointer untouched = x;
  CK_STATUS(spool_export_pointer(p, buf + 256, &x), SPOOL_ERR_INTERIOR_POINTER);
  CK_LAST_ERROR_HAS("256 bytes into");
  CK_STATUS(spool_export_pointer(p, foreign, &x), SPOOL_ERR_WRONG_POOL);
  int host = 0;
  CK_STATUS(spool_export_pointer(p, &host, &x), SPOOL_ERR_UNKNOWN_POINTER);
  ck_assert_int_eq(memcmp(&x, &untouched, sizeof x), 0); /* written only on success */
  CK_SPOOL(spool_export_pointer(p, buf, &x));
  ck_assert_uint_eq(x.size, 4096);
  ck_assert_uint_eq(x.magic, SPOOL_IPC_POINTER_MAGIC);
  ck_assert_uint_eq(x.version, SPOOL_IPC_POINTER_VERSION);
  char *text = test_report_text(p);
  CK_TEXT_HAS(text, "1 buffer exported");
  free(text);
  CK_SPOOL(spool_free(other, foreign, s));
  CK_SPOOL(spool_free(p, buf, s));
  test_stream_destroy(s);
  test_pool_destroy(other);
  test_pool_destroy(p);
  /* track=off: nothing to check the pointer against; the size is unknown */
  SHAREABLE_OR_SKIP(off, "track=off");
  s = test_stream_on(0);
  buf = test_alloc(off, 4096, s);
  CK_SPOOL(spool_export_pointer(off, buf, &x));
  ck_assert_uint_eq(x.size, 0);
  CK_SPOOL(spool_free(off, buf, s));
  test_stream_destroy(s);
  test_pool_destroy(off);
}
END_TEST

START_TEST(import_needs_a_given_descriptor) {
  spool_pool *p = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_import(-1, &p), SPOOL_ERR_INVALID);
  ck_assert_ptr_null(p);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  close(fds[0]);
  close(fds[1]);
  CK_STATUS(spool_pool_import(fds[0], &p), SPOOL_ERR_INVALID); /* closed: not this process's */
  CK_LAST_ERROR_HAS("is not open in this process");
  CK_LAST_ERROR_HAS("SCM_RIGHTS");
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ck_assert_int_ge(devnull, 0);
  p = (spool_pool *)TEST_SENTINEL;
  spool_status s = spool_pool_import(devnull, &p); /* open, but no pool's descriptor */
  ck_assert_msg(s != SPOOL_OK, "imported a pool from /dev/null");
  ck_assert_ptr_null(p);
  CK_STATUS(spool_pool_import(devnull, NULL), SPOOL_ERR_INVALID);
  close(devnull);
}
END_TEST

/* A process that was not given the descriptor cannot import the pool, even knowing its number
 * in the exporter (the descriptor is close-on-exec, so the child does not inherit it). */
START_TEST(other_process_cannot_import) {
  SHAREABLE_OR_SKIP(p, NULL);
  int fd = -1;
  CK_SPOOL(spool_pool_export(p, &fd));
  char number[16];
  snprintf(number, sizeof number, "%d", fd);
  int rc = test_run_child("noimport", number);
  ck_assert_msg(rc == 0, "ipc_child noimport %d exited %d (1: it imported the pool)", fd, rc);
  close(fd);
  test_pool_destroy(p);
}
END_TEST

#ifndef SPOOL_TEST_SIM
START_TEST(gpu_no_allocation_under_capture) {
  SHAREABLE_OR_SKIP(p, NULL);
  cudaStream_t s = test_stream_on(0);
  CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  void *ptr = TEST_SENTINEL;
  CK_STATUS(spool_alloc(p, &ptr, 4096, s), SPOOL_ERR_UNSUPPORTED);
  ck_assert_ptr_null(ptr);
  CK_LAST_ERROR_HAS("captured");
  cudaGraph_t graph = NULL;
  CK_CUDA(cudaStreamEndCapture(s, &graph)); /* the capture is still valid */
  CK_CUDA(cudaGraphDestroy(graph));
  ptr = test_alloc(p, 4096, s); /* after the capture: fine */
  CK_SPOOL(spool_free(p, ptr, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#endif

/* ---- in one process (cudasim) ---------------------------------------------------------------- */

#ifdef SPOOL_TEST_SIM
/* Passes fd through a Unix domain socket to this same process: the number that comes back is a
 * new descriptor of the same pool. */
static int pass_through_socket(int fd) {
  int sv[2], got = -1;
  char byte = 'p';
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  ck_assert_int_eq(ipc_send(sv[0], fd, &byte, 1), 0);
  ck_assert_int_eq(ipc_recv(sv[1], &got, &byte, 1, IPC_TIMEOUT_MS), 0);
  close(sv[0]);
  close(sv[1]);
  ck_assert_int_ge(got, 0);
  ck_assert_int_ne(got, fd);
  return got;
}

/* Exporter side: a shareable pool with a buffer of n values seed + i. */
static uint32_t *filled(spool_pool *p, size_t n, uint32_t seed, cudaStream_t s) {
  uint32_t *buf = test_alloc(p, n * sizeof *buf, s);
  CK_CUDA(test_kernel_fill(buf, n, seed, s));
  CK_CUDA(cudaStreamSynchronize(s)); /* complete before anyone imports it */
  return buf;
}

static spool_pool *imported(spool_pool *exporter) {
  int fd = -1;
  CK_SPOOL(spool_pool_export(exporter, &fd));
  int given = pass_through_socket(fd);
  close(fd);
  spool_pool *q = (spool_pool *)TEST_SENTINEL;
  CK_SPOOL(spool_pool_import(given, &q));
  close(given); /* the imported pool does not need it */
  ck_assert_ptr_nonnull(q);
  return q;
}

START_TEST(sim_round_trip) {
  spool_pool *p = shareable_pool(NULL, __func__);
  cudaStream_t s = test_stream_on(0);
  uint32_t *buf = filled(p, 1000, 7, s);
  spool_pool *q = imported(p);
  ck_assert_int_eq(spool_pool_device(q), 0);
  ck_assert_int_eq(spool_pool_config(q)->ipc, SPOOL_IPC_POSIX_FD);
  spool_ipc_pointer x;
  CK_SPOOL(spool_export_pointer(p, buf, &x));
  uint32_t *mine = TEST_SENTINEL;
  CK_SPOOL(spool_import_pointer(q, &x, (void **)&mine));
  ck_assert_ptr_ne(mine, buf); /* a mapping of its own, as in another process */
  test_expect_values(mine, 1000, 7, s);
  CK_CUDA(test_kernel_add(mine, 1000, 3, s)); /* the importer writes, the exporter sees it */
  test_expect_values(buf, 1000, 10, s);
  spool_pool *found = NULL;
  CK_SPOOL(spool_pool_of(mine, &found));
  ck_assert_ptr_eq(found, q);
  spool_stats st = test_stats(q);
  ck_assert_uint_eq(st.buffers_in_use, 1);
  ck_assert_uint_eq(st.bytes_in_use, 4000);
  ck_assert_uint_eq(st.allocs, 1);
  char *text = test_report_text(q);
  CK_TEXT_HAS(text, "imported from another process (cannot allocate, never shrinks); 1 buffer");
  free(text);
  /* CUDA's rules for imported pools, as statuses */
  void *no = TEST_SENTINEL;
  CK_STATUS(spool_alloc(q, &no, 4096, s), SPOOL_ERR_UNSUPPORTED);
  ck_assert_ptr_null(no);
  CK_LAST_ERROR_HAS("imported from another process");
  CK_STATUS(spool_trim(q, 0), SPOOL_ERR_UNSUPPORTED);
  int fd = 99;
  CK_STATUS(spool_pool_export(q, &fd), SPOOL_ERR_UNSUPPORTED);
  CK_STATUS(spool_export_pointer(q, mine, &x), SPOOL_ERR_UNSUPPORTED);
  spool_access m = SPOOL_ACCESS_NONE;
  CK_SPOOL(spool_pool_get_access(q, 0, &m));
  ck_assert_int_eq(m, SPOOL_ACCESS_READ_WRITE);
  /* the importer frees first (and that free completes), then the exporter */
  CK_SPOOL(spool_free(q, mine, s));
  CK_CUDA(cudaStreamSynchronize(s));
  ck_assert_int_eq(cudasim_imports(), 0);
  CK_STATUS(spool_free(q, mine, s), SPOOL_ERR_DOUBLE_FREE);
  CK_SPOOL(spool_free(p, buf, s));
  test_pool_destroy(q);
  test_stream_destroy(s);
  test_pool_destroy(p);
  ck_assert_int_eq(cudasim_pool_count(), 0);
}
END_TEST

START_TEST(sim_import_on_another_device) {
  /* The imported pool gets access for another device in the importer, as CUDA wants. */
  cudasim_set_device_count(2);
  spool_pool *p = shareable_pool(NULL, __func__);
  cudaStream_t s0 = test_stream_on(0), s1 = test_stream_on(1);
  uint32_t *buf = filled(p, 256, 1, s0);
  spool_pool *q = imported(p);
  spool_ipc_pointer x;
  CK_SPOOL(spool_export_pointer(p, buf, &x));
  uint32_t *mine = NULL;
  CK_SPOOL(spool_import_pointer(q, &x, (void **)&mine));
  ck_assert_int_eq(test_kernel_add(mine, 256, 1, s1), cudaErrorIllegalAddress);
  CK_SPOOL(spool_pool_set_access(q, 1, SPOOL_ACCESS_READ_WRITE));
  CK_CUDA(test_kernel_add(mine, 256, 1, s1));
  test_expect_values(buf, 256, 2, s0);
  CK_SPOOL(spool_free(q, mine, s1));
  CK_SPOOL(spool_free(p, buf, s0));
  test_pool_destroy(q);
  test_stream_destroy(s1);
  test_stream_destroy(s0);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_import_pointer_checks) {
  spool_pool *p = shareable_pool(NULL, __func__);
  cudaStream_t s = test_stream_on(0);
  uint32_t *buf = filled(p, 64, 0, s);
  spool_pool *q = imported(p);
  spool_ipc_pointer x;
  CK_SPOOL(spool_export_pointer(p, buf, &x));
  spool_ipc_pointer bad = x;
  bad.magic = 0x12345678u;
  void *mine = TEST_SENTINEL;
  CK_STATUS(spool_import_pointer(q, &bad, &mine), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("magic 0x12345678");
  ck_assert_ptr_null(mine);
  bad = x;
  bad.version = 99;
  CK_STATUS(spool_import_pointer(q, &bad, &mine), SPOOL_ERR_INVALID);
  CK_LAST_ERROR_HAS("version 99");
  /* the exporter freed it meanwhile (breaking the rule): CUDA refuses, spool says so */
  CK_SPOOL(spool_free(p, buf, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_STATUS(spool_import_pointer(q, &x, &mine), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("cudaMemPoolImportPointer");
  ck_assert_ptr_null(mine);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  ck_assert_uint_eq(test_stats(q).buffers_in_use, 0);
  test_pool_destroy(q);
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_destroying_imported_pool_frees_first) {
  spool_pool *p = shareable_pool(NULL, __func__);
  cudaStream_t s = test_stream_on(0);
  uint32_t *buf = filled(p, 64, 0, s);
  spool_pool *q = imported(p);
  spool_ipc_pointer x;
  CK_SPOOL(spool_export_pointer(p, buf, &x));
  void *mine = NULL;
  CK_SPOOL(spool_import_pointer(q, &x, &mine));
  ck_assert_int_eq(cudasim_imports(), 1);
  FILE *sink = tmpfile(); /* the leak report goes here, not to the test's output */
  ck_assert_ptr_nonnull(sink);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fileno(sink));
  setenv("SPOOL_REPORT", path, 1);
  CK_STATUS(spool_pool_destroy(q), SPOOL_ERR_LEAKS); /* a leak, freed before the exporter's */
  unsetenv("SPOOL_REPORT");
  fclose(sink);
  ck_assert_int_eq(cudasim_imports(), 0);
  CK_SPOOL(spool_free(p, buf, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(sim_import_of_destroyed_pool) {
  spool_pool *p = shareable_pool(NULL, __func__);
  int fd = -1;
  CK_SPOOL(spool_pool_export(p, &fd));
  test_pool_destroy(p);
  spool_pool *q = (spool_pool *)TEST_SENTINEL;
  CK_STATUS(spool_pool_import(fd, &q), SPOOL_ERR_CUDA);
  CK_LAST_ERROR_HAS("still alive");
  ck_assert_ptr_null(q);
  close(fd);
  ck_assert_int_eq(cudasim_pool_count(), 0);
}
END_TEST
#endif

/* ---- two real processes ---------------------------------------------------------------------- */

/* Starts ipc_child import, sends it the pool's descriptor (SCM_RIGHTS) and *job, and waits for
 * its answer and its exit. Returns the exit status; *r holds the answer. */
static int run_import_child(spool_pool *p, const ipc_job *job, ipc_reply *r) {
  int fd = -1, sv[2];
  CK_SPOOL(spool_pool_export(p, &fd));
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  ck_assert_int_eq(fcntl(sv[0], F_SETFD, FD_CLOEXEC), 0); /* the child gets sv[1] only */
  char arg[16];
  snprintf(arg, sizeof arg, "%d", sv[1]);
  char *argv[] = {(char *)SPOOL_TEST_CHILD, (char *)"import", arg, NULL};
  fflush(stdout);
  fflush(stderr);
  pid_t pid = ipc_child_start(argv);
  close(sv[1]);
  ck_assert_int_gt(pid, 0);
  ck_assert_int_eq(ipc_send(sv[0], fd, job, sizeof *job), 0);
  close(fd); /* the child has its own descriptor now */
  int none = -1;
  int got = ipc_recv(sv[0], &none, r, sizeof *r, IPC_TIMEOUT_MS);
  int err = errno;
  if (got != 0) kill(pid, SIGKILL); /* no answer in time: do not wait for ever */
  int rc = ipc_child_wait(pid, IPC_TIMEOUT_MS);
  close(sv[0]);
  ck_assert_msg(got == 0, "no answer from the child (%s); it exited %d", strerror(err), rc);
  return rc;
}

#ifdef SPOOL_TEST_SIM
/* The descriptor does cross to the other process (SCM_RIGHTS): the child's import gets past
 * "not open in this process" and fails only in cudasim, whose pools stay in this process. */
START_TEST(sim_descriptor_reaches_child) {
  spool_pool *p = shareable_pool(NULL, __func__);
  cudaStream_t s = test_stream_on(0);
  void *buf = test_alloc(p, 4096, s);
  ipc_job job;
  memset(&job, 0, sizeof job);
  CK_SPOOL(spool_export_pointer(p, buf, &job.buffer));
  job.count = 1024;
  ipc_reply r;
  int rc = run_import_child(p, &job, &r);
  ck_assert_int_eq(rc, 1);
  ck_assert_int_eq(r.step, 2); /* spool_pool_import */
  ck_assert_msg(strstr(r.words, "cudaMemPoolImportFromShareableHandle") != NULL &&
                    strstr(r.words, "not open") == NULL,
                "the child's import failed otherwise: %s", r.words);
  CK_SPOOL(spool_free(p, buf, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#else
#define SHARED_VALUES ((size_t)1 << 20)

/* Shares a buffer with a child process that imports it, checks it, adds `add` by a kernel on
 * `device`, frees it; then checks here that the child's writes arrived, and frees it last. */
static void share_with_child(spool_pool *p, int device) {
  const uint32_t seed = 0x1000u + (uint32_t)device, add = 3;
  cudaStream_t s = test_stream_on(spool_pool_device(p));
  uint32_t *buf = test_alloc(p, SHARED_VALUES * sizeof *buf, s);
  CK_CUDA(test_kernel_fill(buf, SHARED_VALUES, seed, s));
  CK_CUDA(cudaStreamSynchronize(s)); /* the allocation and the data are complete */
  ipc_job job;
  memset(&job, 0, sizeof job);
  CK_SPOOL(spool_export_pointer(p, buf, &job.buffer));
  job.count = SHARED_VALUES;
  job.seed = seed;
  job.add = add;
  job.device = device;
  ipc_reply r;
  int rc = run_import_child(p, &job, &r);
  ck_assert_msg(r.status == 0, "the child failed at step %d: %s", r.step, r.words);
  ck_assert_int_eq(rc, 0);
  /* The child has freed its mapping and synchronized: the exporter reads and frees last. */
  test_expect_values(buf, SHARED_VALUES, seed + add, s);
  CK_SPOOL(spool_free(p, buf, s));
  test_stream_destroy(s);
}
#endif

START_TEST(two_processes_share_a_buffer) {
#ifdef SPOOL_TEST_SIM
  printf("skipped %s: cudasim cannot share memory between processes (check_ipc_gpu runs it)\n",
         __func__);
#else
  NEED_KERNELS();
  SHAREABLE_OR_SKIP(p, NULL);
  share_with_child(p, 0);
  if (test_device_count() >= 2)
    share_with_child(p, 1); /* the child's kernel on device 1, with access set in the child */
  else
    printf("%s: one device: the child's kernel on another device was not tried\n", __func__);
  test_pool_destroy(p);
#endif
}
END_TEST

int main(void) {
  Suite *s = suite_create("ipc");
  TCase *tc = test_tcase("config");
  tcase_add_test(tc, config_ipc_key);
  suite_add_tcase(s, tc);

  tc = test_tcase("shareable");
  tcase_add_test(tc, shareable_pool_basics);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_shareable_unsupported);
#endif
  tcase_add_test(tc, adopted_pool_cannot_be_shareable);
  tcase_add_test(tc, ordinary_pool_cannot_share);
  tcase_add_test(tc, export_pointer_checks);
  tcase_add_test(tc, import_needs_a_given_descriptor);
  tcase_add_test(tc, other_process_cannot_import);
#ifndef SPOOL_TEST_SIM
  tcase_add_test(tc, gpu_no_allocation_under_capture);
#endif
  suite_add_tcase(s, tc);

#ifdef SPOOL_TEST_SIM
  tc = test_tcase("sim_one_process");
  tcase_add_test(tc, sim_round_trip);
  tcase_add_test(tc, sim_import_on_another_device);
  tcase_add_test(tc, sim_import_pointer_checks);
  tcase_add_test(tc, sim_destroying_imported_pool_frees_first);
  tcase_add_test(tc, sim_import_of_destroyed_pool);
  suite_add_tcase(s, tc);
#endif

  tc = test_tcase("processes");
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, sim_descriptor_reaches_child);
#endif
  tcase_add_test(tc, two_processes_share_a_buffer);
  suite_add_tcase(s, tc);
  return test_main(s);
}
