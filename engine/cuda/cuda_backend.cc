// The CUDA LayerBackend: the CPU executor's forward pass (engine/cpu/cpu_backend.cc) with the same
// precision semantics, on one device and one stream (plus a second that hands rows out). A step
// uploads the hidden rows (or copies them from device rows) and a metadata buffer (slices, tiles,
// rotary tables, cache block pointers), runs every layer, and downloads the hidden rows (or copies
// them into new device rows); decode steps replay a captured CUDA graph.
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/bf16.h"
#include "engine/cpu/ops.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/decode_graphs.h"
#include "engine/cuda/device_kv.h"
#include "engine/cuda/device_rows.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/links/ipc_link.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/links/nccl_link.h"
#include "engine/cuda/links/peer_link_id.h"
#include "engine/cuda/step_plan.h"
#include "engine/cuda/stream.h"
#include "engine/sampling/logit_summary.h"
#include "engine/sampling/sampler.h"

namespace layerpipe {
namespace cuda {
namespace {

// What every launch of a step depends on besides buffer addresses: equal shapes give equal launches,
// which is what lets a decode graph be replayed.
struct StepShape {
  int64_t rows = 0;
  int num_slices = 0;
  int tiles_sliding = 0, tiles_full = 0;
  int splits_sliding = 1, splits_full = 1;
  StepLayout layout;
};

// The host side of a step's metadata.
// A slice attended through GEMMs (step_plan.h) and its query blocks for each layer type.
struct GemmSlice {
  int32_t index;
  SliceMeta slice;
  std::vector<GemmQueryBlock> sliding, full;
};

// Byte offsets of one query block's GEMM-attention scratch inside one buffer.
struct GemmScratchLayout {
  size_t q_hi, q_lo, k, v, scores, p_hi, p_lo, o, total;
};

GemmScratchLayout GemmScratchFor(const GemmQueryBlock& b, int heads, int kv_heads, int head_dim) {
  GemmScratchLayout l{};
  size_t at = 0;
  auto section = [&at](size_t bytes) {
    const size_t start = at;
    at = (at + bytes + 255) / 256 * 256;
    return start;
  };
  const size_t q = size_t(heads) * b.rows_pad * head_dim, kv = size_t(kv_heads) * b.keys_pad * head_dim;
  const size_t s = size_t(heads) * b.rows_pad * b.keys_pad;
  l.q_hi = section(q * 2);
  l.q_lo = section(q * 2);
  l.k = section(kv * 2);
  l.v = section(kv * 2);
  l.scores = section(s * 4);
  l.p_hi = section(s * 2);
  l.p_lo = section(s * 2);
  l.o = section(q * 4);
  l.total = at;
  return l;
}

// Scores and probabilities of one query block stay below this (PlanGemmQueryBlocks) unless
// LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET (bytes) says otherwise.
constexpr int64_t kDefaultGemmAttentionBudget = int64_t{256} << 20;

struct HostStep {
  std::vector<SliceMeta> slices;
  std::vector<int32_t> row_slice;
  std::vector<TileMeta> tiles_sliding, tiles_full;
  std::vector<int32_t> kv_offset;
  std::vector<uint64_t> ptrs;
  std::vector<float> cs_sliding, cs_full;
  std::vector<GemmSlice> gemm;
  StepShape shape;
};

class PinnedBuffer {
 public:
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  absl::Status EnsureAtLeast(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    LP_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Where a step's hidden rows come from (one of the inputs) and go to (one of the outputs).
struct StepIo {
  const float* host_in = nullptr;
  const CudaDeviceRows* device_in = nullptr;
  float* host_out = nullptr;
  std::unique_ptr<CudaDeviceRows>* device_out = nullptr;
};

template <typename T>
void Put(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

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
  absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden) override;
  absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) override;
  absl::Status Logits(const float* hidden, int64_t rows, float* logits) override;
  absl::Status SummarizeLogits(const float* hidden, absl::Span<const LogitRowRequest> requests,
                               std::vector<LogitRowSummary>* out) override;
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
  size_t act_bytes() const { return act_bf16() ? 2 : 4; }
  int num_local() const { return layer_end() - layer_begin(); }
  absl::Status Validate(absl::Span<const SequenceSlice> slices) const;
  absl::Status ValidateDeviceIn(const CudaDeviceRows& in, absl::Span<const SequenceSlice> slices) const;
  absl::Status HandoffAvailable() const;
  // Forward and ForwardToDevice: the same step, with the rows in and out where `io` says.
  absl::Status Step(absl::Span<const SequenceSlice> slices, const StepIo& io);
  // Copies the step's `rows` hidden rows into new device rows on the hand-off stream.
  absl::Status CopyOut(int64_t rows, std::unique_ptr<CudaDeviceRows>* out);
  HostStep Plan(absl::Span<const SequenceSlice> slices) const;
  absl::Status EnsureScratch(const StepShape& shape);
  absl::Status RunLayers(const StepShape& shape);
  absl::Status RunLayer(int l, const StepShape& shape);
  // Attention of one query block of a GEMM slice (step_plan.h); `p` holds the layer's and slice's part.
  absl::Status RunGemmAttention(const GemmQueryBlock& b, GemmAttentionParams p);
  // Final norm, tied head and softcap of `rows` host hidden rows into logits_ (left on the device).
  absl::Status RunHead(const float* hidden, int64_t rows);

