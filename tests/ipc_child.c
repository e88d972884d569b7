/* ipc_child: the other process of the IPC and peer-access tests (check_ipc, check_multi), started
 * with fork + exec so that it opens CUDA afresh.
 *
 *   ipc_child import <socket fd>
 *       Receives a pool's descriptor (SCM_RIGHTS) and an ipc_job over the socket, imports the
 *       pool and the buffer, checks that the buffer holds the exporter's pattern, adds job.add to
 *       every value by a kernel on job.device (giving that device access first when the pool
 *       lives elsewhere), frees the buffer and synchronizes (the importer frees first), destroys
 *       the pool, and answers with an ipc_reply. Exit 0 when every step went well.
 *   ipc_child noimport <fd number>
 *       Imports through a descriptor number it was never given. Exit 0 when spool refuses, 1
 *       when the import succeeds.
 *   ipc_child peer_fault none|ro
 *       A kernel on device 1 writes a buffer of a pool on device 0 that device 1 may not write
 *       (no access, or read-only access). Exit 0 when the write is refused cleanly (an error
 *       instead of success or a hang, and device 0 still reads its data unchanged); 2 when the
 *       write went through, 3 when device 0 could no longer read its data, 4 when the data
 *       changed, 77 when there are fewer than two devices or read-only access is unsupported.
 *       It runs in a process of its own because on a GPU the fault sticks to device 1's context.
 *
 * Built twice, like the suites: ipc_child_gpu (CUDA) and ipc_child_sim (cudasim, where a pool
 * cannot cross processes: only noimport and peer_fault are meaningful there). */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <spool/spool.h>

#include "ipc_proto.h"
#include "test_kernels.h"

#ifdef SPOOL_TEST_SIM
#include "cudasim.h"
#endif

/* ---- import --------------------------------------------------------------------------------- */

static int answer(int sock, int step, int status, const char *words) {
  ipc_reply r;
  memset(&r, 0, sizeof r);
  r.status = status;
  r.step = step;
  snprintf(r.words, sizeof r.words, "%s", words);
  if (ipc_send(sock, -1, &r, sizeof r) != 0) perror("ipc_child: sending the answer");
  if (status != 0) fprintf(stderr, "ipc_child: step %d failed: %s\n", step, words);
  return status == 0 ? 0 : 1;
}

static int answer_cuda(int sock, int step, const char *what, cudaError_t err) {
  char words[256];
  snprintf(words, sizeof words, "%s: %s", what, cudaGetErrorName(err));
  return answer(sock, step, -1, words);
}

/* Step 5 on: the buffer is imported into pool. Leaves nothing behind on failure but the pool. */
static int work_on(int sock, const ipc_job *job, spool_pool *pool, void *ptr) {
  size_t bytes = (size_t)job->count * sizeof(uint32_t);
  uint32_t *host = malloc(bytes);
  cudaStream_t stream = NULL;
  cudaError_t err = host ? cudaSetDevice(job->device) : cudaErrorMemoryAllocation;
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaMemcpyAsync(host, ptr, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    free(host);
    return answer_cuda(sock, 5, "reading the imported buffer", err);
  }
  for (uint64_t i = 0; i < job->count; i++) {
    if (host[i] != job->seed + (uint32_t)i) {
      char words[128];
      snprintf(words, sizeof words, "value %" PRIu64 " is %" PRIu32 ", expected %" PRIu32, i,
               host[i], job->seed + (uint32_t)i);
      free(host);
      return answer(sock, 6, -1, words);
    }
  }
  free(host);
  err = test_kernel_add(ptr, (size_t)job->count, job->add, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return answer_cuda(sock, 7, "the kernel on the imported buffer", err);
  spool_status s = spool_free(pool, ptr, stream);
  if (s != SPOOL_OK) return answer(sock, 8, (int)s, spool_last_error());
  /* The importer's free must be complete before the exporter frees: synchronize. */
  err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) err = cudaStreamDestroy(stream);
  if (err != cudaSuccess) return answer_cuda(sock, 9, "completing the free", err);
  return -1; /* go on */
}

static int run_import(int sock) {
  ipc_job job;
  int fd = -1;
  if (ipc_recv(sock, &fd, &job, sizeof job, IPC_TIMEOUT_MS) != 0) {
    perror("ipc_child: receiving the job");
    return 1;
  }
  if (fd < 0) return answer(sock, 1, -1, "no descriptor came with the job");
  spool_pool *pool = NULL;
  spool_status s = spool_pool_import(fd, &pool);
  close(fd); /* the imported pool does not need it */
  if (s != SPOOL_OK) return answer(sock, 2, (int)s, spool_last_error());
  void *ptr = NULL;
  s = spool_import_pointer(pool, &job.buffer, &ptr);
  if (s == SPOOL_OK && job.device != spool_pool_device(pool))
    s = spool_pool_set_access(pool, job.device, SPOOL_ACCESS_READ_WRITE);
  int rc = -1;
  if (s != SPOOL_OK) rc = answer(sock, 3, (int)s, spool_last_error());
  else if (job.buffer.size != job.count * sizeof(uint32_t))
    rc = answer(sock, 4, -1, "the buffer's size is not what the job says");
  else rc = work_on(sock, &job, pool, ptr);
  spool_status d = spool_pool_destroy(pool); /* frees the buffer if a step failed before */
  if (rc >= 0) return rc;
  if (d != SPOOL_OK) return answer(sock, 10, (int)d, spool_last_error());
  return answer(sock, 0, 0, "done");
}

