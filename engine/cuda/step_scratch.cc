#include "engine/cuda/step_scratch.h"

#include <algorithm>

namespace layerpipe::cuda {

StepScratch::StepScratch(const ModelConfig& cfg, int layer_begin, int layer_end, Precision precision,
                         DecodeGraphs* graphs)
    : cfg_(cfg),
      act_bytes_(precision == Precision::kBf16 ? 2 : 4),
      kv_elem_(precision == Precision::kFp32 ? 4 : 2),
      graphs_(graphs) {
  for (int l = layer_begin; l < layer_end; ++l) {
    const int hd = cfg_.HeadDim(l);
    const int64_t qw = int64_t(cfg_.num_heads) * hd, kw = int64_t(cfg_.KvHeads(l)) * hd;
    max_qw_ = std::max(max_qw_, qw);
    max_kw_ = std::max(max_kw_, kw);
    max_qkv_ = std::max(max_qkv_, qw + kw * (cfg_.HasVProj(l) ? 2 : 1));
  }
}

absl::Status StepScratch::Ensure(const StepShape& shape) {
  bool moved = false;
  if (shape.rows > cap_rows_) {
    int64_t cap = std::max<int64_t>(cap_rows_, 8);
    while (cap < shape.rows) cap *= 2;
    // Allocate() frees the old buffer first, so a failure below leaves some buffers freed or empty:
    // forget the capacity and the graphs that hold the old addresses before touching any of them.
    graphs_->Clear();
    cap_rows_ = 0;
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    LP_RETURN_IF_ERROR(b_.h.Allocate(cap * H * 4));
    LP_RETURN_IF_ERROR(b_.x.Allocate(cap * H * act_bytes_));
    LP_RETURN_IF_ERROR(b_.qkv.Allocate(cap * max_qkv_ * 4));
    LP_RETURN_IF_ERROR(b_.k_new.Allocate(cap * max_kw_ * kv_elem_));
    LP_RETURN_IF_ERROR(b_.v_new.Allocate(cap * max_kw_ * kv_elem_));
    LP_RETURN_IF_ERROR(b_.attn.Allocate(cap * max_qw_ * act_bytes_));
    LP_RETURN_IF_ERROR(b_.o.Allocate(cap * H * 4));
    LP_RETURN_IF_ERROR(b_.gu.Allocate(cap * 2 * I * 4));
    LP_RETURN_IF_ERROR(b_.act.Allocate(cap * I * act_bytes_));
    cap_rows_ = cap;
    moved = true;
  }
  // Split partials: [splits][rows · heads][head_dim] for the larger of the two layer types.
  const int64_t part = std::max(int64_t(shape.splits_sliding) * cfg_.head_dim,
                                int64_t(shape.splits_full) * cfg_.global_head_dim) *
                       shape.rows * cfg_.num_heads;
  const int64_t part_ml = std::max(shape.splits_sliding, shape.splits_full) * shape.rows * cfg_.num_heads * 2;
  absl::Status st = b_.part_acc.EnsureAtLeast(part * 4, &moved);
  if (st.ok()) st = b_.part_ml.EnsureAtLeast(part_ml * 4, &moved);
  // Headroom so growing page tables rarely move the buffer.
  if (st.ok() && shape.layout.total > b_.meta.bytes()) st = b_.meta.EnsureAtLeast(2 * shape.layout.total + 4096, &moved);
  if (st.ok()) st = meta_host_.EnsureAtLeast(b_.meta.bytes());
  // Also on failure: a buffer that failed to grow was freed, and a graph must not keep its address.
  if (moved) graphs_->Clear();
  return st;
}

}  // namespace layerpipe::cuda
