// config_tuning: one workload, three pool configs, and the stats that show why the thresholds
// matter.
//
// The workload: rounds of allocate / use / free on two streams (sizes from 4 KiB to 16 MiB,
// log-uniform, the same sequence for every config; each stream keeps its last 16 buffers live),
// with a device synchronize after each round,
// as a program that synchronizes once per batch or per frame does. It runs under
//
//   release_threshold=0, cache=off   what cudaMallocAsync's default pool does: at every
//                                    synchronize the pool gives its free memory back to the
//                                    driver, so the next round maps it again
//   cache=off                        release_threshold=max (spool's default): the pool keeps it
//   (spool's defaults)               the same, plus the per-stream caches in front of the pool
//
// and prints, per config, the host time per alloc+free pair, what the pool still reserves right
// after each synchronize, its peak, and how many allocations reached the pool. Configs can be
// replaced on the command line: config_tuning "text 1" "text 2" ... (config text, as SPOOL_CONF).
//
// Usage: config_tuning [--rounds N] [config text ...]
// Exit status: 0 ok, 1 a failed call, 2 bad usage, 77 no CUDA device.

#define SAMPLE_NAME "config_tuning"
#include "sample_check.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

constexpr int kPairs = 256;   // alloc+free pairs per stream per round
constexpr int kStreams = 2;
constexpr int kLive = 16;     // buffers each stream keeps live (freed oldest first)

static uint64_t next_random(uint64_t *x) { // xorshift64*
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 2685821657736338717ull;
}

// 4 KiB to 16 MiB, log-uniform.
static size_t random_size(uint64_t *x) {
  const unsigned bits = 12 + (unsigned)(next_random(x) % 13); // 2^12 .. 2^24
  const size_t lo = (size_t)1 << (bits - 1);
  return lo + (size_t)(next_random(x) % lo) + 1;
}

struct Result {
  double ns_per_pair = 0;
  double reserved_after_sync = 0; // bytes, averaged over the rounds
  uint64_t reserved_peak = 0, allocs = 0, hits = 0, misses = 0;
};

// The workload on a pool made from text; the streams are the caller's.
static bool run_config(const char *text, int rounds, const cudaStream_t *streams, Result *r) {
  spool_config cfg;
  spool_config_init(&cfg);
  SPOOL_CHECK(spool_config_parse(&cfg, text));
  spool_pool *pool = nullptr;
  SPOOL_CHECK(spool_pool_create(&pool, &cfg));
  bool ok = true;
  uint64_t rng = 12345;
  double alloc_sec = 0, reserved_sum = 0;
  void *live[kStreams][kLive] = {};
  for (int round = 0; round < rounds && ok; ++round) {
    // Each stream keeps its last kLive buffers; the round ends with all of them freed.
    for (int i = 0; i < (kPairs + kLive) * kStreams && ok; ++i) {
      const int k = i % kStreams, slot = (i / kStreams) % kLive;
      const cudaStream_t s = streams[k];
      const auto t0 = std::chrono::steady_clock::now();
      if (live[k][slot]) ok = spool_ok(spool_free(pool, live[k][slot], s), "spool_free", __LINE__);
      live[k][slot] = nullptr;
      const bool more = i < kPairs * kStreams;
      const size_t size = more ? random_size(&rng) : 0;
      if (ok && more)
        ok = spool_ok(spool_alloc(pool, &live[k][slot], size, s), "spool_alloc", __LINE__);
      alloc_sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // The "kernel": something on the stream that uses the buffer.
      if (ok && more)
        ok = cuda_ok(cudaMemsetAsync(live[k][slot], 1, size < 4096 ? size : 4096, s),
                     "cudaMemsetAsync", __LINE__);
    }
    // The synchronize after each round: where release_threshold decides what the pool keeps.
    ok = ok && cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __LINE__);
    spool_stats st;
    ok = ok && spool_ok(spool_stats_get(pool, &st), "spool_stats_get", __LINE__);
    if (ok) reserved_sum += (double)st.bytes_reserved;
  }
  spool_stats st;
  if (ok) ok = spool_ok(spool_stats_get(pool, &st), "spool_stats_get", __LINE__);
  if (ok) {
    r->ns_per_pair = 1e9 * alloc_sec / ((double)rounds * kPairs * kStreams);
    r->reserved_after_sync = reserved_sum / rounds;
    r->reserved_peak = st.bytes_reserved_peak;
    r->allocs = st.allocs;
    r->hits = st.cache_hits;
    r->misses = st.cache_misses;
  }
  for (int k = 0; k < kStreams; ++k) // after a failure: what is still live
    for (int j = 0; j < kLive; ++j)
      if (live[k][j])
        ok = spool_ok(spool_free(pool, live[k][j], streams[k]), "spool_free", __LINE__) && ok;
  for (int i = 0; i < kStreams; ++i)
    ok = spool_ok(spool_stream_release(pool, streams[i]), "spool_stream_release", __LINE__) && ok;
  return spool_ok(spool_pool_destroy(pool), "spool_pool_destroy", __LINE__) && ok;
}

