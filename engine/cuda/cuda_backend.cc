// The CUDA LayerBackend: the CPU executor's forward pass (engine/cpu/cpu_backend.cc) with the same
// precision semantics, on one device and one stream (plus a second that hands rows out). A step
// uploads the hidden rows (or copies them from device rows) and a metadata buffer (slices, tiles,
// rotary tables, cache block pointers), runs every layer, and downloads the hidden rows (or copies
// them into new device rows); decode steps replay a captured CUDA graph. This file only orchestrates:
// planning (host_step.h), scratch (step_scratch.h), the layers (decoder_layers.h, gemm_attention.h),
// the embedding and head (tied_embedding.h), the image and audio embedders (embedders.h) and the peer
// links (links/peer_links.h) live beside it.
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/decode_graphs.h"
#include "engine/cuda/decoder_layers.h"
#include "engine/cuda/device_kv.h"
#include "engine/cuda/device_rows.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/embedders.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/gemm_attention.h"
#include "engine/cuda/host_step.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/links/peer_links.h"
#include "engine/cuda/step_plan.h"
#include "engine/cuda/step_scratch.h"
#include "engine/cuda/stream.h"
#include "engine/cuda/tied_embedding.h"
#include "engine/model/kv_bytes.h"

namespace layerpipe {
namespace cuda {
namespace {

// Scores and probabilities of one query block stay below this (PlanGemmQueryBlocks) unless
// LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET (bytes) says otherwise.
constexpr int64_t kDefaultGemmAttentionBudget = int64_t{256} << 20;

// Where a step's hidden rows come from (one of the inputs) and go to (one of the outputs).
struct StepIo {
  const float* host_in = nullptr;
  const CudaDeviceRows* device_in = nullptr;
  float* host_out = nullptr;
  std::unique_ptr<CudaDeviceRows>* device_out = nullptr;
};

class CudaBackend final : public LayerBackend {
 public:
  CudaBackend(const ModelWeights& w, Precision precision, int device)
      : w_(w), cfg_(w.config()), precision_(precision), device_(device) {}
  // The streams themselves live on while device rows this backend made still free into them.
  ~CudaBackend() override {
    cudaSetDevice(device_);
    graphs_.Clear();
    if (layers_done_ != nullptr) cudaEventDestroy(layers_done_);
  }

  absl::Status Init();

  std::string device() const override { return absl::StrCat("cuda:", device_); }
  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceFrom(const PrefixSnapshot& prefix) const override;
  bool keeps_prefixes() const override { return true; }
  absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden) override;
  absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) override { return embedding_->Embed(ids, hidden); }
  absl::Status EmbedImage(const ImageView& image, float* out) override { return embedders_->EmbedImage(image, out); }
  absl::Status EmbedAudio(const float* samples, int64_t tokens, float* out) override {
    return embedders_->EmbedAudio(samples, tokens, out);
  }
  absl::Status Logits(const float* hidden, int64_t rows, float* logits) override {
    return embedding_->Logits(hidden, rows, logits);
  }
  absl::Status SummarizeLogits(const float* hidden, absl::Span<const LogitRowRequest> requests,
                               std::vector<LogitRowSummary>* out) override {
    return embedding_->SummarizeLogits(hidden, requests, out);
  }
  bool summarizes_on_device() const override { return true; }
  const ModelWeights& weights() const override { return w_; }
  Precision precision() const override { return precision_; }

  bool device_handoff() const override { return rows_pool_; }
  std::string device_uid() const override { return pci_bus_id_; }
  absl::StatusOr<std::unique_ptr<DeviceRows>> ForwardToDevice(absl::Span<const SequenceSlice> slices,
                                                              const float* host_in,
                                                              std::unique_ptr<DeviceRows> device_in) override;
  absl::StatusOr<std::string> NewPeerLinkId() override;
  absl::StatusOr<std::unique_ptr<PeerLink>> JoinPeerLink(const std::string& id, int rank, PeerLinkKind kind,
                                                         const std::atomic<bool>* give_up) override;

