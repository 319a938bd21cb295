#include "engine/model/kv_bytes.h"

#include "engine/model/kv_layout.h"

namespace layerpipe {

int64_t KvJoinedValues(const ModelConfig& config, int layer) {
  if (config.HasVProj(layer) || config.KvHeads(layer) != 1) return 0;
  const int hd = config.HeadDim(layer), rotated = 2 * config.RotaryPairs(layer);
  if (rotated == 0 || rotated == hd || rotated % 8 != 0 || hd % 8 != 0) return 0;
  return rotated;
}

int64_t KvBytesAtLength(const ModelConfig& config, int layer_begin, int layer_end, Precision precision,
                        int64_t length) {
  int64_t total = 0;
  for (int l = layer_begin; l < layer_end; ++l) {
    const bool ring = config.layer_types[l] != LayerType::kFull;
    total += kv::LayerBytesAt(ring, config.sliding_window, KvRowWidth(config, l), KvElementBytes(precision),
                              KvJoinedValues(config, l), length);
  }
  return total;
}

int64_t KvSharedBytesAtCut(const ModelConfig& config, int layer_begin, int layer_end, Precision precision,
                           int64_t cut) {
  const int64_t whole_pages = cut / kv::kPageTokens;
  int64_t total = 0;
  for (int l = layer_begin; l < layer_end; ++l) {
    if (config.layer_types[l] != LayerType::kFull) continue;
    total += kv::LayerBytesAt(false, config.sliding_window, KvRowWidth(config, l), KvElementBytes(precision),
                              KvJoinedValues(config, l), whole_pages * kv::kPageTokens);
  }
  return total;
}

}  // namespace layerpipe
