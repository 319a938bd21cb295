#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/embedders.h"
#include "engine/model/kv_bytes.h"
#include "engine/model/bf16.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"

namespace layerpipe {
namespace {

std::atomic<int64_t> attention_ns{0}, matmul_ns{0};

void AddSince(std::atomic<int64_t>& total, std::chrono::steady_clock::time_point start) {
  total.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count(),
      std::memory_order_relaxed);
}

}  // namespace

int64_t CpuBackend::attention_nanos() { return attention_ns.load(std::memory_order_relaxed); }
int64_t CpuBackend::matmul_nanos() { return matmul_ns.load(std::memory_order_relaxed); }

CpuBackend::CpuBackend(const ModelWeights& weights, Precision precision, ThreadPool& pool)
    : w_(weights), cfg_(weights.config()), precision_(precision), pool_(pool) {
  // Once a process (a worker may hold several stages): which kernel its numbers come from.
  static std::once_flag logged;
  std::call_once(logged, [&pool] {
    const std::string line = absl::StrCat("CPU stages: ", pool.size(), " threads, ", MatmulKernelSummary());
    if (MatmulEnvRequestIgnored()) {
      LP_LOG(WARNING) << line;
    } else {
      LP_LOG(INFO) << line;
    }
  });
  inv_freq_sliding_ = RopeInvFreq(cfg_.head_dim, cfg_.rope_sliding);
  inv_freq_full_ = RopeInvFreq(cfg_.global_head_dim, cfg_.rope_full);
  for (int l = layer_begin(); l < layer_end(); ++l) {
    if (KvJoinedValues(cfg_, l) > 0 && !joined_order_) joined_order_.emplace(cfg_.HeadDim(l), cfg_.RotaryPairs(l));
  }
}

std::unique_ptr<SequenceState> CpuBackend::NewSequence() const {
  std::vector<LayerKvCache> layers;
  for (int l = layer_begin(); l < layer_end(); ++l) {
    const bool full = cfg_.layer_types[l] == LayerType::kFull;
    layers.emplace_back(!full, cfg_.sliding_window, KvRowWidth(cfg_, l), precision_, KvJoinedValues(cfg_, l));
  }
  return std::make_unique<SequenceKv>(std::move(layers), layer_begin());
}

absl::StatusOr<std::unique_ptr<SequenceState>> CpuBackend::NewSequenceFrom(const PrefixSnapshot& prefix) const {
  if (!SequenceKv::Fits(prefix, layer_begin(), static_cast<size_t>(layer_end() - layer_begin()))) {
    return absl::InvalidArgumentError("the prefix is not a snapshot of this CPU backend's layers");
  }
  return std::unique_ptr<SequenceState>(SequenceKv::From(prefix));
}

void CpuBackend::Matmul(const float* x, int64_t m, const WeightMatrix& w, float* y) {
  const auto start = std::chrono::steady_clock::now();
  layerpipe::Matmul(x, m, w, y, pool_, precision_ == Precision::kBf16);
  AddSince(matmul_ns, start);
}