  const ModelWeights& w_;
  const ModelConfig& cfg_;
  Precision precision_;
  int device_;
  int sm_count_ = 0;
  bool use_graphs_ = true;
  bool gemm_attention_ = true;  // long prefill slices attend through GEMMs (bf16 mode)
  int64_t gemm_attention_budget_ = kDefaultGemmAttentionBudget;
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
  std::vector<double> inv_freq_sliding_, inv_freq_full_;
  int pairs_sliding_ = 0, pairs_full_ = 0;
  AttentionBlocking blocking_sliding_{}, blocking_full_{};
  int64_t max_qw_ = 0, max_kw_ = 0, max_qkv_ = 0;

  // Scratch sized for `cap_rows_` rows; moving any of it invalidates the decode graphs.
  int64_t cap_rows_ = 0;
  DeviceBuffer h_, x_, qkv_, k_new_, v_new_, attn_, o_, gu_, act_;
  DeviceBuffer part_acc_, part_ml_, meta_;
  // The current step's GEMM-attention slices (never in a decode graph: those have one row per slice).
  std::vector<GemmSlice> gemm_slices_;
  DeviceBuffer gemm_scratch_;
  PinnedBuffer meta_host_;
  // Embed / Logits / SummarizeLogits only (never in a graph).
  DeviceBuffer ids_, logits_;
  DeviceBuffer prepared_, summary_;  // sampling on the device: the prepared rows; requests and results
  PinnedBuffer summary_host_;
};

absl::Status CudaBackend::Init() {
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
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
  if (const char* env = std::getenv("LAYERPIPE_CUDA_GEMM_ATTENTION"); env != nullptr && std::string(env) == "0") {
    gemm_attention_ = false;
  }
  gemm_attention_ = gemm_attention_ && act_bf16();
  if (const char* env = std::getenv("LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET"); env != nullptr) {
    const long long bytes = std::atoll(env);
    if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET=", env));
    gemm_attention_budget_ = bytes;
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
    const int64_t qw = int64_t(cfg_.num_heads) * hd, kw = int64_t(cfg_.KvHeads(l)) * hd;
    max_qw_ = std::max(max_qw_, qw);
    max_kw_ = std::max(max_kw_, kw);
    max_qkv_ = std::max(max_qkv_, qw + kw * (cfg_.HasVProj(l) ? 2 : 1));
  }
  LP_CUDA_RETURN_IF_ERROR(PrepareAttentionKernels());
  inv_freq_sliding_ = RopeInvFreq(cfg_.head_dim, cfg_.rope_sliding.theta, cfg_.rope_sliding.partial_rotary_factor);
  inv_freq_full_ = RopeInvFreq(cfg_.global_head_dim, cfg_.rope_full.theta, cfg_.rope_full.partial_rotary_factor);
  pairs_sliding_ = RotaryPairs(inv_freq_sliding_);
  pairs_full_ = RotaryPairs(inv_freq_full_);
  blocking_sliding_ = BlockingFor(cfg_.num_heads, std::max(1, cfg_.num_kv_heads));
  blocking_full_ = BlockingFor(cfg_.num_heads, std::max(1, cfg_.num_global_kv_heads));
  absl::StatusOr<std::unique_ptr<DeviceWeights>> dw = DeviceWeights::Upload(w_, precision_ == Precision::kFp32);
  if (!dw.ok()) return dw.status();
  dw_ = std::move(*dw);
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  if (!gemm.ok()) return gemm.status();
  gemm_ = std::move(*gemm);
  return absl::OkStatus();
}

std::unique_ptr<SequenceState> CudaBackend::NewSequence() const {
  std::vector<DeviceLayerKv> layers;
  const size_t elem = precision_ == Precision::kFp32 ? 4 : 2;
  for (int l = layer_begin(); l < layer_end(); ++l) {
    const bool full = cfg_.layer_types[l] == LayerType::kFull;
    layers.emplace_back(!full, cfg_.sliding_window, int64_t(cfg_.KvHeads(l)) * cfg_.HeadDim(l), elem);
  }
  return std::make_unique<DeviceSequenceKv>(this, std::move(layers));
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
  }
  return absl::OkStatus();
}

HostStep CudaBackend::Plan(absl::Span<const SequenceSlice> slices) const {
  HostStep st;
  int64_t row = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const SequenceSlice& s = slices[i];
    st.slices.push_back({s.kv->length(), static_cast<int32_t>(s.n), static_cast<int32_t>(row)});
    for (int64_t r = 0; r < s.n; ++r) st.row_slice.push_back(static_cast<int32_t>(i));
    row += s.n;
  }
  const int64_t rows = row;
  std::vector<bool> by_gemm(st.slices.size(), false);
  for (size_t i = 0; i < st.slices.size(); ++i) {
    if (!gemm_attention_ || st.slices[i].n < kGemmAttentionMinRows) continue;
    by_gemm[i] = true;
    st.gemm.push_back({static_cast<int32_t>(i), st.slices[i],
                       PlanGemmQueryBlocks(st.slices[i], cfg_.sliding_window, cfg_.num_heads, gemm_attention_budget_),
                       PlanGemmQueryBlocks(st.slices[i], 0, cfg_.num_heads, gemm_attention_budget_)});
  }
  st.tiles_sliding = MakeTiles(st.slices, blocking_sliding_.rows_per_tile, by_gemm);
  st.tiles_full = MakeTiles(st.slices, blocking_full_.rows_per_tile, by_gemm);
  const int b = static_cast<int>(slices.size());
  st.kv_offset.resize(static_cast<size_t>(num_local()) * b);
  for (int local = 0; local < num_local(); ++local) {
    for (int i = 0; i < b; ++i) {
      st.kv_offset[static_cast<size_t>(local) * b + i] = static_cast<int32_t>(st.ptrs.size());
      static_cast<const DeviceSequenceKv*>(slices[i].kv)->layer(local).AppendBlockPointers(&st.ptrs);
    }
  }
  st.cs_sliding.resize(static_cast<size_t>(rows * 2 * pairs_sliding_));
  st.cs_full.resize(static_cast<size_t>(rows * 2 * pairs_full_));
  for (int64_t r = 0; r < rows; ++r) {
    const SliceMeta& s = st.slices[st.row_slice[r]];
    const int64_t pos = s.pos0 + (r - s.row0);
    RopeCosSin(pos, inv_freq_sliding_, pairs_sliding_, st.cs_sliding.data() + r * 2 * pairs_sliding_);
    RopeCosSin(pos, inv_freq_full_, pairs_full_, st.cs_full.data() + r * 2 * pairs_full_);
  }
  StepShape& sh = st.shape;
  sh.rows = rows;
  sh.num_slices = b;
  sh.tiles_sliding = static_cast<int>(st.tiles_sliding.size());
  sh.tiles_full = static_cast<int>(st.tiles_full.size());
  sh.splits_sliding = ChooseSplits(int64_t(sh.tiles_sliding) * cfg_.num_kv_heads * blocking_sliding_.head_chunks,
                                   cfg_.sliding_window + blocking_sliding_.rows_per_tile - 1, sm_count_);
  sh.splits_full = ChooseSplits(int64_t(sh.tiles_full) * cfg_.num_global_kv_heads * blocking_full_.head_chunks,
                                cfg_.max_position_embeddings, sm_count_);
  sh.layout = LayoutFor(b, rows, st.tiles_sliding.size(), st.tiles_full.size(), num_local(), pairs_sliding_,
                        pairs_full_, st.ptrs.size());
  return st;
}

absl::Status CudaBackend::EnsureScratch(const StepShape& shape) {
  bool moved = false;
  if (shape.rows > cap_rows_) {
    int64_t cap = std::max<int64_t>(cap_rows_, 8);
    while (cap < shape.rows) cap *= 2;
    // Allocate() frees the old buffer first, so a failure below leaves some buffers freed or empty:
    // forget the capacity and the graphs that hold the old addresses before touching any of them.
    graphs_.Clear();
    cap_rows_ = 0;
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    const size_t kv_elem = precision_ == Precision::kFp32 ? 4 : 2;
    LP_RETURN_IF_ERROR(h_.Allocate(cap * H * 4));
    LP_RETURN_IF_ERROR(x_.Allocate(cap * H * act_bytes()));
    LP_RETURN_IF_ERROR(qkv_.Allocate(cap * max_qkv_ * 4));
    LP_RETURN_IF_ERROR(k_new_.Allocate(cap * max_kw_ * kv_elem));
    LP_RETURN_IF_ERROR(v_new_.Allocate(cap * max_kw_ * kv_elem));
    LP_RETURN_IF_ERROR(attn_.Allocate(cap * max_qw_ * act_bytes()));
    LP_RETURN_IF_ERROR(o_.Allocate(cap * H * 4));
    LP_RETURN_IF_ERROR(gu_.Allocate(cap * 2 * I * 4));
    LP_RETURN_IF_ERROR(act_.Allocate(cap * I * act_bytes()));
    cap_rows_ = cap;
    moved = true;
  }
  // Split partials: [splits][rows · heads][head_dim] for the larger of the two layer types.
  const int64_t part = std::max(int64_t(shape.splits_sliding) * cfg_.head_dim,
                                int64_t(shape.splits_full) * cfg_.global_head_dim) *
                       shape.rows * cfg_.num_heads;
  const int64_t part_ml = std::max(shape.splits_sliding, shape.splits_full) * shape.rows * cfg_.num_heads * 2;
  absl::Status st = part_acc_.EnsureAtLeast(part * 4, &moved);
  if (st.ok()) st = part_ml_.EnsureAtLeast(part_ml * 4, &moved);
  // Headroom so growing page tables rarely move the buffer.
  if (st.ok() && shape.layout.total > meta_.bytes()) st = meta_.EnsureAtLeast(2 * shape.layout.total + 4096, &moved);
  if (st.ok()) st = meta_host_.EnsureAtLeast(meta_.bytes());
  // Also on failure: a buffer that failed to grow was freed, and a graph must not keep its address.
  if (moved) graphs_.Clear();
  return st;
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
  // The next stage decides which kind of link the two join (same device or not), so the id serves
  // both: an NCCL unique id (empty without NCCL) and a CUDA IPC link name.
  absl::StatusOr<std::string> nccl = NewNcclLinkId();
  return EncodePeerLinkId(nccl.ok() ? *nccl : std::string(), NewIpcLinkName());
}

absl::StatusOr<std::unique_ptr<PeerLink>> CudaBackend::JoinPeerLink(const std::string& id, int rank, PeerLinkKind kind,
                                                                    const std::atomic<bool>* give_up) {
  LP_RETURN_IF_ERROR(HandoffAvailable());
  // Arguments first: a bad rank is the caller's mistake whichever links this plugin can make.
  LP_RETURN_IF_ERROR(ValidatePeerLinkRank(rank));
  absl::StatusOr<PeerLinkId> parts = DecodePeerLinkId(id);
  if (!parts.ok()) return parts.status();
  if (kind == PeerLinkKind::kSameDevice) return JoinIpcLink(device_, parts->ipc_name, rank, give_up);
  if (parts->nccl.empty()) {
    return absl::UnimplementedError("the sending stage's CUDA plugin was built without NCCL: no link across devices");
  }
  return JoinNcclLink(device_, parts->nccl, rank, give_up);
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
  HostStep st = Plan(slices);
  const StepShape& shape = st.shape;
  LP_RETURN_IF_ERROR(EnsureScratch(shape));
  size_t gemm_bytes = 0;
  for (const GemmSlice& g : st.gemm) {
    for (const GemmQueryBlock& b : g.sliding) {
      gemm_bytes = std::max(gemm_bytes, GemmScratchFor(b, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim).total);
    }
    for (const GemmQueryBlock& b : g.full) {
      gemm_bytes = std::max(
          gemm_bytes, GemmScratchFor(b, cfg_.num_heads, cfg_.num_global_kv_heads, cfg_.global_head_dim).total);
    }
  }
  bool moved = false;  // never captured in a graph, so moving it costs nothing
  LP_RETURN_IF_ERROR(gemm_scratch_.EnsureAtLeast(gemm_bytes, &moved));
  gemm_slices_ = std::move(st.gemm);

  uint8_t* mh = meta_host_.get();
  const StepLayout& lay = shape.layout;
  Put(mh, lay.slices, st.slices);
  Put(mh, lay.row_slice, st.row_slice);
  Put(mh, lay.tiles_sliding, st.tiles_sliding);
  Put(mh, lay.tiles_full, st.tiles_full);
  Put(mh, lay.kv_offset, st.kv_offset);
  Put(mh, lay.cs_sliding, st.cs_sliding);
  Put(mh, lay.cs_full, st.cs_full);
  Put(mh, lay.ptrs, st.ptrs);
  const size_t hidden_bytes = shape.rows * H * sizeof(float);
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_.get(), mh, lay.total, cudaMemcpyHostToDevice, stream_));
  // From here on the stream may hold work that reads the inputs: every path drains it below.
  absl::Status run;
  if (io.host_in != nullptr) {
    run = CudaStatus(cudaMemcpyAsync(h_.get(), io.host_in, hidden_bytes, cudaMemcpyHostToDevice, stream_),
                     "upload hidden");
  } else {
    run = CudaStatus(cudaStreamWaitEvent(stream_, io.device_in->ready(), 0), "wait for input rows");
    if (run.ok()) {
      run = CudaStatus(
          cudaMemcpyAsync(h_.get(), io.device_in->data(), hidden_bytes, cudaMemcpyDeviceToDevice, stream_),
          "copy input rows");
    }
  }

  bool decode = true;
  for (const SequenceSlice& s : slices) decode = decode && s.n == 1;
  if (run.ok()) {
    run = decode && use_graphs_ ? graphs_.Run(shape.num_slices, stream_, [&] { return RunLayers(shape); })
                                : RunLayers(shape);
  }
  if (run.ok() && io.host_out != nullptr) {
    run = CudaStatus(cudaMemcpyAsync(io.host_out, h_.get(), hidden_bytes, cudaMemcpyDeviceToHost, stream_),
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
      cudaMemcpyAsync((*r)->data(), h_.get(), (*r)->bytes(), cudaMemcpyDeviceToDevice, handoff));
  LP_RETURN_IF_ERROR((*r)->MarkReady());
  *out = *std::move(r);
  return absl::OkStatus();
}

