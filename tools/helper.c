/* The helpers run under posix_spawnp with their arguments as they are, so no path needs
 * quoting; their messages go to the tool's own standard error. */
#define _POSIX_C_SOURCE 200809L /* posix_spawn, waitpid */
#include "helper.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* SPOOL_HELPER_DIR; else share/spool beside the tool's own bin/ (an installed tree that was
 * moved), the configured install folder, the source tree's. */
static void helper_path(const char *name, char out[1024]) {
  const char *env = getenv("SPOOL_HELPER_DIR");
  if (env && *env) {
    snprintf(out, 1024, "%s/%s", env, name);
    return;
  }
  char exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (slash) {
    *slash = '\0';
    snprintf(out, 1024, "%s/../share/spool/%s", exe, name);
    if (access(out, R_OK) == 0) return;
  }
  snprintf(out, 1024, "%s/%s", SPOOL_HELPER_INSTALLED, name);
  if (access(out, R_OK) == 0) return;
  snprintf(out, 1024, "%s/%s", SPOOL_HELPER_SOURCE, name);
}

int tool_helper_start(const char *helper, const char *const *args, int nargs, bool feed,
                      bool read, tool_helper *h, char err[TF_ERR]) {
  const char *python = getenv("SPOOL_PYTHON") && *getenv("SPOOL_PYTHON")
                           ? getenv("SPOOL_PYTHON") : "python3";
  char path[1024];
  helper_path(helper, path);
  char *argv[8] = {(char *)python, path};
  for (int i = 0; i < nargs && i < 4; i++) argv[2 + i] = (char *)args[i];
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if ((feed && pipe(in) != 0) || (read && pipe(out) != 0))
    return snprintf(err, TF_ERR, "pipe: %s", strerror(errno)), -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (feed) posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  if (feed) posix_spawn_file_actions_addclose(&fa, in[1]);
  if (read) posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  if (read) posix_spawn_file_actions_addclose(&fa, out[0]);
  int rc = posix_spawnp(&h->pid, python, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (feed) close(in[0]);
  if (read) close(out[1]);
  h->to = feed ? in[1] : -1;
  h->from = read ? out[0] : -1;
  if (rc == 0) return 0;
  if (feed) close(in[1]);
  if (read) close(out[0]);
  return snprintf(err, TF_ERR, "%s needs %.64s (Python 3) to run %.300s: %s", helper, python, path,
                  strerror(rc)), -1;
}

int tool_helper_wait(tool_helper *h) {
  if (h->to >= 0) close(h->to);
  if (h->from >= 0) close(h->from);
  h->to = h->from = -1;
  int status = 0;
  while (waitpid(h->pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int tool_helper_feed(const char *helper, const char *const *args, int nargs, const tf_trace *t,
                     void (*emit)(const tf_trace *, FILE *), const char *out, const char *what,
                     char err[TF_ERR]) {
  tool_helper h;
  if (tool_helper_start(helper, args, nargs, true, false, &h, err) != 0) return -1;
  void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* a helper that stops early is its message */
  FILE *f = fdopen(h.to, "w");
  if (f) {
    emit(t, f);
    fclose(f);
    h.to = -1;
  }
  int status = tool_helper_wait(&h);
  signal(SIGPIPE, old);
  if (f && status == 0) return 0;
  snprintf(err, TF_ERR, "%.300s: %s failed (exit %d)", out, what, status);
  return -1;
}