absl::Status CpuBackend::Embed(absl::Span<const int32_t> ids, float* hidden) {
  const WeightMatrix& e = w_.embed_tokens();
  if (e.empty()) return absl::FailedPreconditionError("this stage does not hold the embedding");
  const int64_t H = cfg_.hidden_size;
  // The reference casts the scale to the weight dtype: 62.0 for 3840.
  const float scale = Bf16ToF32(F32ToBf16(static_cast<float>(std::sqrt(double(H)))));
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || ids[r] >= cfg_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[r], " at index ", r, " is outside the vocabulary [0, ", cfg_.vocab_size, ")"));
    }
  }
  for (size_t r = 0; r < ids.size(); ++r) {
    float* out = hidden + int64_t(r) * H;
    ReadRowF32(e, ids[r], out);
    for (int64_t i = 0; i < H; ++i) out[i] *= scale;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::EmbedImage(const ImageView& image, float* out) {
  if (w_.vision() == nullptr) return absl::FailedPreconditionError("this stage holds no vision embedder");
  return EmbedImageCpu(*w_.vision(), cfg_, image, pool_,
                       [this](const float* x, int64_t m, const WeightMatrix& w, float* y) { Matmul(x, m, w, y); }, out);
}

absl::Status CpuBackend::EmbedAudio(const float* samples, int64_t tokens, float* out) {
  if (w_.audio_projection() == nullptr) return absl::FailedPreconditionError("this stage holds no audio projection");
  return EmbedAudioCpu(*w_.audio_projection(), cfg_, samples, tokens, pool_,
                       [this](const float* x, int64_t m, const WeightMatrix& w, float* y) { Matmul(x, m, w, y); }, out);
}

absl::Status CpuBackend::Logits(const float* hidden, int64_t rows, float* logits) {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  normed_.resize(static_cast<size_t>(rows * H));
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(hidden + r * H, w_.final_norm().data(), H, cfg_.rms_norm_eps, normed_.data() + r * H);
  }
  Matmul(normed_.data(), rows, w_.embed_tokens(), logits);
  const float cap = static_cast<float>(cfg_.final_logit_softcapping);
  if (cap > 0) {
    pool_.ParallelFor(rows * V, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    });
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Forward(absl::Span<const SequenceSlice> slices, float* hidden) {
  std::set<const SequenceState*> seen;
  std::vector<int64_t> positions;
  for (const SequenceSlice& s : slices) {
    if (s.kv == nullptr || s.n <= 0) return absl::InvalidArgumentError("empty sequence slice in a step");
    if (!seen.insert(s.kv).second) return absl::InvalidArgumentError("a sequence appears twice in one step");
    if (s.kv->length() + s.n > cfg_.max_position_embeddings) {
      return absl::OutOfRangeError(absl::StrCat("sequence would reach position ", s.kv->length() + s.n,
                                                " past the model's ", cfg_.max_position_embeddings));
    }
    if (auto st = CheckImageBlocks(s); !st.ok()) return st;
    for (int64_t i = 0; i < s.n; ++i) positions.push_back(s.kv->length() + i);
  }
  if (positions.empty()) return absl::OkStatus();
  const int64_t M = static_cast<int64_t>(positions.size());
  // Rotary tables are shared by all layers of a type.
  const int pairs_s = cfg_.rope_sliding.Pairs(cfg_.head_dim), pairs_f = cfg_.rope_full.Pairs(cfg_.global_head_dim);
  cs_sliding_.resize(static_cast<size_t>(M * 2 * pairs_s));
  cs_full_.resize(static_cast<size_t>(M * 2 * pairs_f));
  for (int64_t r = 0; r < M; ++r) {
    RopeCosSin(positions[r], inv_freq_sliding_, pairs_s, cs_sliding_.data() + r * 2 * pairs_s);
    RopeCosSin(positions[r], inv_freq_full_, pairs_f, cs_full_.data() + r * 2 * pairs_f);
  }
  for (int l = layer_begin(); l < layer_end(); ++l) RunLayer(l, slices, positions, hidden);
  for (const SequenceSlice& s : slices) s.kv->Advance(s.n);
  return absl::OkStatus();
}

namespace {

// How many of the slice's last rows get outputs: all of them but on the model's last layer.
int64_t QueryRows(const SequenceSlice& s, bool last_layer) {
  return last_layer && s.outputs >= 0 ? std::min(s.outputs, s.n) : s.n;
}

// rows[j] of src (row width w) into dst row j.
void GatherRows(const float* src, const std::vector<int64_t>& rows, int64_t w, float* dst) {
  for (size_t j = 0; j < rows.size(); ++j) std::memcpy(dst + j * w, src + rows[j] * w, sizeof(float) * w);
}

}  // namespace

void CpuBackend::RunLayer(int l, absl::Span<const SequenceSlice> slices,
                                  const std::vector<int64_t>& positions, float* h) {
  const LayerWeights& L = w_.layer(l);
  const bool full = cfg_.layer_types[l] == LayerType::kFull;
  const int64_t M = static_cast<int64_t>(positions.size());
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int nh = cfg_.num_heads, hd = cfg_.HeadDim(l), kvh = cfg_.KvHeads(l);
  const int64_t qw = int64_t(nh) * hd, kw = int64_t(kvh) * hd;
  const double eps = cfg_.rms_norm_eps;
  const int pairs = cfg_.RotaryPairs(l);
  const float* cs = full ? cs_full_.data() : cs_sliding_.data();
  const int64_t window = full ? 0 : cfg_.sliding_window;
  // A joined cache (engine/model/joined_kv.h) takes its rows, and gives its outputs, in other dim orders.
  const JoinedOrder* joined = KvJoinedValues(cfg_, l) > 0 ? &*joined_order_ : nullptr;

  // Every row's keys and values; queries, attention, o_proj and the MLP for the query rows: all rows,
  // but on the model's last layer only those the caller reads (for a long prompt, its last).
  const bool last_layer = l == cfg_.num_layers - 1;
  std::vector<int64_t>& rows = query_rows_;
  rows.clear();
  int64_t row0 = 0;
  for (const SequenceSlice& s : slices) {
    for (int64_t i = s.n - QueryRows(s, last_layer); i < s.n; ++i) rows.push_back(row0 + i);
    row0 += s.n;
  }
  const int64_t Mq = static_cast<int64_t>(rows.size());
  const bool gathered = Mq < M;

  a_.resize(M * H);
  k_.resize(M * kw);
  v_.resize(M * kw);
  q_.resize(Mq * qw);
  attn_.resize(Mq * qw);
  o_.resize(Mq * H);
  g_.resize(Mq * I);
  u_.resize(Mq * I);

  pool_.ParallelFor(M, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) RmsNorm(h + r * H, L.input_layernorm.data(), H, eps, a_.data() + r * H);
  });
  const float* aq = a_.data();
  if (gathered) {
    gathered_.resize(Mq * H);
    GatherRows(a_.data(), rows, H, gathered_.data());
    aq = gathered_.data();
  }
  Matmul(aq, Mq, L.q_proj, q_.data());
  Matmul(a_.data(), M, L.k_proj, k_.data());
  if (L.v_proj.empty()) {
    // k_eq_v: V is the raw key projection, before k_norm and rotary.
    std::memcpy(v_.data(), k_.data(), sizeof(float) * M * kw);
  } else {
    Matmul(a_.data(), M, L.v_proj, v_.data());
  }
  pool_.ParallelFor(M, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* k = k_.data() + r * kw;
      float* v = v_.data() + r * kw;
      RmsNormHeads(k, L.k_norm.data(), kvh, hd, eps);
      RmsNormHeads(v, nullptr, kvh, hd, eps);
      ApplyRope(k, kvh, hd, cs + r * 2 * pairs, pairs);
      if (precision_ == Precision::kBf16) {
        RoundRowToBf16(k, k, kw);
        RoundRowToBf16(v, v, kw);
      }
      if (joined != nullptr) joined->Rows(k, v);  // one KV head
    }
  });
  pool_.ParallelFor(Mq, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      float* q = q_.data() + j * qw;
      RmsNormHeads(q, L.q_norm.data(), nh, hd, eps);
      ApplyRope(q, nh, hd, cs + rows[j] * 2 * pairs, pairs);
      if (joined != nullptr) {
        for (int h = 0; h < nh; ++h) joined->Query(q + int64_t(h) * hd, L.k_norm.data());
      }
    }
  });

  // Per slice, the rows before its query rows only store their keys and values (read back from the
  // cache by the query rows, the same values); the query rows attend as a chunk of their own.
  std::vector<AttentionChunk> chunks;
  row0 = 0;
  int64_t qrow0 = 0;
  for (const SequenceSlice& s : slices) {
    // Every state here came from NewSequence above.
    LayerKvCache* cache = &static_cast<SequenceKv*>(s.kv)->layer(l);
    const int64_t keep = QueryRows(s, last_layer), skip = s.n - keep, pos0 = s.kv->length() + skip;
    if (skip > 0) {
      StoreChunk(AttentionChunk{cache, precision_, s.kv->length(), skip, window, nullptr, qw, k_.data() + row0 * kw,
                                v_.data() + row0 * kw, kw, nullptr, qw});
    }
    if (keep > 0) {
      // Image blocks see themselves both ways on sliding layers only; full layers stay causal.
      chunks.push_back(AttentionChunk{cache, precision_, pos0, keep, window, q_.data() + qrow0 * qw, qw,
                                      k_.data() + (row0 + skip) * kw, v_.data() + (row0 + skip) * kw, kw,
                                      attn_.data() + qrow0 * qw, qw,
                                      full ? absl::Span<const PositionRange>() : s.image_blocks});
    }
    row0 += s.n;
    qrow0 += keep;
  }
  const auto attention_start = std::chrono::steady_clock::now();
  attention_.Run(chunks, nh, kvh, hd, pool_);
  if (joined != nullptr) {
    pool_.ParallelFor(Mq, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        for (int h = 0; h < nh; ++h) joined->Output(attn_.data() + r * qw + int64_t(h) * hd);
      }
    });
  }
  AddSince(attention_ns, attention_start);
  if (Mq == 0) return;

  float* hq = h;
  if (gathered) {
    GatherRows(h, rows, H, gathered_.data());  // its q rows are no longer needed
    hq = gathered_.data();
  }
  Matmul(attn_.data(), Mq, L.o_proj, o_.data());
  pool_.ParallelFor(Mq, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* o = o_.data() + r * H;
      RmsNorm(o, L.post_attention_layernorm.data(), H, eps, o);
      float* hr = hq + r * H;
      for (int64_t i = 0; i < H; ++i) hr[i] += o[i];
      RmsNorm(hr, L.pre_feedforward_layernorm.data(), H, eps, a_.data() + r * H);
    }
  });
  Matmul(a_.data(), Mq, L.gate_proj, g_.data());
  Matmul(a_.data(), Mq, L.up_proj, u_.data());
  pool_.ParallelFor(Mq, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) GeluTanhMul(g_.data() + r * I, u_.data() + r * I, I);
  });
  Matmul(g_.data(), Mq, L.down_proj, o_.data());
  const float scalar = L.layer_scalar;
  pool_.ParallelFor(Mq, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* o = o_.data() + r * H;
      RmsNorm(o, L.post_feedforward_layernorm.data(), H, eps, o);
      float* hr = hq + r * H;
      for (int64_t i = 0; i < H; ++i) hr[i] = (hr[i] + o[i]) * scalar;
    }
  });
  if (gathered) {
    for (int64_t j = 0; j < Mq; ++j) std::memcpy(h + rows[j] * H, hq + j * H, sizeof(float) * H);
  }
}

}  // namespace layerpipe
