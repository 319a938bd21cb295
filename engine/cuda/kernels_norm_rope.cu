// Row norms, the fused residual steps around attention and the feed-forward, and the per-head
// norm + rotary step between the QKV projection and attention.
#include <cuda_bf16.h>

#include "engine/cuda/device_common.cuh"
#include "engine/cuda/kernels.h"
#include "engine/model/joined_kv.h"

namespace layerpipe::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kPrepWarps = 4;

// 1 / sqrt(ss / n + eps) computed in double and narrowed, as the CPU RmsNorm does.
__device__ __forceinline__ float InvRms(double ss, int64_t n, double eps) {
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
}

// InvRms of a row of n values, summed over the block (every thread gets it).
__device__ __forceinline__ float RowInvRms(const float* row, int64_t n, double eps, double* scratch) {
  double ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += double(row[i]) * row[i];
  return InvRms(BlockSum(ss, scratch), n, eps);
}

__global__ void RmsNormKernel(const float* x, const float* w, int64_t n, double eps, void* out, bool out_bf16) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  const float inv = RowInvRms(xr, n, eps, scratch);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = w == nullptr ? xr[i] * inv : xr[i] * inv * w[i];
    StoreAct(out, r * n + i, v, out_bf16);
  }
}

__global__ void PostAttentionKernel(const float* o, const float* post_attn, float* h, const float* pre_ff, int64_t n,
                                    double eps, void* ff_in, bool ff_in_bf16) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* orow = o + r * n;
  float* hrow = h + r * n;
  const float inv_o = RowInvRms(orow, n, eps, scratch);
  double hs = 0;
  // Each thread re-reads only the h elements it wrote itself, so no barrier is needed between.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = hrow[i] + orow[i] * inv_o * post_attn[i];
    hrow[i] = v;
    hs += double(v) * v;
  }
  const float inv_h = InvRms(BlockSum(hs, scratch), n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) StoreAct(ff_in, r * n + i, hrow[i] * inv_h * pre_ff[i], ff_in_bf16);
}

__global__ void PostFeedforwardKernel(const float* o, const float* post_ff, float* h, float scalar, int64_t n,
                                      double eps) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* orow = o + r * n;
  float* hrow = h + r * n;
  const float inv = RowInvRms(orow, n, eps, scratch);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) hrow[i] = (hrow[i] + orow[i] * inv * post_ff[i]) * scalar;
}

