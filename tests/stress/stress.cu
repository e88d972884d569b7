// gpu_stress: many host threads allocating, writing, verifying and freeing spool buffers on the
// real device at once.
//
// What it proves: that a buffer spool hands out is memory nobody else is using while it is live.
// Two independent checks, and both must come out 0:
//
//   corruptions  A kernel writes a pattern unique to each buffer (a hash of the buffer's number
//                and the word's index) over the whole buffer right after it is allocated; just
//                before the buffer is freed, another kernel on the same stream reads it all back
//                and atomically counts the words that differ into a device counter. If the pool
//                gave the same memory to two live buffers, or reused memory before the free's
//                stream got there, one buffer's writes show up in the other's verify.
//   overlaps     Host side: every live buffer's [ptr, ptr + size) is kept in one sorted, mutex-
//                protected map, and every new buffer is checked against it when it is returned.
//                A range leaves the map before its free is called, so it can never be handed out
//                again while it is still in the map (no false alarms).
//
// And no leaks: after every thread has joined, spool must count 0 buffers in use, and
// spool_pool_destroy must not return SPOOL_ERR_LEAKS.
//
// Shape of the load: N host threads (SPOOL_STRESS_THREADS, default 8). Every 4th thread (3, 7,
// ...) works on one stream shared by all of them; the others each on their own non-blocking
// stream. Sizes are log-uniform from 256 B to 64 MiB (any byte count, not only whole words). A
// thread keeps up to 8 buffers live, chooses at random between allocating and verifying + freeing
// a random live one, and frees one in 8 on a second stream of its own that first waits on an
// event recorded after the verify (the cross-stream free CUDA allows in stream order). Every 64
// steps it synchronizes its stream, so that the queue stays short and freed memory really comes
// back to the pool while others allocate. It stops after SPOOL_STRESS_SECONDS (default 5), then
// verifies and frees what it still holds.
//
// Environment: SPOOL_STRESS_THREADS (1..256), SPOOL_STRESS_SECONDS (> 0, e.g. 600),
// SPOOL_STRESS_SEED (the run's seed; printed, so that a failing run can be repeated), SPOOL_CONF
// (the pool's settings, e.g. SPOOL_CONF=track=full to have call sites in any leak report).
// Output: the spool report, then one summary line starting with "gpu_stress:".
// Exit status: 0 pass, 1 failure (a corruption, an overlap, a leak, or a CUDA or spool call that
// failed), 2 bad environment value, 77 no CUDA device (CTest reads 77 as "skipped").

#include <spool/spool.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

// ---------------------------------------------------------------------------------------------
// Checking every call
// ---------------------------------------------------------------------------------------------

// As in samples/pipeline.cu: every CUDA and spool call goes through one of these, which name the
// call, the thread and CUDA's or spool's reason; functions return false on failure and the
// caller tears down what was built. spool_last_error() and cudaGetLastError() are per thread, so
// each worker reads its own.
static bool cuda_ok(cudaError_t err, const char *call, int line, int thread) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_stress: thread %d: line %d: %s failed: %s: %s\n", thread, line, call,
               cudaGetErrorName(err), cudaGetErrorString(err));
  return false;
}

static bool spool_ok(spool_status st, const char *call, int line, int thread) {
  if (st == SPOOL_OK) return true;
  std::fprintf(stderr, "gpu_stress: thread %d: line %d: %s failed: %s: %s\n", thread, line, call,
               spool_status_name(st), spool_last_error());
  return false;
}

// THREAD_ID is the worker's index in worker code and -1 (main thread) elsewhere.
#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    if (!cuda_ok((call), #call, __LINE__, THREAD_ID)) return false;                                \
  } while (0)
