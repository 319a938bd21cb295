// The backend seam: something that runs a contiguous range of decoder layers (and, when it holds them,
// the embedding and the tied head) on a batch of sequence slices. The CPU executor and the CUDA backend
// implement it; stages and the engine only talk to this interface.
#ifndef LAYERPIPE_ENGINE_BACKEND_LAYER_BACKEND_H_
#define LAYERPIPE_ENGINE_BACKEND_LAYER_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cpu/thread_pool.h"
#include "engine/backend/device_handoff.h"
#include "engine/sampling/logit_summary.h"
#include "engine/model/precision.h"
#include "engine/backend/sequence_state.h"
#include "engine/model/weights.h"

namespace layerpipe {

// n new tokens of one sequence, at positions kv->length() .. kv->length() + n - 1.
struct SequenceSlice {
  SequenceState* kv;
  int64_t n;
};

class LayerBackend {
 public:
  virtual ~LayerBackend() = default;

  // "cpu", "cuda:0", ...
  virtual std::string device() const = 0;

  // Empty caches for a new sequence, in this backend's memory.
  virtual std::unique_ptr<SequenceState> NewSequence() const = 0;

  // hidden: host [sum of n, hidden_size] fp32, rows in slice order; updated in place. Appends each
  // slice's keys and values to its caches and advances its length. A sequence may appear once per call;
  // every state must come from this backend's NewSequence. On error no sequence has advanced.
  virtual absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden) = 0;

  // First stage: h = E[id] · bf16(sqrt(hidden)) into host `hidden`. Ids must be in the vocabulary.
  virtual absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) = 0;

  // Last stage: softcapped logits of `rows` host hidden rows into host logits [rows, vocab].
  virtual absl::Status Logits(const float* hidden, int64_t rows, float* logits) = 0;

  // Last stage: the summary requests[r] asks for of each host hidden row r (engine/sampling/logit_summary.h),
  // into *out. This default computes the logits with Logits and summarises them on the host; a device
  // backend summarises where the logits are and copies back only the summaries.
  virtual absl::Status SummarizeLogits(const float* hidden, absl::Span<const LogitRowRequest> requests,
                                       std::vector<LogitRowSummary>* out) {
    const int64_t V = weights().config().vocab_size, rows = static_cast<int64_t>(requests.size());
    std::vector<float> logits(static_cast<size_t>(rows * V));
    if (absl::Status st = Logits(hidden, rows, logits.data()); !st.ok()) return st;
    out->clear();
    for (int64_t r = 0; r < rows; ++r) {
      out->push_back(SummarizeLogitRow({logits.data() + r * V, static_cast<size_t>(V)}, requests[r]));
    }
    return absl::OkStatus();
  }

  // Whether SummarizeLogits works where the logits are (a device) rather than on host logits. Samplers
  // whose host summary costs more than their pass over the whole row (temperature, top-p) ask for one
  // only when it does (Sampler::UsesSummary).
  virtual bool summarizes_on_device() const { return false; }

  virtual const ModelWeights& weights() const = 0;
  virtual Precision precision() const = 0;

  // ---- Device hand-off between GPU stages (engine/backend/device_handoff.h); the defaults mean "none".

  // True when ForwardToDevice and the peer-link calls work.
  virtual bool device_handoff() const { return false; }
  // What identifies the device across processes on one host (a PCI bus id): two stages on one device
  // join a kSameDevice link, two on different devices a kAcrossDevices one.
  virtual std::string device_uid() const { return ""; }
  // Forward whose input rows are `host_in` (host memory) or, when that is null, `device_in`, leaving the
  // output rows in this backend's device memory. Same contract as Forward otherwise.
  virtual absl::StatusOr<std::unique_ptr<DeviceRows>> ForwardToDevice(absl::Span<const SequenceSlice> slices,
                                                                      const float* host_in,
                                                                      std::unique_ptr<DeviceRows> device_in) {
    return absl::UnimplementedError(device() + " keeps no hidden rows in device memory");
  }
  // A fresh link id for the sending stage to give the receiving one; it serves either kind of link.
  virtual absl::StatusOr<std::string> NewPeerLinkId() {
    return absl::UnimplementedError(device() + " has no peer links");
  }
  // Joins link `id` as rank 0 (sender) or 1 (receiver), both ends naming the same kind; returns once
  // both ends have joined. A peer that never comes must not hold the caller forever: Cancelled as soon
  // as *give_up turns true (the caller's assignment was replaced), DeadlineExceeded after
  // kPeerLinkJoinTimeout.
  virtual absl::StatusOr<std::unique_ptr<PeerLink>> JoinPeerLink(const std::string& id, int rank, PeerLinkKind kind,
                                                                 const std::atomic<bool>* give_up) {
    return absl::UnimplementedError(device() + " has no peer links");
  }
  int layer_begin() const { return weights().selection().layer_begin; }
  int layer_end() const { return weights().selection().layer_end; }
};

// How long JoinPeerLink waits for the other end.
inline constexpr int kPeerLinkJoinTimeoutSeconds = 120;

// Makes the backend that runs the layers of `weights`. The engine library only knows the CPU one; the
// CUDA backend lives in a library above it (backend/backend_factory.h picks by device name).
using BackendMaker =
    std::function<absl::StatusOr<std::unique_ptr<LayerBackend>>(const ModelWeights&, Precision, ThreadPool&)>;

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_BACKEND_LAYER_BACKEND_H_
