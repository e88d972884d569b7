// ipc_share: one buffer of a spool pool, shared by two processes.
//
// The parent (the exporter) creates a shareable pool (config ipc=posix_fd), allocates a buffer,
// fills it with i by a kernel and synchronizes, so the data is complete before anyone else sees
// it. It sends the child (the importer) the pool's file descriptor over a Unix domain socket
// (SCM_RIGHTS: the only way another process gets it) and the buffer's export data. The child
// imports the pool and the buffer, doubles every value by a kernel, frees the buffer,
// synchronizes and says so. Only then does the parent check the values and free the buffer: the
// importer frees first, as CUDA requires (spool cannot see the other process: that order is the
// program's to keep).
//
// The process forks before either side makes a CUDA call: CUDA is undefined in a child forked
// after it was initialised.
//
// Usage: ipc_share [--count N] [--child-device D]
//   --count N         values (uint32_t) in the buffer, default 16 Mi (64 MiB)
//   --child-device D  the device whose kernel the child uses (default 0); another device than
//                     the pool's is given access in the child (an imported pool starts with
//                     access from its own device only)
// Exit status: 0 success, 1 failure, 2 bad usage, 77 no CUDA device, or the device or driver
// cannot share pools (CTest reads 77 as "skipped").

#include <spool/spool.h>

#include <cuda_runtime.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

// What the parent sends along with the descriptor, and what the child answers.
struct job {
  spool_ipc_pointer buffer;
  uint64_t count;
  int32_t child_device;
  int32_t quit; // the parent cannot go on (no device): the child just exits
};
struct answer {
  int32_t ok;
  char words[256];
};

// ---- checking every call ----

bool cuda_ok(cudaError_t err, const char *who, const char *call) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "ipc_share %s: %s failed: %s\n", who, call, cudaGetErrorName(err));
  return false;
}
bool spool_ok(spool_status st, const char *who, const char *call) {
  if (st == SPOOL_OK) return true;
  std::fprintf(stderr, "ipc_share %s: %s failed: %s: %s\n", who, call, spool_status_name(st),
               spool_last_error());
  return false;
}
#define CUDA_OK(who, call) cuda_ok((call), who, #call)
#define SPOOL_OK_(who, call) spool_ok((call), who, #call)

// ---- a descriptor over a Unix domain socket ----

bool send_msg(int sock, int fd, const void *buf, size_t len) {
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  iovec iov = {const_cast<void *>(buf), len};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) { // SCM_RIGHTS: the kernel gives the receiver its own descriptor of the file
    msg.msg_control = space;
    msg.msg_controllen = sizeof space;
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

// Exactly len bytes, and the descriptor that came with them (-1 if none). False when the other
// side closed the socket or the message had another size.
bool recv_msg(int sock, int *fd, void *buf, size_t len) {
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  iovec iov = {buf, len};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = space;
  msg.msg_controllen = sizeof space;
  *fd = -1;
  ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  for (cmsghdr *c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(fd, CMSG_DATA(c), sizeof *fd);
  return n == static_cast<ssize_t>(len);
}

__global__ void fill(uint32_t *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint32_t)i;
}

__global__ void twice(uint32_t *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] *= 2;
}

// ---- the child: import, double, free, answer ----

