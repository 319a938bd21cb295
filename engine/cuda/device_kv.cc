#include "engine/cuda/device_kv.h"

#include "engine/model/kv_layout.h"

namespace layerpipe::cuda {

namespace {

// What a CUDA sequence's snapshot holds: its layers frozen at one length, and which backend made it.
class CudaPrefix final : public PrefixSnapshot {
 public:
  CudaPrefix(const void* owner, cudaStream_t stream, std::vector<DeviceLayerKv> layers, int64_t length)
      : owner_(owner), stream_(stream), layers_(std::move(layers)), length_(length) {}
  int64_t length() const override { return length_; }
  size_t bytes() const override {
    size_t b = 0;
    for (const DeviceLayerKv& l : layers_) b += l.bytes();
    return b;
  }
  const void* owner() const { return owner_; }
  cudaStream_t stream() const { return stream_; }
  const std::vector<DeviceLayerKv>& layers() const { return layers_; }

 private:
  const void* owner_;
  cudaStream_t stream_;
  std::vector<DeviceLayerKv> layers_;
  int64_t length_;
};

}  // namespace

absl::Status DeviceLayerKv::Reserve(int64_t end) {
  const size_t want = static_cast<size_t>(kv::BlocksAt(ring_, end));
  while (blocks_.size() < want) {
    auto b = std::make_shared<DeviceBuffer>();
    LP_RETURN_IF_ERROR(b->Allocate(BlockBytes()));
    blocks_.push_back(std::move(b));
  }
  return absl::OkStatus();
}

void DeviceLayerKv::AppendBlockPointers(std::vector<uint64_t>* out) const {
  for (const auto& b : blocks_) out->push_back(reinterpret_cast<uint64_t>(b->get()));
}

absl::StatusOr<DeviceLayerKv> DeviceLayerKv::Frozen(int64_t length, cudaStream_t stream) const {
  DeviceLayerKv out(ring_, window_, width_, elem_, joined_);
  const auto n = static_cast<size_t>(kv::BlocksAt(ring_, length));
  for (size_t b = 0; b < n && b < blocks_.size(); ++b) {
    // Positions below the cut are never written again: a whole page can be shared.
    const bool whole_page = !ring_ && static_cast<int64_t>(b + 1) * kv::kPageTokens <= length;
    if (whole_page) {
      out.blocks_.push_back(blocks_[b]);
      continue;
    }
    auto copy = std::make_shared<DeviceBuffer>();
    LP_RETURN_IF_ERROR(copy->Allocate(BlockBytes()));
    LP_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(copy->get(), blocks_[b]->get(), BlockBytes(), cudaMemcpyDeviceToDevice, stream));
    out.blocks_.push_back(std::move(copy));
  }
  // Drained before the source is written again, by its own next step or anyone's.
  LP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return out;
}

std::unique_ptr<PrefixSnapshot> DeviceSequenceKv::Snapshot() const {
  std::vector<DeviceLayerKv> frozen;
  for (const DeviceLayerKv& l : layers_) {
    auto f = l.Frozen(length(), stream_);
    if (!f.ok()) return nullptr;
    frozen.push_back(*std::move(f));
  }
  return std::make_unique<CudaPrefix>(owner_, stream_, std::move(frozen), length());
}

absl::StatusOr<std::unique_ptr<DeviceSequenceKv>> DeviceSequenceKv::From(const PrefixSnapshot& prefix,
                                                                         const void* owner) {
  const auto* p = dynamic_cast<const CudaPrefix*>(&prefix);
  if (p == nullptr || p->owner() != owner) {
    return absl::InvalidArgumentError("the prefix is not a snapshot of this CUDA backend's sequences");
  }
  std::vector<DeviceLayerKv> layers;
  for (const DeviceLayerKv& l : p->layers()) {
    auto f = l.Frozen(p->length(), p->stream());
    if (!f.ok()) return f.status();
    layers.push_back(*std::move(f));
  }
  auto kv = std::make_unique<DeviceSequenceKv>(owner, p->stream(), std::move(layers));
  kv->Advance(p->length());
  return kv;
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
