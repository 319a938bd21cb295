#include "worker/kv_bytes.h"

#include "engine/kv_cache.h"

namespace layerpipe {

int64_t KvBytesAtLength(const ModelConfig& config, int layer_begin, int layer_end, Precision precision,
                        int64_t length) {
  if (length <= 0) return 0;
  const int64_t elem = precision == Precision::kFp32 ? 4 : 2;
  int64_t total = 0;
  for (int l = layer_begin; l < layer_end; ++l) {
    const int64_t row = int64_t{2} * config.KvHeads(l) * config.HeadDim(l) * elem;  // K and V
    if (config.layer_types[l] == LayerType::kFull) {
      const int64_t pages = (length + LayerKvCache::kPageTokens - 1) / LayerKvCache::kPageTokens;
      total += pages * LayerKvCache::kPageTokens * row;
    } else {
      total += config.sliding_window * row;
    }
  }
  return total;
}

}  // namespace layerpipe
