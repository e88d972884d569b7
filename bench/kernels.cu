// The harness's kernels (see kernels.h). The pipeline kernels are those of samples/pipeline.cu,
// copied rather than shared so that the sample stays one file a user can copy; keep the two in
// step when either changes, so that the pipeline here is the one the demo runs.

#include "kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

// ---- touch --------------------------------------------------------------------------------------

__global__ void touch(uint32_t *first, uint32_t *last, uint32_t v) {
  if (threadIdx.x == 0) *first = v;
  if (threadIdx.x == 1) *last = v;
}

extern "C" cudaError_t bench_touch(void *p, size_t n, cudaStream_t s) {
  uint8_t *b = static_cast<uint8_t *>(p);
  touch<<<1, 32, 0, s>>>(reinterpret_cast<uint32_t *>(b),
                         reinterpret_cast<uint32_t *>(b + (n - 4) / 4 * 4), (uint32_t)n);
  return cudaGetLastError();
}

// ---- the five-kernel image pipeline (from samples/pipeline.cu) ----------------------------------

namespace {

// Binomial weights (1 8 28 56 70 56 28 8 1) / 256: a Gaussian of sigma sqrt(2).
constexpr int kBlurRadius = 4;
__constant__ float c_taps[2 * kBlurRadius + 1] = {
    1 / 256.f, 8 / 256.f, 28 / 256.f, 56 / 256.f, 70 / 256.f, 56 / 256.f, 28 / 256.f, 8 / 256.f,
    1 / 256.f};

// Edges weaker than this share of the frame's strongest edge are set to 0 in the output.
constexpr float kThreshold = 0.25f;

const dim3 kBlock(32, 8);  // 256 threads, a multiple of 32 as block_reduce needs

dim3 grid_for(int w, int h) { return dim3((unsigned)((w + 31) / 32), (unsigned)((h + 7) / 8)); }

__device__ __forceinline__ uint32_t hash32(uint32_t x) {  // lowbias32
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {  // splitmix64
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct MaxOp {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};
struct SumOp {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return a + b;
  }
};

// Reduces v over the block; valid in thread (0,0). Every thread of the block must call it.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T partial[32];
  const unsigned tid = threadIdx.y * blockDim.x + threadIdx.x;
  const unsigned lane = tid & 31u, warp = tid >> 5;
  const unsigned warps = (blockDim.x * blockDim.y) >> 5;
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : T{};
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  return v;
}

// The input: a test card that changes every frame, so that blur and Sobel have edges.
__global__ void synth_frame(uint8_t *rgb, int w, int h, int frame, int cx, int cy, int r) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const uint32_t noise =
      hash32((uint32_t)x * 0x9e3779b1u ^ (uint32_t)y * 0x85ebca77u ^
             (uint32_t)frame * 0xc2b2ae3du) & 15u;
  const bool tile = (((x + 4 * frame) >> 6) ^ (y >> 6)) & 1;
  const long long dx = x - cx, dy = y - cy;
  const bool disc = dx * dx + dy * dy <= (long long)r * r;
  uint8_t *p = rgb + 3 * ((size_t)y * w + x);
  if (disc) {
    p[0] = (uint8_t)(250 - noise);
    p[1] = (uint8_t)(220 - noise);
    p[2] = (uint8_t)(60 + noise);
  } else {
    p[0] = (uint8_t)(x * 191 / max(w - 1, 1) + (tile ? 48 : 0) + noise);
    p[1] = (uint8_t)(y * 191 / max(h - 1, 1) + (tile ? 48 : 0) + noise);
    p[2] = (uint8_t)((tile ? 160 : 32) + noise);
  }
}

__global__ void luma(const uint8_t *rgb, float *lum, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const size_t i = (size_t)y * w + x;
  const uint8_t *p = rgb + 3 * i;
  lum[i] = (0.2126f * p[0] + 0.7152f * p[1] + 0.0722f * p[2]) * (1.0f / 255.0f);
}

