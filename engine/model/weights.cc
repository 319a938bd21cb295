#include "engine/model/weights.h"

#include <immintrin.h>

#include <array>
#include <chrono>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "engine/model/bf16.h"
#include "engine/model/compressed_tensors.h"
#include "engine/model/quantize.h"

namespace layerpipe {
namespace {

constexpr const char* kPrefixes[] = {"model.language_model.", "model."};

std::string LayerName(int layer, const char* suffix) { return absl::StrCat("layers.", layer, ".", suffix); }

// A decoder layer's projection matrices (what WeightLoadOptions::quantize quantizes), v_proj included
// (absent on k_eq_v full layers).
constexpr const char* kLayerProjections[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                             "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                             "mlp.down_proj.weight"};

// The same matrices of a loaded layer, in that order.
template <typename Layer>  // LayerWeights or const LayerWeights
auto Projections(Layer& L) {
  return std::array{&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj};
}

// Names (without prefix) of every text tensor the selection needs.
std::vector<std::string> NeededNames(const ModelConfig& c, const WeightSelection& sel) {
  std::vector<std::string> names;
  if (sel.embedding || sel.head) names.push_back("embed_tokens.weight");
  if (sel.head) names.push_back("norm.weight");
  for (int l = sel.layer_begin; l < sel.layer_end; ++l) {
    for (const char* s : {"input_layernorm.weight", "post_attention_layernorm.weight",
                          "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "layer_scalar",
                          "self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
      names.push_back(LayerName(l, s));
    }
    for (const char* s : kLayerProjections) {
      if (std::string_view(s) != "self_attn.v_proj.weight" || c.HasVProj(l)) names.push_back(LayerName(l, s));
    }
  }
  return names;
}

// Full names: the embedders sit beside the language model, not under it.
constexpr const char* kVisionPrefix = "model.vision_embedder.";
constexpr const char* kVisionProjection = "model.embed_vision.embedding_projection.weight";
constexpr const char* kAudioProjection = "model.embed_audio.embedding_projection.weight";

std::vector<std::string> VisionNames() {
  std::vector<std::string> names;
  for (const char* s : {"patch_ln1.weight", "patch_ln1.bias", "patch_dense.weight", "patch_dense.bias",
                        "patch_ln2.weight", "patch_ln2.bias", "pos_embedding", "pos_norm.weight", "pos_norm.bias"}) {
    names.push_back(absl::StrCat(kVisionPrefix, s));
  }
  names.push_back(kVisionProjection);
  return names;
}

float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// Widens any stored float dtype to fp32 (norm gains and scalars are tiny).
std::vector<float> ToFloat(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.NumElements()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32: std::memcpy(&out[i], t.data + 4 * i, 4); break;
      case DType::kBF16: {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = Bf16ToF32(v);
        break;
      }
      case DType::kF16: {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = HalfToFloat(v);
        break;
      }
      case DType::kI32:
      case DType::kI64: break;  // refused by Loader::Get before any read
    }
  }
  return out;
}

class Loader {
 public:
  Loader(const Checkpoint& ckpt, std::string prefix, std::vector<std::vector<uint16_t>>* converted)
      : ckpt_(ckpt), prefix_(std::move(prefix)), converted_(converted) {}
  // The same checkpoint, names taken as full names.
  Loader Unprefixed() const { return Loader(ckpt_, "", converted_); }

  const TensorInfo* Find(const std::string& name) const { return ckpt_.Find(prefix_ + name); }

