// The elementwise parts of prefill attention on tensor cores (the GEMMs run through cuBLASLt, see
// gemm_attention.cc): staging queries, keys and values as bf16 GEMM operands, the masked softmax between
// the two products, and the scatter of the output into the step's attention rows.
//
// Keys and values are bf16 in this mode, exactly what the attention kernel reads. Queries and
// probabilities are fp32: each is split into a bf16 high part and a bf16 remainder and both products
// are accumulated (x·k = hi·k + lo·k, with every partial product exact in fp32), which keeps them to
// about 16 significant bits — as close to the fp32 kernel as its own summation order is, where a
// single bf16 rounding of the queries would move scores by ~1e-2.
#include <cuda_bf16.h>

#include "engine/cuda/attention_keys.cuh"
#include "engine/cuda/device_common.cuh"
#include "engine/cuda/kernels.h"

namespace layerpipe::cuda {
namespace {

constexpr int kThreads = 256;

unsigned BlocksFor(int64_t n) { return GridFor(n, kThreads); }

__device__ __forceinline__ __nv_bfloat16* Bf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

__device__ __forceinline__ void SplitBf16(float x, __nv_bfloat16* hi, __nv_bfloat16* lo) {
  const __nv_bfloat16 h = __float2bfloat16_rn(x);
  *hi = h;
  *lo = __float2bfloat16_rn(x - __bfloat162float(h));
}

// Keys and values of every KV head for the block's key range, zero past its end: k, v [kv][keys_pad][hd].
__global__ void StageKeysKernel(GemmAttentionParams p) {
  const int hd = p.head_dim;
  constexpr int kVec = 8;  // bf16 per 16-byte load; head_dim is a multiple of kHeadDimMultiple
  const int vecs = hd / kVec;
  const int64_t total = int64_t(p.kv_heads) * p.keys_pad * vecs;
  const int32_t kv_off = p.kv_offset[p.slice_index];
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t g = e / (p.keys_pad * vecs), rest = e % (p.keys_pad * vecs);
    const int64_t kk = rest / vecs;
    const int col = static_cast<int>(rest % vecs) * kVec;
    uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
    if (kk < p.keys) {
      const int64_t key = p.key_begin + kk;
      kx = *reinterpret_cast<const uint4*>(KeyRow<__nv_bfloat16>(p.kv, p.slice, kv_off, key, 0, g * hd) + col);
      vx = *reinterpret_cast<const uint4*>(KeyRow<__nv_bfloat16>(p.kv, p.slice, kv_off, key, 1, g * hd) + col);
    }
    const int64_t at = (g * p.keys_pad + kk) * hd + col;
    *reinterpret_cast<uint4*>(p.k + at) = kx;
    *reinterpret_cast<uint4*>(p.v + at) = vx;
  }
}

// Queries stacked per KV head as (head in group, row): q_hi / q_lo [kv][group · rows_pad][hd], zero
// for padding rows.
__global__ void StageQueriesKernel(GemmAttentionParams p) {
  const int hd = p.head_dim, group = p.heads / p.kv_heads;
  const int64_t m = int64_t(group) * p.rows_pad;
  const int64_t total = int64_t(p.kv_heads) * m * hd;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t g = e / (m * hd), i = (e / hd) % m;
    const int d = static_cast<int>(e % hd);
    const int64_t hg = i / p.rows_pad, rr = i % p.rows_pad;
    float x = 0.f;
    if (rr < p.rows) {
      const int64_t row = p.slice.row0 + p.row_begin + rr;
      x = p.q[row * p.q_stride + (g * group + hg) * hd + d];
    }
    SplitBf16(x, Bf16(p.q_hi) + e, Bf16(p.q_lo) + e);
  }
}

