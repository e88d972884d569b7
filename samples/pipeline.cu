// pipeline: spool's flagship sample.
//
// The essay behind spool describes an image-processing pipeline of five kernels, each needing a
// temporary buffer, that is "painfully slow" when every kernel calls cudaMalloc before it and
// cudaFree after it: cudaFree waits for the whole device, so the streams never overlap, and both
// calls may go to the driver. This program runs that pipeline twice in one process on the same
// input and compares:
//
//   (a) cudaMalloc / cudaFree around each kernel   (what people write today)
//   (b) spool_alloc / spool_free around each kernel, on the frame's stream (stream-ordered, from
//       a cudaMemPool that keeps its memory between frames)
//   (c) one spool_scope per frame: every temporary is a spool_scope_alloc from the frame's
//       scope (mostly a pointer bump), and spool_scope_end after the last kernel frees them all
//       in stream order; no per-temporary free to forget
//
// The allocation pattern is the same in both runs, only the two calls differ. Each frame goes
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
// output checksums of the two runs must be identical, or the program fails.
//
// Usage: pipeline [--frames N] [--width W --height H] [--streams S] [--warmup N] [--quick]
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
// The two ways of getting a kernel's temporary buffer
// ---------------------------------------------------------------------------------------------

struct Strategy {
  const char *name;
  spool_pool *pool;      // NULL: cudaMalloc/cudaFree; else spool_alloc/spool_free from this pool
  double alloc_seconds;  // host time spent inside the allocate and free calls of timed frames
  bool scoped = false;   // (c): temporaries from the frame's scope, freed when it ends
  spool_scope *scope = nullptr;  // the current frame's scope
};

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// count elements of T for use on stream. cudaMalloc ignores the stream; spool_alloc orders the
// allocation on it, so the memory is ready when the stream's next kernel runs.
template <typename T>
static bool tmp_alloc(Strategy &st, T **p, size_t count, cudaStream_t stream) {
  void *q = nullptr;
  const Clock::time_point t0 = Clock::now();
  if (st.scoped) {
    SPOOL_CHECK(spool_scope_alloc(st.scope, &q, count * sizeof(T)));
  } else if (st.pool == nullptr) {
    CUDA_CHECK(cudaMalloc(&q, count * sizeof(T)));
  } else {
    SPOOL_CHECK(spool_alloc(st.pool, &q, count * sizeof(T), stream));
  }
  st.alloc_seconds += seconds_since(t0);
  *p = static_cast<T *>(q);
  return true;
}

// Frees *p after the work queued so far on stream and nulls it, so that a second free is a no-op
// instead of undefined behaviour. cudaFree gets there by waiting for the whole device, the cost
// this sample measures; spool_free queues the free on the stream and returns at once.
template <typename T>
static bool tmp_free(Strategy &st, T **p, cudaStream_t stream) {
  const Clock::time_point t0 = Clock::now();
  if (st.scoped) {
    // nothing: the frame's scope frees every temporary at its end
  } else if (st.pool == nullptr) {
    CUDA_CHECK(cudaFree(*p));
  } else {
    SPOOL_CHECK(spool_free(st.pool, *p, stream));
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
  float *lum = nullptr, *hblur = nullptr, *vblur = nullptr, *grad = nullptr;
  unsigned *peak = nullptr;
  ~FrameTemps() {
    if (lum) tmp_free(st, &lum, stream);
    if (hblur) tmp_free(st, &hblur, stream);
    if (vblur) tmp_free(st, &vblur, stream);
    if (grad) tmp_free(st, &grad, stream);
    if (peak) tmp_free(st, &peak, stream);
    if (st.scope) spool_ok(spool_scope_end(st.scope), "spool_scope_end(scope)", __LINE__);
    st.scope = nullptr;
  }
};

// (c): the frame's scope, begun before its first temporary and ended after its last kernel.
static bool frame_scope_begin(Strategy &st, cudaStream_t stream) {
  if (!st.scoped) return true;
  const Clock::time_point t0 = Clock::now();
  SPOOL_CHECK(spool_scope_begin(st.pool, stream, &st.scope));
  st.alloc_seconds += seconds_since(t0);
  return true;
}

static bool frame_scope_end(Strategy &st) {
  if (!st.scoped) return true;
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
};

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
  FrameTemps t{st, s};
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
  if (!tmp_free(st, &t.lum, s)) return false;

  if (!tmp_alloc(st, &t.vblur, px, s)) return false;
  blur_v<<<grid, block, 0, s>>>(t.hblur, t.vblur, w, h);
  LAUNCH_CHECK(blur_v);
  if (!tmp_free(st, &t.hblur, s)) return false;

  if (!tmp_alloc(st, &t.grad, px, s)) return false;
  if (!tmp_alloc(st, &t.peak, 1, s)) return false;
  CUDA_CHECK(cudaMemsetAsync(t.peak, 0, sizeof *t.peak, s));
  sobel<<<grid, block, 0, s>>>(t.vblur, t.grad, t.peak, w, h);
  LAUNCH_CHECK(sobel);
  if (!tmp_free(st, &t.vblur, s)) return false;

  normalise<<<grid, block, 0, s>>>(t.grad, t.peak, lane.out, sum, w, h);
  LAUNCH_CHECK(normalise);
  if (!tmp_free(st, &t.grad, s)) return false;
  if (!tmp_free(st, &t.peak, s)) return false;
  return frame_scope_end(st);
}

