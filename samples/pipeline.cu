// pipeline: spool's flagship sample.
//
// The essay behind spool describes an image-processing pipeline of five kernels, each needing a
// temporary buffer, that is "painfully slow" when every kernel calls cudaMalloc before it and
// cudaFree after it: cudaFree waits for the whole device, so the streams never overlap, and both
// calls may go to the driver. This program runs that pipeline in one process on the same input
// with four ways of getting the temporaries (--strategy picks some), and compares their frame
// times and the device memory each reserved for the temporaries at its peak:
//
//   malloc  cudaMalloc / cudaFree around each kernel   (what people write today)
//   async   cudaMallocAsync / cudaFreeAsync on the frame's stream, from the pool cudaMallocAsync
//           uses (the device's default pool) with its release threshold raised to the maximum,
//           so that it keeps its memory between frames: CUDA's own answer, without spool
//   spool   spool_alloc / spool_free around each kernel, on the frame's stream (stream-ordered, from
//           a cudaMemPool that keeps its memory between frames, with spool's stream caches in
//           front)
//   scope   one spool_scope per frame: every temporary is a spool_scope_alloc from the frame's
//           scope (mostly a pointer bump), and spool_scope_end after the last kernel frees them all
//           in stream order; no per-temporary free to forget
//
// The allocation pattern is the same in every run, only the calls differ. Each frame goes
// through the kernels on its own stream (frames round-robin over the streams):
//
//   synth_frame  (input RGB8, per stream)          stands in for a decoder or camera upload
//   1 luma       RGB8          -> lum   (temp)     float luminance
//   2 blur_h     lum           -> hblur (temp)     9-tap Gaussian, horizontal     free lum
//   3 blur_v     hblur         -> vblur (temp)     9-tap Gaussian, vertical       free hblur
//   4 sobel      vblur         -> grad  (temp)     gradient magnitude, and the    free vblur
//                                 peak  (temp)     frame's largest one
//   5 normalise  grad, peak    -> out   (per stream) 8-bit edges, thresholded;    free grad, peak
//                                 checksum of the output frame
//
// Input and output frames are allocated once per stream up front (the essay's advice for what
// lives long); only the temporaries follow the per-kernel pattern being compared. The per-frame
// output checksums of all runs must be identical, or the program fails.
//
// Usage: pipeline [--frames N] [--width W --height H] [--streams S] [--warmup N] [--quick]
//                 [--strategy malloc,async,spool,scope]
// Exit status: 0 success, 1 failure (a CUDA or spool call failed, or the outputs differ),
// 2 bad usage, 77 no CUDA device (CTest reads 77 as "skipped").
// The pool is created with the defaults, then SPOOL_CONF on top (e.g. SPOOL_CONF=reserve=1GiB).

#include <spool/spool.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// ---------------------------------------------------------------------------------------------
// Checking every call
// ---------------------------------------------------------------------------------------------

// An unchecked failure becomes a crash far from its cause (the essay's first point), so every
// CUDA and spool call goes through one of these: they name the call and give CUDA's or spool's
// reason. Functions return false on failure and main tears down what was built, so nothing is
// left for process exit.
static bool cuda_ok(cudaError_t err, const char *call, int line) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "pipeline: line %d: %s failed: %s: %s\n", line, call, cudaGetErrorName(err),
               cudaGetErrorString(err));
  return false;
}

static bool spool_ok(spool_status st, const char *call, int line) {
  if (st == SPOOL_OK) return true;
  std::fprintf(stderr, "pipeline: line %d: %s failed: %s: %s\n", line, call, spool_status_name(st),
               spool_last_error());
  return false;
}

#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    if (!cuda_ok((call), #call, __LINE__)) return false;                                           \
  } while (0)