 private:
  bool act_bf16() const { return precision_ == Precision::kBf16; }
  absl::Status Validate(absl::Span<const SequenceSlice> slices) const;
  absl::Status ValidateDeviceIn(const CudaDeviceRows& in, absl::Span<const SequenceSlice> slices) const;
  absl::Status HandoffAvailable() const;
  // Forward and ForwardToDevice: the same step, with the rows in and out where `io` says.
  absl::Status Step(absl::Span<const SequenceSlice> slices, const StepIo& io);
  // Copies the step's `rows` hidden rows into new device rows on the hand-off stream.
  absl::Status CopyOut(int64_t rows, std::unique_ptr<CudaDeviceRows>* out);

  const ModelWeights& w_;
  const ModelConfig& cfg_;
  Precision precision_;
  int device_;
  bool use_graphs_ = true;
  bool rows_pool_ = false;  // the device has stream-ordered pools, which device rows come from
  std::string pci_bus_id_;
  std::shared_ptr<Stream> stream_owner_;
  cudaStream_t stream_ = nullptr;  // stream_owner_'s: every step's work, and the decode graph captures
  // Where output device rows are made and freed. Never captured: rows may be let go on any thread at
  // any time, and a free enqueued on a stream under capture would become part of the graph.
  std::shared_ptr<Stream> handoff_;
  cudaEvent_t layers_done_ = nullptr;  // a step's layers, for the hand-off stream to wait on
  std::unique_ptr<DeviceWeights> dw_;
  std::unique_ptr<Gemm> gemm_;
  DecodeGraphs graphs_;
  std::unique_ptr<StepPlanner> planner_;
  std::unique_ptr<StepScratch> scratch_;
  std::unique_ptr<GemmAttention> gemm_attention_;
  std::unique_ptr<DecoderLayers> layers_;
  std::unique_ptr<TiedEmbedding> embedding_;
  std::unique_ptr<DeviceEmbedders> embedders_;
};

absl::Status CudaBackend::Init() {
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  int sm_count = 0;
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device_));
  absl::StatusOr<std::shared_ptr<Stream>> stream = Stream::Create(device_);
  if (!stream.ok()) return stream.status();
  stream_owner_ = *std::move(stream);
  stream_ = stream_owner_->get();
  stream = Stream::Create(device_);
  if (!stream.ok()) return stream.status();
  handoff_ = *std::move(stream);
  LP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&layers_done_, cudaEventDisableTiming));
  char bus_id[64] = {};
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_));
  pci_bus_id_ = bus_id;
  absl::StatusOr<bool> pool = CudaDeviceRows::PreparePool(device_);
  if (!pool.ok()) return pool.status();
  rows_pool_ = *pool;
  if (const char* env = std::getenv("LAYERPIPE_CUDA_GRAPHS"); env != nullptr && std::string(env) == "0") {
    use_graphs_ = false;
  }
  bool gemm_attention = true;  // long prefill slices attend through GEMMs (bf16 mode)
  if (const char* env = std::getenv("LAYERPIPE_CUDA_GEMM_ATTENTION"); env != nullptr && std::string(env) == "0") {
    gemm_attention = false;
  }
  gemm_attention = gemm_attention && act_bf16();
  int64_t gemm_attention_budget = kDefaultGemmAttentionBudget;
  if (const char* env = std::getenv("LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET"); env != nullptr) {
    const long long bytes = std::atoll(env);
    if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET=", env));
    gemm_attention_budget = bytes;
  }
  for (int l = layer_begin(); l < layer_end(); ++l) {
    const int hd = cfg_.HeadDim(l);
    if (hd % kHeadDimMultiple != 0 || hd > kMaxHeadDim) {
      return absl::UnimplementedError(absl::StrCat("CUDA backend: layer ", l, " head_dim ", hd, " is not a multiple of ",
                                                   kHeadDimMultiple, " up to ", kMaxHeadDim));
    }
    if (cfg_.num_heads % cfg_.KvHeads(l) != 0) {
      return absl::UnimplementedError(absl::StrCat("CUDA backend: layer ", l, " heads not a multiple of KV heads"));
    }
  }
  LP_CUDA_RETURN_IF_ERROR(PrepareAttentionKernels());
  planner_ = std::make_unique<StepPlanner>(cfg_, layer_end() - layer_begin(), sm_count, gemm_attention,
                                           gemm_attention_budget);
  absl::StatusOr<std::unique_ptr<DeviceWeights>> dw = DeviceWeights::Upload(w_, precision_ == Precision::kFp32);
  if (!dw.ok()) return dw.status();
  dw_ = std::move(*dw);
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  if (!gemm.ok()) return gemm.status();
  gemm_ = std::move(*gemm);
  scratch_ = std::make_unique<StepScratch>(cfg_, layer_begin(), layer_end(), precision_, &graphs_);
  gemm_attention_ = std::make_unique<GemmAttention>(cfg_, gemm_.get(), stream_);
  layers_ = std::make_unique<DecoderLayers>(cfg_, *dw_, layer_begin(), layer_end(), act_bf16(), *planner_, *scratch_,
                                            gemm_.get(), gemm_attention_.get(), stream_);
  embedding_ = std::make_unique<TiedEmbedding>(w_, *dw_, device_, act_bf16(), scratch_.get(), gemm_.get(), stream_);
  embedders_ = std::make_unique<DeviceEmbedders>(cfg_, *dw_, device_, act_bf16(), gemm_.get(), stream_);
  return absl::OkStatus();
}

