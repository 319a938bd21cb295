#include "engine/cuda/device_kv.h"

#include "engine/cuda/kv_index.h"
#include "engine/kv_cache.h"

namespace layerpipe::cuda {

static_assert(kPageTokens == LayerKvCache::kPageTokens, "device pages must match the CPU cache's");

absl::Status DeviceLayerKv::Reserve(int64_t end) {
  if (end <= 0) return absl::OkStatus();
  const size_t want = ring_ ? 1 : static_cast<size_t>((end + kPageTokens - 1) / kPageTokens);
  while (blocks_.size() < want) {
    DeviceBuffer b;
    LP_RETURN_IF_ERROR(b.Allocate(BlockBytes()));
    blocks_.push_back(std::move(b));
  }
  return absl::OkStatus();
}

void DeviceLayerKv::AppendBlockPointers(std::vector<uint64_t>* out) const {
  for (const DeviceBuffer& b : blocks_) out->push_back(reinterpret_cast<uint64_t>(b.get()));
}

size_t DeviceSequenceKv::bytes() const {
  size_t b = 0;
  for (const DeviceLayerKv& l : layers_) b += l.bytes();
  return b;
}

size_t DeviceSequenceKv::sliding_bytes() const {
  size_t b = 0;
  for (const DeviceLayerKv& l : layers_) b += l.ring() ? l.bytes() : 0;
  return b;
}

}  // namespace layerpipe::cuda
