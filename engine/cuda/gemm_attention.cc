#include "engine/cuda/gemm_attention.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "engine/cuda/cuda_check.h"

namespace layerpipe::cuda {
namespace {

// Byte offsets of one query block's GEMM-attention scratch inside one buffer.
struct GemmScratchLayout {
  size_t q_hi, q_lo, k, v, scores, p_hi, p_lo, o, total;
};

GemmScratchLayout GemmScratchFor(const GemmQueryBlock& b, int heads, int kv_heads, int head_dim) {
  GemmScratchLayout l{};
  size_t at = 0;
  auto section = [&at](size_t bytes) {
    const size_t start = at;
    at = (at + bytes + 255) / 256 * 256;
    return start;
  };
  const size_t q = size_t(heads) * b.rows_pad * head_dim, kv = size_t(kv_heads) * b.keys_pad * head_dim;
  const size_t s = size_t(heads) * b.rows_pad * b.keys_pad;
  l.q_hi = section(q * 2);
  l.q_lo = section(q * 2);
  l.k = section(kv * 2);
  l.v = section(kv * 2);
  l.scores = section(s * 4);
  l.p_hi = section(s * 2);
  l.p_lo = section(s * 2);
  l.o = section(q * 4);
  l.total = at;
  return l;
}

}  // namespace

absl::Status GemmAttention::Prepare(std::vector<GemmSlice> slices) {
  size_t bytes = 0;
  for (const GemmSlice& g : slices) {
    for (const GemmQueryBlock& b : g.sliding) {
      bytes = std::max(bytes, GemmScratchFor(b, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim).total);
    }
    for (const GemmQueryBlock& b : g.full) {
      bytes = std::max(bytes, GemmScratchFor(b, cfg_.num_heads, cfg_.FullKvHeads(), cfg_.global_head_dim).total);
    }
  }
  bool moved = false;  // never captured in a graph, so moving it costs nothing
  LP_RETURN_IF_ERROR(scratch_.EnsureAtLeast(bytes, &moved));
  slices_ = std::move(slices);
  return absl::OkStatus();
}

absl::Status GemmAttention::Run(GemmAttentionParams p, bool full) {
  for (const GemmSlice& g : slices_) {
    p.slice = g.slice;
    p.slice_index = g.index;
    for (const GemmQueryBlock& b : full ? g.full : g.sliding) LP_RETURN_IF_ERROR(RunBlock(b, p));
  }
  return absl::OkStatus();
}

absl::Status GemmAttention::RunBlock(const GemmQueryBlock& b, GemmAttentionParams p) {
  p.row_begin = b.row_begin;
  p.rows = b.rows;
  p.rows_pad = b.rows_pad;
  p.key_begin = b.key_begin;
  p.keys = b.keys;
  p.keys_pad = b.keys_pad;
  const GemmScratchLayout lay = GemmScratchFor(b, p.heads, p.kv_heads, p.head_dim);
  uint8_t* base = scratch_.as<uint8_t>();
  p.q_hi = reinterpret_cast<uint16_t*>(base + lay.q_hi);
  p.q_lo = reinterpret_cast<uint16_t*>(base + lay.q_lo);
  p.k = reinterpret_cast<uint16_t*>(base + lay.k);
  p.v = reinterpret_cast<uint16_t*>(base + lay.v);
  p.scores = reinterpret_cast<float*>(base + lay.scores);
  p.p_hi = reinterpret_cast<uint16_t*>(base + lay.p_hi);
  p.p_lo = reinterpret_cast<uint16_t*>(base + lay.p_lo);
  p.o = reinterpret_cast<float*>(base + lay.o);
  const int group = p.heads / p.kv_heads;
  const int64_t m = int64_t(group) * b.rows_pad, hd = p.head_dim;
  // Scores: per KV head, its stacked queries times its keys (both halves of each query).
  LP_CUDA_RETURN_IF_ERROR(LaunchGemmAttentionStage(p, stream_));
  GemmOptions per_kv_head;
  per_kv_head.batch = p.kv_heads;
  LP_RETURN_IF_ERROR(gemm_->Run(p.q_hi, p.k, true, m, b.keys_pad, hd, p.scores, stream_, per_kv_head));
  GemmOptions add = per_kv_head;
  add.accumulate = true;
  LP_RETURN_IF_ERROR(gemm_->Run(p.q_lo, p.k, true, m, b.keys_pad, hd, p.scores, stream_, add));
  LP_CUDA_RETURN_IF_ERROR(LaunchGemmAttentionSoftmax(p, stream_));
  // Output: probabilities (both halves) times values, V given as [keys][hd].
  GemmOptions pv = per_kv_head;
  pv.w_is_kn = true;
  LP_RETURN_IF_ERROR(gemm_->Run(p.p_hi, p.v, true, m, hd, b.keys_pad, p.o, stream_, pv));
  pv.accumulate = true;
  LP_RETURN_IF_ERROR(gemm_->Run(p.p_lo, p.v, true, m, hd, b.keys_pad, p.o, stream_, pv));
  LP_CUDA_RETURN_IF_ERROR(LaunchGemmAttentionScatter(p, stream_));
  return absl::OkStatus();
}

}  // namespace layerpipe::cuda
