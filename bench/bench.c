/* spool_bench: every allocation strategy on the same pre-generated workloads, in one process.
 *
 * Strategies (strategy.h): cudaMalloc/cudaFree; cudaMallocAsync on the default pool with release
 * threshold 0 and with threshold max; PyTorch's caching allocator with and without expandable
 * segments, in a build with PyTorch; spool with cache=off, with its defaults, and tuned; and
 * `none`, the same loop with the allocations taken out, which every other row is read against.
 * Workloads (workload.h): 1 MiB and 64 MiB fixed and 256 B..32 MiB log-uniform, each without and
 * with a kernel per buffer; the log-uniform one on 8 streams; the five-kernel image pipeline;
 * churn; host threads.
 *
 * Output: a header (spool version and commit, card, driver, runtime, the command), a table per
 * workload, the targets beside their figures; optionally a CSV and PNG plots. docs/
 * benchmarks.md says what every column means.
 *
 * Exit status: 0 ok, 1 a CUDA or spool call failed (one line names it), 2 bad usage, 77 no CUDA
 * device. */
#define _POSIX_C_SOURCE 200809L /* posix_spawnp, gmtime_r, mkdir */

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "floor.h"
#include "kernels.h"
#include "measure.h"
#include "torch_strategy.h"

#ifndef SPOOL_BENCH_COMMIT
#define SPOOL_BENCH_COMMIT "unknown" /* bench/CMakeLists.txt passes git's commit in */
#endif
#ifndef SPOOL_BENCH_PLOT
#define SPOOL_BENCH_PLOT "bench/plot.py"
#endif

extern char **environ;

/* ---- the run's description ------------------------------------------------------------------- */

/* The kernel module's version ("580.159.04") from /proc: what people mean by "driver", which
 * cudaDriverGetVersion (the CUDA version the driver supports) does not say. */
static void kernel_driver(char *out, size_t len) {
  snprintf(out, len, "unknown");
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (f == NULL) return;
  char line[512];
  if (fgets(line, sizeof line, f) != NULL) {
    for (char *save = NULL, *tok = strtok_r(line, " \t\n", &save); tok != NULL;
         tok = strtok_r(NULL, " \t\n", &save)) {
      if (strspn(tok, "0123456789.") == strlen(tok) && strchr(tok, '.') != NULL) {
        snprintf(out, len, "%s", tok);
        break;
      }
    }
  }
  fclose(f);
}

/* The command line, quoted where the shell would need it, so that it can be pasted back. */
static void command_line(int argc, char **argv, char *out, size_t len) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < argc && used < len; ++i) {
    const bool quote = argv[i][strcspn(argv[i], " \t\"'$,;&|<>()*?")] != '\0' || !*argv[i];
    const int n = snprintf(out + used, len - used, quote ? "%s'%s'" : "%s%s", i ? " " : "",
                           argv[i]);
    used += n > 0 ? (size_t)n : 0;
  }
}

