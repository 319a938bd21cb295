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
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/cpu/thread_pool.h"
#include "engine/backend/device_handoff.h"
#include "engine/sampling/logit_summary.h"
#include "engine/model/precision.h"
#include "engine/backend/sequence_state.h"
#include "engine/model/soft_tokens.h"
#include "engine/model/weights.h"

namespace layerpipe {

// n new tokens of one sequence, at positions kv->length() .. kv->length() + n - 1. image_blocks: the
// images whose soft tokens lie in the slice (absolute positions, ascending, each wholly inside it).
// outputs: how many of the slice's last rows the caller reads after the model's last layer (the rows
// that need logits: 0 for a prompt chunk before the last, 1 for a prompt's end or a decode step); -1,
// all. A backend holding the last layer may compute only those rows there (llama.cpp's output ids do
// this after attention for most models), the others storing just their keys and values; the others'
// hidden rows are then left unspecified. Their keys and values, and the rows computed, are bit for bit
// those of a full pass.
struct SequenceSlice {
  SequenceState* kv;
  int64_t n;
  absl::Span<const PositionRange> image_blocks = {};
  int64_t outputs = -1;
};

// InvalidArgument unless the slice's image blocks are non-empty, ascending, disjoint and inside it (the
// caller never splits an image across slices).
inline absl::Status CheckImageBlocks(const SequenceSlice& s) {
  int64_t next = s.kv->length();
  for (const PositionRange& b : s.image_blocks) {
    if (b.begin < next || b.end <= b.begin || b.end > s.kv->length() + s.n) {
      return absl::InvalidArgumentError(absl::StrCat("image block [", b.begin, ", ", b.end,
                                                     ") is not an ascending block inside the slice [", s.kv->length(),
                                                     ", ", s.kv->length() + s.n, ")"));
    }
    next = b.end;
  }
  return absl::OkStatus();
}

class LayerBackend {
 public:
  virtual ~LayerBackend() = default;

  // "cpu", "cuda:0", ...
  virtual std::string device() const = 0;

  // Empty caches for a new sequence, in this backend's memory.
  virtual std::unique_ptr<SequenceState> NewSequence() const = 0;
  // A new sequence that starts where `prefix` (a Snapshot of one of this backend's sequences) stands:
  // its next token goes to position prefix.length(), and its logits equal those of a sequence that ran
  // the prefix's tokens itself, bit for bit.
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceFrom(const PrefixSnapshot& prefix) const {
    return absl::UnimplementedError(device() + " keeps no prefixes");
  }
  // Whether its sequences' Snapshot() and NewSequenceFrom work: a worker offers the prefix cache only then.
  virtual bool keeps_prefixes() const { return false; }

  // hidden: host [sum of n, hidden_size] fp32, rows in slice order; updated in place. Appends each
  // slice's keys and values to its caches and advances its length. A sequence may appear once per call;
  // every state must come from this backend's NewSequence. On error no sequence has advanced.
  virtual absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden) = 0;

  // First stage: h = E[id] · bf16(sqrt(hidden)) into host `hidden`. Ids must be in the vocabulary.
  virtual absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) = 0;

  // First stage: the soft tokens of one prepared image, [blocks][hidden] into `out` (the vision embedder),
  // and of `tokens` audio frames (the audio projection). Not scaled like text embeddings.
  virtual absl::Status EmbedImage(const ImageView& image, float* out) {
    return absl::UnimplementedError(device() + " has no vision embedder");
  }
  virtual absl::Status EmbedAudio(const float* samples, int64_t tokens, float* out) {
    return absl::UnimplementedError(device() + " has no audio embedder");
  }

  // Embed, then the soft spans' rows replaced by their soft tokens: the first stage's input rows.
  absl::Status EmbedInputs(absl::Span<const int32_t> ids, absl::Span<const SoftSpan> soft, float* hidden) {
    if (absl::Status st = Embed(ids, hidden); !st.ok()) return st;
    const ModelConfig& c = weights().config();
    const int64_t H = c.hidden_size;
    for (const SoftSpan& s : soft) {
      if (s.offset < 0 || s.count <= 0 || s.offset + s.count > static_cast<int64_t>(ids.size())) {
        return absl::InvalidArgumentError("a soft-token span lies outside its slice");
      }
      const bool image = s.kind == SoftSpan::Kind::kImage;
      const int32_t placeholder = image ? c.mm_ids.image : c.mm_ids.audio;
      for (int64_t i = s.offset; i < s.offset + s.count; ++i) {
        if (ids[i] != placeholder) {
          return absl::InvalidArgumentError(absl::StrCat("row ", i, " of a soft-token span holds id ", ids[i],
                                                         ", not the placeholder ", placeholder));
        }
      }
      float* rows = hidden + s.offset * H;
      if (image) {
        const int64_t b = c.vision.model_patch_size;
        if (s.image.height % b != 0 || s.image.width % b != 0 || (s.image.height / b) * (s.image.width / b) != s.count) {
          return absl::InvalidArgumentError(absl::StrCat("an image of ", s.image.width, "x", s.image.height,
                                                         " pixels does not make the span's ", s.count, " soft tokens"));
        }
      }
      absl::Status st = image ? EmbedImage(s.image, rows) : EmbedAudio(s.samples, s.count, rows);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

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
