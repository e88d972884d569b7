// The five kernels of the image pipeline (and the frame generator), shared by the sample
// samples/pipeline.cu and the benchmark harness bench/kernels.cu, so that the benchmark's
// pipeline is the one the demo runs. Device code only; include from one .cu file per program.
#ifndef SPOOL_SAMPLES_PIPELINE_KERNELS_CUH
#define SPOOL_SAMPLES_PIPELINE_KERNELS_CUH

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

// Binomial weights (1 8 28 56 70 56 28 8 1) / 256: a Gaussian of sigma sqrt(2), exact in float,
// so the sum of the taps is exactly 1.
constexpr int kBlurRadius = 4;
__constant__ float c_taps[2 * kBlurRadius + 1] = {
    1 / 256.f, 8 / 256.f, 28 / 256.f, 56 / 256.f, 70 / 256.f, 56 / 256.f, 28 / 256.f, 8 / 256.f,
    1 / 256.f};

// Edges weaker than this share of the frame's strongest edge are set to 0 in the output.
constexpr float kThreshold = 0.25f;

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

// Reduces v over the block; the result is valid in thread (0,0). T{} must be op's identity (0
// for both uses here). Every thread of the block must call it, so kernels that use it do not
// return early for pixels outside the image. The block size must be a multiple of 32. Reducing
// in the block first leaves one global atomic per block instead of one per pixel.
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

// The input: a test card that changes every frame (colour ramps, a scrolling 64-pixel
// checkerboard, a disc orbiting the centre, a little noise), so that blur and Sobel have edges to
// work on and every frame's output, and so its checksum, is different.
__global__ void synth_frame(uint8_t *rgb, int w, int h, int frame, int cx, int cy, int r) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const uint32_t noise =
      hash32((uint32_t)x * 0x9e3779b1u ^ (uint32_t)y * 0x85ebca77u ^
             (uint32_t)frame * 0xc2b2ae3du) &
      15u;
  const bool tile = (((x + 4 * frame) >> 6) ^ (y >> 6)) & 1;
  const long long dx = x - cx, dy = y - cy;
  const bool disc = dx * dx + dy * dy <= (long long)r * r;
  uint8_t *p = rgb + 3 * ((size_t)y * w + x);
  if (disc) {
    p[0] = (uint8_t)(250 - noise);
    p[1] = (uint8_t)(220 - noise);
    p[2] = (uint8_t)(60 + noise);
  } else {  // at most 191 + 48 + 15 = 254: no overflow
    p[0] = (uint8_t)(x * 191 / max(w - 1, 1) + (tile ? 48 : 0) + noise);
    p[1] = (uint8_t)(y * 191 / max(h - 1, 1) + (tile ? 48 : 0) + noise);
    p[2] = (uint8_t)((tile ? 160 : 32) + noise);
  }
}

// 1: RGB8 -> luminance in [0, 1] (Rec. 709 weights).
__global__ void luma(const uint8_t *rgb, float *lum, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const size_t i = (size_t)y * w + x;
  const uint8_t *p = rgb + 3 * i;
  lum[i] = (0.2126f * p[0] + 0.7152f * p[1] + 0.0722f * p[2]) * (1.0f / 255.0f);
}

// 2: horizontal Gaussian; pixels beyond the border repeat the edge pixel.
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

// 3: vertical Gaussian, same border rule.
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

// 4: Sobel gradient magnitude, and the frame's largest magnitude into *peak (which the stream
// zeroed before). Magnitudes are >= 0, and non-negative floats order like their bit patterns read
// as unsigned ints, so an integer atomicMax on the bits is an exact float max.
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

// 5: magnitude / peak -> 8 bits, below kThreshold -> 0; and the checksum of the output frame into
// *sum (zeroed before the run): the sum of a hash of (pixel index, value) over all pixels, which
// does not depend on the order in which blocks add their parts.
__global__ void normalise(const float *grad, const unsigned *peak, uint8_t *out,
                          unsigned long long *sum, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  unsigned long long hsh = 0;
  if (x < w && y < h) {
    const size_t i = (size_t)y * w + x;
    const float p = __uint_as_float(*peak);
    const float v = p > 0.f ? grad[i] / p : 0.f;  // in [0, 1]
    const uint8_t o = v < kThreshold ? 0 : (uint8_t)fminf(v * 255.f + 0.5f, 255.f);
    out[i] = o;
    hsh = mix64(((unsigned long long)i << 8) | o);
  }
  hsh = block_reduce(hsh, SumOp{});
  if (threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(sum, hsh);
}

#endif  // SPOOL_SAMPLES_PIPELINE_KERNELS_CUH
