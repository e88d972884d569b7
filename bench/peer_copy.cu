// peer_copy: copying from device 0 to device 1 through spool pool memory, against a plain
// cudaMemcpyPeer between cudaMalloc'd buffers.
//
// Rows, each at 1 MiB, 64 MiB and 256 MiB, device 0 -> device 1:
//   plain       cudaMemcpyPeerAsync, cudaMalloc buffers, cudaDeviceEnablePeerAccess both ways
//   plain-nopeer  the same without cudaDeviceEnablePeerAccess (the driver picks its path)
//   pool        cudaMemcpyPeerAsync, buffers from spool pools that give each other access
//               (peer_access=[1] on device 0's pool, [0] on device 1's)
//   pool-noacc  the same from pools without peer access
//   pool-kernel a copy kernel on device 1 that loads device 0's pool memory directly and
//               stores into device 1's pool
// Every copy is queued on one stream of device 1 and timed with events around `reps` copies;
// the best of `runs` runs is reported as GB/s (10^9 bytes per second). A row whose copy fails
// says so and the program goes on (the failure is part of the answer).
//
// Usage: peer_copy [--reps N] [--runs N] [--quick]   (defaults 20 copies, 5 runs; --quick: 3, 2)
// Output: a table, then one CSV line per row and size ("csv,row,bytes,gbps").
// Exit status: 0 ok, 1 a setup call failed, 2 bad usage, 77 fewer than two devices, or the two
// cannot reach each other (cudaDeviceCanAccessPeer).

#include <spool/spool.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

const size_t SIZES[] = {(size_t)1 << 20, (size_t)64 << 20, (size_t)256 << 20};
const int NSIZES = 3;

bool cuda_ok(cudaError_t err, const char *call, int line) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "peer_copy: line %d: %s failed: %s\n", line, call, cudaGetErrorName(err));
  return false;
}
bool spool_ok(spool_status st, const char *call, int line) {
  if (st == SPOOL_OK) return true;
  std::fprintf(stderr, "peer_copy: line %d: %s failed: %s: %s\n", line, call,
               spool_status_name(st), spool_last_error());
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

__global__ void copy_words(uint4 *dst, const uint4 *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

enum how { PEER_COPY, KERNEL };

struct setup {
  cudaStream_t s1 = nullptr; // device 1: every copy is queued here
  cudaEvent_t start = nullptr, stop = nullptr;
  int reps = 20, runs = 5;
};

// Best GB/s over runs of reps copies of bytes from src (device 0) to dst (device 1); a negative
// value when the copy fails (its error is printed).
double measure(const setup &su, void *dst, const void *src, size_t bytes, how h) {
  float best_ms = 0;
  for (int r = 0; r < su.runs; r++) {
    cudaError_t err = cudaEventRecord(su.start, su.s1);
    for (int i = 0; i < su.reps && err == cudaSuccess; i++) {
      if (h == PEER_COPY) {
        err = cudaMemcpyPeerAsync(dst, 1, src, 0, bytes, su.s1);
      } else {
        copy_words<<<1024, 256, 0, su.s1>>>(static_cast<uint4 *>(dst),
                                           static_cast<const uint4 *>(src), bytes / sizeof(uint4));
        err = cudaGetLastError();
      }
    }
    if (err == cudaSuccess) err = cudaEventRecord(su.stop, su.s1);
    if (err == cudaSuccess) err = cudaEventSynchronize(su.stop);
    float ms = 0;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, su.start, su.stop);
    if (err != cudaSuccess) {
      std::fprintf(stderr, "peer_copy: %s of %zu bytes failed: %s\n",
                   h == PEER_COPY ? "cudaMemcpyPeerAsync" : "the copy kernel", bytes,
                   cudaGetErrorName(err));
      cudaGetLastError();
      return -1;
    }
    if (r == 0 || ms < best_ms) best_ms = ms;
  }
  return (double)bytes * su.reps / (best_ms * 1e-3) / 1e9;
}

struct row {
  const char *name;
  double gbps[NSIZES];
};

void print_row(const row &r) {
  std::printf("%-13s", r.name);
  for (int i = 0; i < NSIZES; i++) {
    if (r.gbps[i] < 0) std::printf("  %10s", "failed");
    else std::printf("  %10.1f", r.gbps[i]);
  }
  std::printf("\n");
}

// cudaMalloc buffers, with or without peer access enabled.
bool plain_rows(const setup &su, row *with, row *without) {
  size_t biggest = SIZES[NSIZES - 1];
  void *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaMalloc(&src, biggest));
  CUDA_CHECK(cudaMemset(src, 1, biggest));
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaMalloc(&dst, biggest));
  for (int i = 0; i < NSIZES; i++) without->gbps[i] = measure(su, dst, src, SIZES[i], PEER_COPY);
  CUDA_CHECK(cudaDeviceEnablePeerAccess(0, 0)); // device 1 may reach device 0, and back
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaDeviceEnablePeerAccess(1, 0));
  for (int i = 0; i < NSIZES; i++) with->gbps[i] = measure(su, dst, src, SIZES[i], PEER_COPY);
  CUDA_CHECK(cudaDeviceDisablePeerAccess(1));
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaDeviceDisablePeerAccess(0));
  CUDA_CHECK(cudaFree(dst));
  CUDA_CHECK(cudaFree(src));
  return true;
}