__global__ void blur_h(const float *src, float *dst, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const float *row = src + (size_t)y * w;
  float acc = 0.f;
#pragma unroll
  for (int k = -kBlurRadius; k <= kBlurRadius; ++k)
    acc += c_taps[k + kBlurRadius] * row[min(max(x + k, 0), w - 1)];
  dst[(size_t)y * w + x] = acc;
}

__global__ void blur_v(const float *src, float *dst, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float acc = 0.f;
#pragma unroll
  for (int k = -kBlurRadius; k <= kBlurRadius; ++k)
    acc += c_taps[k + kBlurRadius] * src[(size_t)min(max(y + k, 0), h - 1) * w + x];
  dst[(size_t)y * w + x] = acc;
}

// Magnitudes are >= 0, and non-negative floats order like their bits read as unsigned ints, so
// an integer atomicMax on the bits is an exact float max.
__global__ void sobel(const float *src, float *grad, unsigned *peak, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  float m = 0.f;
  if (x < w && y < h) {
    auto at = [=](int dx, int dy) {
      const int xx = min(max(x + dx, 0), w - 1), yy = min(max(y + dy, 0), h - 1);
      return src[(size_t)yy * w + xx];
    };
    const float gx =
        (at(1, -1) + 2.f * at(1, 0) + at(1, 1)) - (at(-1, -1) + 2.f * at(-1, 0) + at(-1, 1));
    const float gy =
        (at(-1, 1) + 2.f * at(0, 1) + at(1, 1)) - (at(-1, -1) + 2.f * at(0, -1) + at(1, -1));
    m = sqrtf(gx * gx + gy * gy);
    grad[(size_t)y * w + x] = m;
  }
  const unsigned block_peak = block_reduce(__float_as_uint(m), MaxOp{});
  if (threadIdx.x == 0 && threadIdx.y == 0) atomicMax(peak, block_peak);
}

__global__ void normalise(const float *grad, const unsigned *peak, uint8_t *out,
                          unsigned long long *sum, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  unsigned long long hsh = 0;
  if (x < w && y < h) {
    const size_t i = (size_t)y * w + x;
    const float p = __uint_as_float(*peak);
    const float v = p > 0.f ? grad[i] / p : 0.f;
    const uint8_t o = v < kThreshold ? 0 : (uint8_t)fminf(v * 255.f + 0.5f, 255.f);
    out[i] = o;
    hsh = mix64(((unsigned long long)i << 8) | o);
  }
  hsh = block_reduce(hsh, SumOp{});
  if (threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(sum, hsh);
}

}  // namespace

extern "C" cudaError_t bench_synth(uint8_t *rgb, int w, int h, int frame, cudaStream_t s) {
  const double a = 0.05 * frame;  // the disc's orbit, on the host so that the kernel is integer
  const int cx = (int)(w * (0.5 + 0.3 * std::cos(a))), cy = (int)(h * (0.5 + 0.3 * std::sin(a)));
  synth_frame<<<grid_for(w, h), kBlock, 0, s>>>(rgb, w, h, frame, cx, cy,
                                                std::max(1, std::min(w, h) / 8));
  return cudaGetLastError();
}

extern "C" cudaError_t bench_luma(const uint8_t *rgb, float *lum, int w, int h, cudaStream_t s) {
  luma<<<grid_for(w, h), kBlock, 0, s>>>(rgb, lum, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_blur_h(const float *src, float *dst, int w, int h, cudaStream_t s) {
  blur_h<<<grid_for(w, h), kBlock, 0, s>>>(src, dst, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_blur_v(const float *src, float *dst, int w, int h, cudaStream_t s) {
  blur_v<<<grid_for(w, h), kBlock, 0, s>>>(src, dst, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_sobel(const float *src, float *grad, unsigned *peak, int w, int h,
                                   cudaStream_t s) {
  sobel<<<grid_for(w, h), kBlock, 0, s>>>(src, grad, peak, w, h);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_normalise(const float *grad, const unsigned *peak, uint8_t *out,
                                       unsigned long long *sum, int w, int h, cudaStream_t s) {
  normalise<<<grid_for(w, h), kBlock, 0, s>>>(grad, peak, out, sum, w, h);
  return cudaGetLastError();
}