  absl::StatusOr<const TensorInfo*> Get(const std::string& name, std::vector<int64_t> shape) {
    std::string full = prefix_ + name;
    const TensorInfo* t = ckpt_.Find(full);
    if (t == nullptr) {
      if (ckpt_.Has(PackedTensorName(full, kPackedSuffix))) {
        return absl::InvalidArgumentError(absl::StrCat(
            ckpt_.dir(), ": tensor ", full, " is stored packed (", PackedTensorName(full, kPackedSuffix),
            ") but config.json has no quantization_config saying how"));
      }
      return absl::NotFoundError(absl::StrCat(ckpt_.dir(), ": tensor ", full, " is missing from the checkpoint"));
    }
    if (!IsFloatDType(t->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor ", full, " has dtype ", DTypeName(t->dtype),
                                                     " but a floating-point tensor is needed"));
    }
    if (t->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor ", full, " has shape ", t->ShapeString(),
                                                     " but the config needs [", absl::StrJoin(shape, ","), "]"));
    }
    return t;
  }

  // source: where the tensor read lies, for a caller that releases it after quantizing.
  absl::Status Matrix(const std::string& name, int64_t rows, int64_t cols, WeightMatrix* out,
                      const TensorInfo** source = nullptr) {
    auto t = Get(name, {rows, cols});
    if (!t.ok()) return t.status();
    if (source != nullptr) *source = *t;
    if ((*t)->dtype == DType::kBF16 && reinterpret_cast<uintptr_t>((*t)->data) % 2 == 0) {
      *out = WeightMatrix::Bf16(reinterpret_cast<const uint16_t*>((*t)->data), rows, cols);
      return absl::OkStatus();
    }
    std::vector<float> f = ToFloat(**t);
    std::vector<uint16_t>& dst = converted_->emplace_back(f.size());
    for (size_t i = 0; i < f.size(); ++i) dst[i] = F32ToBf16(f[i]);
    *out = WeightMatrix::Bf16(dst.data(), rows, cols);
    return absl::OkStatus();
  }

  // The tensors of a Linear the checkpoint stores packed (compressed_tensors.h), checked against
  // [rows, cols]; *found = false where it stores the Linear as it is.
  absl::Status Packed(const std::string& name, int64_t rows, int64_t cols, int64_t group_size, PackedTensors* out,
                      bool* found) {
    for (std::string_view suffix : kRefusedSuffixes) {
      if (const TensorInfo* t = Find(PackedTensorName(name, suffix))) {
        return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor ", t->name,
                                                       ": zero points and activation order are not served"));
      }
    }
    out->packed = Find(PackedTensorName(name, kPackedSuffix));
    *found = out->packed != nullptr;
    if (!*found) return absl::OkStatus();
    out->scale = Find(PackedTensorName(name, kScaleSuffix));
    out->shape = Find(PackedTensorName(name, kShapeSuffix));
    if (out->scale == nullptr) {
      return absl::NotFoundError(absl::StrCat(ckpt_.dir(), ": tensor ", prefix_, PackedTensorName(name, kScaleSuffix),
                                              " is missing (", out->packed->name, " needs its scales)"));
    }
    return CheckPackedTensors(*out, rows, cols, group_size);
  }

  absl::Status Vector(const std::string& name, int64_t n, std::vector<float>* out) {
    return Floats(name, {n}, out);
  }

  absl::Status Floats(const std::string& name, std::vector<int64_t> shape, std::vector<float>* out) {
    auto t = Get(name, std::move(shape));
    if (!t.ok()) return t.status();
    *out = ToFloat(**t);
    return absl::OkStatus();
  }

 private:
  const Checkpoint& ckpt_;
  std::string prefix_;
  std::vector<std::vector<uint16_t>>* converted_;
};

