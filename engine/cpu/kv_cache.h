// Per-sequence KV caches of one layer range (MODEL.md §2, "What this means for the KV cache").
#ifndef LAYERPIPE_ENGINE_CPU_KV_CACHE_H_
#define LAYERPIPE_ENGINE_CPU_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/precision.h"
#include "engine/backend/sequence_state.h"

namespace layerpipe {

// K and V rows ([kv_heads · head_dim] each) of one layer in host memory, laid out as engine/model/kv_layout.h
// says: a ring of `window` slots for a sliding layer, pages that grow with the context for a full one;
// with `joined` > 0, K and V of a position are two views of one row (engine/model/joined_kv.h).
class LayerKvCache {
 public:
  LayerKvCache(bool ring, int64_t window, int64_t row_width, Precision precision, int64_t joined = 0);

  // Makes room for positions < end (allocates pages of a full layer).
  void Reserve(int64_t end);
  // Row pointers; T is float (fp32) or uint16_t (bf16). `pos` must be retained.
  template <typename T>
  T* K(int64_t pos) {
    return reinterpret_cast<T*>(Row(pos, 0));
  }
  template <typename T>
  T* V(int64_t pos) {
    return reinterpret_cast<T*>(Row(pos, 1));
  }
  bool ring() const { return ring_; }
  int64_t row_width() const { return width_; }
  int64_t joined() const { return joined_; }
  size_t bytes() const;

  // This layer as of `length` positions: the whole pages below the cut shared (positions are written
  // once, so they never change again), the last partly filled page and the ring copied (the sequence
  // they came from goes on writing into them). Freezing a frozen layer is how a sequence starts from
  // it: what it writes into is its own.
  LayerKvCache Frozen(int64_t length) const;

  // Positions [0, n) that this cache and `other` hold in the same memory: the whole pages both took
  // from one snapshot (Frozen). Always 0 for a ring, which every sequence copies.
  int64_t SharedPositions(const LayerKvCache& other) const;

 private:
  uint8_t* Row(int64_t pos, int which);
  size_t block_bytes() const;
  std::shared_ptr<uint8_t[]> NewBlock() const;

  bool ring_;
  int64_t window_;
  int64_t width_;
  int64_t joined_;
  size_t elem_;
  // Ring: one block of [2][window][width]; paged: pages of [2][kv::kPageTokens][width] (or of
  // [kv::kPageTokens][width + joined] joined rows). Shared: a
  // snapshot and the sequences started from it hold the same whole pages.
  std::vector<std::shared_ptr<uint8_t[]>> blocks_;
};

// The host-memory caches of one sequence for the layers [layer_begin, layer_end) a stage serves.
class SequenceKv final : public SequenceState {
 public:
  SequenceKv(std::vector<LayerKvCache> layers, int layer_begin)
      : layers_(std::move(layers)), layer_begin_(layer_begin) {}

  LayerKvCache& layer(int absolute_layer) { return layers_[absolute_layer - layer_begin_]; }
  size_t bytes() const override;
  size_t sliding_bytes() const override;
  std::unique_ptr<PrefixSnapshot> Snapshot() const override;

  // A sequence continuing from `prefix`, which must be a snapshot of this layer range's caches.
  static std::unique_ptr<SequenceKv> From(const PrefixSnapshot& prefix);
  // The snapshot's layer range, to check a prefix against the backend it is given to.
  static bool Fits(const PrefixSnapshot& prefix, int layer_begin, size_t layers);

 private:
  std::vector<LayerKvCache> layers_;
  int layer_begin_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_KV_CACHE_H_
