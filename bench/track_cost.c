/* track_cost: what spool's bookkeeping costs on the host, per spool_alloc + spool_free pair.
 *
 * The default `track` level is the cheapest one that still catches double frees and foreign
 * pointers, and the README quotes its cost per alloc+free pair. This program measures it: host
 * nanoseconds per SPOOL_ALLOC + SPOOL_FREE pair on one non-blocking stream, for
 *
 *   track=off, track=counts, track=full, and poison=on (with track=counts),
 *
 * against the same pair made straight to CUDA (cudaMallocFromPoolAsync + cudaFreeAsync) on a
 * pool of the same kind (an own cudaMemPool with release threshold max, as spool creates by
 * default). The difference is spool's cost. SPOOL_ALLOC / SPOOL_FREE are the forms the README's
 * examples use; at off and counts they ignore the call site, at full they record it.
 *
 * Method: per row and size, a fresh pool, 10,000 warm-up pairs (the pool grows to its working
 * set, the tracking table to its size, caches warm), then `runs` runs of `pairs` pairs each,
 * timed with CLOCK_MONOTONIC; the best run is reported, as the least disturbed by the rest of the
 * machine. The stream is synchronized every 1000 pairs so that queued work (poison's memsets)
 * cannot pile up without bound, and that synchronize is part of the time, for every row alike.
 *
 * Poison also costs GPU time: two cudaMemsetAsync of the whole buffer per pair (fill at alloc,
 * overwrite at free). That is measured apart, as two memsets per pair captured in a CUDA graph
 * of 1000 pairs and launched at once, so that the GPU runs them back to back and the events
 * around the launch time the GPU alone, not the host that queues them.
 *
 * Usage: track_cost [--pairs N] [--runs N] [--quick]   (defaults 1000000 pairs, 5 runs; --quick
 * is 20000 pairs, 2 runs). SPOOL_CONF is not read: each row sets its own config.
 * Output: a table, then one CSV line per row ("csv,..." with a "csv,config,..." header).
 * Exit status: 0 ok, 1 a CUDA or spool call failed, 2 bad usage, 77 no CUDA device.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <spool/spool.h>

enum { SYNC_EVERY = 1000, WARMUP_PAIRS = 10000, GRAPH_PAIRS = 1000, GPU_RUNS = 5 };

/* ---- checking every call --------------------------------------------------------------------- */

/* Every CUDA and spool call goes through one of these: a failure prints the call and the reason
 * and makes the function return false; the caller then releases what it built. */
static bool cuda_ok(cudaError_t err, const char *call, int line) {
  if (err == cudaSuccess) return true;
  fprintf(stderr, "track_cost: line %d: %s failed: %s: %s\n", line, call, cudaGetErrorName(err),
          cudaGetErrorString(err));
  return false;
}

