// Planning one step from its sequence slices: the host side of the step's metadata (HostStep) — which
// slices attend through GEMMs, the attention tiles and splits, the cache block pointers, the rotary
// tables and the step's shape — and writing it into the staging buffer that the step uploads in one
// copy. step_plan.h holds the rules; this applies them with what is fixed for one backend (its config,
// layer range and device) to the step's sequences.
#ifndef LAYERPIPE_ENGINE_CUDA_HOST_STEP_H_
#define LAYERPIPE_ENGINE_CUDA_HOST_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/backend/layer_backend.h"
#include "engine/cuda/step_plan.h"
#include "engine/model/config.h"

namespace layerpipe::cuda {

// What every launch of a step depends on besides buffer addresses: equal shapes give equal launches,
// which is what lets a decode graph be replayed.
struct StepShape {
  int64_t rows = 0;
  int num_slices = 0;
  int tiles_sliding = 0, tiles_full = 0;
  int splits_sliding = 1, splits_full = 1;
  // Some slice has an image block of more than one position: sliding layers read the step's last_key
  // rows. Never true of a decode step (one row per slice), so decode graphs never hold them.
  bool last_keys = false;
  StepLayout layout;
};

// A slice attended through GEMMs (step_plan.h) and its query blocks for each layer type.
struct GemmSlice {
  int32_t index;
  SliceMeta slice;
  std::vector<GemmQueryBlock> sliding, full;
};

struct HostStep {
  std::vector<SliceMeta> slices;
  std::vector<int32_t> row_slice;
  std::vector<TileMeta> tiles_sliding, tiles_full;
  std::vector<int32_t> kv_offset;
  std::vector<uint64_t> ptrs;
  std::vector<float> cs_sliding, cs_full;
  std::vector<int64_t> last_key;  // [rows] when shape.last_keys (kv_index.h LastVisibleKey), else empty
  std::vector<GemmSlice> gemm;
  StepShape shape;
};

class StepPlanner {
 public:
  // `gemm_attention`: whether long slices may attend through GEMMs, each query block's scores and
  // probabilities within `gemm_attention_budget` bytes.
  StepPlanner(const ModelConfig& cfg, int num_local, int sm_count, bool gemm_attention,
              int64_t gemm_attention_budget);

  // The slices' caches must already be reserved for the step: their block pointers go into the plan.
  HostStep Plan(absl::Span<const SequenceSlice> slices) const;

  // The layers read these when they launch attention on the planned tiles and rotary tables.
  int pairs(bool full) const { return full ? pairs_full_ : pairs_sliding_; }
  const AttentionBlocking& blocking(bool full) const { return full ? blocking_full_ : blocking_sliding_; }

 private:
  const ModelConfig& cfg_;
  int num_local_;
  int sm_count_;
  bool gemm_attention_;
  int64_t gemm_attention_budget_;
  std::vector<double> inv_freq_sliding_, inv_freq_full_;
  int pairs_sliding_ = 0, pairs_full_ = 0;
  AttentionBlocking blocking_sliding_{}, blocking_full_{};
};

// Writes every section of `st` at its offset in st.shape.layout into `meta` (layout.total bytes).
void WriteStepMeta(const HostStep& st, uint8_t* meta);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_HOST_STEP_H_