#define SPOOL_CHECK(call)                                                                          \
  do {                                                                                             \
    if (!spool_ok((call), #call, __LINE__, THREAD_ID)) return false;                               \
  } while (0)
// A bad launch configuration shows at once in cudaGetLastError; a fault inside the kernel at the
// next synchronizing call, which is checked as well.
#define LAUNCH_CHECK(kernel)                                                                       \
  do {                                                                                             \
    if (!cuda_ok(cudaGetLastError(), "launch of " #kernel, __LINE__, THREAD_ID)) return false;     \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Kernels: the pattern, its writer and its checker
// ---------------------------------------------------------------------------------------------

__host__ __device__ __forceinline__ uint32_t hash32(uint32_t x) {  // lowbias32
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Word i of the buffer whose key is key (key = mix64 of the buffer's number and the run's seed,
// so that two buffers, even at the same address, never share a pattern, and a word written at
// the wrong index does not match either). Tail bytes past the last whole word take the low byte
// of the pattern of their own index.
__device__ __forceinline__ uint32_t pattern(uint64_t key, uint32_t i) {
  return hash32(hash32(i * 0x9e3779b1u ^ (uint32_t)key) ^ (uint32_t)(key >> 32));
}

// Where verify kernels report: the number of wrong words over the whole run, and the first one
// seen, for the message.
struct VerifyResult {
  unsigned long long mismatches;
  unsigned int claimed;  // 0 until a thread has written the first-mismatch fields below
  unsigned int word;
  unsigned int expected;
  unsigned int got;
  unsigned long long buffer;  // the buffer's number
  unsigned long long size;
};

// Grid-stride, so one launch covers any size; a size not a multiple of 4 ends with 1..3 tail
// bytes, written by the first block.
__global__ void fill(uint32_t *words, size_t nwords, uint8_t *tail, unsigned ntail, uint64_t key) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)
    words[i] = pattern(key, (uint32_t)i);
  if (blockIdx.x == 0 && threadIdx.x < ntail)
    tail[threadIdx.x] = (uint8_t)pattern(key, (uint32_t)(nwords + threadIdx.x));
}

// Counts the words (and tail bytes) that differ from the pattern. A clean buffer costs no atomic
// at all: each thread adds its own count only when it is not zero.
__global__ void verify(const uint32_t *words, size_t nwords, const uint8_t *tail, unsigned ntail,
                       uint64_t key, unsigned long long buffer, unsigned long long size,
                       VerifyResult *res) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0;
  size_t first = ~(size_t)0;
  uint32_t want = 0, got = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride) {
    const uint32_t e = pattern(key, (uint32_t)i), g = words[i];
    if (e != g) {
      if (bad++ == 0) first = i, want = e, got = g;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < ntail) {
    const uint8_t e = (uint8_t)pattern(key, (uint32_t)(nwords + threadIdx.x)), g = tail[threadIdx.x];
    if (e != g && bad++ == 0) first = nwords + threadIdx.x, want = e, got = g;
  }
  if (bad == 0) return;
  atomicAdd(&res->mismatches, bad);
  if (atomicCAS(&res->claimed, 0u, 1u) == 0u) {
    res->word = (unsigned)first;
    res->expected = want;
    res->got = got;
    res->buffer = buffer;
    res->size = size;
  }
}

// Enough blocks to fill an H200 for the largest buffers, one for the smallest.
static unsigned grid_for(size_t nwords) {
  const size_t blocks = (nwords + 255) / 256;
  return (unsigned)std::max<size_t>(1, std::min<size_t>(blocks, 2048));
}

// ---------------------------------------------------------------------------------------------
// The live set: every live buffer's byte range, for the overlap check
// ---------------------------------------------------------------------------------------------

class LiveSet {
 public:
  // Adds [p, p + size) and returns true, or returns false (and adds nothing) when it overlaps a
  // live range; *with and *with_size then name the one it overlaps.
  bool insert(uintptr_t p, size_t size, uintptr_t *with, size_t *with_size) {
    std::lock_guard<std::mutex> lock(mu_);
    // Ranges in the map are disjoint, so only two can overlap [p, p + size): the first that
    // starts at or after p, and the last that starts before it.
    auto next = ranges_.lower_bound(p);
    if (next != ranges_.end() && next->first < p + size) {
      *with = next->first, *with_size = next->second;
      return false;
    }
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > p) {
        *with = prev->first, *with_size = prev->second;
        return false;
      }
    }
    ranges_.emplace_hint(next, p, size);
    bytes_ += size;
    peak_ = std::max(peak_, bytes_);
    return true;
  }

  void erase(uintptr_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.find(p);
    if (it == ranges_.end()) return;
    bytes_ -= it->second;
    ranges_.erase(it);
  }

  uint64_t peak_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, size_t> ranges_;  // start -> size
  uint64_t bytes_ = 0, peak_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------------------------

constexpr size_t kMinSize = 256, kMaxSize = (size_t)64 << 20;
constexpr size_t kMaxLive = 8;        // buffers a thread holds at most
constexpr unsigned kCrossFreeOneIn = 8;  // frees that go through the thread's second stream
constexpr unsigned kSyncEvery = 64;   // steps between synchronizes of the thread's stream

using Clock = std::chrono::steady_clock;

struct Shared {
  spool_pool *pool = nullptr;
  int device = 0;
  uint64_t seed = 0;
  Clock::time_point deadline;
  VerifyResult *result = nullptr;  // device memory (cudaMalloc, not the pool under test)
  LiveSet live;
  std::atomic<unsigned long long> next_buffer{0};
  std::atomic<unsigned long long> overlaps{0};
  std::atomic<bool> stop{false};  // set by a worker that failed, so the others finish early
};

struct Buffer {
  void *ptr;
  size_t size;
  unsigned long long number;
  uint64_t key;
  bool in_set;  // false when it overlapped and so never went into the live set
};

struct Worker {
  int index = 0;
  cudaStream_t own = nullptr;    // its own stream, unless it uses the shared one
  cudaStream_t home = nullptr;   // where it allocates, writes, verifies and mostly frees
  cudaStream_t other = nullptr;  // the second stream, for cross-stream frees
  cudaEvent_t ready = nullptr;   // recorded on home after a verify, waited on by other
  std::vector<Buffer> live;
  // Counted by the worker, read by main after join.
  unsigned long long allocs = 0, bytes = 0, frees = 0, cross_frees = 0;
  bool ok = true;
};

#define THREAD_ID w.index

static bool alloc_one(Shared &sh, Worker &w, std::mt19937_64 &rng) {
  // Log-uniform: every size class from 256 B to 64 MiB is as likely as any other, so there are
  // many small buffers and still many large ones.
  std::uniform_real_distribution<double> logsize(std::log((double)kMinSize),
                                                 std::log((double)kMaxSize));
  const size_t size =
      std::min(kMaxSize, std::max(kMinSize, (size_t)std::llround(std::exp(logsize(rng)))));
  void *p = nullptr;
  SPOOL_CHECK(SPOOL_ALLOC(sh.pool, &p, size, w.home));
  if (p == nullptr) {
    std::fprintf(stderr, "gpu_stress: thread %d: SPOOL_ALLOC of %zu bytes gave NULL\n", w.index,
                 size);
    return false;
  }
  const unsigned long long number = sh.next_buffer.fetch_add(1, std::memory_order_relaxed);
  Buffer b{p, size, number, mix64(number ^ sh.seed), true};
  uintptr_t with = 0;
  size_t with_size = 0;
  if (!sh.live.insert((uintptr_t)p, size, &with, &with_size)) {
    const unsigned long long n = sh.overlaps.fetch_add(1, std::memory_order_relaxed);
    if (n < 10)  // the first few, with the numbers; the count is in the summary
      std::fprintf(stderr,
                   "gpu_stress: thread %d: OVERLAP: new buffer %#" PRIxPTR "+%zu overlaps live "
                   "buffer %#" PRIxPTR "+%zu\n",
                   w.index, (uintptr_t)p, size, with, with_size);
    b.in_set = false;
  }
  // Track it before anything else can fail, so that the free-all on the way out finds it.
  w.live.push_back(b);
  ++w.allocs;
  w.bytes += size;

  const size_t nwords = size / 4;
  fill<<<grid_for(nwords), 256, 0, w.home>>>(static_cast<uint32_t *>(p), nwords,
                                            static_cast<uint8_t *>(p) + nwords * 4,
                                            (unsigned)(size % 4), b.key);
  LAUNCH_CHECK(fill);
  return true;
}

// Verifies and frees w.live[i]. check=false on the way out after a failure: free only.
static bool release_one(Shared &sh, Worker &w, size_t i, std::mt19937_64 &rng, bool check) {
  const Buffer b = w.live[i];
  w.live[i] = w.live.back();
  w.live.pop_back();

  bool ok = true;
  if (check) {
    const size_t nwords = b.size / 4;
    verify<<<grid_for(nwords), 256, 0, w.home>>>(
        static_cast<const uint32_t *>(b.ptr), nwords,
        static_cast<const uint8_t *>(b.ptr) + nwords * 4, (unsigned)(b.size % 4), b.key, b.number,
        b.size, sh.result);
    ok = cuda_ok(cudaGetLastError(), "launch of verify", __LINE__, w.index);
  }
  // Out of the live set before the free: once spool_free returns, the memory may be handed to
  // another thread, whose insert must not find it here.
  if (b.in_set) sh.live.erase((uintptr_t)b.ptr);

  cudaStream_t on = w.home;
  if (check && ok && rng() % kCrossFreeOneIn == 0) {
    // A free on a stream that did not use the buffer is correct only once that stream waits for
    // the last use: the event recorded after the verify. The pool then reuses the memory by
    // following that dependency (reuse_follow_event_dependencies) or once the free is done.
    if (cuda_ok(cudaEventRecord(w.ready, w.home), "cudaEventRecord(ready, home)", __LINE__,
                w.index) &&
        cuda_ok(cudaStreamWaitEvent(w.other, w.ready, 0), "cudaStreamWaitEvent(other, ready)",
                __LINE__, w.index)) {
      on = w.other;
      ++w.cross_frees;
    } else {
      ok = false;  // still free it, on home, which is ordered after the verify anyway
    }
  }
  ok = spool_ok(SPOOL_FREE(sh.pool, b.ptr, on), "SPOOL_FREE(pool, ptr, stream)", __LINE__,
                w.index) && ok;
  if (ok) ++w.frees;
  return ok;
}

static bool work(Shared &sh, Worker &w) {
  CUDA_CHECK(cudaSetDevice(sh.device));  // the current device is per host thread
  std::mt19937_64 rng(mix64(sh.seed + 0x100000001b3ull * (uint64_t)(w.index + 1)));
  w.live.reserve(kMaxLive);
  for (unsigned step = 1; !sh.stop.load(std::memory_order_relaxed) && Clock::now() < sh.deadline;
       ++step) {
    // Allocate a little more often than free, so that threads spend most of the run near
    // kMaxLive buffers and the pool holds a varied, fragmented working set.
    const bool grow = w.live.empty() || (w.live.size() < kMaxLive && rng() % 100 < 55);
    if (grow) {
      if (!alloc_one(sh, w, rng)) return false;
    } else {
      if (!release_one(sh, w, (size_t)(rng() % w.live.size()), rng, true)) return false;
    }
    if (step % kSyncEvery == 0) CUDA_CHECK(cudaStreamSynchronize(w.home));
  }
  while (!w.live.empty())  // verify and free what is left, newest first
    if (!release_one(sh, w, w.live.size() - 1, rng, true)) return false;
  CUDA_CHECK(cudaStreamSynchronize(w.home));
  CUDA_CHECK(cudaStreamSynchronize(w.other));
  return true;
}

static void run_worker(Shared *sh, Worker *w) {
  w->ok = work(*sh, *w);
  if (!w->ok) {
    sh->stop.store(true, std::memory_order_relaxed);
    // Give back what this thread still holds, so that the only leak report is spool's own
    // verdict on the library, not on this failure. Errors are printed and counted as failure.
    std::mt19937_64 rng(0);
    while (!w->live.empty()) release_one(*sh, *w, w->live.size() - 1, rng, false);
  }
}

#undef THREAD_ID
#define THREAD_ID (-1)

// ---------------------------------------------------------------------------------------------
// Setup, run, teardown
// ---------------------------------------------------------------------------------------------

struct Options {
  int threads = 8;
  double seconds = 5.0;
  uint64_t seed = 0;
  bool seed_given = false;
};

// Reads env var name as a number in [lo, hi]; false (with a message) when set but not one.
static bool env_number(const char *name, double lo, double hi, bool integer, double *out,
                       bool *given) {
  const char *text = std::getenv(name);
  *given = text != nullptr && *text != '\0';
  if (!*given) return true;
  char *end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (*end != '\0' || errno != 0 || !(v >= lo && v <= hi) || (integer && v != std::floor(v))) {
    std::fprintf(stderr, "gpu_stress: %s must be %s from %g to %g, got '%s'\n", name,
                 integer ? "a whole number" : "a number", lo, hi, text);
    return false;
  }
  *out = v;
  return true;
}

static bool parse_env(Options *o) {
  double v = 0;
  bool given = false;
  if (!env_number("SPOOL_STRESS_THREADS", 1, 256, true, &v, &given)) return false;
  if (given) o->threads = (int)v;
  if (!env_number("SPOOL_STRESS_SECONDS", 0.001, 86400.0 * 7, false, &v, &given)) return false;
  if (given) o->seconds = v;
  const char *seed = std::getenv("SPOOL_STRESS_SEED");
  if (seed != nullptr && *seed != '\0') {
    char *end = nullptr;
    errno = 0;
    const unsigned long long s = std::strtoull(seed, &end, 0);
    if (*end != '\0' || errno != 0) {
      std::fprintf(stderr, "gpu_stress: SPOOL_STRESS_SEED must be a whole number, got '%s'\n",
                   seed);
      return false;
    }
    o->seed = s, o->seed_given = true;
  }
  return true;
}

struct App {
  Options o;
  Shared sh;
  cudaStream_t shared_stream = nullptr;
  std::vector<Worker> workers;
};

static bool setup(App &app) {
  // The defaults, then SPOOL_CONF on top.
  SPOOL_CHECK(spool_pool_create(&app.sh.pool, nullptr));
  app.sh.device = spool_pool_device(app.sh.pool);
  CUDA_CHECK(cudaSetDevice(app.sh.device));
  CUDA_CHECK(cudaMalloc(&app.sh.result, sizeof(VerifyResult)));
  CUDA_CHECK(cudaMemset(app.sh.result, 0, sizeof(VerifyResult)));
  CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream memset, before non-blocking streams
  CUDA_CHECK(cudaStreamCreateWithFlags(&app.shared_stream, cudaStreamNonBlocking));

  // Every handle is stored as soon as it exists, so that release() finds it whatever fails next.
  app.workers.resize((size_t)app.o.threads);
  for (int i = 0; i < app.o.threads; ++i) {
    Worker &w = app.workers[(size_t)i];
    w.index = i;
    if (i % 4 == 3) {
      w.home = app.shared_stream;
    } else {
      CUDA_CHECK(cudaStreamCreateWithFlags(&w.own, cudaStreamNonBlocking));
      w.home = w.own;
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&w.other, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&w.ready, cudaEventDisableTiming));
  }
  return true;
}

// Gives back everything setup() built, checking each call and going on after a failure. The pool
// goes first (while the streams its buffers were freed on still exist); *destroy is its status.
static bool release(App &app, spool_status *destroy) {
  bool ok = cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __LINE__, -1);
  *destroy = spool_pool_destroy(app.sh.pool);
  app.sh.pool = nullptr;
  if (*destroy != SPOOL_OK && *destroy != SPOOL_ERR_LEAKS)  // leaks are counted by the caller
    ok = spool_ok(*destroy, "spool_pool_destroy(pool)", __LINE__, -1) && ok;
  for (Worker &w : app.workers) {
    if (w.ready) ok = cuda_ok(cudaEventDestroy(w.ready), "cudaEventDestroy", __LINE__, -1) && ok;
    if (w.other) ok = cuda_ok(cudaStreamDestroy(w.other), "cudaStreamDestroy", __LINE__, -1) && ok;
    if (w.own) ok = cuda_ok(cudaStreamDestroy(w.own), "cudaStreamDestroy", __LINE__, -1) && ok;
  }
  app.workers.clear();
  if (app.shared_stream)
    ok = cuda_ok(cudaStreamDestroy(app.shared_stream), "cudaStreamDestroy", __LINE__, -1) && ok;
  if (app.sh.result) ok = cuda_ok(cudaFree(app.sh.result), "cudaFree(result)", __LINE__, -1) && ok;
  return ok;
}

struct Totals {
  unsigned long long allocs = 0, bytes = 0, frees = 0, cross_frees = 0;
  double seconds = 0;
  VerifyResult verify{};
  uint64_t peak_live = 0, buffers_in_use = 0;
  bool workers_ok = true;
};

static bool run(App &app, Totals *t) {
  Shared &sh = app.sh;
  const Clock::time_point t0 = Clock::now();
  sh.deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(app.o.seconds));
  std::vector<std::thread> threads;
  threads.reserve(app.workers.size());
  for (Worker &w : app.workers) threads.emplace_back(run_worker, &sh, &w);
  for (std::thread &th : threads) th.join();
  t->seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  for (const Worker &w : app.workers) {
    t->allocs += w.allocs, t->bytes += w.bytes, t->frees += w.frees;
    t->cross_frees += w.cross_frees;
    t->workers_ok = t->workers_ok && w.ok;
  }
  t->peak_live = sh.live.peak_bytes();
  CUDA_CHECK(cudaDeviceSynchronize());  // every verify has run
  CUDA_CHECK(cudaMemcpy(&t->verify, sh.result, sizeof t->verify, cudaMemcpyDeviceToHost));

  spool_stats st;
  SPOOL_CHECK(spool_stats_get(sh.pool, &st));
  t->buffers_in_use = st.buffers_in_use;
  std::fflush(stdout);
  SPOOL_CHECK(spool_report(sh.pool, stdout));
  std::fflush(stdout);
  return true;
}

