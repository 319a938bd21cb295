// Attention over the sliding rings and the paged full caches, and the store of new K/V rows.
//
// A block serves up to kQueriesPerBlock query vectors (rows x heads of one GQA group), 4 per warp,
// and walks its key range in tiles of kKeysPerTile keys staged in shared memory, so each key is read
// from memory once per block. Softmax is online (running max and sum per query, rescaled once per
// tile). Long key ranges are cut into `splits` pieces (split-K): each piece writes an unnormalised
// partial and a reduce kernel merges them; with one split the block writes the output directly.
#include <cuda_bf16.h>

#include <cfloat>

#include "engine/cuda/attention_keys.cuh"
#include "engine/cuda/device_common.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kv_index.h"

namespace layerpipe::cuda {
namespace {

constexpr int kWarps = kAttentionThreads / 32;
constexpr int kQueriesPerWarp = kQueriesPerBlock / kWarps;
constexpr int kMaxDimsPerLane = kMaxHeadDim / 32;
static_assert(kKeysPerTile == 32, "a tile's scores are spread one per lane");

// Key / value `key` of KV head `kvh` (attention_keys.cuh).
template <typename T>
__device__ __forceinline__ const T* KeyRow(const AttentionParams& p, const SliceMeta& s, int32_t kv_off, int64_t key,
                                           int which, int kvh) {
  return KeyRow<T>(p.kv, s, kv_off, key, which, int64_t(kvh) * p.head_dim);
}

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads) AttentionKernel(AttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int hd = p.head_dim;
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + kKeysPerTile * hd;

  const TileMeta tile = p.tiles[blockIdx.x];
  const SliceMeta s = p.slices[tile.slice];
  const int32_t kv_off = p.kv_offset[tile.slice];
  const AttentionBlocking& b = p.blocking;
  const int kvh = blockIdx.y / b.head_chunks, chunk = blockIdx.y % b.head_chunks;
  const int split = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Lane `lane` holds dims lane + 32·i of each query and accumulator; with a head_dim that is not a
  // multiple of 32 the last round leaves some lanes without a dim (they hold zeros).
  auto owns = [hd, lane](int i) { return lane + 32 * i < hd; };

  // This warp's queries. Validity depends only on (warp, qi), so every branch on it is warp-uniform.
  bool valid[kQueriesPerWarp];
  int64_t q_row[kQueriesPerWarp], q_lo[kQueriesPerWarp], q_hi[kQueriesPerWarp];
  int q_head[kQueriesPerWarp];
  float q[kQueriesPerWarp][kMaxDimsPerLane];
  float acc[kQueriesPerWarp][kMaxDimsPerLane];
  float m[kQueriesPerWarp], l[kQueriesPerWarp];
#pragma unroll
  for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
    const int idx = warp * kQueriesPerWarp + qi;
    const int row_in_tile = idx / b.heads_per_chunk;
    const int g = chunk * b.heads_per_chunk + idx % b.heads_per_chunk;
    const int row = tile.row_begin + row_in_tile;
    valid[qi] = idx < b.rows_per_tile * b.heads_per_chunk && g < b.group && row < s.n;
    q_head[qi] = kvh * b.group + g;
    q_row[qi] = s.row0 + row;
    q_lo[qi] = FirstVisibleKey(s.pos0 + row, p.kv.window);
    q_hi[qi] = valid[qi] ? LastVisibleKey(p.last_key, q_row[qi], s.pos0 + row) : s.pos0 + row;
    m[qi] = -INFINITY;
    l[qi] = 0.f;
    const float* qp = p.q + q_row[qi] * p.q_stride + int64_t(q_head[qi]) * hd;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      q[qi][i] = (valid[qi] && owns(i)) ? qp[lane + 32 * i] : 0.f;
      acc[qi][i] = 0.f;
    }
  }

  // The block's keys: from the first row's window start to the last row's last key (rows' last keys
  // never decrease). Tiles start at multiples of kKeysPerTile whatever rows share the block, so a
  // query's keys always meet in the same tiles and lanes, and tiles outside its own range change
  // nothing: unless split-K cuts its range differently, its result does not depend on how the prompt
  // was chunked. Keys before range_lo load as zeros.
  const int first_row = tile.row_begin;
  const int last_row = min(tile.row_begin + b.rows_per_tile, s.n) - 1;
  const int64_t range_lo = FirstVisibleKey(s.pos0 + first_row, p.kv.window);
  const int64_t range_hi = LastVisibleKey(p.last_key, s.row0 + last_row, s.pos0 + last_row);
  int64_t kbegin, kend;
  SplitKeyRange(range_lo / kKeysPerTile * kKeysPerTile, range_hi, p.splits, split, kKeysPerTile, &kbegin, &kend);

  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte load; head_dim is a multiple of kHeadDimMultiple
  const int vecs_per_row = hd / kVec;
  for (int64_t t0 = kbegin; t0 < kend; t0 += kKeysPerTile) {
    __syncthreads();  // the previous tile is fully consumed
    for (int v = threadIdx.x; v < kKeysPerTile * vecs_per_row; v += kAttentionThreads) {
      const int j = v / vecs_per_row, col = (v % vecs_per_row) * kVec;
      const int64_t key = t0 + j;
      uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
      if (key >= range_lo && key < kend) {  // outside the range: zeros, so 0-weighted values never inject NaN
        kx = *reinterpret_cast<const uint4*>(KeyRow<T>(p, s, kv_off, key, 0, kvh) + col);
        vx = *reinterpret_cast<const uint4*>(KeyRow<T>(p, s, kv_off, key, 1, kvh) + col);
      }
      *reinterpret_cast<uint4*>(ks + j * hd + col) = kx;
      *reinterpret_cast<uint4*>(vs + j * hd + col) = vx;
    }
    __syncthreads();

    // Scores: lane j ends up holding score[qi] of key t0 + j.
    float score[kQueriesPerWarp];
#pragma unroll
    for (int qi = 0; qi < kQueriesPerWarp; ++qi) score[qi] = -INFINITY;
    for (int j = 0; j < kKeysPerTile; ++j) {
      float kreg[kMaxDimsPerLane];
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) kreg[i] = owns(i) ? ToFloat(ks[j * hd + lane + 32 * i]) : 0.f;
      const int64_t key = t0 + j;
#pragma unroll
      for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
        if (!valid[qi]) continue;
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < kMaxDimsPerLane; ++i) d = fmaf(q[qi][i], kreg[i], d);
        d = WarpSum(d);
        if (lane == j && key < kend && key >= q_lo[qi] && key <= q_hi[qi]) score[qi] = d;
      }
    }