// One warp per (row, head): heads [0, heads) are query heads, [heads, heads + kv_heads) KV heads.
__global__ void QkvPrepKernel(QkvPrepParams p) {
  __shared__ float stage[kPrepWarps][kMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x;
  const int t = blockIdx.y * kPrepWarps + warp;
  if (t >= p.heads + p.kv_heads) return;  // warp-uniform; no block barrier below
  const int hd = p.head_dim, half = hd / 2;
  const int64_t qw = int64_t(p.heads) * hd, kw = int64_t(p.kv_heads) * hd;
  float* row = p.qkv + r * p.ld;
  const float* cs = p.cos_sin + r * 2 * p.pairs;
  float* st = stage[warp];

  // RmsNorm of src (gain w or none) into the warp's stage.
  auto norm_into_stage = [&](const float* src, const float* w) {
    double ss = 0;
    for (int d = lane; d < hd; d += 32) ss += double(src[d]) * src[d];
    ss = WarpSum(ss);
    const float inv = InvRms(ss, hd, p.eps);
    for (int d = lane; d < hd; d += 32) st[d] = w == nullptr ? src[d] * inv : src[d] * inv * w[d];
    __syncwarp();
  };
  // Rotate-half rotary of the stage: dim i pairs with i + half, only the first `pairs` pairs turn.
  auto rotated = [&](int d) {
    const int i = d < half ? d : d - half;
    if (i >= p.pairs) return st[d];
    const float c = cs[i], s = cs[p.pairs + i];
    return d < half ? st[d] * c - st[d + half] * s : st[d] * c + st[i] * s;
  };

  // A joined cache's orders (engine/model/joined_kv.h): the queries' and keys' dim j is the head's
  // KeyDim(j), the values' ValueDim(j); the queries' un-rotated dims take k_norm's weight.
  if (t < p.heads) {
    float* q = row + int64_t(t) * hd;
    norm_into_stage(q, p.q_norm);
    for (int j = lane; j < hd; j += 32) {
      if (!p.joined) {
        q[j] = rotated(j);
        continue;
      }
      const int d = kv::JoinedKeyDim(j, hd, p.pairs);
      q[j] = kv::JoinedKeyRotated(j, p.pairs) ? rotated(d) : st[d] * p.k_norm[d];
    }
    return;
  }
  const int kvh = t - p.heads;
  const float* k = row + qw + int64_t(kvh) * hd;
  const float* v = p.has_v ? row + qw + kw + int64_t(kvh) * hd : k;
  const int64_t out = r * kw + int64_t(kvh) * hd;
  // V first: with k_eq_v it reads the raw keys, which the k pass below leaves untouched anyway.
  norm_into_stage(v, nullptr);
  for (int j = lane; j < hd; j += 32) {
    if (!p.joined) {
      StoreAct(p.v_new, out + j, st[j], p.kv_bf16);
      continue;
    }
    StoreAct(p.v_new, out + j, st[kv::JoinedValueDim(j, hd, p.pairs)], p.kv_bf16);
    // The keys' un-rotated dims are V's (the weight went to the queries).
    if (!kv::JoinedKeyRotated(j, p.pairs)) {
      StoreAct(p.k_new, out + j, st[kv::JoinedKeyDim(j, hd, p.pairs)], p.kv_bf16);
    }
  }
  __syncwarp();  // every lane is done reading the stage before it is overwritten
  norm_into_stage(k, p.k_norm);
  for (int j = lane; j < hd; j += 32) {
    if (!p.joined) {
      StoreAct(p.k_new, out + j, rotated(j), p.kv_bf16);
    } else if (kv::JoinedKeyRotated(j, p.pairs)) {
      StoreAct(p.k_new, out + j, rotated(kv::JoinedKeyDim(j, hd, p.pairs)), p.kv_bf16);
    }
  }
}

// One warp per (row, head): the head's attention output from a joined cache's value order back to its own.
template <typename T>
__global__ void JoinedOutputKernel(T* out, int heads, int hd, int pairs) {
  __shared__ float stage[kPrepWarps][kMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.y * kPrepWarps + warp;
  if (t >= heads) return;
  T* o = out + int64_t(blockIdx.x) * heads * hd + int64_t(t) * hd;
  float* st = stage[warp];
  for (int j = lane; j < hd; j += 32) st[kv::JoinedValueDim(j, hd, pairs)] = ToFloat(o[j]);
  __syncwarp();
  for (int d = lane; d < hd; d += 32) o[d] = FromFloat<T>(st[d]);
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* w, int64_t rows, int64_t n, double eps, void* out,
                          bool out_bf16, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, w, n, eps, out, out_bf16);
  return cudaGetLastError();
}

cudaError_t LaunchPostAttention(const float* o, const float* post_attn, float* h, const float* pre_ff, int64_t rows,
                                int64_t n, double eps, void* ff_in, bool ff_in_bf16, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  PostAttentionKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(o, post_attn, h, pre_ff, n, eps, ff_in,
                                                                                ff_in_bf16);
  return cudaGetLastError();
}

cudaError_t LaunchPostFeedforward(const float* o, const float* post_ff, float* h, float scalar, int64_t rows,
                                  int64_t n, double eps, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  PostFeedforwardKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(o, post_ff, h, scalar, n, eps);
  return cudaGetLastError();
}

cudaError_t LaunchQkvPrep(const QkvPrepParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.head_dim > kMaxHeadDim || p.head_dim % kHeadDimMultiple != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(p.rows), (p.heads + p.kv_heads + kPrepWarps - 1) / kPrepWarps);
  QkvPrepKernel<<<grid, kPrepWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchJoinedOutputOrder(void* out, bool out_bf16, int64_t rows, int heads, int head_dim, int pairs,
                                    cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (head_dim > kMaxHeadDim) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(rows), (heads + kPrepWarps - 1) / kPrepWarps);
  if (out_bf16) {
    JoinedOutputKernel<<<grid, kPrepWarps * 32, 0, stream>>>(static_cast<__nv_bfloat16*>(out), heads, head_dim, pairs);
  } else {
    JoinedOutputKernel<<<grid, kPrepWarps * 32, 0, stream>>>(static_cast<float*>(out), heads, head_dim, pairs);
  }
  return cudaGetLastError();
}

}  // namespace layerpipe::cuda
