#include "engine/cpu/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "engine/cpu/kv_block_memory.h"
#include "engine/model/kv_bytes.h"
#include "engine/model/kv_layout.h"

namespace layerpipe {

LayerKvCache::LayerKvCache(bool ring, int64_t window, int64_t row_width, Precision precision, int64_t joined)
    : ring_(ring),
      window_(window),
      width_(row_width),
      joined_(joined),
      elem_(static_cast<size_t>(KvElementBytes(precision))) {}

size_t LayerKvCache::block_bytes() const {
  return static_cast<size_t>(kv::BlockBytes(ring_, window_, width_, static_cast<int64_t>(elem_), joined_));
}

// A block on a cache line (rows are whole 64-byte vectors, which attention then reads in place (fp32)
// or widens (bf16) without loads that straddle two lines), in huge pages (kv_block_memory.h).
std::shared_ptr<uint8_t[]> LayerKvCache::NewBlock() const { return NewKvBlock(block_bytes()); }

void LayerKvCache::Reserve(int64_t end) {
  while (static_cast<int64_t>(blocks_.size()) < kv::BlocksAt(ring_, end)) blocks_.push_back(NewBlock());
}

LayerKvCache LayerKvCache::Frozen(int64_t length) const {
  LayerKvCache out(*this);
  out.blocks_.clear();
  const int64_t blocks = std::min<int64_t>(kv::BlocksAt(ring_, length), static_cast<int64_t>(blocks_.size()));
  // Whole pages below the cut are shared; a ring and a partly filled page are copied.
  const int64_t whole = ring_ ? 0 : length / kv::kPageTokens;
  for (int64_t b = 0; b < blocks; ++b) {
    if (b < whole) {
      out.blocks_.push_back(blocks_[b]);
    } else {
      std::shared_ptr<uint8_t[]> copy = NewBlock();
      std::memcpy(copy.get(), blocks_[b].get(), block_bytes());
      out.blocks_.push_back(std::move(copy));
    }
  }
  return out;
}

int64_t LayerKvCache::SharedPositions(const LayerKvCache& other) const {
  if (ring_ || other.ring_) return 0;
  size_t pages = 0;
  while (pages < std::min(blocks_.size(), other.blocks_.size()) && blocks_[pages] == other.blocks_[pages]) ++pages;
  return static_cast<int64_t>(pages) * kv::kPageTokens;
}

uint8_t* LayerKvCache::Row(int64_t pos, int which) {
  const kv::Slot s = kv::SlotOf(pos, ring_, window_);
  const int64_t offset = kv::RowOffset(s.slot, which, width_, ring_, window_, joined_);
  return blocks_[s.block].get() + static_cast<size_t>(offset) * elem_;
}

size_t LayerKvCache::bytes() const {
  return blocks_.size() * block_bytes();
}

namespace {

// What a CPU sequence's snapshot holds: its layers frozen at one length.
class CpuPrefix final : public PrefixSnapshot {
 public:
  CpuPrefix(std::vector<LayerKvCache> layers, int layer_begin, int64_t length)
      : layers_(std::move(layers)), layer_begin_(layer_begin), length_(length) {}
  int64_t length() const override { return length_; }
  size_t bytes() const override {
    size_t b = 0;
    for (const LayerKvCache& l : layers_) b += l.bytes();
    return b;
  }
  const std::vector<LayerKvCache>& layers() const { return layers_; }
  int layer_begin() const { return layer_begin_; }

 private:
  std::vector<LayerKvCache> layers_;
  int layer_begin_;
  int64_t length_;
};

}  // namespace

std::unique_ptr<PrefixSnapshot> SequenceKv::Snapshot() const {
  std::vector<LayerKvCache> frozen;
  for (const LayerKvCache& l : layers_) frozen.push_back(l.Frozen(length()));
  return std::make_unique<CpuPrefix>(std::move(frozen), layer_begin_, length());
}

bool SequenceKv::Fits(const PrefixSnapshot& prefix, int layer_begin, size_t layers) {
  const auto* p = dynamic_cast<const CpuPrefix*>(&prefix);
  return p != nullptr && p->layer_begin() == layer_begin && p->layers().size() == layers;
}

std::unique_ptr<SequenceKv> SequenceKv::From(const PrefixSnapshot& prefix) {
  const auto& p = static_cast<const CpuPrefix&>(prefix);
  std::vector<LayerKvCache> layers;
  for (const LayerKvCache& l : p.layers()) layers.push_back(l.Frozen(p.length()));
  auto kv = std::make_unique<SequenceKv>(std::move(layers), p.layer_begin());
  kv->Advance(p.length());
  return kv;
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
