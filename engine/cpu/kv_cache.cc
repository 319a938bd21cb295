#include "engine/cpu/kv_cache.h"

#include <cstring>

#include "engine/model/kv_bytes.h"
#include "engine/model/kv_layout.h"

namespace layerpipe {

LayerKvCache::LayerKvCache(bool ring, int64_t window, int64_t row_width, Precision precision)
    : ring_(ring), window_(window), width_(row_width), elem_(static_cast<size_t>(KvElementBytes(precision))) {}

void LayerKvCache::Reserve(int64_t end) {
  const size_t block_bytes = static_cast<size_t>(kv::BlockBytes(ring_, window_, width_, static_cast<int64_t>(elem_)));
  while (static_cast<int64_t>(blocks_.size()) < kv::BlocksAt(ring_, end)) {
    blocks_.emplace_back(new uint8_t[block_bytes]);
  }
}

uint8_t* LayerKvCache::Row(int64_t pos, int which) {
  const kv::Slot s = kv::SlotOf(pos, ring_, window_);
  return blocks_[s.block].get() + static_cast<size_t>(kv::RowOffset(s.slot, which, width_)) * elem_;
}

size_t LayerKvCache::bytes() const {
  return blocks_.size() * static_cast<size_t>(kv::BlockBytes(ring_, window_, width_, static_cast<int64_t>(elem_)));
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