std::unique_ptr<SequenceState> CudaBackend::NewSequence() const {
  std::vector<DeviceLayerKv> layers;
  const auto elem = static_cast<size_t>(KvElementBytes(precision_));
  for (int l = layer_begin(); l < layer_end(); ++l) {
    const bool full = cfg_.layer_types[l] == LayerType::kFull;
    layers.emplace_back(!full, cfg_.sliding_window, KvRowWidth(cfg_, l), elem, KvJoinedValues(cfg_, l));
  }
  return std::make_unique<DeviceSequenceKv>(this, stream_, std::move(layers));
}

absl::StatusOr<std::unique_ptr<SequenceState>> CudaBackend::NewSequenceFrom(const PrefixSnapshot& prefix) const {
  auto kv = DeviceSequenceKv::From(prefix, this);
  if (!kv.ok()) return kv.status();
  return std::unique_ptr<SequenceState>(std::move(*kv));
}

absl::Status CudaBackend::Validate(absl::Span<const SequenceSlice> slices) const {
  std::set<const SequenceState*> seen;
  for (const SequenceSlice& s : slices) {
    if (s.kv == nullptr || s.n <= 0) return absl::InvalidArgumentError("empty sequence slice in a step");
    if (!seen.insert(s.kv).second) return absl::InvalidArgumentError("a sequence appears twice in one step");
    const auto* kv = dynamic_cast<const DeviceSequenceKv*>(s.kv);
    if (kv == nullptr || kv->owner() != this) {
      return absl::InvalidArgumentError("a sequence state was not made by this CUDA backend");
    }
    if (s.kv->length() + s.n > cfg_.max_position_embeddings) {
      return absl::OutOfRangeError(absl::StrCat("sequence would reach position ", s.kv->length() + s.n,
                                                " past the model's ", cfg_.max_position_embeddings));
    }
    LP_RETURN_IF_ERROR(CheckImageBlocks(s));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ValidateDeviceIn(const CudaDeviceRows& in, absl::Span<const SequenceSlice> slices) const {
  int64_t rows = 0;
  for (const SequenceSlice& s : slices) rows += s.n;
  if (in.device() != device_) {
    return absl::InvalidArgumentError(
        absl::StrCat("input rows live on cuda:", in.device(), ", this backend runs on cuda:", device_));
  }
  if (in.rows() != rows || in.width() != cfg_.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("input rows are [", in.rows(), ", ", in.width(), "]; the step needs [",
                                                   rows, ", ", cfg_.hidden_size, "]"));
  }
  return in.Filled();
}

absl::Status CudaBackend::HandoffAvailable() const {
  if (rows_pool_) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(device(), " has no stream-ordered memory pools, which device hand-off needs"));
}