static bool spool_ok(spool_status st, const char *call, int line) {
  if (st == SPOOL_OK) return true;
  fprintf(stderr, "track_cost: line %d: %s failed: %s: %s\n", line, call, spool_status_name(st),
          spool_last_error());
  return false;
}

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    if (!cuda_ok((call), #call, __LINE__)) return false;                                          \
  } while (0)
#define SPOOL_CHECK(call)                                                                         \
  do {                                                                                            \
    if (!spool_ok((call), #call, __LINE__)) return false;                                         \
  } while (0)

/* ---- what is measured ------------------------------------------------------------------------ */

typedef struct row {
  const char *name; /* in the table and the CSV */
  const char *conf; /* spool config text; NULL: the raw CUDA reference */
} row;

static const row ROWS[] = {
    {"raw", NULL},
    {"track=off", "track=off"},
    {"track=counts", "track=counts"},
    {"track=full", "track=full"},
    {"poison=on", "track=counts, poison=on"},
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static const size_t SIZES[] = {(size_t)1 << 10, (size_t)1 << 20};
enum { NSIZES = sizeof SIZES / sizeof SIZES[0] };

/* One row's allocator: a spool pool, or (pool NULL) a raw cudaMemPool. */
typedef struct target {
  spool_pool *pool;
  cudaMemPool_t raw;
} target;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* pairs alloc+free pairs of size bytes on s; *ns is the host time per pair. The branch on the
 * target is taken the same way every time, so the predictor makes it free. */
static bool run_pairs(const target *t, size_t size, long pairs, cudaStream_t s, double *ns) {
  const double t0 = now_ns();
  for (long i = 1; i <= pairs; ++i) {
    void *p = NULL;
    if (t->pool != NULL) {
      SPOOL_CHECK(SPOOL_ALLOC(t->pool, &p, size, s));
      SPOOL_CHECK(SPOOL_FREE(t->pool, p, s));
    } else {
      CUDA_CHECK(cudaMallocFromPoolAsync(&p, size, t->raw, s));
      CUDA_CHECK(cudaFreeAsync(p, s));
    }
    if (i % SYNC_EVERY == 0) CUDA_CHECK(cudaStreamSynchronize(s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  *ns = (now_ns() - t0) / (double)pairs;
  return true;
}

/* The reference pool: what spool creates by default (own pool on device dev, pinned device
 * memory, release threshold max), built with CUDA's own calls. */
static bool raw_pool_create(int dev, cudaMemPool_t *out) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool = NULL;
  CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  if (!cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
               "cudaMemPoolSetAttribute(ReleaseThreshold)", __LINE__)) {
    cuda_ok(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy", __LINE__);
    return false;
  }
  *out = pool;
  return true;
}

/* --conf: settings applied on top of every spool row (e.g. cache=off, capture_check=off). */
static const char *extra_conf;

/* Measures one row at one size: fresh pool, warm-up, best of runs. */
static bool measure(const row *r, int dev, size_t size, long pairs, int runs, cudaStream_t s,
                    double *best) {
  target t = {NULL, NULL};
  bool ok = true;
  if (r->conf != NULL) {
    spool_config cfg;
    spool_config_init(&cfg);
    cfg.device = dev;
    SPOOL_CHECK(spool_config_parse(&cfg, r->conf));
    if (extra_conf) SPOOL_CHECK(spool_config_parse(&cfg, extra_conf));
    SPOOL_CHECK(spool_pool_create(&t.pool, &cfg));
  } else {
    if (!raw_pool_create(dev, &t.raw)) return false;
  }
  double ns = 0;
  ok = run_pairs(&t, size, WARMUP_PAIRS, s, &ns);
  *best = 0;
  for (int k = 0; ok && k < runs; ++k) {
    ok = run_pairs(&t, size, pairs, s, &ns);
    if (ok && (k == 0 || ns < *best)) *best = ns;
  }
  /* Released whatever happened; every buffer was freed, so destroy must say SPOOL_OK. */
  if (t.pool != NULL) ok = spool_ok(spool_pool_destroy(t.pool), "spool_pool_destroy", __LINE__) && ok;
  if (t.raw != NULL) ok = cuda_ok(cudaMemPoolDestroy(t.raw), "cudaMemPoolDestroy", __LINE__) && ok;
  return ok;
}

/* GPU time of poison per pair: two whole-buffer memsets (0xA5 at alloc, 0xDD at free), run back
 * to back from a captured graph of GRAPH_PAIRS pairs; best of GPU_RUNS launches, in ns per pair.
 * A plain cudaMalloc buffer: the memsets do not care where the memory came from. */
static bool poison_gpu_ns(size_t size, cudaStream_t s, double *out) {
  void *buf = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaEvent_t ev[2] = {NULL, NULL};
  bool ok = cuda_ok(cudaMalloc(&buf, size), "cudaMalloc", __LINE__) &&
            cuda_ok(cudaEventCreate(&ev[0]), "cudaEventCreate", __LINE__) &&
            cuda_ok(cudaEventCreate(&ev[1]), "cudaEventCreate", __LINE__) &&
            cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                    "cudaStreamBeginCapture", __LINE__);
  if (ok) {
    for (int i = 0; ok && i < GRAPH_PAIRS; ++i)
      ok = cuda_ok(cudaMemsetAsync(buf, 0xA5, size, s), "cudaMemsetAsync", __LINE__) &&
           cuda_ok(cudaMemsetAsync(buf, 0xDD, size, s), "cudaMemsetAsync", __LINE__);
    /* Ends the capture even after a failed memset, so the stream is usable again. */
    ok = cuda_ok(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture", __LINE__) && ok;
  }
  ok = ok && cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate", __LINE__);
  /* One launch to warm up (first-launch upload), then the timed ones. */
  ok = ok && cuda_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch", __LINE__) &&
       cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize", __LINE__);
  for (int k = 0; ok && k < GPU_RUNS; ++k) {
    float ms = 0;
    ok = cuda_ok(cudaEventRecord(ev[0], s), "cudaEventRecord", __LINE__) &&
         cuda_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch", __LINE__) &&
         cuda_ok(cudaEventRecord(ev[1], s), "cudaEventRecord", __LINE__) &&
         cuda_ok(cudaEventSynchronize(ev[1]), "cudaEventSynchronize", __LINE__) &&
         cuda_ok(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime", __LINE__);
    const double ns = (double)ms * 1e6 / GRAPH_PAIRS;
    if (ok && (k == 0 || ns < *out)) *out = ns;
  }
  if (exec != NULL) ok = cuda_ok(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy", __LINE__) && ok;
  if (graph != NULL) ok = cuda_ok(cudaGraphDestroy(graph), "cudaGraphDestroy", __LINE__) && ok;
  for (int i = 0; i < 2; ++i)
    if (ev[i] != NULL) ok = cuda_ok(cudaEventDestroy(ev[i]), "cudaEventDestroy", __LINE__) && ok;
  if (buf != NULL) ok = cuda_ok(cudaFree(buf), "cudaFree", __LINE__) && ok;
  return ok;
}

/* ---- main ------------------------------------------------------------------------------------ */

static const char *size_str(size_t b) { return b >= ((size_t)1 << 20) ? "MiB" : "KiB"; }
static size_t size_num(size_t b) { return b >= ((size_t)1 << 20) ? b >> 20 : b >> 10; }

static bool parse_long(const char *opt, const char *text, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  const long v = text != NULL ? strtol(text, &end, 10) : 0;
  if (text == NULL || *text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    fprintf(stderr, "track_cost: %s needs a whole number from %ld to %ld, got '%s'\n", opt, lo, hi,
            text != NULL ? text : "");
    return false;
  }
  *out = v;
  return true;
}

static bool bench(long pairs, int runs) {
  const int dev = 0;
  CUDA_CHECK(cudaSetDevice(dev));
  struct cudaDeviceProp prop;
  int drv = 0, rt = 0;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  CUDA_CHECK(cudaDriverGetVersion(&drv));
  CUDA_CHECK(cudaRuntimeGetVersion(&rt));
  printf("track_cost: spool %s, device %d: %s, driver %d.%d, runtime %d.%d\n",
         spool_version_string(), dev, prop.name, drv / 1000, drv % 1000 / 10, rt / 1000,
         rt % 1000 / 10);
  printf("host ns per alloc+free pair on one non-blocking stream: %ld pairs per run (synchronized "
         "every %d), best of %d runs, after %d warm-up pairs\n\n",
         pairs, SYNC_EVERY, runs, WARMUP_PAIRS);

  cudaStream_t s = NULL;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  double ns[NSIZES][NROWS] = {{0}}, gpu[NSIZES] = {0};
  bool ok = true;
  printf("%-14s %8s %10s %22s\n", "config", "size", "ns/pair", "vs raw");
  for (int z = 0; ok && z < NSIZES; ++z) {
    for (int r = 0; ok && r < NROWS; ++r) {
      ok = measure(&ROWS[r], dev, SIZES[z], pairs, runs, s, &ns[z][r]);
      if (!ok) break;
      const double over = ns[z][r] - ns[z][0];
      if (r == 0)
        printf("%-14s %4zu %-3s %10.1f %22s\n", ROWS[r].name, size_num(SIZES[z]),
               size_str(SIZES[z]), ns[z][r], "(reference)");
      else
        printf("%-14s %4zu %-3s %10.1f %+10.1f ns (%+6.1f%%)\n", ROWS[r].name, size_num(SIZES[z]),
               size_str(SIZES[z]), ns[z][r], over, 100.0 * over / ns[z][0]);
      fflush(stdout);
    }
    ok = ok && poison_gpu_ns(SIZES[z], s, &gpu[z]);
  }
  if (ok) {
    printf("\npoison's GPU time per pair (two whole-buffer cudaMemsetAsync, back to back):");
    for (int z = 0; z < NSIZES; ++z)
      printf("%s %zu %s: %.0f ns", z ? "," : "", size_num(SIZES[z]), size_str(SIZES[z]), gpu[z]);
    printf("\n\ncsv,config,size_bytes,ns_per_pair,overhead_ns,overhead_pct,poison_gpu_ns\n");
    for (int z = 0; z < NSIZES; ++z)
      for (int r = 0; r < NROWS; ++r) {
        const double over = ns[z][r] - ns[z][0];
        printf("csv,%s,%zu,%.1f,%.1f,%.2f,", ROWS[r].name, SIZES[z], ns[z][r], over,
               100.0 * over / ns[z][0]);
        if (strcmp(ROWS[r].name, "poison=on") == 0)
          printf("%.0f\n", gpu[z]);
        else
          printf("\n");
      }
  }
  ok = cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy", __LINE__) && ok;
  return ok;
}

int main(int argc, char **argv) {
  long pairs = 1000000, runs = 5;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (strcmp(a, "--quick") == 0) {
      pairs = 20000, runs = 2;
    } else if (strcmp(a, "--pairs") == 0) {
      if (!parse_long(a, i + 1 < argc ? argv[++i] : NULL, SYNC_EVERY, 1000000000L, &pairs))
        return 2;
    } else if (strcmp(a, "--runs") == 0) {
      if (!parse_long(a, i + 1 < argc ? argv[++i] : NULL, 1, 100, &runs)) return 2;
    } else if (strcmp(a, "--conf") == 0 && i + 1 < argc) {
      extra_conf = argv[++i];
    } else {
      fprintf(stderr, "usage: track_cost [--pairs N] [--runs N] [--quick] [--conf TEXT]\n");
      return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 ? 0 : 2;
    }
  }

  /* No device, no driver, or a driver too old for this runtime: 77, "skipped" to CTest. */
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  if (err != cudaSuccess) {
    fprintf(stderr, "track_cost: no CUDA device: %s: %s\n", cudaGetErrorName(err),
            cudaGetErrorString(err));
    return 77;
  }
  return bench(pairs, (int)runs) ? 0 : 1;
}
