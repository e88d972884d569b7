/* What check_ipc, check_multi and their child process (ipc_child) share: a descriptor passed
 * over a Unix domain socket (SCM_RIGHTS), the job the child is given and its answer, and running
 * a child with a time limit. Test code only; include after test_main.h or with
 * _POSIX_C_SOURCE 200809L defined. */
#ifndef SPOOL_IPC_PROTO_H
#define SPOOL_IPC_PROTO_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <spool/spool.h>

#define IPC_TIMEOUT_MS 60000 /* CUDA's first initialisation in a new process can take seconds */

/* The child's job: import the buffer, check that it holds seed + i, add `add` to every value by
 * a kernel on `device`, free it, synchronize, destroy the pool, answer. */
typedef struct ipc_job {
  spool_ipc_pointer buffer;
  uint64_t count;  /* uint32_t values in the buffer */
  uint32_t seed;
  uint32_t add;
  int32_t device;
  int32_t pad;
} ipc_job;

typedef struct ipc_reply {
  int32_t status; /* 0: done; else the spool_status (or -1) of the failed step */
  int32_t step;   /* which step failed */
  char words[700];
} ipc_reply;

/* Sends len bytes of buf in one message and, when fd >= 0, the descriptor fd with it. Returns 0,
 * or -1 with errno. */
static inline int ipc_send(int sock, int fd, const void *buf, size_t len) {
  union {
    struct cmsghdr h;
    char space[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct iovec iov = {(void *)(uintptr_t)buf, len};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  memset(&ctl, 0, sizeof ctl);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = ctl.space;
    msg.msg_controllen = sizeof ctl.space;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)len ? 0 : -1;
}

/* Receives one message of exactly len bytes into buf within timeout_ms, and the descriptor that
 * came with it into *fd (-1 when none did; made close-on-exec). Returns 0, or -1 with errno
 * (ETIMEDOUT, EPROTO for a message of another size or a closed socket). */
static inline int ipc_recv(int sock, int *fd, void *buf, size_t len, int timeout_ms) {
  union {
    struct cmsghdr h;
    char space[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct pollfd pfd = {sock, POLLIN, 0};
  struct iovec iov = {buf, len};
  struct msghdr msg;
  int r;
  *fd = -1;
  do r = poll(&pfd, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  if (r == 0) errno = ETIMEDOUT;
  if (r <= 0) return -1;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.space;
  msg.msg_controllen = sizeof ctl.space;
  ssize_t n;
  do n = recvmsg(sock, &msg, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      memcpy(fd, CMSG_DATA(c), sizeof *fd);
      (void)fcntl(*fd, F_SETFD, FD_CLOEXEC); /* not for this process's own children */
    }
  if ((size_t)n != len) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    errno = EPROTO;
    return -1;
  }
  return 0;
}

/* Starts argv[0] (argv NULL-terminated) in a child process: fork, then at once execv, as is
 * safe after CUDA was initialised. Returns the pid, or -1. */
static inline pid_t ipc_child_start(char *const argv[]) {
  pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

/* Waits for child pid at most timeout_ms; kills it (SIGKILL) when it takes longer. Returns its
 * exit status, 128 + the signal that ended it, or -1 when it was killed for taking too long. */
static inline int ipc_child_wait(pid_t pid, int timeout_ms) {
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int waited = 0;; waited += 10) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0 && errno != EINTR) return -1;
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    nanosleep(&tick, NULL);
  }
}

#endif /* SPOOL_IPC_PROTO_H */