#pragma unroll
    for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
      if (!valid[qi]) continue;
      const float m_new = fmaxf(m[qi], WarpMax(score[qi]));
      if (m_new == -INFINITY) continue;  // nothing visible yet for this query
      const float rescale = expf(m[qi] - m_new);  // 0 on the first visible tile (m = -inf)
      const float pj = expf(score[qi] - m_new);   // 0 for masked keys
      l[qi] = l[qi] * rescale + WarpSum(pj);
      m[qi] = m_new;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) acc[qi][i] *= rescale;
      score[qi] = pj;
    }
    for (int j = 0; j < kKeysPerTile; ++j) {
      float vreg[kMaxDimsPerLane];
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) vreg[i] = owns(i) ? ToFloat(vs[j * hd + lane + 32 * i]) : 0.f;
#pragma unroll
      for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
        if (!valid[qi] || m[qi] == -INFINITY) continue;
        const float pb = __shfl_sync(0xffffffffu, score[qi], j);
#pragma unroll
        for (int i = 0; i < kMaxDimsPerLane; ++i) acc[qi][i] = fmaf(pb, vreg[i], acc[qi][i]);
      }
    }
  }

#pragma unroll
  for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
    if (!valid[qi]) continue;
    const int64_t qh = q_row[qi] * p.heads + q_head[qi];
    if (p.splits == 1) {
      // Every query sees at least its own key, so l > 0.
      const float inv = 1.f / l[qi];
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) {
        if (owns(i)) StoreAct(p.out, q_row[qi] * (int64_t(p.heads) * hd) + int64_t(q_head[qi]) * hd + lane + 32 * i,
                              acc[qi][i] * inv, p.out_bf16);
      }
    } else {
      const int64_t entry = int64_t(split) * p.rows * p.heads + qh;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) {
        if (owns(i)) p.part_acc[entry * hd + lane + 32 * i] = acc[qi][i];
      }
      if (lane == 0) {
        p.part_ml[entry * 2] = m[qi];
        p.part_ml[entry * 2 + 1] = l[qi];
      }
    }
  }
}