static double mib(double b) { return b / (1 << 20); }

static void explain(void) {
  std::printf(
      "\nWhy it matters:\n"
      "- release_threshold=0 gives free memory back to the driver at every synchronize (the\n"
      "  'after sync' column drops to what is in use); the next round maps it again, and the\n"
      "  host time per pair shows it. Raise the threshold to what a round needs.\n"
      "- release_threshold=max keeps it: after the first round the pool serves from what it\n"
      "  holds. Bound it with spool_trim or max_size when other code needs the memory.\n"
      "- The stream caches answer a stream's repeated sizes without a CUDA call: the pool sees\n"
      "  only the misses. They hold up to front_limit per stream, and the heap gives idle chunks back.\n");
}

int main(int argc, char **argv) {
  int rounds = 40;
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
      if (rounds < 1 || rounds > 100000) {
        std::fprintf(stderr, "config_tuning: --rounds needs 1 to 100000\n");
        return 2;
      }
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: config_tuning [--rounds N] [config text ...]\n");
      return 2;
    } else {
      configs.push_back(argv[i]);
    }
  }
  if (configs.empty())
    configs = {"release_threshold=0, cache=off", "cache=off", "" /* spool's defaults */};

  if (sample_no_device()) return 77;

  cudaStream_t streams[kStreams] = {};
  bool ok = true;
  for (int i = 0; i < kStreams && ok; ++i)
    ok = cuda_ok(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags", __LINE__);
  std::printf("spool %s: %d rounds x %d streams x %d alloc+free pairs (4 KiB .. 16 MiB), a "
              "device synchronize after each round\n\n",
              spool_version_string(), rounds, kStreams, kPairs);
  std::printf("%-34s %12s %16s %14s %10s %10s\n", "config", "ns/pair", "after sync MiB",
              "peak res. MiB", "pool alloc", "cache hit");
  for (const std::string &c : configs) {
    if (!ok) break;
    Result r;
    ok = run_config(c.c_str(), rounds, streams, &r);
    if (!ok) break;
    // Allocations that reached the pool: all of them without caches, the misses with them.
    const uint64_t pool_allocs = r.hits + r.misses ? r.misses : r.allocs;
    std::printf("%-34s %12.0f %16.1f %14.1f %10" PRIu64 " %9.1f%%\n",
                c.empty() ? "(spool's defaults)" : c.c_str(), r.ns_per_pair,
                mib(r.reserved_after_sync), mib((double)r.reserved_peak), pool_allocs,
                r.allocs ? 100.0 * (double)r.hits / (double)r.allocs : 0.0);
    std::fflush(stdout);
  }
  if (ok) explain();
  for (cudaStream_t s : streams)
    if (s) ok = cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy", __LINE__) && ok;
  return ok ? 0 : 1;
}
