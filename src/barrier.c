/* A full memory barrier run on every CPU that executes a thread of this process (Linux
 * membarrier, private expedited): what lets a stream cache's owning thread take no atomic on
 * its own path (front.h). A thread that wants the cache clears the owner, runs this barrier, and
 * then sees whether the owner is inside; the owner, for its part, needs only plain stores and
 * loads. Where the call is missing (not Linux, an old kernel, a seccomp filter) or a sanitizer
 * could not see it (ThreadSanitizer knows nothing of membarrier), every cache takes its lock. */
#define _GNU_SOURCE /* syscall */

#include "internal.h"

#if defined(__SANITIZE_THREAD__)
#define SPOOL__NO_BARRIER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPOOL__NO_BARRIER 1
#endif
#endif

#if defined(__linux__) && !defined(SPOOL__NO_BARRIER)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool available;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void probe(void) {
  long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  available = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
              syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool spool__barrier_available(void) {
  pthread_once(&once, probe);
  return available;
}

bool spool__barrier_all(void) {
  return syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

#else

bool spool__barrier_available(void) { return false; }
bool spool__barrier_all(void) { return false; }

#endif

_Thread_local uint64_t spool__thread_no;
static atomic_uint_fast64_t threads_seen;

uint64_t spool__thread_new(void) {
  spool__thread_no = atomic_fetch_add(&threads_seen, 1) + 1;
  return spool__thread_no;
}
