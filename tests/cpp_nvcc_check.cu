// Compiles include/spool/spool.hpp with nvcc (tests/CMakeLists.txt: object target
// cpp_nvcc_check, never linked or run): the header must build in a .cu file next to kernels,
// with the caller's site recorded through __builtin_FILE / __builtin_LINE under nvcc as well.
#include <spool/spool.hpp>

#include <cuda_runtime.h>

#if !defined(SPOOL_HPP_BUILTIN_SITE)
#error "spool.hpp: expected __builtin_FILE call sites under nvcc"
#endif

namespace {

__global__ void fill(float *out, std::size_t n, float value) {
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = value;
}

} // namespace

// Not called: it only has to compile (a pool, a buffer, a launch, a hand-off, the errors).
float cpp_nvcc_check(cudaStream_t stream, cudaStream_t other) {
  try {
    spool::pool pool{spool::config{}.parse("release_threshold=64MiB").from_env()};
    spool::buffer<float> buf = pool.alloc<float>(1024, stream);
    fill<<<4, 256, 0, stream>>>(buf.data(), buf.size(), 1.0f);
    auto moved = std::move(buf);
    moved.set_stream(other);
    auto other_buf = SPOOL_POOL_ALLOC(pool, int, 16, other);
    other_buf.reset();
    {
      spool::scope tmp = pool.begin_scope(stream);
      float *t = tmp.alloc<float>(256);
      fill<<<1, 256, 0, stream>>>(t, 256, 2.0f);
      spool::batch b = pool.alloc_batch({64, 128}, stream);
      fill<<<1, 32, 0, stream>>>(b.get<float>(1), 32, 3.0f);
    }
    return static_cast<float>(pool.stats().buffers_in_use);
  } catch (const spool::error &e) {
    return -static_cast<float>(e.status());
  }
}