static bool describe(run_info *info, const options *o) {
  struct cudaDeviceProp prop;
  int drv = 0, rt = 0;
  CUDA_TRY(cudaGetDeviceProperties(&prop, o->device));
  CUDA_TRY(cudaDriverGetVersion(&drv));
  CUDA_TRY(cudaRuntimeGetVersion(&rt));
  snprintf(info->spool, sizeof info->spool, "spool %s, commit %s", spool_version_string(),
           SPOOL_BENCH_COMMIT);
  snprintf(info->device, sizeof info->device, "device %d: %s, %zu MiB", o->device, prop.name,
           prop.totalGlobalMem >> 20);
  char kmod[64];
  kernel_driver(kmod, sizeof kmod);
  snprintf(info->driver, sizeof info->driver, "driver %s (CUDA %d.%d), runtime %d.%d", kmod,
           drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
  if (!bench_torch_describe(info->torch, sizeof info->torch)) info->torch[0] = '\0';
  const time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(info->date, sizeof info->date, "%Y-%m-%d %H:%M UTC", &tm);
  info->reps = o->reps;
  info->quick = o->quick;
  info->tuned = o->tuned;
  cudaStream_t s = NULL;
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  info->floor_locks = floor_locks_ns();
  info->floor_capture = floor_capture_check_ns(s);
  CUDA_TRY(cudaStreamDestroy(s));
  return true;
}

/* ---- plots ----------------------------------------------------------------------------------- */

/* mkdir -p. */
static bool make_dirs(const char *path) {
  char buf[4096];
  if (strlen(path) >= sizeof buf) return bench_fail("path too long: %s", path);
  strcpy(buf, path);
  for (char *p = buf + 1;; ++p) {
    if (*p != '/' && *p != '\0') continue;
    const char c = *p;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return bench_fail("cannot create %s: %s", buf, strerror(errno));
    if (c == '\0') return true;
    *p = c;
  }
}

/* bench/plot.py CSV DIR. It exits 0 with a note when matplotlib is missing; anything else that
 * goes wrong is reported, after the table and the CSV are complete. Spawned only now, with every
 * CUDA resource released (CUDA and fork do not mix; posix_spawn does not run our code in the
 * child anyway). */
static bool run_plots(const char *csv, const char *dir) {
  char script[4096], a0[] = "python3", a1[4096], a2[4096];
  snprintf(script, sizeof script, "%s", SPOOL_BENCH_PLOT);
  if (access(script, R_OK) != 0) {
    printf("plots skipped: %s not found\n", script);
    return true;
  }
  snprintf(a1, sizeof a1, "%s", csv);
  snprintf(a2, sizeof a2, "%s", dir);
  char *argv[] = {a0, script, a1, a2, NULL};
  fflush(stdout);
  pid_t pid;
  const int rc = posix_spawnp(&pid, "python3", NULL, NULL, argv, environ);
  if (rc == ENOENT) {
    printf("plots skipped: python3 not found\n");
    return true;
  }
  if (rc != 0) return bench_fail("posix_spawnp(python3 %s) failed: %s", script, strerror(rc));
  int status = 0;
  if (waitpid(pid, &status, 0) < 0)
    return bench_fail("waitpid(python3) failed: %s", strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  return bench_fail("%s %s %s failed (status %d); the table and the CSV are complete", script, csv,
                    dir, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* ---- main ------------------------------------------------------------------------------------ */

/* No driver, no device, or a driver too old for this runtime: one line and 77. */
static int check_device(const options *o) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  if (err != cudaSuccess) {
    fprintf(stderr, BENCH_PROG ": no CUDA device: %s: %s\n", cudaGetErrorName(err),
            cudaGetErrorString(err));
    return 77;
  }
  if (o->device >= count) {
    fprintf(stderr, BENCH_PROG ": --device %d: there are %d devices\n", o->device, count);
    return 2;
  }
  return 0;
}

/* The workloads, then the targets; true when every call succeeded. */
static bool run(const options *o, report *rep) {
  bench_env env;
  bool ok = env_open(&env, o, rep);
  for (int i = 0; ok && i < WL_COUNT; ++i)
    if (o->workload[i]) ok = measure_workload(&env, (workload_id)i);
  ok = env_close(&env) && ok;
  report_targets(stdout, rep);
  return ok;
}

int main(int argc, char **argv) {
  options o;
  const int rc = options_parse(&o, argc, argv);
  if (rc != OPTIONS_RUN) return rc;
  char why[320];
  if (o.tuned_given && !strategy_conf_ok(o.tuned, why, sizeof why)) {
    fprintf(stderr, BENCH_PROG ": --tuned: %s\n", why); /* the user's text: bad usage */
    return 2;
  }
  const int dev = check_device(&o);
  if (dev != 0) return dev;
  bench_device_setup();

  static char cmd[2048], csv_path[4096];
  command_line(argc, argv, cmd, sizeof cmd);
  run_info info = {cmd, "", "", "", "", "", 0, false, NULL, 0, -1};
  const char *csv = o.csv;
  if (o.plots != NULL && !make_dirs(o.plots)) return 1;
  if (o.plots != NULL && csv == NULL) {
    snprintf(csv_path, sizeof csv_path, "%s/spool_bench.csv", o.plots);
    csv = csv_path;
  }
  report rep;
  if (!describe(&info, &o) || !report_open(&rep, csv, &info)) return 1;
  report_header(stdout, &info);
  bool ok = run(&o, &rep);
  ok = report_close(&rep) && ok;
  if (ok && csv != NULL) printf("CSV: %s\n", csv);
  if (ok && o.plots != NULL) ok = run_plots(csv, o.plots);
  return ok ? 0 : 1;
}