#define SPOOL_CHECK(call)                                                                          \
  do {                                                                                             \
    if (!spool_ok((call), #call, __LINE__)) return false;                                          \
  } while (0)
// A launch reports a bad configuration through cudaGetLastError right away; a fault inside the
// kernel shows up at the next synchronizing call, which is checked as well.
#define LAUNCH_CHECK(kernel)                                                                       \
  do {                                                                                             \
    if (!cuda_ok(cudaGetLastError(), "launch of " #kernel, __LINE__)) return false;                \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

// The kernels: pipeline_kernels.cuh (shared with the benchmark harness).
#include "pipeline_kernels.cuh"

// ---------------------------------------------------------------------------------------------
// The ways of getting a kernel's temporary buffer
// ---------------------------------------------------------------------------------------------

enum class Kind { malloc_free, malloc_async, spool, scope };

struct Strategy {
  Kind kind;
  const char *key;               // its name for --strategy
  const char *name;              // its row in the table
  spool_pool *pool = nullptr;    // spool and scope: the pool
  cudaMemPool_t mempool = nullptr;  // async: the pool cudaMallocAsync uses
  uint64_t saved_threshold = 0;  // async: that pool's release threshold before this program
  bool threshold_changed = false;   // async: release() puts saved_threshold back
  double alloc_seconds = 0;      // host time spent inside the allocate and free calls of timed frames
  uint64_t live_bytes = 0;       // malloc: bytes of the temporaries allocated now ...
  uint64_t live_peak = 0;        // ... and at most since the warm-up
  uint64_t reserved_peak = 0;    // device memory held for the temporaries at most, timed frames
  spool_scope *scope = nullptr;  // scope: the current frame's scope
  double seconds = 0;            // wall time of the timed frames
  unsigned long long *sums = nullptr;  // per-frame output checksums (device memory)
};

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// count elements of T for use on stream. cudaMalloc ignores the stream; cudaMallocAsync and
// spool_alloc order the allocation on it, so the memory is ready when the stream's next kernel
// runs.
template <typename T>
static bool tmp_alloc(Strategy &st, T **p, size_t count, cudaStream_t stream) {
  void *q = nullptr;
  const Clock::time_point t0 = Clock::now();
  switch (st.kind) {
    case Kind::malloc_free:
      CUDA_CHECK(cudaMalloc(&q, count * sizeof(T)));
      break;
    case Kind::malloc_async:
      CUDA_CHECK(cudaMallocAsync(&q, count * sizeof(T), stream));
      break;
    case Kind::spool:
      SPOOL_CHECK(spool_alloc(st.pool, &q, count * sizeof(T), stream));
      break;
    case Kind::scope:
      SPOOL_CHECK(spool_scope_alloc(st.scope, &q, count * sizeof(T)));
      break;
  }
  st.alloc_seconds += seconds_since(t0);
  if (st.kind == Kind::malloc_free) {  // cudaMalloc has no counter of its own: count here
    st.live_bytes += count * sizeof(T);
    st.live_peak = std::max(st.live_peak, st.live_bytes);
  }
  *p = static_cast<T *>(q);
  return true;
}

// Frees *p (count elements) after the work queued so far on stream and nulls it, so that a
// second free is a no-op instead of undefined behaviour. cudaFree gets there by waiting for the
// whole device, the cost this sample measures; cudaFreeAsync and spool_free queue the free on the
// stream and return at once.
template <typename T>
static bool tmp_free(Strategy &st, T **p, size_t count, cudaStream_t stream) {
  const Clock::time_point t0 = Clock::now();
  switch (st.kind) {
    case Kind::malloc_free:
      CUDA_CHECK(cudaFree(*p));
      st.live_bytes -= count * sizeof(T);
      break;
    case Kind::malloc_async:
      CUDA_CHECK(cudaFreeAsync(*p, stream));
      break;
    case Kind::spool:
      SPOOL_CHECK(spool_free(st.pool, *p, stream));
      break;
    case Kind::scope:
      break;  // nothing: the frame's scope frees every temporary at its end
  }
  st.alloc_seconds += seconds_since(t0);
  *p = nullptr;
  return true;
}

// A frame's temporaries. On the normal path each is freed as soon as the kernel that reads it is
// queued; on an error path the destructor gives back whatever is left, so a failed frame leaks
// nothing. (On the normal path all are NULL by then and no call is made.)
struct FrameTemps {
  Strategy &st;
  cudaStream_t stream;
  size_t px;  // elements of each float temporary (peak has one)
  float *lum = nullptr, *hblur = nullptr, *vblur = nullptr, *grad = nullptr;
  unsigned *peak = nullptr;
  ~FrameTemps() {
    if (lum) tmp_free(st, &lum, px, stream);
    if (hblur) tmp_free(st, &hblur, px, stream);
    if (vblur) tmp_free(st, &vblur, px, stream);
    if (grad) tmp_free(st, &grad, px, stream);
    if (peak) tmp_free(st, &peak, 1, stream);
    if (st.scope) spool_ok(spool_scope_end(st.scope), "spool_scope_end(scope)", __LINE__);
    st.scope = nullptr;
  }
};

// scope: the frame's scope, begun before its first temporary and ended after its last kernel.
static bool frame_scope_begin(Strategy &st, cudaStream_t stream) {
  if (st.kind != Kind::scope) return true;
  const Clock::time_point t0 = Clock::now();
  SPOOL_CHECK(spool_scope_begin(st.pool, stream, &st.scope));
  st.alloc_seconds += seconds_since(t0);
  return true;
}

static bool frame_scope_end(Strategy &st) {
  if (st.kind != Kind::scope) return true;
  const Clock::time_point t0 = Clock::now();
  spool_scope *scope = st.scope;
  st.scope = nullptr;
  SPOOL_CHECK(spool_scope_end(scope));
  st.alloc_seconds += seconds_since(t0);
  return true;
}

// ---------------------------------------------------------------------------------------------
// The pipeline
// ---------------------------------------------------------------------------------------------

struct Options {
  int width = 3840, height = 2160, frames = 300, streams = 4;
  int warmup = -1;  // frames run before timing; -1: two per stream
  unsigned strategies = 0xf;  // bit i: run the i-th strategy of kStrategies
};

// Every strategy, in the order they run and are listed.
struct StrategyInfo {
  Kind kind;
  const char *key, *name;
};
static const StrategyInfo kStrategies[] = {
    {Kind::malloc_free, "malloc", "cudaMalloc/cudaFree"},
    {Kind::malloc_async, "async", "cudaMallocAsync (threshold max)"},
    {Kind::spool, "spool", "spool_alloc/spool_free"},
    {Kind::scope, "scope", "spool_scope per frame"},
};
constexpr int kStrategyCount = (int)(sizeof kStrategies / sizeof kStrategies[0]);

// One stream and the frames that live as long as it: allocated once, reused by every frame.
struct Lane {
  cudaStream_t stream = nullptr;
  uint8_t *rgb = nullptr;  // input frame, RGB8 interleaved
  uint8_t *out = nullptr;  // output frame, 8-bit edges
};

// Queues one frame on its lane's stream: the input, then the five kernels, each with its
// temporary allocated right before it and freed right after its reader.
static bool run_frame(Strategy &st, const Lane &lane, int frame, const Options &o,
                      unsigned long long *sum) {
  const int w = o.width, h = o.height;
  const size_t px = (size_t)w * h;
  const dim3 block(32, 8);  // 256 threads, a multiple of 32 as block_reduce needs
  const dim3 grid((unsigned)((w + 31) / 32), (unsigned)((h + 7) / 8));
  const cudaStream_t s = lane.stream;
  FrameTemps t{st, s, px};
  if (!frame_scope_begin(st, s)) return false;

  const double a = 0.05 * frame;  // the disc's orbit; computed here so that the kernel is integer
  const int cx = (int)(w * (0.5 + 0.3 * std::cos(a))), cy = (int)(h * (0.5 + 0.3 * std::sin(a)));
  synth_frame<<<grid, block, 0, s>>>(lane.rgb, w, h, frame, cx, cy, std::max(1, std::min(w, h) / 8));
  LAUNCH_CHECK(synth_frame);

  if (!tmp_alloc(st, &t.lum, px, s)) return false;
  luma<<<grid, block, 0, s>>>(lane.rgb, t.lum, w, h);
  LAUNCH_CHECK(luma);

  if (!tmp_alloc(st, &t.hblur, px, s)) return false;
  blur_h<<<grid, block, 0, s>>>(t.lum, t.hblur, w, h);
  LAUNCH_CHECK(blur_h);
  if (!tmp_free(st, &t.lum, px, s)) return false;

  if (!tmp_alloc(st, &t.vblur, px, s)) return false;
  blur_v<<<grid, block, 0, s>>>(t.hblur, t.vblur, w, h);
  LAUNCH_CHECK(blur_v);
  if (!tmp_free(st, &t.hblur, px, s)) return false;

  if (!tmp_alloc(st, &t.grad, px, s)) return false;
  if (!tmp_alloc(st, &t.peak, 1, s)) return false;
  CUDA_CHECK(cudaMemsetAsync(t.peak, 0, sizeof *t.peak, s));
  sobel<<<grid, block, 0, s>>>(t.vblur, t.grad, t.peak, w, h);
  LAUNCH_CHECK(sobel);
  if (!tmp_free(st, &t.vblur, px, s)) return false;

  normalise<<<grid, block, 0, s>>>(t.grad, t.peak, lane.out, sum, w, h);
  LAUNCH_CHECK(normalise);
  if (!tmp_free(st, &t.grad, px, s)) return false;
  if (!tmp_free(st, &t.peak, 1, s)) return false;
  return frame_scope_end(st);
}

// Before a strategy's warm-up: what it reserves must be its own, not what an earlier strategy
// left. async: the pool cudaMallocAsync uses (the device's default pool, unless someone set
// another) gets its release threshold raised to the maximum (CUDA ships it at 0: the pool would
// give its memory back at every synchronize) and is trimmed; strategy_end puts the threshold
// back. spool and scope share one pool: the second of them to run trims it first, stream caches
// included (the first finds the pool as SPOOL_CONF made it, reserve= included).
static bool strategy_begin(Strategy &st, int device, bool pool_used) {
  CUDA_CHECK(cudaDeviceSynchronize());
  if (st.kind == Kind::malloc_async) {
    CUDA_CHECK(cudaDeviceGetMemPool(&st.mempool, device));
    CUDA_CHECK(cudaMemPoolGetAttribute(st.mempool, cudaMemPoolAttrReleaseThreshold,
                                       &st.saved_threshold));
    st.threshold_changed = true;
    uint64_t keep_all = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(st.mempool, cudaMemPoolAttrReleaseThreshold, &keep_all));
    CUDA_CHECK(cudaMemPoolTrimTo(st.mempool, 0));
  } else if (st.pool != nullptr && pool_used) {
    SPOOL_CHECK(spool_trim(st.pool, 0));
  }
  return true;
}

// After the warm-up: the peaks start from what the strategy holds now.
static bool strategy_reset_peak(Strategy &st) {
  switch (st.kind) {
    case Kind::malloc_free:
      st.live_peak = st.live_bytes;
      break;
    case Kind::malloc_async: {
      uint64_t zero = 0;  // setting a high-water mark to 0 resets it to the current value
      CUDA_CHECK(cudaMemPoolSetAttribute(st.mempool, cudaMemPoolAttrReservedMemHigh, &zero));
      break;
    }
    case Kind::spool:
    case Kind::scope:
      SPOOL_CHECK(spool_stats_reset_peaks(st.pool));
      break;
  }
  return true;
}

// After the timed frames: the most device memory the strategy held for the temporaries. cudaMalloc
// has no pool: the largest sum of live temporaries, as asked (the driver rounds each one up to its
// page size). The pools: their reserved high-water mark.
static bool strategy_read_peak(Strategy &st) {
  switch (st.kind) {
    case Kind::malloc_free:
      st.reserved_peak = st.live_peak;
      break;
    case Kind::malloc_async:
      CUDA_CHECK(cudaMemPoolGetAttribute(st.mempool, cudaMemPoolAttrReservedMemHigh,
                                         &st.reserved_peak));
      break;
    case Kind::spool:
    case Kind::scope: {
      spool_stats stats;
      SPOOL_CHECK(spool_stats_get(st.pool, &stats));
      st.reserved_peak = stats.bytes_reserved_peak;
      break;
    }
  }
  return true;
}

// async: gives the pool's memory back and its release threshold its old value, so that the
// strategies after it, and whoever uses the pool after this program, find it as it was.
static bool strategy_end(Strategy &st) {
  if (!st.threshold_changed) return true;
  bool ok = cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __LINE__);
  ok = cuda_ok(cudaMemPoolTrimTo(st.mempool, 0), "cudaMemPoolTrimTo(mempool, 0)", __LINE__) && ok;
  ok = cuda_ok(cudaMemPoolSetAttribute(st.mempool, cudaMemPoolAttrReleaseThreshold,
                                       &st.saved_threshold),
               "cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold)", __LINE__) &&
       ok;
  st.threshold_changed = false;
  return ok;
}

// Warms up, then times o.frames frames round-robin over the lanes; per-frame output checksums go
// to st.sums[0 .. o.frames). st.seconds is wall time from the first frame queued to the device
// idle; st.reserved_peak what the strategy held at most meanwhile.
// pool_used: an earlier strategy used st's spool pool.
static bool run_strategy(Strategy &st, const std::vector<Lane> &lanes, const Options &o,
                         int device, bool pool_used) {
  unsigned long long *sums = st.sums;
  if (!strategy_begin(st, device, pool_used)) return false;
  // First use costs (loading the kernels, the pool growing to the working set, the driver's
  // first large blocks) are not what is compared. Warm-up frames write into the same checksum
  // slots, which are cleared before (the frames add into them: memory read before it is ever
  // written is what initcheck reports) and afterwards.
  CUDA_CHECK(cudaMemset(sums, 0, (size_t)o.frames * sizeof *sums));
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int f = 0; f < o.warmup; ++f)
    if (!run_frame(st, lanes[(size_t)f % lanes.size()], f, o, sums + f % o.frames)) return false;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemset(sums, 0, (size_t)o.frames * sizeof *sums));
  CUDA_CHECK(cudaDeviceSynchronize());  // the memset is on the legacy stream, which the
                                        // non-blocking lanes do not wait for
  if (!strategy_reset_peak(st)) return false;  // report the timed run

  st.alloc_seconds = 0;
  const Clock::time_point t0 = Clock::now();
  for (int f = 0; f < o.frames; ++f)
    if (!run_frame(st, lanes[(size_t)f % lanes.size()], f, o, sums + f)) return false;
  CUDA_CHECK(cudaDeviceSynchronize());
  st.seconds = seconds_since(t0);
  if (!strategy_read_peak(st)) return false;
  return strategy_end(st);
}

// ---------------------------------------------------------------------------------------------
// Setup, report, teardown
// ---------------------------------------------------------------------------------------------

static const char *bytes_str(double b, char *buf, size_t len) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  std::snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", b, unit[u]);
  return buf;
}