// Merges the split partials of one (row, head) per block.
__global__ void SplitReduceKernel(AttentionParams p) {
  const int64_t qh = blockIdx.x;
  const int hd = p.head_dim;
  const int64_t stride = p.rows * p.heads;
  float mx = -INFINITY;
  for (int s = 0; s < p.splits; ++s) mx = fmaxf(mx, p.part_ml[(s * stride + qh) * 2]);
  float total = 0.f;
  for (int s = 0; s < p.splits; ++s) {
    const float ms = p.part_ml[(s * stride + qh) * 2];
    if (ms != -INFINITY) total += p.part_ml[(s * stride + qh) * 2 + 1] * expf(ms - mx);
  }
  const float inv = 1.f / total;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.f;
    for (int s = 0; s < p.splits; ++s) {
      const float ms = p.part_ml[(s * stride + qh) * 2];
      if (ms != -INFINITY) o = fmaf(p.part_acc[(s * stride + qh) * hd + d], expf(ms - mx), o);
    }
    StoreAct(p.out, qh * hd + d, o * inv, p.out_bf16);
  }
}

template <typename T>
__global__ void StoreKvKernel(StoreKvParams p) {
  const int64_t r = blockIdx.x;
  const int32_t si = p.row_slice[r];
  const SliceMeta s = p.slices[si];
  const int64_t i = r - s.row0;
  const bool ring = p.kv.window > 0;
  if (!kv::CacheKeepsRow(i, s.n, ring, p.kv.window)) return;
  const kv::Slot slot = kv::SlotOf(s.pos0 + i, ring, p.kv.window);
  T* block = reinterpret_cast<T*>(p.kv.ptrs[p.kv_offset[si] + slot.block]);
  T* kdst = block + kv::RowOffset(slot.slot, 0, p.kv.kv_width, ring, p.kv.window, p.kv.joined);
  T* vdst = block + kv::RowOffset(slot.slot, 1, p.kv.kv_width, ring, p.kv.window, p.kv.joined);
  const T* ksrc = static_cast<const T*>(p.kv.k_new) + r * p.kv.kv_width;
  const T* vsrc = static_cast<const T*>(p.kv.v_new) + r * p.kv.kv_width;
  constexpr int kVec = 16 / sizeof(T);
  for (int64_t c = int64_t(threadIdx.x) * kVec; c < p.kv.kv_width; c += int64_t(blockDim.x) * kVec) {
    *reinterpret_cast<uint4*>(kdst + c) = *reinterpret_cast<const uint4*>(ksrc + c);
    *reinterpret_cast<uint4*>(vdst + c) = *reinterpret_cast<const uint4*>(vsrc + c);
  }
}

size_t AttentionSmem(int head_dim, bool bf16) {
  return size_t{2} * kKeysPerTile * head_dim * (bf16 ? sizeof(__nv_bfloat16) : sizeof(float));
}

}  // namespace

cudaError_t PrepareAttentionKernels() {
  const int max_head_dim = kMaxHeadDim;
  cudaError_t e = cudaFuncSetAttribute(AttentionKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(AttentionSmem(max_head_dim, false)));
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(AttentionKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(AttentionSmem(max_head_dim, true)));
}

cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream) {
  if (p.num_tiles <= 0) return cudaSuccess;
  if (p.head_dim > kMaxHeadDim || p.head_dim % kHeadDimMultiple != 0 || p.splits < 1 || p.splits > kMaxSplits) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(p.num_tiles), static_cast<unsigned>(p.kv_heads * p.blocking.head_chunks),
                  static_cast<unsigned>(p.splits));
  const size_t smem = AttentionSmem(p.head_dim, p.kv_bf16);
  if (p.kv_bf16) {
    AttentionKernel<__nv_bfloat16><<<grid, kAttentionThreads, smem, stream>>>(p);
  } else {
    AttentionKernel<float><<<grid, kAttentionThreads, smem, stream>>>(p);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.splits == 1) return e;
  SplitReduceKernel<<<static_cast<unsigned>(p.rows * p.heads), 128, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchStoreKv(const StoreKvParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.kv_bf16) {
    StoreKvKernel<__nv_bfloat16><<<static_cast<unsigned>(p.rows), 128, 0, stream>>>(p);
  } else {
    StoreKvKernel<float><<<static_cast<unsigned>(p.rows), 128, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace layerpipe::cuda