// Warms up, then times o.frames frames round-robin over the lanes; per-frame output checksums go
// to sums[0 .. o.frames). *seconds is wall time from the first frame queued to the device idle.
static bool run_strategy(Strategy &st, const std::vector<Lane> &lanes, const Options &o,
                         unsigned long long *sums, double *seconds) {
  // First use costs (loading the kernels, the pool growing to the working set, the driver's
  // first large blocks) are not what is compared. Warm-up frames write into the same checksum
  // slots, which are cleared afterwards.
  for (int f = 0; f < o.warmup; ++f)
    if (!run_frame(st, lanes[(size_t)f % lanes.size()], f, o, sums + f % o.frames)) return false;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemset(sums, 0, (size_t)o.frames * sizeof *sums));
  CUDA_CHECK(cudaDeviceSynchronize());  // the memset is on the legacy stream, which the
                                        // non-blocking lanes do not wait for
  if (st.pool != nullptr) SPOOL_CHECK(spool_stats_reset_peaks(st.pool));  // report the timed run

  st.alloc_seconds = 0;
  const Clock::time_point t0 = Clock::now();
  for (int f = 0; f < o.frames; ++f)
    if (!run_frame(st, lanes[(size_t)f % lanes.size()], f, o, sums + f)) return false;
  CUDA_CHECK(cudaDeviceSynchronize());
  *seconds = seconds_since(t0);
  return true;
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
  std::vector<Lane> lanes;
  unsigned long long *sums[3] = {nullptr, nullptr, nullptr};  // per-frame checksums, (a) to (c)
};

static bool setup(App &app) {
  const Options &o = app.o;
  // The defaults, then SPOOL_CONF on top: the pool the library gives anyone who asks for nothing.
  SPOOL_CHECK(spool_pool_create(&app.pool, nullptr));
  const int dev = spool_pool_device(app.pool);  // SPOOL_CONF may have chosen another device
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
  for (unsigned long long *&s : app.sums) CUDA_CHECK(cudaMalloc(&s, (size_t)o.frames * sizeof *s));
  return true;
}

// Compares the per-frame checksums of runs (b) and (c) with (a)'s; *same when all are equal.
static bool verify(const App &app, bool *same) {
  const size_t n = (size_t)app.o.frames;
  std::vector<unsigned long long> a(n), b(n);
  CUDA_CHECK(cudaMemcpy(a.data(), app.sums[0], n * sizeof a[0], cudaMemcpyDeviceToHost));
  *same = true;
  for (int run = 1; run < 3; ++run) {
    CUDA_CHECK(cudaMemcpy(b.data(), app.sums[run], n * sizeof b[0], cudaMemcpyDeviceToHost));
    size_t differ = 0, first = 0;
    for (size_t f = 0; f < n; ++f)
      if (a[f] != b[f] && differ++ == 0) first = f;
    if (differ != 0) {
      std::fprintf(stderr,
                   "pipeline: the outputs of runs (a) and (%c) differ in %zu of %zu frames; "
                   "first: frame %zu, checksum %016llx with cudaMalloc, %016llx\n",
                   'a' + run, differ, n, first, a[first], b[first]);
      *same = false;
    }
  }
  unsigned long long all = 0;  // one number for the whole output, to compare across machines
  for (size_t f = 0; f < n; ++f) all = all * 0x100000001b3ull ^ a[f];
  if (*same) std::printf("output: identical in all runs, %zu frames, checksum %016llx\n\n", n, all);
  return true;
}

static void print_table(const Options &o, const Strategy *st, const double *sec) {
  std::printf("%-36s %10s %10s %18s %9s\n", "temporaries per kernel", "ms/frame", "frames/s",
              "alloc+free ms/fr", "speed-up");
  for (int i = 0; i < 3; ++i)
    std::printf("%-36s %10.3f %10.1f %18.3f %8.2fx\n", st[i].name, 1e3 * sec[i] / o.frames,
                o.frames / sec[i], 1e3 * st[i].alloc_seconds / o.frames, sec[0] / sec[i]);
  std::printf("(alloc+free: host time inside the allocate and free calls; cudaFree's includes "
              "waiting for the device)\n\n");
}

// Gives back everything setup() built, in reverse order, checking each call and going on after a
// failure so that as much as possible is released. The pool goes first, while the streams it
// may have seen still exist.
static bool release(App &app) {
  bool ok = cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __LINE__);
  ok = spool_ok(spool_pool_destroy(app.pool), "spool_pool_destroy(pool)", __LINE__) && ok;
  app.pool = nullptr;
  for (unsigned long long *&s : app.sums) {
    ok = cuda_ok(cudaFree(s), "cudaFree(sums)", __LINE__) && ok;
    s = nullptr;
  }
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
  Strategy st[3] = {{"cudaMalloc/cudaFree", nullptr, 0.0},
                    {"spool_alloc/spool_free", app.pool, 0.0},
                    {"spool_scope per frame", app.pool, 0.0, true}};
  double sec[3] = {0.0, 0.0, 0.0};
  for (int i = 0; i < 3; ++i)
    if (!run_strategy(st[i], app.lanes, o, app.sums[i], &sec[i])) return false;

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

  print_table(o, st, sec);
  std::fflush(stdout);  // the report is written through the same FILE, but keep the order certain
  SPOOL_CHECK(spool_report(app.pool, stdout));
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
               "  --frames N    timed frames (default 300)\n"
               "  --width W     frame width in pixels (default 3840)\n"
               "  --height H    frame height in pixels (default 2160)\n"
               "  --streams S   non-blocking streams the frames go round-robin over (default 4)\n"
               "  --warmup N    frames run before timing, per strategy (default 2 per stream)\n"
               "  --quick       1280x720, 20 frames (for tests); explicit options still apply\n"
               "The spool pool uses the defaults and SPOOL_CONF (e.g. SPOOL_CONF=reserve=1GiB).\n"
               "Exit status: 0 ok, 1 failure, 2 bad usage, 77 no CUDA device.\n");
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
