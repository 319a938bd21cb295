// What a sequence's KV caches take on a range of layers (the layout of kv_layout.h applied to the
// model's shapes): the worker checks its budget with it before running a step, the coordinator admits
// requests with it, and every backend's caches report exactly these bytes.
#ifndef LAYERPIPE_ENGINE_MODEL_KV_BYTES_H_
#define LAYERPIPE_ENGINE_MODEL_KV_BYTES_H_

#include <cstdint>

#include "engine/model/config.h"
#include "engine/model/precision.h"

namespace layerpipe {

// Bytes of one K or V element in the cache.
inline int64_t KvElementBytes(Precision precision) { return precision == Precision::kFp32 ? 4 : 2; }

// Elements of one K (or V) row of `layer`: kv_heads · head_dim.
inline int64_t KvRowWidth(const ModelConfig& config, int layer) {
  return int64_t{config.KvHeads(layer)} * config.HeadDim(layer);
}

// The `joined` of `layer`'s cache rows (engine/model/kv_layout.h, joined_kv.h): its rotated dims where
// it is a full layer with k_eq_v and one KV head, and the views keep 16-byte rows (the CUDA kernels'
// loads); else 0 (K and V rows apart, as every sliding layer).
int64_t KvJoinedValues(const ModelConfig& config, int layer);

// Bytes the caches of layers [layer_begin, layer_end) hold once a sequence has `length` positions:
// a sliding layer allocates its whole window ring on the first token, a full layer one page at a time.
int64_t KvBytesAtLength(const ModelConfig& config, int layer_begin, int layer_end, Precision precision,
                        int64_t length);

// Bytes of the full layers' whole pages below `cut`: what a sequence that starts from a prefix of `cut`
// positions, or keeps one, shares with the prefix's snapshot (its pages are shared by reference; the
// rings and a partly filled page are copies).
int64_t KvSharedBytesAtCut(const ModelConfig& config, int layer_begin, int layer_end, Precision precision,
                           int64_t cut);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_KV_BYTES_H_
