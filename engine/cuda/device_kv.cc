#include "engine/cuda/device_kv.h"

#include "engine/model/kv_layout.h"

namespace layerpipe::cuda {

absl::Status DeviceLayerKv::Reserve(int64_t end) {
  const size_t want = static_cast<size_t>(kv::BlocksAt(ring_, end));
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
