// scoped_streams: a multi-stream pipeline whose per-job temporaries come from scopes.
//
// Jobs go round-robin over S non-blocking streams. Each job opens a scope on its stream, takes
// three temporaries from it (sizes vary from job to job), runs three kernels on them, adds the
// result into the stream's accumulator, and ends the scope: every temporary is freed at once, in
// stream order, and no kernel of the job can outlive its memory. A nested scope holds the one
// temporary that only the middle kernel needs. At the end the accumulators are checked against
// the host's sum, and the stats show what the scopes cost: the temporaries handed out against
// the allocations that reached the pool or a stream cache.
//
// Usage: scoped_streams [--jobs N] [--streams S] [--elements E]
// Exit status: 0 ok, 1 a failed call or a wrong result, 2 bad usage, 77 no CUDA device.

#define SAMPLE_NAME "scoped_streams"
#include "sample_check.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// ---- kernels ----------------------------------------------------------------------------------

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

__global__ void fill(float *a, size_t n, float v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) a[i] = v;
}

__global__ void mul(float *out, const float *a, const float *b, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i];
}

__global__ void add_into(float *acc, const float *x, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

// ---- the jobs ---------------------------------------------------------------------------------

struct Options {
  int jobs = 2000, streams = 4;
  size_t elements = 1 << 18; // the largest job's length (1 MiB of floats)
};

// Job j's length: from a quarter of E to E, so the scopes see many sizes.
static size_t job_length(const Options &o, int j) {
  return o.elements / 4 + (o.elements * 3 / 4) * (size_t)(j % 8) / 7;
}

// Job j's value: acc[i] += j % 16 * 2 for i < its length (small integers: exact in float).
static float job_value(int j) { return (float)(j % 16) * 2.0f; }

static bool run_job(spool_pool *pool, cudaStream_t s, float *acc, const Options &o, int j) {
  const size_t n = job_length(o, j);
  spool_scope *job = nullptr;
  SPOOL_CHECK(spool_scope_begin(pool, s, &job));
  bool ok = false;
  do { // on any failure the scope still ends below
    void *a = nullptr, *b = nullptr, *prod = nullptr;
    if (!spool_ok(spool_scope_alloc(job, &a, n * sizeof(float)), "scope alloc a", __LINE__)) break;
    if (!spool_ok(spool_scope_alloc(job, &b, n * sizeof(float)), "scope alloc b", __LINE__)) break;
    if (!spool_ok(spool_scope_alloc(job, &prod, n * sizeof(float)), "scope alloc", __LINE__)) break;
    fill<<<blocks_for(n), 256, 0, s>>>((float *)a, n, (float)(j % 16));
    // The nested scope: a temporary only this step needs, gone before the job's end.
    spool_scope *step = nullptr;
    if (!spool_ok(spool_scope_begin(pool, s, &step), "spool_scope_begin(step)", __LINE__)) break;
    void *two = nullptr;
    bool step_ok = spool_ok(spool_scope_alloc(step, &two, n * sizeof(float)), "alloc", __LINE__);
    if (step_ok) {
      fill<<<blocks_for(n), 256, 0, s>>>((float *)two, n, 2.0f);
      mul<<<blocks_for(n), 256, 0, s>>>((float *)b, (const float *)two, (const float *)two, n);
    } // b = 4; below, prod = a * b, then halved: j % 16 * 2
    step_ok = spool_ok(spool_scope_end(step), "spool_scope_end(step)", __LINE__) && step_ok;
    if (!step_ok) break;
    mul<<<blocks_for(n), 256, 0, s>>>((float *)prod, (const float *)a, (const float *)b, n);
    fill<<<blocks_for(n), 256, 0, s>>>((float *)a, n, 0.5f);
    mul<<<blocks_for(n), 256, 0, s>>>((float *)prod, (const float *)prod, (const float *)a, n);
    add_into<<<blocks_for(n), 256, 0, s>>>(acc, (const float *)prod, n);
    if (!cuda_ok(cudaGetLastError(), "the job's kernels", __LINE__)) break;
    ok = true;
  } while (0);
  return spool_ok(spool_scope_end(job), "spool_scope_end(job)", __LINE__) && ok;
}

static bool check(const Options &o, int lane, const float *host) {
  std::vector<double> want(o.elements, 0.0);
  for (int j = lane; j < o.jobs; j += o.streams)
    for (size_t i = 0; i < job_length(o, j); ++i) want[i] += job_value(j);
  for (size_t i = 0; i < o.elements; ++i) {
    if ((double)host[i] != want[i]) {
      std::fprintf(stderr, "scoped_streams: stream %d element %zu is %g, expected %g\n", lane, i,
                   (double)host[i], want[i]);
      return false;
    }
  }
  return true;
}

struct App {
  Options o;
  spool_pool *pool = nullptr;
  std::vector<cudaStream_t> streams;
  std::vector<float *> acc;
};

static bool run(App &app) {
  const Options &o = app.o;
  SPOOL_CHECK(spool_pool_create(&app.pool, nullptr));
  CUDA_CHECK(cudaSetDevice(spool_pool_device(app.pool)));
  for (int i = 0; i < o.streams; ++i) {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    app.streams.push_back(s);
    void *a = nullptr;
    SPOOL_CHECK(SPOOL_ALLOC(app.pool, &a, o.elements * sizeof(float), s));
    app.acc.push_back((float *)a);
    CUDA_CHECK(cudaMemsetAsync(a, 0, o.elements * sizeof(float), s));
  }
  std::printf("spool %s: %d jobs round-robin over %d streams, a scope per job with 3 temporaries "
              "(+1 in a nested scope) of %zu to %zu floats\n",
              spool_version_string(), o.jobs, o.streams, o.elements / 4, o.elements);
  const auto t0 = std::chrono::steady_clock::now();
  for (int j = 0; j < o.jobs; ++j)
    if (!run_job(app.pool, app.streams[(size_t)j % app.streams.size()],
                 app.acc[(size_t)j % app.acc.size()], o, j))
      return false;
  CUDA_CHECK(cudaDeviceSynchronize());
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<float> host(o.elements);
  for (int i = 0; i < o.streams; ++i) {
    CUDA_CHECK(cudaMemcpy(host.data(), app.acc[(size_t)i], o.elements * sizeof(float),
                          cudaMemcpyDeviceToHost));
    if (!check(o, i, host.data())) return false;
  }
  spool_stats st;
  SPOOL_CHECK(spool_stats_get(app.pool, &st));
  // The accumulators were the first allocations: misses, one per stream.
  const uint64_t temporaries = 4ull * (uint64_t)o.jobs;
  const uint64_t chunk_allocs = st.allocs - (uint64_t)o.streams;
  const uint64_t from_pool = st.cache_misses - (uint64_t)o.streams;
  std::printf("results: every accumulator checked, %.3f ms per job\n", 1e3 * sec / o.jobs);
  std::printf("temporaries handed out: %" PRIu64 ", chunks taken for them: %" PRIu64
              " (%" PRIu64 " from the stream caches, %" PRIu64 " from the pool)\n",
              temporaries, chunk_allocs, st.cache_hits, from_pool);
  std::printf("live now: %" PRIu64 " buffers (the accumulators); reserved peak %.1f MiB\n\n",
              st.buffers_in_use, (double)st.bytes_reserved_peak / (1 << 20));
  std::fflush(stdout);
  SPOOL_CHECK(spool_report(app.pool, stdout));
  std::fflush(stdout);
  if (st.buffers_in_use != (uint64_t)o.streams) {
    std::fprintf(stderr, "scoped_streams: %" PRIu64 " buffers live, expected the %d accumulators\n",
                 st.buffers_in_use, o.streams);
    return false;
  }
  return true;
}

static bool release(App &app) {
  bool ok = cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __LINE__);
  for (size_t i = 0; i < app.acc.size(); ++i)
    ok = spool_ok(spool_free(app.pool, app.acc[i], app.streams[i]), "spool_free(acc)", __LINE__) &&
         ok;
  for (cudaStream_t s : app.streams)
    ok = spool_ok(spool_stream_release(app.pool, s), "spool_stream_release", __LINE__) && ok;
  ok = spool_ok(spool_pool_destroy(app.pool), "spool_pool_destroy", __LINE__) && ok;
  for (cudaStream_t s : app.streams)
    ok = cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy", __LINE__) && ok;
  return ok;
}

static bool parse(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; ++i) {
    long v = i + 1 < argc ? std::strtol(argv[i + 1], nullptr, 10) : 0;
    if (!std::strcmp(argv[i], "--jobs") && v > 0 && v <= 10000000) o->jobs = (int)v;
    else if (!std::strcmp(argv[i], "--streams") && v > 0 && v <= 64) o->streams = (int)v;
    else if (!std::strcmp(argv[i], "--elements") && v >= 8 && v <= (1l << 28))
      o->elements = (size_t)v;
    else {
      std::fprintf(stderr, "usage: scoped_streams [--jobs N] [--streams S] [--elements E]\n");
      return false;
    }
    ++i;
  }
  return true;
}

int main(int argc, char **argv) {
  App app;
  if (!parse(argc, argv, &app.o)) return 2;
  if (sample_no_device()) return 77;
  bool ok = run(app);
  ok = release(app) && ok;
  return ok ? 0 : 1;
}