absl::Status CudaBackend::Forward(absl::Span<const SequenceSlice> slices, float* hidden) {
  StepIo io;
  io.host_in = hidden;
  io.host_out = hidden;
  return Step(slices, io);
}

absl::StatusOr<std::unique_ptr<DeviceRows>> CudaBackend::ForwardToDevice(absl::Span<const SequenceSlice> slices,
                                                                         const float* host_in,
                                                                         std::unique_ptr<DeviceRows> device_in) {
  LP_RETURN_IF_ERROR(HandoffAvailable());
  if ((host_in == nullptr) == (device_in == nullptr)) {
    return absl::InvalidArgumentError("a step to device takes its rows from the host or from the device, one of them");
  }
  StepIo io;
  io.host_in = host_in;
  if (device_in != nullptr) {
    io.device_in = dynamic_cast<const CudaDeviceRows*>(device_in.get());
    if (io.device_in == nullptr) {
      return absl::InvalidArgumentError("input device rows were not made by the CUDA plugin");
    }
  }
  std::unique_ptr<CudaDeviceRows> out;
  io.device_out = &out;
  // device_in goes only after Step, which has drained the stream that read it.
  LP_RETURN_IF_ERROR(Step(slices, io));
  return std::unique_ptr<DeviceRows>(std::move(out));
}

absl::StatusOr<std::string> CudaBackend::NewPeerLinkId() {
  LP_RETURN_IF_ERROR(HandoffAvailable());
  return NewEitherKindLinkId();
}

absl::StatusOr<std::unique_ptr<PeerLink>> CudaBackend::JoinPeerLink(const std::string& id, int rank, PeerLinkKind kind,
                                                                    const std::atomic<bool>* give_up) {
  LP_RETURN_IF_ERROR(HandoffAvailable());
  return JoinLinkOfKind(device_, id, rank, kind, give_up);
}

