/* sampler: a sampling profiler to preload into spool_bench (or any program), for hosts without
 * perf. A POSIX timer interrupts the main thread every SAMPLER_US microseconds of wall time
 * (default 100); each interrupt keeps a glibc backtrace of up to DEPTH frames. At exit the
 * samples and /proc/self/maps go to SAMPLER_OUT; scripts/sampler.py names the frames.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/sampler.so scripts/sampler.c -lrt
 *   SAMPLER_OUT=/tmp/s.txt LD_PRELOAD=/tmp/sampler.so build/bench/spool_bench --only churn
 *   python3 scripts/sampler.py /tmp/s.txt build/bench/spool_bench churn_steps
 *
 * Wall time, not CPU time: a thread waiting in the driver is counted where it waits. Without
 * SAMPLER_OUT it does nothing. Linux and glibc only (SIGEV_THREAD_ID, backtrace). */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEPTH 12
#define MAX_SAMPLES 400000 /* 40 s at the default rate; later interrupts are dropped */

static void *frames[MAX_SAMPLES][DEPTH];
static unsigned char depth[MAX_SAMPLES];
static volatile sig_atomic_t taken;
static timer_t timer;

/* backtrace() in a handler: its first call, which may load the unwinder, ran at start. */
static void on_tick(int sig) {
  (void)sig;
  long i = taken;
  if (i >= MAX_SAMPLES) return;
  depth[i] = (unsigned char)backtrace(frames[i], DEPTH);
  taken = (sig_atomic_t)(i + 1);
}

static void write_samples(void) {
  struct itimerspec off = {0};
  timer_settime(timer, 0, &off, NULL);
  FILE *f = fopen(getenv("SAMPLER_OUT"), "w");
  if (!f) return;
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) fprintf(f, "M %s", line);
  if (maps) fclose(maps);
  for (long i = 0; i < taken; i++) {
    fputc('S', f);
    for (int k = 0; k < depth[i]; k++) fprintf(f, " %lx", (unsigned long)frames[i][k]);
    fputc('\n', f);
  }
  fclose(f);
}

__attribute__((constructor)) static void sampler_start(void) {
  if (!getenv("SAMPLER_OUT")) return;
  void *warm[4];
  (void)backtrace(warm, 4);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_tick;
  sa.sa_flags = SA_RESTART; /* the program's own calls go on after a tick */
  if (sigaction(SIGPROF, &sa, NULL) != 0) return;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID; /* the main thread only: the driver's threads sleep */
  ev.sigev_signo = SIGPROF;
  ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return;
  long us = getenv("SAMPLER_US") ? atol(getenv("SAMPLER_US")) : 100;
  if (us < 10) us = 10;
  struct timespec period = {us / 1000000, us % 1000000 * 1000};
  struct itimerspec every = {period, period};
  if (timer_settime(timer, 0, &every, NULL) == 0) atexit(write_samples);
}
