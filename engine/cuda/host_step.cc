#include "engine/cuda/host_step.h"

#include <algorithm>
#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/cuda/device_kv.h"

namespace layerpipe::cuda {
namespace {

template <typename T>
void Put(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

// The last key each row of the step sees on a sliding layer (MULTIMODAL.md, "Masks"): the end of its
// image block, else its own position. Empty when no block has a second position to open up.
std::vector<int64_t> LastKeys(absl::Span<const SequenceSlice> slices, int64_t rows) {
  bool any = false;
  for (const SequenceSlice& s : slices) {
    for (const PositionRange& b : s.image_blocks) any = any || b.end - b.begin > 1;
  }
  std::vector<int64_t> last;
  if (!any) return last;
  last.reserve(static_cast<size_t>(rows));
  for (const SequenceSlice& s : slices) {
    size_t next = 0;  // blocks are ascending and inside the slice (CheckImageBlocks)
    for (int64_t pos = s.kv->length(); pos < s.kv->length() + s.n; ++pos) {
      while (next < s.image_blocks.size() && s.image_blocks[next].end <= pos) ++next;
      const bool inside = next < s.image_blocks.size() && s.image_blocks[next].begin <= pos;
      last.push_back(inside ? s.image_blocks[next].end - 1 : pos);
    }
  }
  return last;
}

}  // namespace

StepPlanner::StepPlanner(const ModelConfig& cfg, int num_local, int sm_count, bool gemm_attention,
                         int64_t gemm_attention_budget)
    : cfg_(cfg),
      num_local_(num_local),
      sm_count_(sm_count),
      gemm_attention_(gemm_attention),
      gemm_attention_budget_(gemm_attention_budget) {
  inv_freq_sliding_ = RopeInvFreq(cfg_.head_dim, cfg_.rope_sliding);
  inv_freq_full_ = RopeInvFreq(cfg_.global_head_dim, cfg_.rope_full);
  pairs_sliding_ = cfg_.rope_sliding.Pairs(cfg_.head_dim);
  pairs_full_ = cfg_.rope_full.Pairs(cfg_.global_head_dim);
  blocking_sliding_ = BlockingFor(cfg_.num_heads, std::max(1, cfg_.num_kv_heads));
  blocking_full_ = BlockingFor(cfg_.num_heads, std::max(1, cfg_.FullKvHeads()));
}

HostStep StepPlanner::Plan(absl::Span<const SequenceSlice> slices) const {
  HostStep st;
  int64_t row = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const SequenceSlice& s = slices[i];
    st.slices.push_back({s.kv->length(), static_cast<int32_t>(s.n), static_cast<int32_t>(row)});
    for (int64_t r = 0; r < s.n; ++r) st.row_slice.push_back(static_cast<int32_t>(i));
    row += s.n;
  }
  const int64_t rows = row;
  st.last_key = LastKeys(slices, rows);
  std::vector<bool> by_gemm(st.slices.size(), false);
  for (size_t i = 0; i < st.slices.size(); ++i) {
    if (!gemm_attention_ || st.slices[i].n < kGemmAttentionMinRows) continue;
    by_gemm[i] = true;
    // Image blocks open up sliding layers only; full layers stay causal.
    const int64_t* last = st.last_key.empty() ? nullptr : st.last_key.data() + st.slices[i].row0;
    st.gemm.push_back(
        {static_cast<int32_t>(i), st.slices[i],
         PlanGemmQueryBlocks(st.slices[i], cfg_.sliding_window, cfg_.num_heads, gemm_attention_budget_, last),
         PlanGemmQueryBlocks(st.slices[i], 0, cfg_.num_heads, gemm_attention_budget_)});
  }
  st.tiles_sliding = MakeTiles(st.slices, blocking_sliding_.rows_per_tile, by_gemm);
  st.tiles_full = MakeTiles(st.slices, blocking_full_.rows_per_tile, by_gemm);
  const int b = static_cast<int>(slices.size());
  st.kv_offset.resize(static_cast<size_t>(num_local_) * b);
  for (int local = 0; local < num_local_; ++local) {
    for (int i = 0; i < b; ++i) {
      st.kv_offset[static_cast<size_t>(local) * b + i] = static_cast<int32_t>(st.ptrs.size());
      static_cast<const DeviceSequenceKv*>(slices[i].kv)->layer(local).AppendBlockPointers(&st.ptrs);
    }
  }
  st.cs_sliding.resize(static_cast<size_t>(rows * 2 * pairs_sliding_));
  st.cs_full.resize(static_cast<size_t>(rows * 2 * pairs_full_));
  for (int64_t r = 0; r < rows; ++r) {
    const SliceMeta& s = st.slices[st.row_slice[r]];
    const int64_t pos = s.pos0 + (r - s.row0);
    RopeCosSin(pos, inv_freq_sliding_, pairs_sliding_, st.cs_sliding.data() + r * 2 * pairs_sliding_);
    RopeCosSin(pos, inv_freq_full_, pairs_full_, st.cs_full.data() + r * 2 * pairs_full_);
  }
  StepShape& sh = st.shape;
  sh.rows = rows;
  sh.num_slices = b;
  sh.tiles_sliding = static_cast<int>(st.tiles_sliding.size());
  sh.tiles_full = static_cast<int>(st.tiles_full.size());
  sh.splits_sliding = ChooseSplits(int64_t(sh.tiles_sliding) * cfg_.num_kv_heads * blocking_sliding_.head_chunks,
                                   cfg_.sliding_window + blocking_sliding_.rows_per_tile - 1, sm_count_);
  sh.last_keys = !st.last_key.empty();
  sh.splits_full = ChooseSplits(int64_t(sh.tiles_full) * cfg_.FullKvHeads() * blocking_full_.head_chunks,
                                cfg_.max_position_embeddings, sm_count_);
  sh.layout = LayoutFor(b, rows, st.tiles_sliding.size(), st.tiles_full.size(), num_local_, pairs_sliding_,
                        pairs_full_, st.ptrs.size(), sh.last_keys);
  return st;
}

void WriteStepMeta(const HostStep& st, uint8_t* meta) {
  const StepLayout& lay = st.shape.layout;
  Put(meta, lay.slices, st.slices);
  Put(meta, lay.row_slice, st.row_slice);
  Put(meta, lay.tiles_sliding, st.tiles_sliding);
  Put(meta, lay.tiles_full, st.tiles_full);
  Put(meta, lay.kv_offset, st.kv_offset);
  Put(meta, lay.cs_sliding, st.cs_sliding);
  Put(meta, lay.cs_full, st.cs_full);
  Put(meta, lay.last_key, st.last_key);
  Put(meta, lay.ptrs, st.ptrs);
}

}  // namespace layerpipe::cuda