absl::Status CudaBackend::Step(absl::Span<const SequenceSlice> slices, const StepIo& io) {
  LP_RETURN_IF_ERROR(Validate(slices));
  if (io.device_in != nullptr) LP_RETURN_IF_ERROR(ValidateDeviceIn(*io.device_in, slices));
  const int64_t H = cfg_.hidden_size;
  if (slices.empty()) {
    if (io.device_out == nullptr) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<CudaDeviceRows>> none = CudaDeviceRows::Allocate(handoff_, 0, H);
    if (!none.ok()) return none.status();
    LP_RETURN_IF_ERROR((*none)->MarkReady());
    *io.device_out = *std::move(none);
    return absl::OkStatus();
  }
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // The kernel launches check the thread's last error: one that an earlier failed call left there (a
  // failed step's, a destructor's ignored free) would fail this step with a stale message. Sticky
  // errors are not cleared and still surface.
  cudaGetLastError();
  for (const SequenceSlice& s : slices) {
    auto* kv = static_cast<DeviceSequenceKv*>(s.kv);
    for (int local = 0; local < kv->num_layers(); ++local) LP_RETURN_IF_ERROR(kv->layer(local).Reserve(s.kv->length() + s.n));
  }
  HostStep st = planner_->Plan(slices);
  const StepShape& shape = st.shape;
  LP_RETURN_IF_ERROR(scratch_->Ensure(shape));
  LP_RETURN_IF_ERROR(gemm_attention_->Prepare(std::move(st.gemm)));

  uint8_t* mh = scratch_->meta_host();
  WriteStepMeta(st, mh);
  const StepBuffers& b = scratch_->buffers();
  const size_t hidden_bytes = shape.rows * H * sizeof(float);
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.meta.get(), mh, shape.layout.total, cudaMemcpyHostToDevice, stream_));
  // From here on the stream may hold work that reads the inputs: every path drains it below.
  absl::Status run;
  if (io.host_in != nullptr) {
    run = CudaStatus(cudaMemcpyAsync(b.h.get(), io.host_in, hidden_bytes, cudaMemcpyHostToDevice, stream_),
                     "upload hidden");
  } else {
    run = CudaStatus(cudaStreamWaitEvent(stream_, io.device_in->ready(), 0), "wait for input rows");
    if (run.ok()) {
      run = CudaStatus(
          cudaMemcpyAsync(b.h.get(), io.device_in->data(), hidden_bytes, cudaMemcpyDeviceToDevice, stream_),
          "copy input rows");
    }
  }

  // A captured graph reads no last_key rows, so a step that has them never replays one (one row per
  // slice leaves an image block nothing to open up, so decode steps never have them anyway).
  bool decode = !shape.last_keys;
  for (const SequenceSlice& s : slices) decode = decode && s.n == 1;
  if (run.ok()) {
    run = decode && use_graphs_ ? graphs_.Run(shape.num_slices, stream_, [&] { return layers_->Run(shape); })
                                : layers_->Run(shape);
  }
  if (run.ok() && io.host_out != nullptr) {
    run = CudaStatus(cudaMemcpyAsync(io.host_out, b.h.get(), hidden_bytes, cudaMemcpyDeviceToHost, stream_),
                     "download hidden");
  }
  std::unique_ptr<CudaDeviceRows> out;
  if (run.ok() && io.device_out != nullptr) run = CopyOut(shape.rows, &out);
  // Always drain the streams: the pinned metadata is rewritten by the next step, the next step's
  // layers overwrite what the hand-off copy reads, and the input rows may be freed once this returns.
  absl::Status synced = CudaStatus(cudaStreamSynchronize(stream_), "step");
  if (io.device_out != nullptr) {
    const absl::Status copied = CudaStatus(cudaStreamSynchronize(handoff_->get()), "step hand-off");
    if (synced.ok()) synced = copied;
  }
  LP_RETURN_IF_ERROR(run);
  LP_RETURN_IF_ERROR(synced);
  // Rows whose link went away before they arrived have completed without being written.
  if (io.device_in != nullptr) LP_RETURN_IF_ERROR(io.device_in->Filled());
  for (const SequenceSlice& s : slices) s.kv->Advance(s.n);
  if (io.device_out != nullptr) *io.device_out = std::move(out);
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyOut(int64_t rows, std::unique_ptr<CudaDeviceRows>* out) {
  const cudaStream_t handoff = handoff_->get();
  LP_CUDA_RETURN_IF_ERROR(cudaEventRecord(layers_done_, stream_));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(handoff, layers_done_, 0));
  absl::StatusOr<std::unique_ptr<CudaDeviceRows>> r = CudaDeviceRows::Allocate(handoff_, rows, cfg_.hidden_size);
  if (!r.ok()) return r.status();
  LP_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync((*r)->data(), scratch_->buffers().h.get(), (*r)->bytes(), cudaMemcpyDeviceToDevice, handoff));
  LP_RETURN_IF_ERROR((*r)->MarkReady());
  *out = *std::move(r);
  return absl::OkStatus();
}

}  // namespace
}  // namespace cuda

absl::StatusOr<std::unique_ptr<LayerBackend>> MakeCudaBackend(const ModelWeights& weights, Precision precision,
                                                              int device) {
  const int count = CudaDeviceCount();
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " requested; ", count, " visible to this process"));
  }
  auto backend = std::make_unique<cuda::CudaBackend>(weights, precision, device);
  LP_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<LayerBackend>(std::move(backend));
}

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace layerpipe
