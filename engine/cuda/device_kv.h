// Device-memory KV caches of one sequence for a layer range, in the layout and allocation pattern of
// engine/model/kv_layout.h (a sliding layer's whole ring on its first token, a full layer's pages as they
// fill), so bytes() and sliding_bytes() match the CPU cache and engine/model/kv_bytes.h. Blocks are
// reference-counted so that a prefix snapshot and the sequences started from it share whole pages, as
// the CPU cache does (engine/backend/sequence_state.h, PrefixSnapshot).
#ifndef LAYERPIPE_ENGINE_CUDA_DEVICE_KV_H_
#define LAYERPIPE_ENGINE_CUDA_DEVICE_KV_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/model/kv_layout.h"
#include "engine/backend/sequence_state.h"

namespace layerpipe::cuda {

class DeviceLayerKv {
 public:
  // joined: kv_layout.h's joined rows (0: K and V rows apart).
  DeviceLayerKv(bool ring, int64_t window, int64_t row_width, size_t elem_bytes, int64_t joined)
      : ring_(ring), window_(window), width_(row_width), joined_(joined), elem_(elem_bytes) {}

  // Allocates what positions < end need.
  absl::Status Reserve(int64_t end);
  bool ring() const { return ring_; }
  // Device addresses of the blocks: the ring, or the pages in position order.
  void AppendBlockPointers(std::vector<uint64_t>* out) const;
  size_t blocks() const { return blocks_.size(); }
  size_t bytes() const { return blocks_.size() * BlockBytes(); }
  // This layer as of `length` positions: whole pages shared, the ring and a partly filled page copied on
  // `stream` (the backend's, so the copy follows the step that wrote them), which it then drains.
  absl::StatusOr<DeviceLayerKv> Frozen(int64_t length, cudaStream_t stream) const;

 private:
  size_t BlockBytes() const {
    return static_cast<size_t>(kv::BlockBytes(ring_, window_, width_, static_cast<int64_t>(elem_), joined_));
  }

  bool ring_;
  int64_t window_;
  int64_t width_;
  int64_t joined_;
  size_t elem_;
  std::vector<std::shared_ptr<DeviceBuffer>> blocks_;
};

class DeviceSequenceKv final : public SequenceState {
 public:
  // `owner` identifies the backend that made it (a state is only valid there); `stream` is the backend's.
  DeviceSequenceKv(const void* owner, cudaStream_t stream, std::vector<DeviceLayerKv> layers)
      : owner_(owner), stream_(stream), layers_(std::move(layers)) {}
  // A sequence continuing from `prefix`, a Snapshot of a sequence of the backend `owner`.
  static absl::StatusOr<std::unique_ptr<DeviceSequenceKv>> From(const PrefixSnapshot& prefix, const void* owner);

  const void* owner() const { return owner_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  DeviceLayerKv& layer(int local) { return layers_[local]; }
  const DeviceLayerKv& layer(int local) const { return layers_[local]; }
  size_t bytes() const override;
  size_t sliding_bytes() const override;
  // Null when the device copies fail (the stage then keeps no prefix, and says so).
  std::unique_ptr<PrefixSnapshot> Snapshot() const override;

 private:
  const void* owner_;
  cudaStream_t stream_;
  std::vector<DeviceLayerKv> layers_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DEVICE_KV_H_