int main() {
  App app;
  if (!parse_env(&app.o)) return 2;

  // No device, no driver, or a driver too old for this runtime: one line, and 77 so that CTest
  // reports the test as skipped rather than failed.
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  if (err != cudaSuccess) {
    std::fprintf(stderr, "gpu_stress: no CUDA device: %s: %s\n", cudaGetErrorName(err),
                 cudaGetErrorString(err));
    return 77;
  }

  if (!app.o.seed_given)
    app.o.seed = mix64((uint64_t)Clock::now().time_since_epoch().count());
  app.sh.seed = app.o.seed;
  const int shared = app.o.threads / 4;  // threads 3, 7, 11, ...
  std::printf("gpu_stress: spool %s, %d threads (%d on one shared stream), %.1f s, sizes %zu B "
              "to %zu MiB log-uniform, up to %zu live per thread, seed %#" PRIx64 "\n",
              spool_version_string(), app.o.threads, shared, app.o.seconds, kMinSize,
              kMaxSize >> 20, kMaxLive, app.o.seed);
  std::fflush(stdout);

  Totals t;
  bool ok = setup(app) && run(app, &t);
  spool_status destroy = SPOOL_OK;
  ok = release(app, &destroy) && ok;  // whatever happened: nothing is left for process exit
  ok = ok && t.workers_ok;

  const unsigned long long corruptions = t.verify.mismatches;
  const unsigned long long overlaps = app.sh.overlaps.load();
  const bool leaked = t.buffers_in_use != 0 || destroy == SPOOL_ERR_LEAKS;
  if (corruptions != 0)
    std::fprintf(stderr,
                 "gpu_stress: CORRUPTION: %llu wrong words; first seen: buffer %llu (%llu bytes), "
                 "word %u is %#010x, expected %#010x\n",
                 corruptions, t.verify.buffer, t.verify.size, t.verify.word, t.verify.got,
                 t.verify.expected);
  if (leaked)
    std::fprintf(stderr, "gpu_stress: LEAK: %" PRIu64 " buffers in use after every thread joined; "
                 "spool_pool_destroy returned %s\n",
                 t.buffers_in_use, spool_status_name(destroy));
  const bool pass = ok && corruptions == 0 && overlaps == 0 && !leaked;
  std::printf("gpu_stress: threads=%d seconds=%.2f buffers=%llu frees=%llu cross_stream_frees=%llu "
              "bytes_allocated=%llu (%.2f GiB) peak_live_bytes=%" PRIu64 " (%.1f MiB) "
              "corruptions=%llu overlaps=%llu leaks=%" PRIu64 " destroy=%s seed=%#" PRIx64
              " result=%s\n",
              app.o.threads, t.seconds, t.allocs, t.frees, t.cross_frees, t.bytes,
              (double)t.bytes / (double)(1ull << 30), t.peak_live,
              (double)t.peak_live / (double)(1u << 20), corruptions, overlaps, t.buffers_in_use,
              spool_status_name(destroy), app.o.seed, pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass ? 0 : 1;
}
