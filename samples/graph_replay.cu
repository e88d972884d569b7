// graph_replay: spool allocations and scopes captured into a CUDA graph, replayed many times.
//
// A three-kernel step is captured once, in global capture mode (the strictest: no call that
// could synchronize or touch the pool's attributes is allowed meanwhile): its temporaries are a
// spool_alloc / spool_free pair and a scope with two pieces. Under capture spool bypasses its
// stream caches, so every temporary becomes a graph allocation that the graph itself frees; the
// graph is then replayed, each launch on new input, and every result is checked. The program
// also shows the rule for memory allocated outside the capture: freeing it inside is refused
// with SPOOL_ERR_INVALID (CUDA itself would refuse and invalidate the capture), the capture goes
// on, and the buffer is freed after it.
//
// Usage: graph_replay [--replays N] [--elements E]
// Exit status: 0 ok, 1 a failed call or a wrong result, 2 bad usage, 77 no CUDA device.

#define SAMPLE_NAME "graph_replay"
#include "sample_check.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }

__global__ void scale(float *out, const float *in, size_t n, float k) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * k;
}

__global__ void add(float *out, const float *a, const float *b, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void set_input(float *in, size_t n, int launch) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) in[i] = (float)(launch % 1000) + (float)(i % 7);
}

struct Options {
  int replays = 1000;
  size_t elements = 1 << 18;
};

// The captured step: out = 2*in + 3*in = 5*in, through three temporaries.
static bool step(spool_pool *pool, cudaStream_t s, const float *in, float *out, size_t n) {
  void *t = nullptr;
  SPOOL_CHECK(spool_alloc(pool, &t, n * sizeof(float), s));
  scale<<<blocks_for(n), 256, 0, s>>>((float *)t, in, n, 2.0f);
  spool_scope *scope = nullptr;
  SPOOL_CHECK(spool_scope_begin(pool, s, &scope));
  void *u = nullptr, *v = nullptr;
  bool ok = spool_ok(spool_scope_alloc(scope, &u, n * sizeof(float)), "scope alloc", __LINE__) &&
            spool_ok(spool_scope_alloc(scope, &v, n * sizeof(float)), "scope alloc", __LINE__);
  if (ok) {
    scale<<<blocks_for(n), 256, 0, s>>>((float *)u, in, n, 3.0f);
    add<<<blocks_for(n), 256, 0, s>>>((float *)v, (const float *)t, (const float *)u, n);
    cudaError_t e = cudaMemcpyAsync(out, v, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    ok = cuda_ok(e, "cudaMemcpyAsync", __LINE__) &&
         cuda_ok(cudaGetLastError(), "the step's kernels", __LINE__);
  }
  ok = spool_ok(spool_scope_end(scope), "spool_scope_end", __LINE__) && ok;
  return spool_ok(spool_free(pool, t, s), "spool_free(t)", __LINE__) && ok;
}

static bool check(const std::vector<float> &host, int launch) {
  for (size_t i = 0; i < host.size(); ++i) {
    const float want = 5.0f * ((float)(launch % 1000) + (float)(i % 7));
    if (host[i] != want) {
      std::fprintf(stderr, "graph_replay: launch %d element %zu is %g, expected %g\n", launch, i,
                   (double)host[i], (double)want);
      return false;
    }
  }
  return true;
}

struct App {
  Options o;
  spool_pool *pool = nullptr;
  cudaStream_t s = nullptr;
  float *in = nullptr, *out = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

// Memory from before the capture, freed inside it: refused, capture intact (for every buffer,
// cached or not, unless capture_check=off).
static bool show_outside_free(App &app) {
  void *before = nullptr;
  SPOOL_CHECK(spool_alloc(app.pool, &before, 4096, app.s));
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(app.s, cudaStreamCaptureModeGlobal));
  spool_status st = spool_free(app.pool, before, app.s);
  std::string words = spool_last_error();
  CUDA_CHECK(cudaStreamEndCapture(app.s, &g));
  CUDA_CHECK(cudaGraphDestroy(g));
  std::printf("freeing memory allocated before the capture, inside it: %s\n  %s\n",
              spool_status_name(st), st == SPOOL_OK ? "" : words.c_str());
  std::printf("the capture ended normally; the buffer is freed after it\n\n");
  SPOOL_CHECK(spool_free(app.pool, before, app.s));
  return st == SPOOL_ERR_INVALID;
}

static bool run(App &app) {
  const Options &o = app.o;
  const size_t n = o.elements;
  spool_config cfg; // the defaults, SPOOL_CONF on top
  spool_config_init(&cfg);
  SPOOL_CHECK(spool_config_from_env(&cfg));
  SPOOL_CHECK(spool_pool_create(&app.pool, &cfg));
  CUDA_CHECK(cudaSetDevice(spool_pool_device(app.pool)));
  CUDA_CHECK(cudaStreamCreateWithFlags(&app.s, cudaStreamNonBlocking));
  void *p = nullptr;
  SPOOL_CHECK(spool_alloc(app.pool, &p, n * sizeof(float), app.s));
  app.in = (float *)p;
  SPOOL_CHECK(spool_alloc(app.pool, &p, n * sizeof(float), app.s));
  app.out = (float *)p;
  std::printf("spool %s: a step with a spool_alloc/spool_free pair and a scope of two pieces "
              "(%zu floats each), captured once, replayed %d times\n\n",
              spool_version_string(), n, o.replays);
  if (!show_outside_free(app)) return false;

  CUDA_CHECK(cudaStreamBeginCapture(app.s, cudaStreamCaptureModeGlobal));
  const bool captured = step(app.pool, app.s, app.in, app.out, n);
  CUDA_CHECK(cudaStreamEndCapture(app.s, &app.graph));
  if (!captured) return false;
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(app.graph, nullptr, &nodes));
  CUDA_CHECK(cudaGraphInstantiate(&app.exec, app.graph, 0));
  spool_stats st;
  SPOOL_CHECK(spool_stats_get(app.pool, &st));
  std::printf("captured in global mode: %zu nodes; spool buffers live after the capture: %" PRIu64
              " (in and out: the graph frees its own)\n", nodes, st.buffers_in_use);

  std::vector<float> host(n);
  double launch_sec = 0;
  for (int i = 0; i < o.replays; ++i) {
    set_input<<<blocks_for(n), 256, 0, app.s>>>(app.in, n, i);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemsetAsync(app.out, 0, n * sizeof(float), app.s));
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaGraphLaunch(app.exec, app.s));
    launch_sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CUDA_CHECK(cudaMemcpyAsync(host.data(), app.out, n * sizeof(float), cudaMemcpyDeviceToHost,
                               app.s));
    CUDA_CHECK(cudaStreamSynchronize(app.s));
    if (!check(host, i)) return false;
  }
  std::printf("replayed %d times, every result checked (out = 5 * in): ok; %.2f us of host time "
              "per cudaGraphLaunch\n\n", o.replays, 1e6 * launch_sec / o.replays);
  std::fflush(stdout);
  SPOOL_CHECK(spool_report(app.pool, stdout));
  std::fflush(stdout);
  return true;
}