// Everything main builds; release() gives it all back before main returns.
struct App {
  Options o;
  spool_pool *pool = nullptr;
  int device = 0;
  std::vector<Lane> lanes;
  std::vector<Strategy> runs;  // the strategies chosen, in kStrategies order
};

static bool setup(App &app) {
  const Options &o = app.o;
  // The defaults, then SPOOL_CONF on top: the pool the library gives anyone who asks for nothing.
  SPOOL_CHECK(spool_pool_create(&app.pool, nullptr));
  const int dev = spool_pool_device(app.pool);  // SPOOL_CONF may have chosen another device
  app.device = dev;
  CUDA_CHECK(cudaSetDevice(dev));

  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int drv = 0, rt = 0;
  CUDA_CHECK(cudaDriverGetVersion(&drv));
  CUDA_CHECK(cudaRuntimeGetVersion(&rt));
  const size_t px = (size_t)o.width * o.height;
  char b1[32], b2[32];
  std::printf("spool %s: five-kernel image pipeline, a temporary buffer around each kernel\n",
              spool_version_string());
  std::printf("device %d: %s, driver %d.%d, runtime %d.%d\n", dev, prop.name, drv / 1000,
              drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
  std::printf("frames: %dx%d RGB8, %d timed (+%d warm-up) round-robin over %d non-blocking streams\n",
              o.width, o.height, o.frames, o.warmup, o.streams);
  std::printf("per frame: 5 temporaries (4 x %s + 4 B), 5 allocations and 5 frees\n",
              bytes_str((double)(px * sizeof(float)), b1, sizeof b1));
  std::printf("per stream, allocated once: input %s, output %s\n\n",
              bytes_str((double)(px * 3), b1, sizeof b1), bytes_str((double)px, b2, sizeof b2));
  std::fflush(stdout);

  // Streams first, each pushed into lanes at once so that release() finds it whatever fails next.
  for (int i = 0; i < o.streams; ++i) {
    Lane lane;
    CUDA_CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
    app.lanes.push_back(lane);
  }
  for (Lane &lane : app.lanes) {
    CUDA_CHECK(cudaMalloc(&lane.rgb, px * 3));
    CUDA_CHECK(cudaMalloc(&lane.out, px));
  }
  for (int i = 0; i < kStrategyCount; ++i) {
    if (!(o.strategies & (1u << i))) continue;
    Strategy st{kStrategies[i].kind, kStrategies[i].key, kStrategies[i].name};
    if (st.kind == Kind::spool || st.kind == Kind::scope) st.pool = app.pool;
    app.runs.push_back(st);  // pushed before its memory, so that release() frees it
    CUDA_CHECK(cudaMalloc(&app.runs.back().sums, (size_t)o.frames * sizeof(unsigned long long)));
  }
  return true;
}

// Compares the per-frame checksums of every run with the first's; *same when all are equal.
static bool verify(const App &app, bool *same) {
  const size_t n = (size_t)app.o.frames;
  const Strategy &first = app.runs[0];
  std::vector<unsigned long long> a(n), b(n);
  CUDA_CHECK(cudaMemcpy(a.data(), first.sums, n * sizeof a[0], cudaMemcpyDeviceToHost));
  *same = true;
  for (size_t run = 1; run < app.runs.size(); ++run) {
    const Strategy &st = app.runs[run];
    CUDA_CHECK(cudaMemcpy(b.data(), st.sums, n * sizeof b[0], cudaMemcpyDeviceToHost));
    size_t differ = 0, at = 0;
    for (size_t f = 0; f < n; ++f)
      if (a[f] != b[f] && differ++ == 0) at = f;
    if (differ != 0) {
      std::fprintf(stderr,
                   "pipeline: the outputs of %s and %s differ in %zu of %zu frames; first: "
                   "frame %zu, checksum %016llx against %016llx\n",
                   first.name, st.name, differ, n, at, a[at], b[at]);
      *same = false;
    }
  }
  unsigned long long all = 0;  // one number for the whole output, to compare across machines
  for (size_t f = 0; f < n; ++f) all = all * 0x100000001b3ull ^ a[f];
  if (*same)
    std::printf("output: identical in %s, %zu frames, checksum %016llx\n\n",
                app.runs.size() > 1 ? "all runs" : "the one run", n, all);
  return true;
}

static void print_table(const Options &o, const std::vector<Strategy> &runs) {
  char b[32];
  std::printf("%-32s %9s %9s %17s %14s %9s\n", "temporaries per kernel", "ms/frame", "frames/s",
              "alloc+free ms/fr", "peak reserved", "speed-up");
  for (const Strategy &st : runs)
    std::printf("%-32s %9.3f %9.1f %17.3f %14s %8.2fx\n", st.name, 1e3 * st.seconds / o.frames,
                o.frames / st.seconds, 1e3 * st.alloc_seconds / o.frames,
                bytes_str((double)st.reserved_peak, b, sizeof b), runs[0].seconds / st.seconds);
  std::printf("alloc+free: host time inside the allocate and free calls; cudaFree's includes "
              "waiting for the device.\n"
              "peak reserved: device memory held for the temporaries at most during the timed "
              "frames: the pool's\n"
              "  reserved high-water mark; for cudaMalloc, the live temporaries' bytes as asked "
              "(the driver rounds up).\n"
              "speed-up: against the first row.\n\n");
}

// Gives back everything setup() built, in reverse order, checking each call and going on after a
// failure so that as much as possible is released. The pool goes first, while the streams it
// may have seen still exist.
static bool release(App &app) {
  bool ok = cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __LINE__);
  for (Strategy &st : app.runs) ok = strategy_end(st) && ok;  // async stopped half-way
  ok = spool_ok(spool_pool_destroy(app.pool), "spool_pool_destroy(pool)", __LINE__) && ok;
  app.pool = nullptr;
  for (Strategy &st : app.runs) {
    ok = cuda_ok(cudaFree(st.sums), "cudaFree(sums)", __LINE__) && ok;
    st.sums = nullptr;
  }
  app.runs.clear();
  for (Lane &lane : app.lanes) {
    ok = cuda_ok(cudaFree(lane.rgb), "cudaFree(lane.rgb)", __LINE__) && ok;
    ok = cuda_ok(cudaFree(lane.out), "cudaFree(lane.out)", __LINE__) && ok;
    ok = cuda_ok(cudaStreamDestroy(lane.stream), "cudaStreamDestroy(lane.stream)", __LINE__) && ok;
  }
  app.lanes.clear();
  return ok;
}

