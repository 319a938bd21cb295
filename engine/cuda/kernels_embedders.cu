// The vision embedder's per-block kernels (kernels_embedders.h), one thread block per image block.
// Each thread only rereads the elements it wrote itself, so the row passes need no barriers of their
// own; the statistics are block sums in double, and every value is rounded where the CPU rounds it.
#include <cuda_bf16.h>

#include "engine/cuda/device_common.cuh"
#include "engine/cuda/kernels_embedders.h"

namespace layerpipe::cuda {
namespace {

constexpr int kThreads = 256;

// Mean and 1 / sqrt(var + eps) of the values `value(i)`, i < n, in double over two passes.
template <typename F>
__device__ __forceinline__ void LayerNormStats(F value, int64_t n, double eps, double* scratch, double* mean,
                                               double* inv) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += value(i);
  const double m = BlockSum(sum, scratch) / static_cast<double>(n);
  double var = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = value(i) - m;
    var += d * d;
  }
  *mean = m;
  *inv = 1.0 / sqrt(BlockSum(var, scratch) / static_cast<double>(n) + eps);
}

__device__ __forceinline__ float Normed(float x, double mean, double inv, float w, float b) {
  return static_cast<float>((x - mean) * inv * w + b);
}

__global__ void __launch_bounds__(kThreads) PatchNormKernel(PatchNormParams p) {
  __shared__ double scratch[32];
  const int64_t blk = blockIdx.x, bs = p.block;
  const int64_t row_values = bs * 3, n = bs * row_values, width = p.grid_w * bs;
  const uint8_t* origin = p.rgb + ((blk / p.grid_w) * bs * width + (blk % p.grid_w) * bs) * 3;
  // Pixels scaled to [0, 1] and kept fp32, as the CPU keeps them.
  auto pixel = [&](int64_t i) {
    return static_cast<float>(origin[(i / row_values) * width * 3 + i % row_values]) / 255.0f;
  };
  double mean, inv;
  LayerNormStats(pixel, n, p.eps, scratch, &mean, &inv);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    StoreAct(p.out, blk * n + i, Normed(pixel(i), mean, inv, p.weight[i], p.bias[i]), p.out_bf16);
  }
}

__global__ void __launch_bounds__(kThreads) VisionRowsKernel(VisionRowsParams p) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x, H = p.hidden;
  float* t = p.t + r * H;
  // pos_embedding axis 0 takes the block's column, axis 1 its row.
  const float* px = p.pos_embedding + ((r % p.grid_w) * 2 + 0) * H;
  const float* py = p.pos_embedding + ((r / p.grid_w) * 2 + 1) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) t[i] += p.dense_bias[i];
  auto at = [t](int64_t i) { return t[i]; };
  double mean, inv;
  LayerNormStats(at, H, p.ln_eps, scratch, &mean, &inv);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    t[i] = Normed(t[i], mean, inv, p.ln2_weight[i], p.ln2_bias[i]) + (px[i] + py[i]);
  }
  LayerNormStats(at, H, p.ln_eps, scratch, &mean, &inv);
  double ss = 0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    t[i] = Normed(t[i], mean, inv, p.pos_norm_weight[i], p.pos_norm_bias[i]);
    ss += double(t[i]) * t[i];
  }
  const float inv_rms = static_cast<float>(1.0 / sqrt(BlockSum(ss, scratch) / static_cast<double>(H) + p.rms_eps));
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) StoreAct(p.out, r * H + i, t[i] * inv_rms, p.out_bf16);
}

}  // namespace

cudaError_t LaunchPatchNorm(const PatchNormParams& p, cudaStream_t stream) {
  if (p.blocks <= 0) return cudaSuccess;
  PatchNormKernel<<<static_cast<unsigned>(p.blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchVisionRows(const VisionRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  VisionRowsKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace layerpipe::cuda
