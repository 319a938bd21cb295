#include "engine/kv_cache.h"

#include <cstring>

namespace layerpipe {

LayerKvCache::LayerKvCache(bool ring, int64_t window, int64_t row_width, Precision precision)
    : ring_(ring), window_(window), width_(row_width), elem_(precision == Precision::kFp32 ? 4 : 2) {}

void LayerKvCache::Reserve(int64_t end) {
  if (ring_) {
    if (blocks_.empty()) {
      blocks_.emplace_back(new uint8_t[static_cast<size_t>(window_ * 2 * width_) * elem_]);
    }
    return;
  }
  while (static_cast<int64_t>(blocks_.size()) * kPageTokens < end) {
    blocks_.emplace_back(new uint8_t[static_cast<size_t>(kPageTokens * 2 * width_) * elem_]);
  }
}

uint8_t* LayerKvCache::Row(int64_t pos, int which) {
  int64_t block, slot;
  if (ring_) {
    block = 0;
    slot = pos % window_;
  } else {
    block = pos / kPageTokens;
    slot = pos % kPageTokens;
  }
  return blocks_[block].get() + static_cast<size_t>((slot * 2 + which) * width_) * elem_;
}

size_t LayerKvCache::bytes() const {
  const int64_t rows = ring_ ? window_ : kPageTokens;
  return blocks_.size() * static_cast<size_t>(rows * 2 * width_) * elem_;
}

size_t SequenceKv::bytes() const {
  size_t b = 0;
  for (const LayerKvCache& l : layers_) b += l.bytes();
  return b;
}

size_t SequenceKv::sliding_bytes() const {
  size_t b = 0;
  for (const LayerKvCache& l : layers_) b += l.ring() ? l.bytes() : 0;
  return b;
}

}  // namespace layerpipe