// Buffers from spool pools; with access, the kernel row too.
bool pool_rows(const setup &su, bool access, row *copy, row *kernel) {
  size_t biggest = SIZES[NSIZES - 1];
  spool_config c0, c1;
  spool_config_init(&c0);
  spool_config_init(&c1);
  SPOOL_CHECK(spool_config_parse(&c0, access ? "device=0, peer_access=[1]" : "device=0"));
  SPOOL_CHECK(spool_config_parse(&c1, access ? "device=1, peer_access=[0]" : "device=1"));
  spool_pool *p0 = nullptr, *p1 = nullptr;
  SPOOL_CHECK(spool_pool_create(&p0, &c0));
  SPOOL_CHECK(spool_pool_create(&p1, &c1));
  cudaStream_t s0 = nullptr;
  void *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  SPOOL_CHECK(spool_alloc(p0, &src, biggest, s0));
  CUDA_CHECK(cudaMemsetAsync(src, 1, biggest, s0));
  CUDA_CHECK(cudaStreamSynchronize(s0));
  CUDA_CHECK(cudaSetDevice(1));
  SPOOL_CHECK(spool_alloc(p1, &dst, biggest, su.s1));
  for (int i = 0; i < NSIZES; i++) copy->gbps[i] = measure(su, dst, src, SIZES[i], PEER_COPY);
  for (int i = 0; access && i < NSIZES; i++)
    kernel->gbps[i] = measure(su, dst, src, SIZES[i], KERNEL);
  SPOOL_CHECK(spool_free(p1, dst, su.s1));
  SPOOL_CHECK(spool_free(p0, src, s0));
  CUDA_CHECK(cudaStreamSynchronize(su.s1));
  CUDA_CHECK(cudaStreamSynchronize(s0));
  CUDA_CHECK(cudaStreamDestroy(s0));
  SPOOL_CHECK(spool_pool_destroy(p1));
  SPOOL_CHECK(spool_pool_destroy(p0));
  return true;
}

int check_devices() {
  int n = 0, can01 = 0, can10 = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("peer_copy: skipped: needs two devices (%d visible)\n", n);
    return 77;
  }
  if (!cuda_ok(cudaDeviceCanAccessPeer(&can10, 1, 0), "cudaDeviceCanAccessPeer", __LINE__) ||
      !cuda_ok(cudaDeviceCanAccessPeer(&can01, 0, 1), "cudaDeviceCanAccessPeer", __LINE__))
    return 1;
  if (!can01 || !can10) {
    std::printf("peer_copy: skipped: devices 0 and 1 are not peers\n");
    return 77;
  }
  cudaDeviceProp p0, p1;
  if (!cuda_ok(cudaGetDeviceProperties(&p0, 0), "cudaGetDeviceProperties", __LINE__) ||
      !cuda_ok(cudaGetDeviceProperties(&p1, 1), "cudaGetDeviceProperties", __LINE__))
    return 1;
  std::printf("peer_copy: device 0 (%s) -> device 1 (%s)\n", p0.name, p1.name);
  return 0;
}

bool run(setup &su) {
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaStreamCreateWithFlags(&su.s1, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&su.start));
  CUDA_CHECK(cudaEventCreate(&su.stop));
  row rows[5] = {{"plain", {}}, {"plain-nopeer", {}}, {"pool", {}}, {"pool-noacc", {}},
                 {"pool-kernel", {}}};
  if (!plain_rows(su, &rows[0], &rows[1]) || !pool_rows(su, true, &rows[2], &rows[4]) ||
      !pool_rows(su, false, &rows[3], nullptr))
    return false;
  std::printf("GB/s, best of %d runs of %d copies   %10s  %10s  %10s\n", su.runs, su.reps,
              "1 MiB", "64 MiB", "256 MiB");
  for (const row &r : rows) print_row(r);
  std::printf("csv,row,bytes,gbps\n");
  for (const row &r : rows)
    for (int i = 0; i < NSIZES; i++) std::printf("csv,%s,%zu,%.2f\n", r.name, SIZES[i], r.gbps[i]);
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaEventDestroy(su.stop));
  CUDA_CHECK(cudaEventDestroy(su.start));
  CUDA_CHECK(cudaStreamDestroy(su.s1));
  return true;
}

} // namespace

int main(int argc, char **argv) {
  setup su;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) su.reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) su.runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) su.reps = 3, su.runs = 2;
    else {
      std::fprintf(stderr, "usage: peer_copy [--reps N] [--runs N] [--quick]\n");
      return 2;
    }
  }
  if (su.reps < 1 || su.runs < 1) {
    std::fprintf(stderr, "peer_copy: --reps and --runs must be at least 1\n");
    return 2;
  }
  int rc = check_devices();
  if (rc != 0) return rc;
  return run(su) ? 0 : 1;
}
