// Where an attention kernel finds key / value rows: older positions in the sequence's cache (a sliding
// ring or full-attention pages), the step's own positions in its k_new / v_new rows (the cache is only
// written after attention, so a ring never loses keys an earlier row of the step still needs).
#ifndef LAYERPIPE_ENGINE_CUDA_ATTENTION_KEYS_CUH_
#define LAYERPIPE_ENGINE_CUDA_ATTENTION_KEYS_CUH_

#include <cstdint>

#include "engine/cuda/kernels.h"
#include "engine/cuda/kv_index.h"
#include "engine/cuda/step_plan.h"

namespace layerpipe::cuda {

// Element pointer of key (which = 0) or value (which = 1) at position `key`, KV head offset head_off
// (kv head · head_dim), for a slice whose block pointers start at ptrs[kv_off].
template <typename T>
__device__ __forceinline__ const T* KeyRow(const KeySource& src, const SliceMeta& s, int32_t kv_off, int64_t key,
                                           int which, int64_t head_off) {
  if (key >= s.pos0) {
    const T* base = static_cast<const T*>(which == 0 ? src.k_new : src.v_new);
    return base + (s.row0 + (key - s.pos0)) * src.kv_width + head_off;
  }
  const bool ring = src.window > 0;
  const kv::Slot slot = kv::SlotOf(key, ring, src.window);
  const T* block = reinterpret_cast<const T*>(src.ptrs[kv_off + slot.block]);
  return block + kv::RowOffset(slot.slot, which, src.kv_width, ring, src.window, src.joined) + head_off;
}

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_ATTENTION_KEYS_CUH_