static bool run(App &app) {
  const Options &o = app.o;
  bool used_spool = false;
  for (Strategy &st : app.runs) {
    if (!run_strategy(st, app.lanes, o, app.device, used_spool)) return false;
    used_spool = used_spool || st.pool != nullptr;
  }

  bool same = false;
  if (!verify(app, &same)) return false;
  if (!same) return false;

  // Every temporary went back: anything else is a leak in this program.
  spool_stats stats;
  SPOOL_CHECK(spool_stats_get(app.pool, &stats));
  if (stats.buffers_in_use != 0) {
    std::fprintf(stderr, "pipeline: %" PRIu64 " spool buffers still in use after the run\n",
                 stats.buffers_in_use);
    return false;
  }

  print_table(o, app.runs);
  std::fflush(stdout);  // the report is written through the same FILE, but keep the order certain
  if (used_spool) SPOOL_CHECK(spool_report(app.pool, stdout));
  std::fflush(stdout);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Options and main
// ---------------------------------------------------------------------------------------------

static void usage(FILE *f) {
  std::fprintf(f,
               "usage: pipeline [--frames N] [--width W --height H] [--streams S] [--warmup N] "
               "[--quick]\n"
               "                [--strategy LIST]\n"
               "  --frames N    timed frames (default 300)\n"
               "  --width W     frame width in pixels (default 3840)\n"
               "  --height H    frame height in pixels (default 2160)\n"
               "  --streams S   non-blocking streams the frames go round-robin over (default 4)\n"
               "  --warmup N    frames run before timing, per strategy (default 2 per stream)\n"
               "  --quick       1280x720, 20 frames (for tests); explicit options still apply\n"
               "  --strategy L  the runs to make, comma-separated, always in this order (default "
               "all):\n"
               "                malloc  cudaMalloc/cudaFree around each kernel\n"
               "                async   cudaMallocAsync/cudaFreeAsync, default pool, release "
               "threshold max\n"
               "                spool   spool_alloc/spool_free around each kernel\n"
               "                scope   one spool_scope per frame\n"
               "The spool pool uses the defaults and SPOOL_CONF (e.g. SPOOL_CONF=reserve=1GiB).\n"
               "Exit status: 0 ok, 1 failure, 2 bad usage, 77 no CUDA device.\n");
}

// "malloc,spool" and the like, or "all", into a set of bits of kStrategies.
static bool parse_strategies(const char *text, unsigned *out) {
  if (text != nullptr && !std::strcmp(text, "all")) {
    *out = (1u << kStrategyCount) - 1;
    return true;
  }
  unsigned set = 0;
  const char *p = text ? text : "";
  while (*p != '\0') {
    const char *comma = std::strchr(p, ',');
    const size_t n = comma ? (size_t)(comma - p) : std::strlen(p);
    int k = 0;
    while (k < kStrategyCount &&
           (std::strlen(kStrategies[k].key) != n || std::strncmp(p, kStrategies[k].key, n) != 0))
      ++k;
    if (k == kStrategyCount) {
      std::fprintf(stderr, "pipeline: --strategy: unknown strategy '%.*s' (expected malloc, "
                   "async, spool, scope or all)\n", (int)n, p);
      return false;
    }
    set |= 1u << k;
    p += n;
    if (*p == ',') ++p;
  }
  if (set == 0) {
    std::fprintf(stderr, "pipeline: --strategy needs a list such as malloc,async,spool,scope\n");
    return false;
  }
  *out = set;
  return true;
}

static bool parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
  char *end = nullptr;
  errno = 0;
  const long v = text ? std::strtol(text, &end, 10) : 0;
  if (text == nullptr || *text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    std::fprintf(stderr, "pipeline: %s needs a whole number from %d to %d, got '%s'\n", opt, lo, hi,
                 text ? text : "");
    return false;
  }
  *out = (int)v;
  return true;
}