static bool release(App &app) {
  bool ok = true;
  if (app.s) ok = cuda_ok(cudaStreamSynchronize(app.s), "cudaStreamSynchronize", __LINE__);
  if (app.exec)
    ok = cuda_ok(cudaGraphExecDestroy(app.exec), "cudaGraphExecDestroy", __LINE__) && ok;
  if (app.graph) ok = cuda_ok(cudaGraphDestroy(app.graph), "cudaGraphDestroy", __LINE__) && ok;
  if (app.in) ok = spool_ok(spool_free(app.pool, app.in, app.s), "spool_free(in)", __LINE__) && ok;
  if (app.out)
    ok = spool_ok(spool_free(app.pool, app.out, app.s), "spool_free(out)", __LINE__) && ok;
  if (app.s && app.pool)
    ok = spool_ok(spool_stream_release(app.pool, app.s), "spool_stream_release", __LINE__) && ok;
  ok = spool_ok(spool_pool_destroy(app.pool), "spool_pool_destroy", __LINE__) && ok;
  if (app.s) ok = cuda_ok(cudaStreamDestroy(app.s), "cudaStreamDestroy", __LINE__) && ok;
  return ok;
}

static bool parse(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; ++i) {
    long v = i + 1 < argc ? std::strtol(argv[i + 1], nullptr, 10) : 0;
    if (!std::strcmp(argv[i], "--replays") && v > 0 && v <= 100000000) o->replays = (int)v;
    else if (!std::strcmp(argv[i], "--elements") && v > 0 && v <= (1l << 28))
      o->elements = (size_t)v;
    else {
      std::fprintf(stderr, "usage: graph_replay [--replays N] [--elements E]\n");
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
