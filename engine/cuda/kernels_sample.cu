// Sampling on the device: the LogitRowSummary (engine/sampling/logit_summary.h) of each logits row, so that only
// a few hundred bytes per sequence leave the GPU. The selections are exact: entries are ranked by a
// 64-bit key (order-preserving float bits above the complemented id), which makes "higher value first,
// lower id among equals" a plain integer order without ties, and a block-wide radix select finds the
// k-th largest key digit by digit.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/device_common.cuh"
#include "engine/cuda/kernels.h"
#include "engine/sampling/sample_weight.h"

namespace layerpipe::cuda {
namespace {

constexpr int kSelectThreads = 1024;
constexpr int kRadixBits = 11;
constexpr int kRadixBins = 1 << kRadixBits;
constexpr int kElementwiseThreads = 256;

// Larger float, larger key; +0 and -0 share a key (they compare equal on the host).
__device__ __forceinline__ uint32_t OrderedBits(float v) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t RankKey(float v, int64_t id) {
  return (static_cast<uint64_t>(OrderedBits(v)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ int64_t IdOfKey(uint64_t key) { return 0xFFFFFFFFu - static_cast<uint32_t>(key); }

__device__ __forceinline__ bool IsBanned(int64_t id, const SummarizeParams& p) {
  // Unrolled, so the list is indexed statically and the parameters are not copied to local memory.
#pragma unroll
  for (int b = 0; b < kMaxSummaryBanned; ++b) {
    if (b < p.num_banned && id == p.banned[b]) return true;
  }
  return false;
}

__device__ __forceinline__ uint64_t WarpMaxU64(uint64_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

// prepared = raw with NaN and banned ids at -inf (the penalty comes next, per row).
__global__ void PrepareKernel(SummarizeParams p) {
  const int64_t total = p.rows * p.vocab;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const float v = p.raw[e];
    p.prepared[e] = (isnan(v) || IsBanned(e % p.vocab, p)) ? -INFINITY : v;
  }
}

// One block per row; the host made the ids distinct, so no two threads touch one entry.
__global__ void PenalizeKernel(SummarizeParams p) {
  const SummaryRowParams& rp = p.row_params[blockIdx.x];
  const float penalty = rp.penalty;
  if (penalty == 1.0f) return;
  float* row = p.prepared + int64_t(blockIdx.x) * p.vocab;
  for (int32_t j = rp.penalized_begin + threadIdx.x; j < rp.penalized_end; j += blockDim.x) {
    float& v = row[p.penalized[j]];
    v = v > 0 ? v / penalty : v * penalty;
  }
}

// One block per row: log Σ exp over the raw row (as engine/sampling/logprobs.cc: NaN ignored, a non-finite
// maximum returned as is) and the fallback id (the raw argmax without NaN and banned ids).
__global__ void __launch_bounds__(kSelectThreads) StatsKernel(SummarizeParams p) {
  __shared__ double scratch[32];
  __shared__ float max_share[32];
  __shared__ uint64_t key_share[32];
  const float* raw = p.raw + int64_t(blockIdx.x) * p.vocab;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;

  float m = -INFINITY;
  uint64_t best = 0;  // 0: none (a real key is at least that of -inf, which is > 0)
  for (int64_t i = threadIdx.x; i < p.vocab; i += blockDim.x) {
    const float v = raw[i];
    if (v > m) m = v;  // false for NaN
    if (!isnan(v) && !IsBanned(i, p)) {
      const uint64_t key = RankKey(v, i);
      best = key > best ? key : best;
    }
  }
  m = WarpMax(m);
  best = WarpMaxU64(best);
  if (lane == 0) {
    max_share[warp] = m;
    key_share[warp] = best;
  }
  __syncthreads();
  m = lane < warps ? max_share[lane] : -INFINITY;
  best = lane < warps ? key_share[lane] : 0;
  m = WarpMax(m);
  best = WarpMaxU64(best);

  const bool want_lse = p.row_params[blockIdx.x].log_sum_exp != 0;
  double sum = 0;
  if (want_lse && isfinite(m)) {
    for (int64_t i = threadIdx.x; i < p.vocab; i += blockDim.x) {
      const float v = raw[i];
      if (v > -INFINITY) sum += exp(static_cast<double>(v) - static_cast<double>(m));
    }
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) {
    SummaryRowStats& out = p.stats[blockIdx.x];
    out.log_sum_exp = !want_lse ? 0.0 : isfinite(m) ? static_cast<double>(m) + log(sum) : static_cast<double>(m);
    const int64_t id = best == 0 ? 0 : IdOfKey(best);
    out.fallback_id = static_cast<int32_t>(id);
    out.fallback_raw = raw[id];
  }
}

// Sampler's log-weight, weight and top-p bucket of a prepared logit, the host's bit for bit.
using sample_weight::ExpNonPositive;
using sample_weight::kLogBuckets;
using sample_weight::LogBucket;
using sample_weight::LogWeight;

// One block per row with a draw or a total: the token whose cumulative weight, in id order over the
// tokens that pass min-p, first exceeds u times their total (DrawFromWholeRow in engine/sampling/sampler.h), and
// the whole row's weight before min-p (WholeRowTotalMass).
//   The draw: each thread sums a contiguous run of ids and one thread combines the runs in order, so the
//   result is deterministic and ordered like the host's sequential walk (the sums round differently, so a
//   draw can differ from the host's only for a u within a few ulps of a boundary between two tokens).
//   The total: a histogram of the weights by bucket, then the buckets in order, as the host sums it. A
//   bucket's weights lie within a factor e^(1/4) of each other, so every partial sum of them is exact in a
//   double (24-bit weights of at most two binades, up to 2^28 of them, fit 53 bits): the atomic adds'
//   order does not matter and the total is the host's bit for bit.
__global__ void __launch_bounds__(kSelectThreads) DrawKernel(SummarizeParams p) {
  __shared__ double run_start[kSelectThreads];
  __shared__ double bucket_mass[kLogBuckets];
  __shared__ double total_share;
  __shared__ float max_share[32];
  __shared__ int last_share[32];
  const SummaryRowParams& rp = p.row_params[blockIdx.x];
  if (rp.draw == 0 && rp.total_mass == 0) return;  // uniform over the block
  const float* row = p.prepared + int64_t(blockIdx.x) * p.vocab;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  SummaryRowStats& out = p.stats[blockIdx.x];
  const bool want_total = rp.total_mass != 0;
  for (int b = threadIdx.x; b < kLogBuckets; b += blockDim.x) bucket_mass[b] = 0.0;

  float m = -INFINITY;  // the prepared row holds no NaN
  for (int64_t i = threadIdx.x; i < p.vocab; i += blockDim.x) m = fmaxf(m, row[i]);
  m = WarpMax(m);
  if (lane == 0) max_share[warp] = m;
  __syncthreads();
  m = WarpMax(lane < warps ? max_share[lane] : -INFINITY);
  if (m == -INFINITY) {
    if (threadIdx.x == 0) {
      out.drawn = -1;
      out.drawn_raw = 0.f;
      out.total_mass = 0.0;
    }
    return;
  }

  const int64_t per = (p.vocab + blockDim.x - 1) / blockDim.x;
  const int64_t lo = int64_t(threadIdx.x) * per, hi = lo + per < p.vocab ? lo + per : p.vocab;
  const float inv_t = rp.inv_temperature, min_p = rp.min_p;
  double mass = 0;
  int last = -1;
  for (int64_t i = lo; i < hi; ++i) {
    const float x = LogWeight(row[i], m, inv_t);
    const float w = ExpNonPositive(x);
    if (want_total && w > 0.f) atomicAdd(&bucket_mass[LogBucket(x)], static_cast<double>(w));
    if (w > 0.f && w >= min_p) {
      mass += w;
      last = static_cast<int>(i);
    }
  }
  run_start[threadIdx.x] = mass;
  int last_all = last;
  for (int o = 16; o > 0; o >>= 1) last_all = max(last_all, __shfl_xor_sync(0xffffffffu, last_all, o));
  if (lane == 0) last_share[warp] = last_all;
  __syncthreads();
  if (threadIdx.x == 0) {
    double running = 0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
      const double run = run_start[t];
      run_start[t] = running;
      running += run;
    }
    total_share = running;
    double whole = 0;
    for (int b = 0; b < kLogBuckets; ++b) whole += bucket_mass[b];
    out.total_mass = want_total ? whole : 0.0;
    last_all = -1;
    for (int w = 0; w < warps; ++w) last_all = max(last_all, last_share[w]);
    last_share[0] = last_all;
  }
  __syncthreads();
  if (rp.draw == 0) return;  // uniform over the block
  const double total = total_share, point = rp.u * total;
  const double start = run_start[threadIdx.x];
  const double end = threadIdx.x + 1 < blockDim.x ? run_start[threadIdx.x + 1] : total;
  int drawn = -2;  // -2: not this thread's to say
  if (start <= point && point < end) {
    double cumulative = start;
    drawn = last;  // rounding may leave the point past the walk's end: the run's last token
    for (int64_t i = lo; i < hi; ++i) {
      const float w = ExpNonPositive(LogWeight(row[i], m, inv_t));
      if (!(w > 0.f && w >= min_p)) continue;
      cumulative += w;
      if (point < cumulative) {
        drawn = static_cast<int>(i);
        break;
      }
    }
  } else if (threadIdx.x == 0 && !(point < total)) {
    drawn = last_share[0];  // rounding left the point at the very end, as on the host
  }
  if (drawn != -2) {
    out.drawn = drawn;
    out.drawn_raw = p.raw[int64_t(blockIdx.x) * p.vocab + drawn];
  }
}

// The block's k largest keys among the included entries of one row, unordered, into out[0, k);
// returns nothing: *count gets min(k, included).
//   prepared mode (skip_neg_inf): values are the prepared row, -inf entries are not candidates.
//   raw mode: NaN reads as -inf and every entry is a candidate.
__device__ void SelectLargest(const float* values, const float* raw, int64_t n, int k, bool skip_neg_inf,
                              SelectedEntry* out, int32_t* count) {
  __shared__ unsigned hist[kRadixBins];
  __shared__ unsigned included_share;
  __shared__ uint64_t prefix_share;
  __shared__ unsigned need_share, bin_share;
  __shared__ unsigned written;
  const int lane = threadIdx.x & 31;

  auto key_of = [&](int64_t i, bool* included) {
    float v = values[i];
    if (isnan(v)) v = -INFINITY;
    *included = !(skip_neg_inf && v == -INFINITY);
    return RankKey(v, i);
  };

  if (threadIdx.x == 0) {
    included_share = 0;
    prefix_share = 0;
    need_share = static_cast<unsigned>(k);
    written = 0;
  }
  __syncthreads();
  unsigned mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    bool inc;
    key_of(i, &inc);
    mine += inc ? 1u : 0u;
  }
  atomicAdd(&included_share, mine);
  __syncthreads();

  uint64_t mask = 0;  // the key bits fixed so far
  if (included_share > static_cast<unsigned>(k)) {
    for (int pass = 0; pass < 6; ++pass) {
      int shift = 64 - kRadixBits * (pass + 1), bits = kRadixBits;
      if (shift < 0) {
        bits += shift;
        shift = 0;
      }
      const uint64_t digit_mask = (uint64_t{1} << bits) - 1;
      for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      const uint64_t prefix = prefix_share;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        bool inc;
        const uint64_t key = key_of(i, &inc);
        if (inc && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & digit_mask], 1u);
      }
      __syncthreads();
      // Warp 0 finds the digit where the k-th largest key lies: lane L sums bins [64L, 64L + 64), a
      // reversed scan gives each lane the count in the lanes above it, and the lane where the running
      // count reaches `need` walks its bins downwards.
      if (threadIdx.x < 32) {
        constexpr int kPerLane = kRadixBins / 32;
        // Every lane reads `need` before the one lane that finds the digit overwrites it: the shuffles
        // below order execution but not memory (the compiler may move a shared load across them), so
        // a warp barrier, which does order memory, separates the reads from that write.
        const unsigned need = need_share;
        __syncwarp();
        unsigned chunk = 0;
        for (int b = 0; b < kPerLane; ++b) chunk += hist[lane * kPerLane + b];
        unsigned inclusive = chunk;
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned t = __shfl_down_sync(0xffffffffu, inclusive, o);
          if (lane + o < 32) inclusive += t;
        }
        const unsigned above = inclusive - chunk;
        if (above < need && inclusive >= need) {
          unsigned acc = above;
          for (int b = kPerLane - 1; b >= 0; --b) {
            const int bin = lane * kPerLane + b;
            if (acc + hist[bin] >= need) {
              prefix_share = prefix | (static_cast<uint64_t>(bin) << shift);
              need_share = need - acc;
              bin_share = hist[bin];
              break;
            }
            acc += hist[bin];
          }
        }
      }
      __syncthreads();
      mask |= digit_mask << shift;
      // Every key in the chosen bin is needed: the selection is decided.
      if (bin_share == need_share) break;
    }
  }
  // Keys above the prefix on the fixed bits, and those equal to it, are the k largest.
  const uint64_t prefix = prefix_share;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    bool inc;
    const uint64_t key = key_of(i, &inc);
    if (!inc || (key & mask) < prefix) continue;
    const unsigned slot = atomicAdd(&written, 1u);
    if (slot < static_cast<unsigned>(k)) {
      const float v = values[i];
      out[slot] = {static_cast<int32_t>(i), isnan(v) ? -INFINITY : v, raw[i]};
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *count = static_cast<int32_t>(written < static_cast<unsigned>(k) ? written : k);
}

// blockIdx.x: row; blockIdx.y: 0 = best of the prepared row, 1 = top of the raw row.
__global__ void __launch_bounds__(kSelectThreads) SelectKernel(SummarizeParams p) {
  const int64_t r = blockIdx.x;
  const SummaryRowParams& rp = p.row_params[r];
  const float* raw = p.raw + r * p.vocab;
  if (blockIdx.y == 0) {
    const int k = rp.best < p.best_capacity ? rp.best : p.best_capacity;
    if (k <= 0) {
      if (threadIdx.x == 0) p.stats[r].best_count = 0;
      return;
    }
    SelectLargest(p.prepared + r * p.vocab, raw, p.vocab, k, true, p.best + r * p.best_capacity,
                  &p.stats[r].best_count);
  } else {
    const int k = rp.top_raw < p.top_capacity ? rp.top_raw : p.top_capacity;
    if (k <= 0) {
      if (threadIdx.x == 0) p.stats[r].top_count = 0;
      return;
    }
    SelectLargest(raw, raw, p.vocab, k, false, p.top + r * p.top_capacity, &p.stats[r].top_count);
  }
}

}  // namespace

cudaError_t LaunchSummarize(const SummarizeParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.vocab <= 0) return cudaSuccess;
  PrepareKernel<<<GridFor(p.rows * p.vocab, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(p);
  PenalizeKernel<<<static_cast<unsigned>(p.rows), 256, 0, stream>>>(p);
  StatsKernel<<<static_cast<unsigned>(p.rows), kSelectThreads, 0, stream>>>(p);
  DrawKernel<<<static_cast<unsigned>(p.rows), kSelectThreads, 0, stream>>>(p);
  SelectKernel<<<dim3(static_cast<unsigned>(p.rows), 2), kSelectThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace layerpipe::cuda