// Parses argv into *o; returns 0 to go on, else the exit status (0 for --help).
static int parse_args(int argc, char **argv, Options *o, bool *help) {
  Options explicit_opts;
  bool quick = false, given[5] = {false, false, false, false, false};
  int *fields[5] = {&explicit_opts.frames, &explicit_opts.width, &explicit_opts.height,
                    &explicit_opts.streams, &explicit_opts.warmup};
  static const char *names[5] = {"--frames", "--width", "--height", "--streams", "--warmup"};
  static const int lo[5] = {1, 1, 1, 1, 0}, hi[5] = {1000000, 32768, 32768, 64, 100000};
  *help = false;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (!std::strcmp(arg, "--quick")) { quick = true; continue; }
    if (!std::strcmp(arg, "--help") || !std::strcmp(arg, "-h")) { *help = true; return 0; }
    if (!std::strncmp(arg, "--strategy", 10) && (arg[10] == '\0' || arg[10] == '=')) {
      const char *val = arg[10] == '=' ? arg + 11 : (i + 1 < argc ? argv[++i] : nullptr);
      if (!parse_strategies(val, &o->strategies)) return 2;
      continue;
    }
    int k = 0;
    size_t n = 0;
    for (; k < 5; ++k) {  // "--frames N" or "--frames=N"
      n = std::strlen(names[k]);
      if (!std::strncmp(arg, names[k], n) && (arg[n] == '\0' || arg[n] == '=')) break;
    }
    if (k == 5) {
      std::fprintf(stderr, "pipeline: unknown option '%s'\n", arg);
      usage(stderr);
      return 2;
    }
    const char *val = arg[n] == '=' ? arg + n + 1 : (i + 1 < argc ? argv[++i] : nullptr);
    if (!parse_int(names[k], val, lo[k], hi[k], fields[k])) return 2;
    given[k] = true;
  }
  if (quick) o->width = 1280, o->height = 720, o->frames = 20;
  int *target[5] = {&o->frames, &o->width, &o->height, &o->streams, &o->warmup};
  for (int k = 0; k < 5; ++k)
    if (given[k]) *target[k] = *fields[k];
  if (o->warmup < 0) o->warmup = 2 * o->streams;
  return 0;
}

int main(int argc, char **argv) {
  App app;
  bool help = false;
  if (const int rc = parse_args(argc, argv, &app.o, &help)) return rc;
  if (help) {
    usage(stdout);
    return 0;
  }

  // No device, no driver, or a driver too old for this runtime: one line, and 77 so that CTest
  // reports the test as skipped rather than failed.
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  if (err != cudaSuccess) {
    std::fprintf(stderr, "pipeline: no CUDA device: %s: %s\n", cudaGetErrorName(err),
                 cudaGetErrorString(err));
    return 77;
  }

  bool ok = setup(app) && run(app);
  ok = release(app) && ok;  // whatever happened: nothing is left for process exit
  return ok ? 0 : 1;
}
