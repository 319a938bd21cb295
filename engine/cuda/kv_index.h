// Attention index math shared by the host planner and the device kernels: which keys a query sees and
// how a block's key range is cut into split-K pieces. Where a position's row lives is
// engine/model/kv_layout.h.
#ifndef LAYERPIPE_ENGINE_CUDA_KV_INDEX_H_
#define LAYERPIPE_ENGINE_CUDA_KV_INDEX_H_

#include <cstdint>

#include "engine/model/kv_layout.h"

namespace layerpipe::cuda {

// First key a query at `pos` sees (window 0: full attention).
LP_HOST_DEVICE inline int64_t FirstVisibleKey(int64_t pos, int64_t window) {
  if (window <= 0) return 0;
  const int64_t lo = pos - window + 1;
  return lo > 0 ? lo : 0;
}

// Last key the query in step row `row` at `pos` sees: its own position, or on a sliding layer the end of
// the image block it lies in (MULTIMODAL.md, "Masks"), from the step's `last_key` rows (null: none).
LP_HOST_DEVICE inline int64_t LastVisibleKey(const int64_t* last_key, int64_t row, int64_t pos) {
  return last_key != nullptr ? last_key[row] : pos;
}

// Split `s` of `splits` over keys [lo, hi]: pieces are whole tiles of `tile` keys, so only the last
// non-empty piece is ragged; later pieces may be empty (*begin >= *end).
LP_HOST_DEVICE inline void SplitKeyRange(int64_t lo, int64_t hi, int splits, int s, int64_t tile, int64_t* begin,
                                         int64_t* end) {
  const int64_t len = hi - lo + 1;
  int64_t chunk = (len + splits - 1) / splits;
  chunk = (chunk + tile - 1) / tile * tile;
  const int64_t b = lo + chunk * s;
  const int64_t e = b + chunk;
  *begin = b;
  *end = e < hi + 1 ? e : hi + 1;
}

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_KV_INDEX_H_