absl::Status CudaBackend::RunLayers(const StepShape& shape) {
  for (int l = layer_begin(); l < layer_end(); ++l) LP_RETURN_IF_ERROR(RunLayer(l, shape));
  return absl::OkStatus();
}

absl::Status CudaBackend::RunLayer(int l, const StepShape& shape) {
  const DeviceLayer& L = dw_->layer(l);
  const bool full = cfg_.layer_types[l] == LayerType::kFull;
  const bool bf16 = act_bf16();
  const int64_t M = shape.rows, H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int nh = cfg_.num_heads, hd = cfg_.HeadDim(l), kvh = cfg_.KvHeads(l);
  const int64_t qw = int64_t(nh) * hd, kw = int64_t(kvh) * hd;
  const double eps = cfg_.rms_norm_eps;
  const StepLayout& lay = shape.layout;
  const uint8_t* meta = meta_.as<uint8_t>();
  const auto* slices = reinterpret_cast<const SliceMeta*>(meta + lay.slices);
  const auto* row_slice = reinterpret_cast<const int32_t*>(meta + lay.row_slice);
  const auto* kv_offset =
      reinterpret_cast<const int32_t*>(meta + lay.kv_offset) + int64_t(l - layer_begin()) * shape.num_slices;
  const auto* ptrs = reinterpret_cast<const uint64_t*>(meta + lay.ptrs);
  const int64_t window = full ? 0 : cfg_.sliding_window;

  LP_CUDA_RETURN_IF_ERROR(LaunchRmsNorm(h_.as<float>(), L.input_ln, M, H, eps, x_.get(), bf16, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(x_.get(), L.qkv.data.get(), bf16, M, L.qkv.rows, H, qkv_.as<float>(), stream_));

  QkvPrepParams prep{};
  prep.qkv = qkv_.as<float>();
  prep.ld = L.qkv.rows;
  prep.rows = M;
  prep.heads = nh;
  prep.kv_heads = kvh;
  prep.head_dim = hd;
  prep.has_v = L.has_v;
  prep.q_norm = L.q_norm;
  prep.k_norm = L.k_norm;
  prep.cos_sin = reinterpret_cast<const float*>(meta + (full ? lay.cs_full : lay.cs_sliding));
  prep.pairs = full ? pairs_full_ : pairs_sliding_;
  prep.eps = eps;
  prep.k_new = k_new_.get();
  prep.v_new = v_new_.get();
  prep.kv_bf16 = bf16;
  LP_CUDA_RETURN_IF_ERROR(LaunchQkvPrep(prep, stream_));

  const KeySource kv{k_new_.get(), v_new_.get(), kw, ptrs, window};
  AttentionParams at{};
  at.q = qkv_.as<float>();
  at.q_stride = L.qkv.rows;
  at.kv = kv;
  at.out = attn_.get();
  at.out_bf16 = bf16;
  at.part_acc = part_acc_.as<float>();
  at.part_ml = part_ml_.as<float>();
  at.slices = slices;
  at.tiles = reinterpret_cast<const TileMeta*>(meta + (full ? lay.tiles_full : lay.tiles_sliding));
  at.num_tiles = full ? shape.tiles_full : shape.tiles_sliding;
  at.kv_offset = kv_offset;
  at.rows = M;
  at.heads = nh;
  at.kv_heads = kvh;
  at.head_dim = hd;
  at.blocking = full ? blocking_full_ : blocking_sliding_;
  at.splits = full ? shape.splits_full : shape.splits_sliding;
  at.kv_bf16 = bf16;
  LP_CUDA_RETURN_IF_ERROR(LaunchAttention(at, stream_));
  // The GEMM slices have no tiles above; they run after it because a split-K reduce writes every row
  // of the step (the GEMM slices' with meaningless values) and the scatter below must have the last word.
  if (!gemm_slices_.empty()) {
    GemmAttentionParams gp{};
    gp.kv_offset = kv_offset;
    gp.kv = kv;
    gp.q = qkv_.as<float>();
    gp.q_stride = L.qkv.rows;
    gp.heads = nh;
    gp.kv_heads = kvh;
    gp.head_dim = hd;
    gp.out = attn_.get();
    gp.out_bf16 = bf16;
    for (const GemmSlice& g : gemm_slices_) {
      gp.slice = g.slice;
      gp.slice_index = g.index;
      for (const GemmQueryBlock& b : full ? g.full : g.sliding) LP_RETURN_IF_ERROR(RunGemmAttention(b, gp));
    }
  }

  StoreKvParams store{};
  store.kv = kv;
  store.slices = slices;
  store.row_slice = row_slice;
  store.kv_offset = kv_offset;
  store.rows = M;
  store.kv_bf16 = bf16;
  LP_CUDA_RETURN_IF_ERROR(LaunchStoreKv(store, stream_));

  LP_RETURN_IF_ERROR(gemm_->Run(attn_.get(), L.o.data.get(), bf16, M, H, qw, o_.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(LaunchPostAttention(o_.as<float>(), L.post_attn_ln, h_.as<float>(), L.pre_ff_ln, M, H, eps,
                                              x_.get(), bf16, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(x_.get(), L.gate_up.data.get(), bf16, M, 2 * I, H, gu_.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(LaunchGeluMul(gu_.as<float>(), M, I, act_.get(), bf16, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(act_.get(), L.down.data.get(), bf16, M, H, I, o_.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(
      LaunchPostFeedforward(o_.as<float>(), L.post_ff_ln, h_.as<float>(), L.layer_scalar, M, H, eps, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Embed(absl::Span<const int32_t> ids, float* hidden) {
  if (dw_->embed().rows == 0 || !w_.selection().embedding) {
    return absl::FailedPreconditionError("this stage does not hold the embedding");
  }
  const int64_t H = cfg_.hidden_size;
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || ids[r] >= cfg_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[r], " at index ", r, " is outside the vocabulary [0, ", cfg_.vocab_size, ")"));
    }
  }
  if (ids.empty()) return absl::OkStatus();
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const int64_t rows = static_cast<int64_t>(ids.size());
  bool moved = false;
  LP_RETURN_IF_ERROR(ids_.EnsureAtLeast(rows * sizeof(int32_t), &moved));
  LP_RETURN_IF_ERROR(logits_.EnsureAtLeast(rows * H * sizeof(float), &moved));
  // The reference casts the scale to the weight dtype: 62.0 for 3840.
  const float scale = Bf16ToF32(F32ToBf16(static_cast<float>(std::sqrt(double(H)))));
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids_.get(), ids.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  LP_CUDA_RETURN_IF_ERROR(LaunchEmbed(dw_->embed().data.get(), !dw_->fp32(), ids_.as<int32_t>(), rows, H, scale,
                                      logits_.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(hidden, logits_.get(), rows * H * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::RunGemmAttention(const GemmQueryBlock& b, GemmAttentionParams p) {
  p.row_begin = b.row_begin;
  p.rows = b.rows;
  p.rows_pad = b.rows_pad;
  p.key_begin = b.key_begin;
  p.keys = b.keys;
  p.keys_pad = b.keys_pad;
  const GemmScratchLayout lay = GemmScratchFor(b, p.heads, p.kv_heads, p.head_dim);
  uint8_t* base = gemm_scratch_.as<uint8_t>();
  p.q_hi = reinterpret_cast<uint16_t*>(base + lay.q_hi);
  p.q_lo = reinterpret_cast<uint16_t*>(base + lay.q_lo);
  p.k = reinterpret_cast<uint16_t*>(base + lay.k);
  p.v = reinterpret_cast<uint16_t*>(base + lay.v);
  p.scores = reinterpret_cast<float*>(base + lay.scores);
  p.p_hi = reinterpret_cast<uint16_t*>(base + lay.p_hi);
  p.p_lo = reinterpret_cast<uint16_t*>(base + lay.p_lo);
  p.o = reinterpret_cast<float*>(base + lay.o);
  const int group = p.heads / p.kv_heads;
  const int64_t m = int64_t(group) * b.rows_pad, hd = p.head_dim;
  // Scores: per KV head, its stacked queries times its keys (both halves of each query).
  LP_CUDA_RETURN_IF_ERROR(LaunchGemmAttentionStage(p, stream_));
  GemmOptions per_kv_head;
  per_kv_head.batch = p.kv_heads;
  LP_RETURN_IF_ERROR(gemm_->Run(p.q_hi, p.k, true, m, b.keys_pad, hd, p.scores, stream_, per_kv_head));
  GemmOptions add = per_kv_head;
  add.accumulate = true;
  LP_RETURN_IF_ERROR(gemm_->Run(p.q_lo, p.k, true, m, b.keys_pad, hd, p.scores, stream_, add));
  LP_CUDA_RETURN_IF_ERROR(LaunchGemmAttentionSoftmax(p, stream_));
  // Output: probabilities (both halves) times values, V given as [keys][hd].
  GemmOptions pv = per_kv_head;
  pv.w_is_kn = true;
  LP_RETURN_IF_ERROR(gemm_->Run(p.p_hi, p.v, true, m, hd, b.keys_pad, p.o, stream_, pv));
  pv.accumulate = true;
  LP_RETURN_IF_ERROR(gemm_->Run(p.p_lo, p.v, true, m, hd, b.keys_pad, p.o, stream_, pv));
  LP_CUDA_RETURN_IF_ERROR(LaunchGemmAttentionScatter(p, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::RunHead(const float* hidden, int64_t rows) {
  if (dw_->embed().rows == 0 || !w_.selection().head || w_.final_norm().empty()) {
    return absl::FailedPreconditionError("this stage does not hold the head");
  }
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  bool moved = false;
  // Reuses the step scratch: h_ and x_ hold the rows, logits_ the result.
  StepShape shape;
  shape.rows = rows;
  LP_RETURN_IF_ERROR(EnsureScratch(shape));
  LP_RETURN_IF_ERROR(logits_.EnsureAtLeast(rows * V * sizeof(float), &moved));
  const bool bf16 = act_bf16();
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_.get(), hidden, rows * H * sizeof(float), cudaMemcpyHostToDevice, stream_));
  LP_CUDA_RETURN_IF_ERROR(
      LaunchRmsNorm(h_.as<float>(), dw_->final_norm(), rows, H, cfg_.rms_norm_eps, x_.get(), bf16, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(x_.get(), dw_->embed().data.get(), bf16, rows, V, H, logits_.as<float>(), stream_));
  const float cap = static_cast<float>(cfg_.final_logit_softcapping);
  if (cap > 0) LP_CUDA_RETURN_IF_ERROR(LaunchSoftcap(logits_.as<float>(), rows * V, cap, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Logits(const float* hidden, int64_t rows, float* logits) {
  if (rows < 0) return absl::InvalidArgumentError("negative row count");
  if (rows == 0) return absl::OkStatus();
  LP_RETURN_IF_ERROR(RunHead(hidden, rows));
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, logits_.get(), rows * cfg_.vocab_size * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::SummarizeLogits(const float* hidden, absl::Span<const LogitRowRequest> requests,
                                          std::vector<LogitRowSummary>* out) {
  const int64_t rows = static_cast<int64_t>(requests.size()), V = cfg_.vocab_size;
  int best_cap = 0, top_cap = 0;
  size_t penalized = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const LogitRowRequest& q = requests[r];
    if (q.best < 0 || q.best > kMaxSummaryBest || q.top_raw < 0) {
      return absl::InvalidArgumentError(absl::StrCat("logit request ", r, " asks for ", q.best, " best and ",
                                                     q.top_raw, " top entries; best must be in [0, ",
                                                     kMaxSummaryBest, "], top >= 0"));
    }
    if (!(q.repetition_penalty > 0) || !std::isfinite(q.repetition_penalty)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit request ", r, " has repetition penalty ", q.repetition_penalty));
    }
    if ((q.draw || q.total_mass) && (!(q.temperature > 0) || !std::isfinite(q.temperature) ||
                                     !(q.min_p >= 0 && q.min_p < 1) || !(q.u >= 0 && q.u < 1))) {
      return absl::InvalidArgumentError(absl::StrCat("logit request ", r, " draws with temperature ", q.temperature,
                                                     ", min_p ", q.min_p, " and u ", q.u));
    }
    if (q.repetition_penalty != 1.0f) {
      for (int32_t id : q.penalized_ids) {
        if (id < 0 || id >= V) {
          return absl::InvalidArgumentError(
              absl::StrCat("logit request ", r, " penalises id ", id, " outside the vocabulary [0, ", V, ")"));
        }
      }
      penalized += q.penalized_ids.size();
    }
    best_cap = std::max(best_cap, q.best);
    top_cap = std::max<int>(top_cap, static_cast<int>(std::min<int64_t>(q.top_raw, V)));
  }
  out->clear();
  if (rows == 0) return absl::OkStatus();
  LP_RETURN_IF_ERROR(RunHead(hidden, rows));

  // One buffer, uploaded part first: [row params][penalised ids] then [stats][best][top].
  auto aligned = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t params_at = 0;
  const size_t ids_at = aligned(params_at + rows * sizeof(SummaryRowParams));
  const size_t stats_at = aligned(ids_at + penalized * sizeof(int32_t));
  const size_t best_at = aligned(stats_at + rows * sizeof(SummaryRowStats));
  const size_t top_at = aligned(best_at + rows * best_cap * sizeof(SelectedEntry));
  const size_t total = aligned(top_at + rows * top_cap * sizeof(SelectedEntry));
  bool moved = false;
  LP_RETURN_IF_ERROR(summary_.EnsureAtLeast(total, &moved));
  LP_RETURN_IF_ERROR(summary_host_.EnsureAtLeast(total));
  LP_RETURN_IF_ERROR(prepared_.EnsureAtLeast(rows * V * sizeof(float), &moved));
  uint8_t* host = summary_host_.get();
  auto* row_params = reinterpret_cast<SummaryRowParams*>(host + params_at);
  auto* ids = reinterpret_cast<int32_t*>(host + ids_at);
  int32_t next = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const LogitRowRequest& q = requests[r];
    SummaryRowParams& rp = row_params[r];
    rp.best = q.best;
    rp.top_raw = static_cast<int32_t>(std::min<int64_t>(q.top_raw, V));
    rp.penalty = q.repetition_penalty;
    rp.log_sum_exp = q.log_sum_exp ? 1 : 0;
    rp.draw = q.draw ? 1 : 0;
    rp.total_mass = q.total_mass ? 1 : 0;
    rp.u = q.u;
    rp.inv_temperature = q.draw || q.total_mass ? 1.0f / q.temperature : 0.0f;
    rp.min_p = q.min_p;
    rp.penalized_begin = next;
    if (q.repetition_penalty != 1.0f) {
      std::memcpy(ids + next, q.penalized_ids.data(), q.penalized_ids.size() * sizeof(int32_t));
      next += static_cast<int32_t>(q.penalized_ids.size());
    }
    rp.penalized_end = next;
  }
  uint8_t* dev = summary_.as<uint8_t>();
  SummarizeParams p{};
  p.raw = logits_.as<float>();
  p.prepared = prepared_.as<float>();
  p.rows = rows;
  p.vocab = V;
  p.row_params = reinterpret_cast<const SummaryRowParams*>(dev + params_at);
  p.penalized = reinterpret_cast<const int32_t*>(dev + ids_at);
  static_assert(std::size(kBannedTokenIds) <= std::size(SummarizeParams{}.banned));
  for (int32_t id : kBannedTokenIds) p.banned[p.num_banned++] = id;
  p.stats = reinterpret_cast<SummaryRowStats*>(dev + stats_at);
  p.best = reinterpret_cast<SelectedEntry*>(dev + best_at);
  p.top = reinterpret_cast<SelectedEntry*>(dev + top_at);
  p.best_capacity = best_cap;
  p.top_capacity = top_cap;
  absl::Status run = CudaStatus(cudaMemcpyAsync(dev, host, stats_at, cudaMemcpyHostToDevice, stream_), "upload");
  if (run.ok()) run = CudaStatus(LaunchSummarize(p, stream_), "summary kernels");
  if (run.ok()) {
    run = CudaStatus(cudaMemcpyAsync(host + stats_at, dev + stats_at, total - stats_at, cudaMemcpyDeviceToHost, stream_),
                     "download");
  }
  // Drained on every path: the next call rewrites the pinned buffer an upload may still be reading.
  const absl::Status synced = CudaStatus(cudaStreamSynchronize(stream_), "summary");
  LP_RETURN_IF_ERROR(run);
  LP_RETURN_IF_ERROR(synced);

  // The kernels leave each selection unordered; the order is the summary's "better" order.
  auto entries = [](const SelectedEntry* e, int32_t n) {
    std::vector<ScoredId> v;
    v.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) v.push_back({e[i].id, e[i].value, e[i].raw});
    std::sort(v.begin(), v.end(), BetterEntry);
    return v;
  };
  const auto* stats = reinterpret_cast<const SummaryRowStats*>(host + stats_at);
  const auto* best = reinterpret_cast<const SelectedEntry*>(host + best_at);
  const auto* top = reinterpret_cast<const SelectedEntry*>(host + top_at);
  out->resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    LogitRowSummary& s = (*out)[r];
    s.log_sum_exp = stats[r].log_sum_exp;
    s.fallback_id = stats[r].fallback_id;
    s.fallback_raw = stats[r].fallback_raw;
    s.best = entries(best + r * best_cap, stats[r].best_count);
    s.top_raw = entries(top + r * top_cap, stats[r].top_count);
    if (requests[r].draw) {
      s.drawn = stats[r].drawn;
      s.drawn_raw = stats[r].drawn_raw;
    }
    if (requests[r].total_mass) s.total_mass = stats[r].total_mass;
    if (!s.best.empty()) {  // the fallback is only part of a summary without best entries
      s.fallback_id = 0;
      s.fallback_raw = 0;
    }
  }
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