// One block per score row: softmax over the keys the row's query sees (causal or to the end of its
// image block, and the window), the probabilities split into p_hi / p_lo; zero for padding rows and
// keys the query does not see.
__global__ void __launch_bounds__(kThreads) SoftmaxKernel(GemmAttentionParams p) {
  __shared__ double scratch[32];
  __shared__ float max_share[32];
  const int64_t row = blockIdx.x;  // over kv · group · rows_pad
  const int64_t rr = row % p.rows_pad;
  const float* s = p.scores + row * p.keys_pad;
  __nv_bfloat16* hi = Bf16(p.p_hi) + row * p.keys_pad;
  __nv_bfloat16* lo = Bf16(p.p_lo) + row * p.keys_pad;
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);
  if (rr >= p.rows) {
    for (int64_t kk = threadIdx.x; kk < p.keys_pad; kk += blockDim.x) hi[kk] = lo[kk] = zero;
    return;
  }
  const int64_t qpos = p.slice.pos0 + p.row_begin + rr;
  // Visible keys: positions [FirstVisibleKey(qpos), LastVisibleKey], i.e. this range of columns.
  const int64_t kk_lo = FirstVisibleKey(qpos, p.kv.window) - p.key_begin;
  const int64_t kk_hi = LastVisibleKey(p.last_key, p.slice.row0 + p.row_begin + rr, qpos) - p.key_begin;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float m = -INFINITY;
  for (int64_t kk = kk_lo + threadIdx.x; kk <= kk_hi; kk += blockDim.x) m = fmaxf(m, s[kk]);
  m = WarpMax(m);
  if (lane == 0) max_share[warp] = m;
  __syncthreads();
  m = WarpMax(lane < warps ? max_share[lane] : -INFINITY);
  double sum = 0;
  for (int64_t kk = kk_lo + threadIdx.x; kk <= kk_hi; kk += blockDim.x) sum += expf(s[kk] - m);
  const float inv = static_cast<float>(1.0 / BlockSum(sum, scratch));
  for (int64_t kk = threadIdx.x; kk < p.keys_pad; kk += blockDim.x) {
    const float prob = (kk >= kk_lo && kk <= kk_hi) ? expf(s[kk] - m) * inv : 0.f;
    SplitBf16(prob, hi + kk, lo + kk);
  }
}

// o [kv][group · rows_pad][hd] into the step's attention rows [rows][heads · hd].
__global__ void ScatterKernel(GemmAttentionParams p) {
  const int hd = p.head_dim, group = p.heads / p.kv_heads;
  const int64_t total = p.rows * p.heads * hd;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t rr = e / (int64_t(p.heads) * hd);
    const int h = static_cast<int>((e / hd) % p.heads), d = static_cast<int>(e % hd);
    const int g = h / group, hg = h % group;
    const float v = p.o[((int64_t(g) * group + hg) * p.rows_pad + rr) * hd + d];
    const int64_t row = p.slice.row0 + p.row_begin + rr;
    StoreAct(p.out, row * (int64_t(p.heads) * hd) + int64_t(h) * hd + d, v, p.out_bf16);
  }
}

}  // namespace

cudaError_t LaunchGemmAttentionStage(const GemmAttentionParams& p, cudaStream_t stream) {
  if (p.head_dim % kHeadDimMultiple != 0 || p.heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  StageKeysKernel<<<BlocksFor(int64_t(p.kv_heads) * p.keys_pad * (p.head_dim / 8)), kThreads, 0, stream>>>(p);
  StageQueriesKernel<<<BlocksFor(int64_t(p.heads) * p.rows_pad * p.head_dim), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchGemmAttentionSoftmax(const GemmAttentionParams& p, cudaStream_t stream) {
  SoftmaxKernel<<<static_cast<unsigned>(int64_t(p.heads) * p.rows_pad), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchGemmAttentionScatter(const GemmAttentionParams& p, cudaStream_t stream) {
  ScatterKernel<<<BlocksFor(p.rows * p.heads * p.head_dim), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace layerpipe::cuda