/* ---- noimport ----------------------------------------------------------------------------- */

static int run_noimport(int fd) {
  spool_pool *pool = NULL;
  spool_status s = spool_pool_import(fd, &pool);
  if (s == SPOOL_OK) {
    fprintf(stderr, "ipc_child: imported a pool through descriptor %d it was never given\n", fd);
    spool_pool_destroy(pool);
    return 1;
  }
  printf("ipc_child: import through descriptor %d refused: %s: %s\n", fd, spool_status_name(s),
         spool_last_error());
  return 0;
}

/* ---- peer_fault --------------------------------------------------------------------------- */

#define FAULT_COUNT 4096u
#define FAULT_SEED 1000u

static int check_unchanged(const uint32_t *dev0, cudaStream_t s0) {
  static uint32_t host[FAULT_COUNT];
  cudaError_t err = cudaSetDevice(0);
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(host, dev0, sizeof host, cudaMemcpyDeviceToHost, s0);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s0);
  if (err == cudaErrorIllegalAddress) {
    /* On the H200 the fault is sticky for the whole process: device 0 reports it too. Every
     * later call fails loudly, which is a clean refusal; only a read that succeeds with other
     * values would be silent corruption. */
    printf("ipc_child: device 0 reports the sticky fault too (%s): nothing went unnoticed\n",
           cudaGetErrorName(err));
    return 0;
  }
  if (err != cudaSuccess) {
    fprintf(stderr, "ipc_child: device 0 cannot read its buffer after the fault: %s\n",
            cudaGetErrorName(err));
    return 3;
  }
  for (uint32_t i = 0; i < FAULT_COUNT; i++)
    if (host[i] != FAULT_SEED + i) {
      fprintf(stderr, "ipc_child: value %u is %u, expected %u: the refused write changed it\n", i,
              host[i], FAULT_SEED + i);
      return 4;
    }
  return 0;
}

/* Returns the exit code; the buffer and pool are left to the caller. */
static int fault(spool_pool *pool, uint32_t *buf, cudaStream_t s0) {
  cudaStream_t s1 = NULL;
  cudaError_t err = cudaSetDevice(1);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    fprintf(stderr, "ipc_child: no stream on device 1: %s\n", cudaGetErrorName(err));
    return 1;
  }
  err = test_kernel_add(buf, FAULT_COUNT, 5, s1);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s1); /* a GPU reports the fault here */
  if (err == cudaSuccess) {
    fprintf(stderr, "ipc_child: a kernel on device 1 wrote memory it may not write\n");
    return 2;
  }
  printf("ipc_child: the write of device 1 was refused: %s\n", cudaGetErrorName(err));
  (void)cudaStreamDestroy(s1); /* may fail on a faulted context: nothing to learn from it */
  (void)pool;
  return check_unchanged(buf, s0);
}

static int run_peer_fault(const char *mode) {
#ifdef SPOOL_TEST_SIM
  cudasim_set_device_count(2);
#endif
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    printf("ipc_child: skipped: peer_fault needs two devices (%d visible)\n", n);
    return 77;
  }
  spool_pool *pool = NULL;
  if (spool_pool_create(&pool, NULL) != SPOOL_OK) {
    fprintf(stderr, "ipc_child: %s\n", spool_last_error());
    return 1;
  }
  int rc = 0;
  if (strcmp(mode, "ro") == 0) {
    spool_status s = spool_pool_set_access(pool, 1, SPOOL_ACCESS_READ);
    if (s == SPOOL_ERR_UNSUPPORTED) printf("ipc_child: skipped: %s\n", spool_last_error());
    rc = s == SPOOL_ERR_UNSUPPORTED ? 77 : s != SPOOL_OK ? 1 : 0;
  }
  cudaStream_t s0 = NULL;
  void *buf = NULL;
  cudaError_t err = cudaSetDevice(0);
  if (rc == 0 && err == cudaSuccess) err = cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
  if (rc == 0 && err == cudaSuccess &&
      spool_alloc(pool, &buf, FAULT_COUNT * sizeof(uint32_t), s0) != SPOOL_OK)
    err = cudaErrorMemoryAllocation;
  if (rc == 0 && err == cudaSuccess) err = test_kernel_fill(buf, FAULT_COUNT, FAULT_SEED, s0);
  if (rc == 0 && err == cudaSuccess) err = cudaStreamSynchronize(s0);
  if (rc == 0 && err != cudaSuccess) {
    fprintf(stderr, "ipc_child: preparing device 0's buffer: %s (%s)\n", cudaGetErrorName(err),
            spool_last_error());
    rc = 1;
  }
  if (rc == 0) rc = fault(pool, buf, s0);
  (void)cudaSetDevice(0);
  (void)spool_free(pool, buf, s0); /* best effort: a GPU's faulted context may refuse */
  if (s0) (void)cudaStreamSynchronize(s0), (void)cudaStreamDestroy(s0);
  (void)spool_pool_destroy(pool);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 3 && strcmp(argv[1], "import") == 0) return run_import(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "noimport") == 0) return run_noimport(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "peer_fault") == 0) return run_peer_fault(argv[2]);
  fprintf(stderr, "usage: ipc_child import <socket fd> | noimport <fd> | peer_fault none|ro\n");
  return 64;
}