bool child_work(const job &j, int fd, answer *a) {
  const char *who = "child";
  spool_pool *pool = nullptr;
  bool ok = SPOOL_OK_(who, spool_pool_import(fd, &pool)); // a pool of this process's own
  close(fd);                                                // the pool does not need it
  void *ptr = nullptr;
  cudaStream_t s = nullptr;
  ok = ok && SPOOL_OK_(who, spool_import_pointer(pool, &j.buffer, &ptr));
  if (ok && j.child_device != spool_pool_device(pool))
    ok = SPOOL_OK_(who, spool_pool_set_access(pool, j.child_device, SPOOL_ACCESS_READ_WRITE));
  ok = ok && CUDA_OK(who, cudaSetDevice(j.child_device));
  ok = ok && CUDA_OK(who, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (ok) twice<<<1024, 256, 0, s>>>(static_cast<uint32_t *>(ptr), j.count);
  ok = ok && CUDA_OK(who, cudaGetLastError());
  ok = ok && SPOOL_OK_(who, spool_free(pool, ptr, s));
  // The importer's free must be complete before the exporter frees: synchronize, then answer.
  ok = ok && CUDA_OK(who, cudaStreamSynchronize(s));
  if (s) ok = CUDA_OK(who, cudaStreamDestroy(s)) && ok;
  if (pool && spool_pool_destroy(pool) != SPOOL_OK) ok = false; // frees what a failure left
  std::snprintf(a->words, sizeof a->words, "%s", ok ? "doubled and freed" : spool_last_error());
  a->ok = ok;
  return ok;
}

int child(int sock) {
  job j;
  int fd = -1;
  if (!recv_msg(sock, &fd, &j, sizeof j) || j.quit) return 0; // the parent gave up: so do we
  answer a = {};
  bool ok = fd >= 0 && child_work(j, fd, &a);
  if (fd < 0) std::snprintf(a.words, sizeof a.words, "no descriptor came with the job");
  send_msg(sock, -1, &a, sizeof a);
  return ok ? 0 : 1;
}

// ---- the parent: create, fill, share, wait, check, free ----

int parent_work(int sock, size_t count, int child_device) {
  const char *who = "parent";
  spool_config cfg;
  spool_config_init(&cfg);
  if (!SPOOL_OK_(who, spool_config_parse(&cfg, "ipc=posix_fd")) ||
      !SPOOL_OK_(who, spool_config_from_env(&cfg)))
    return 1;
  spool_pool *pool = nullptr;
  spool_status st = spool_pool_create(&pool, &cfg);
  if (st == SPOOL_ERR_UNSUPPORTED || st == SPOOL_ERR_NO_DEVICE) {
    std::printf("ipc_share: skipped: %s\n", spool_last_error());
    return 77;
  }
  if (!spool_ok(st, who, "spool_pool_create")) return 1;
  cudaStream_t s = nullptr;
  void *buf = nullptr;
  job j = {};
  j.count = count;
  j.child_device = child_device;
  int fd = -1;
  answer a = {};
  int none = -1;
  bool ok = CUDA_OK(who, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) &&
            SPOOL_OK_(who, spool_alloc(pool, &buf, count * sizeof(uint32_t), s));
  if (ok) fill<<<1024, 256, 0, s>>>(static_cast<uint32_t *>(buf), count);
  ok = ok && CUDA_OK(who, cudaGetLastError()) && CUDA_OK(who, cudaStreamSynchronize(s));
  ok = ok && SPOOL_OK_(who, spool_pool_export(pool, &fd)) &&
       SPOOL_OK_(who, spool_export_pointer(pool, buf, &j.buffer));
  ok = ok && send_msg(sock, fd, &j, sizeof j);
  if (fd >= 0) close(fd); // sent: the child has its own descriptor now
  ok = ok && recv_msg(sock, &none, &a, sizeof a);
  if (ok && !a.ok) std::fprintf(stderr, "ipc_share: the child failed: %s\n", a.words);
  ok = ok && a.ok;
  std::vector<uint32_t> host(count);
  ok = ok && CUDA_OK(who, cudaMemcpy(host.data(), buf, count * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; ok && i < count; i++) bad += host[i] != 2 * (uint32_t)i;
  if (ok) std::printf("ipc_share: the child doubled %zu values in the parent's buffer: %s\n",
                      count, bad ? "WRONG" : "all correct");
  if (buf) ok = SPOOL_OK_(who, spool_free(pool, buf, s)) && ok; // after the child's free
  if (s) {
    ok = CUDA_OK(who, cudaStreamSynchronize(s)) && ok;
    ok = CUDA_OK(who, cudaStreamDestroy(s)) && ok;
  }
  if (ok) spool_report(pool, stdout);
  ok = SPOOL_OK_(who, spool_pool_destroy(pool)) && ok;
  return ok && bad == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  size_t count = (size_t)16 << 20;
  int child_device = 0;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--count") && i + 1 < argc) count = std::strtoull(argv[++i], 0, 0);
    else if (!std::strcmp(argv[i], "--child-device") && i + 1 < argc)
      child_device = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: ipc_share [--count N] [--child-device D]\n");
      return 2;
    }
  }
  if (count == 0) count = 1;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    std::perror("ipc_share: socketpair");
    return 1;
  }
  std::fflush(stdout);
  pid_t pid = fork(); // before any CUDA call, in either process
  if (pid < 0) {
    std::perror("ipc_share: fork");
    return 1;
  }
  if (pid == 0) {
    close(sv[0]);
    return child(sv[1]);
  }
  close(sv[1]);
  int rc = parent_work(sv[0], count, child_device);
  if (rc != 0) { // let a waiting child go
    job quit = {};
    quit.quit = 1;
    send_msg(sv[0], -1, &quit, sizeof quit);
  }
  close(sv[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    std::fprintf(stderr, "ipc_share: the child exited with status %d\n", status);
    rc = 1;
  }
  return rc;
}
