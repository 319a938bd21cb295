// What a backend keeps for one sequence between steps: its KV caches (in host or device memory) and
// how many positions they hold. Only the backend that made a state reads its caches.
#ifndef LAYERPIPE_ENGINE_BACKEND_SEQUENCE_STATE_H_
#define LAYERPIPE_ENGINE_BACKEND_SEQUENCE_STATE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace layerpipe {

// A sequence's caches frozen at one length, to start other sequences from (the prefix cache): a full
// layer's whole pages are shared by reference (positions below the cut are never written again), its
// partly filled last page and the sliding rings are copied, since the ring overwrites its oldest rows.
class PrefixSnapshot {
 public:
  virtual ~PrefixSnapshot() = default;
  // Positions the snapshot holds: a sequence started from it continues at this position.
  virtual int64_t length() const = 0;
  // Bytes the snapshot keeps alive: its copies, and the pages it shares.
  virtual size_t bytes() const = 0;
};

class SequenceState {
 public:
  virtual ~SequenceState() = default;

  // Positions already written (the next token's position).
  int64_t length() const { return length_; }
  void Advance(int64_t n) { length_ += n; }

  // Cache bytes held now, and the part of them in sliding-window rings (the rest is full-attention
  // pages). Every backend allocates the same layout, so engine/model/kv_bytes.h predicts both.
  virtual size_t bytes() const = 0;
  virtual size_t sliding_bytes() const = 0;

  // The caches as they are now (see PrefixSnapshot); null from a backend that keeps no prefixes.
  virtual std::unique_ptr<PrefixSnapshot> Snapshot() const { return nullptr; }

 private:
  int64_t length_ = 0;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_BACKEND_SEQUENCE_STATE_H_