// The stage that embeds loads the embedders the config declares; a checkpoint that declares them must
// hold them (serving it as text only would fail image requests at the first stage, mid-batch).
absl::Status LoadEmbedders(const ModelConfig& c, Loader& ld, std::unique_ptr<VisionWeights>* vision,
                           WeightMatrix* audio) {
  const int64_t H = c.hidden_size;
  if (c.vision.present) {
    auto v = std::make_unique<VisionWeights>();
    const int64_t P = c.vision.patch_values();
    const std::string p = kVisionPrefix;
    absl::Status st;
    if (st = ld.Vector(p + "patch_ln1.weight", P, &v->patch_ln1_weight); !st.ok()) return st;
    if (st = ld.Vector(p + "patch_ln1.bias", P, &v->patch_ln1_bias); !st.ok()) return st;
    if (st = ld.Matrix(p + "patch_dense.weight", H, P, &v->patch_dense); !st.ok()) return st;
    if (st = ld.Vector(p + "patch_dense.bias", H, &v->patch_dense_bias); !st.ok()) return st;
    if (st = ld.Vector(p + "patch_ln2.weight", H, &v->patch_ln2_weight); !st.ok()) return st;
    if (st = ld.Vector(p + "patch_ln2.bias", H, &v->patch_ln2_bias); !st.ok()) return st;
    if (st = ld.Floats(p + "pos_embedding", {c.vision.posemb_size, 2, H}, &v->pos_embedding); !st.ok()) return st;
    if (st = ld.Vector(p + "pos_norm.weight", H, &v->pos_norm_weight); !st.ok()) return st;
    if (st = ld.Vector(p + "pos_norm.bias", H, &v->pos_norm_bias); !st.ok()) return st;
    if (st = ld.Matrix(kVisionProjection, H, H, &v->projection); !st.ok()) return st;
    *vision = std::move(v);
  }
  if (c.audio.present) {
    if (auto st = ld.Matrix(kAudioProjection, H, c.audio.samples_per_token, audio); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Whether a tensor name (with or without its prefix) is a decoder layer's projection matrix: what
// WeightLoadOptions::quantize quantizes.
bool IsLayerProjection(std::string_view name) {
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) name.remove_prefix(std::strlen(p));
  }
  if (name.rfind("layers.", 0) != 0) return false;
  for (const char* s : kLayerProjections) {
    const std::string_view suffix = s;
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix &&
        name[name.size() - suffix.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

// A layer matrix that is resident in a quantized format: a bf16 one quantized at load (packed.packed
// null), or one the checkpoint ships packed.
struct QuantizedSource {
  WeightMatrix* matrix;           // the bf16 matrix as read, or only its shape for a packed one
  const TensorInfo* source;       // what it was read from
  PackedTensors packed;
  WeightFormat format;            // what it is quantized into (kInt4 for a packed one)
};

// Builds every matrix of `sources` in one allocation, quantizing or unpacking each and releasing the
// pages it was read from; returns what the load log says of it.
absl::StatusOr<std::string> BuildQuantizedMatrices(int64_t group_size, const std::vector<QuantizedSource>& sources,
                                                   std::unique_ptr<HugePageBuffer>* buffer) {
  const auto start = std::chrono::steady_clock::now();
  auto round_up = [](size_t v) { return (v + 63) / 64 * 64; };  // each matrix 64-byte aligned
  size_t total = 0;
  for (const QuantizedSource& s : sources) total += round_up(WeightBytes(s.format, s.matrix->rows, s.matrix->cols));
  if (total == 0) return std::string();
  auto allocated = HugePageBuffer::Allocate(total);
  if (!allocated.ok()) return allocated.status();
  size_t at = 0, unpacked = 0;
  std::array<size_t, kWeightFormatCount> quantized{};
  for (const QuantizedSource& s : sources) {
    void* dst = (*allocated)->data() + at;
    if (s.packed.packed) {
      *s.matrix = UnpackInt4(s.packed, s.matrix->rows, s.matrix->cols, group_size, dst);
      ReleasePages(*s.packed.packed);
      ReleasePages(*s.packed.scale);
      ++unpacked;
    } else {
      *s.matrix = Quantize(*s.matrix, s.format, dst);
      ReleasePages(*s.source);
      ++quantized[static_cast<size_t>(s.format)];
    }
    at += round_up(s.matrix->bytes());
  }
  *buffer = std::move(*allocated);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::string> parts;
  if (unpacked > 0) parts.push_back(absl::StrFormat("%zu matrices int4 as shipped", unpacked));
  for (int f = 0; f < kWeightFormatCount; ++f) {
    if (quantized[f] > 0) {
      parts.push_back(absl::StrFormat("%zu matrices quantized to %s", quantized[f],
                                      std::string(WeightFormatName(WeightFormat(f)))));
    }
  }
  return absl::StrFormat("; %s in %.2f s", absl::StrJoin(parts, ", "), seconds);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& model_dir,
                                                                 const ModelConfig& config,
                                                                 const WeightSelection& sel,
                                                                 const WeightLoadOptions& options) {
  if (sel.layer_begin < 0 || sel.layer_end > config.num_layers || sel.layer_begin > sel.layer_end) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", sel.layer_begin, ", ", sel.layer_end,
                                                   ") is outside the model's ", config.num_layers, " layers"));
  }
  const bool packed_checkpoint = config.quantization.packed;
  if (packed_checkpoint && options.quantize != WeightFormat::kBf16) {
    // Re-quantizing quantization-aware-trained weights measurably hurts them: they are served as shipped.
    return absl::InvalidArgumentError(absl::StrCat(
        model_dir, " is already quantized (", config.quantization.Describe(), ") and is served as shipped: --quantize ",
        std::string(WeightFormatName(options.quantize)), " would re-quantize it; use --quantize none"));
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> needed = NeededNames(config, sel);
  std::set<std::string, std::less<>> needed_set(needed.begin(), needed.end());
  if (sel.embedding) {
    for (std::string& n : VisionNames()) needed_set.insert(std::move(n));
    needed_set.insert(kAudioProjection);
  }
  auto wanted = [&](std::string_view tensor_name) {
    // A packed Linear's tensors are wanted where its weight is (and found, to be named, in a checkpoint
    // whose config does not declare them).
    const std::string_view name = WeightNameOf(tensor_name);
    if (needed_set.count(name)) return true;
    for (const char* p : kPrefixes) {
      if (name.rfind(p, 0) == 0 && needed_set.count(name.substr(std::strlen(p)))) return true;
    }
    return false;
  };
  // Matrices to quantize, and packed ones, are read once from the mapping, never copied.
  const bool quantizing = options.quantize != WeightFormat::kBf16;
  const bool quantizing_head = options.quantize_head != WeightFormat::kBf16;
  auto quantized_here = [&](std::string_view name) {
    const std::string_view weight = WeightNameOf(name);
    if (quantizing_head && (name == "embed_tokens.weight" || name.ends_with(".embed_tokens.weight"))) return true;
    return IsLayerProjection(weight) && (quantizing || (packed_checkpoint && weight != name));
  };
  auto ckpt = Checkpoint::Open(model_dir, wanted, options.huge_pages, quantized_here);
  if (!ckpt.ok()) return ckpt.status();

  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  w->config_ = config;
  w->sel_ = sel;
  // The unified checkpoint nests the text stack under model.language_model.; text-only ones use model.
  std::string prefix = kPrefixes[0];
  if (!needed.empty() && !(*ckpt)->Has(prefix + needed.front()) && (*ckpt)->Has(kPrefixes[1] + needed.front())) {
    prefix = kPrefixes[1];
  }
  Loader ld(**ckpt, prefix, &w->converted_);
  const int64_t H = config.hidden_size, I = config.intermediate_size;
  // Every matrix resident quantized, and what it is read from. layers_ is reserved below: the pointers
  // stay.
  std::vector<QuantizedSource> sources;
  if (sel.embedding || sel.head) {
    const TensorInfo* source = nullptr;
    if (auto st = ld.Matrix("embed_tokens.weight", config.vocab_size, H, &w->embed_, &source); !st.ok()) return st;
    if (quantizing_head) sources.push_back({&w->embed_, source, {}, options.quantize_head});
  }
  if (sel.head) {
    if (auto st = ld.Vector("norm.weight", H, &w->final_norm_); !st.ok()) return st;
  }
  if (sel.embedding) {
    Loader full_names = ld.Unprefixed();
    if (auto st = LoadEmbedders(config, full_names, &w->vision_, &w->audio_); !st.ok()) return st;
  }
  w->layers_.reserve(sel.layer_end - sel.layer_begin);
  for (int l = sel.layer_begin; l < sel.layer_end; ++l) {
    LayerWeights& L = w->layers_.emplace_back();
    const int64_t hd = config.HeadDim(l), kv = config.KvHeads(l), nh = config.num_heads;
    auto n = [&](const char* s) { return LayerName(l, s); };
    absl::Status st;
    auto matrix = [&](const char* s, int64_t rows, int64_t cols, WeightMatrix* out) {
      if (packed_checkpoint) {
        QuantizedSource q{out, nullptr, {}, WeightFormat::kInt4};
        bool found = false;
        if (auto st = ld.Packed(n(s), rows, cols, config.quantization.group_size, &q.packed, &found); !st.ok()) {
          return st;
        }
        if (found) {
          out->rows = rows;
          out->cols = cols;
          q.source = q.packed.packed;
          sources.push_back(q);
          return absl::OkStatus();
        }
        // Not packed: a module the config's ignore list keeps as stored.
      }
      const TensorInfo* source = nullptr;
      absl::Status st = ld.Matrix(n(s), rows, cols, out, &source);
      if (st.ok() && quantizing) sources.push_back({out, source, {}, options.quantize});
      return st;
    };
    if (st = matrix("self_attn.q_proj.weight", nh * hd, H, &L.q_proj); !st.ok()) return st;
    if (st = matrix("self_attn.k_proj.weight", kv * hd, H, &L.k_proj); !st.ok()) return st;
    if (config.HasVProj(l)) {
      if (st = matrix("self_attn.v_proj.weight", kv * hd, H, &L.v_proj); !st.ok()) return st;
    }
    if (st = matrix("self_attn.o_proj.weight", H, nh * hd, &L.o_proj); !st.ok()) return st;
    if (st = matrix("mlp.gate_proj.weight", I, H, &L.gate_proj); !st.ok()) return st;
    if (st = matrix("mlp.up_proj.weight", I, H, &L.up_proj); !st.ok()) return st;
    if (st = matrix("mlp.down_proj.weight", H, I, &L.down_proj); !st.ok()) return st;
    if (st = ld.Vector(n("input_layernorm.weight"), H, &L.input_layernorm); !st.ok()) return st;
    if (st = ld.Vector(n("post_attention_layernorm.weight"), H, &L.post_attention_layernorm); !st.ok()) return st;
    if (st = ld.Vector(n("pre_feedforward_layernorm.weight"), H, &L.pre_feedforward_layernorm); !st.ok()) return st;
    if (st = ld.Vector(n("post_feedforward_layernorm.weight"), H, &L.post_feedforward_layernorm); !st.ok())
      return st;
    if (st = ld.Vector(n("self_attn.q_norm.weight"), hd, &L.q_norm); !st.ok()) return st;
    if (st = ld.Vector(n("self_attn.k_norm.weight"), hd, &L.k_norm); !st.ok()) return st;
    std::vector<float> scalar;
    if (st = ld.Vector(n("layer_scalar"), 1, &scalar); !st.ok()) return st;
    L.layer_scalar = scalar[0];
  }
  std::string quantized;
  if (!sources.empty()) {
    auto q = BuildQuantizedMatrices(config.quantization.group_size, sources, &w->quantized_);
    if (!q.ok()) return q.status();
    quantized = *q;
  }
  // The huge-page copies are this process's own memory, so they can be rearranged in place.
  std::string tiled;
  if (options.huge_pages && options.tile_layer_matrices) {
    const auto tile_start = std::chrono::steady_clock::now();
    size_t tiled_bytes = 0;
    auto tile = [&](WeightMatrix* m) {
      if (!CanTile(*m)) return;
      TileInPlace(m);
      tiled_bytes += m->bytes();
    };
    for (LayerWeights& L : w->layers_) {
      for (WeightMatrix* m : Projections(L)) tile(m);
    }
    // The tied head is decode's largest read; row-major, the kernel would transpose it for every token.
    // Token lookups read its rows back (ReadRowF32).
    if (sel.head) tile(&w->embed_);
    w->matrices_tiled_ = tiled_bytes > 0;
    tiled = absl::StrFormat("; %.2f GB of matrices tiled in %.2f s", tiled_bytes / 1e9,
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - tile_start).count());
  }
  // What the selection holds, and how long reading, checking it (and converting what is not bf16) took.
  // bf16 tensors stay in the mapping, whose pages the checkpoint read at load.
  size_t bytes = 0;
  for (const std::string& name : needed) {
    if (const TensorInfo* t = (*ckpt)->Find(prefix + name)) bytes += t->nbytes;
    if (!packed_checkpoint) continue;
    for (std::string_view suffix : {kPackedSuffix, kScaleSuffix, kShapeSuffix}) {
      if (const TensorInfo* t = (*ckpt)->Find(PackedTensorName(prefix + name, suffix))) bytes += t->nbytes;
    }
  }
  if (sel.embedding) {
    std::vector<std::string> embedders = VisionNames();
    embedders.push_back(kAudioProjection);
    for (const std::string& name : embedders) {
      if (const TensorInfo* t = (*ckpt)->Find(name)) bytes += t->nbytes;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int layers = sel.layer_end - sel.layer_begin;
  std::string what = layers > 1    ? absl::StrCat("layers ", sel.layer_begin, "-", sel.layer_end - 1)
                     : layers == 1 ? absl::StrCat("layer ", sel.layer_begin)
                                   : std::string("no layers");
  if (sel.embedding) what += " + embedding";
  if (w->vision_) what += " + vision embedder";
  if (!w->audio_.empty()) what += " + audio projection";
  if (sel.head) what += " + head";
  std::string converted = absl::StrCat("; matrices ", w->MatrixFormatSummary());
  if (!w->converted_.empty()) converted += absl::StrCat(", ", w->converted_.size(), " converted to bf16");
  LP_LOG(INFO) << absl::StrFormat("loaded %.2f GB of %s in %.2f s (%.2f GB/s%s%s%s)", bytes / 1e9, what, seconds,
                                  seconds > 0 ? bytes / 1e9 / seconds : 0.0, converted, quantized, tiled);
  w->ckpt_ = std::move(*ckpt);
  return w;
}

std::vector<const WeightMatrix*> ModelWeights::Matrices() const {
  std::vector<const WeightMatrix*> all;
  for (const LayerWeights& L : layers_) {
    for (const WeightMatrix* m : Projections(L)) all.push_back(m);
  }
  all.push_back(&embed_);
  if (vision_) {
    all.push_back(&vision_->patch_dense);
    all.push_back(&vision_->projection);
  }
  all.push_back(&audio_);
  std::erase_if(all, [](const WeightMatrix* m) { return m->empty(); });
  return all;
}

std::string ModelWeights::MatrixFormatSummary() const {
  std::array<size_t, kWeightFormatCount> bytes{};
  for (const WeightMatrix* m : Matrices()) bytes[static_cast<size_t>(m->format)] += m->bytes();
  std::vector<std::string> parts;
  for (int f = 0; f < kWeightFormatCount; ++f) {
    if (bytes[f] > 0) {
      parts.push_back(absl::StrFormat("%.2f GB %s", bytes[f] / 1e9, std::string(WeightFormatName(WeightFormat(f)))));
    }
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, " + ");
}

size_t ModelWeights::LayerMatrixBytes(int l) const {
  const LayerWeights& L = layer(l);
  size_t b = 0;
  for (const WeightMatrix* m : Projections(L)) {
    if (!m->empty()) b += m->bytes();
  }
  return b;
}

}  // namespace layerpipe
