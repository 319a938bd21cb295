#include "engine/cuda/device_weights.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace layerpipe::cuda {
namespace {

// bf16 bytes staged per copy when widening to fp32 on the device.
constexpr int64_t kStageElems = int64_t{32} << 20;

// Copies host bf16 values to dst at element offset `at`, widening on the device in fp32 mode.
class Uploader {
 public:
  explicit Uploader(bool fp32) : fp32_(fp32) {}

  absl::Status Copy(const uint16_t* src, int64_t elems, void* dst, int64_t at) {
    if (!fp32_) {
      LP_CUDA_RETURN_IF_ERROR(cudaMemcpy(static_cast<uint16_t*>(dst) + at, src, elems * 2, cudaMemcpyHostToDevice));
      return absl::OkStatus();
    }
    if (stage_.get() == nullptr) LP_RETURN_IF_ERROR(stage_.Allocate(kStageElems * 2));
    for (int64_t b = 0; b < elems; b += kStageElems) {
      const int64_t n = std::min(kStageElems, elems - b);
      LP_CUDA_RETURN_IF_ERROR(cudaMemcpy(stage_.get(), src + b, n * 2, cudaMemcpyHostToDevice));
      LP_CUDA_RETURN_IF_ERROR(LaunchBf16ToF32(stage_.as<uint16_t>(), static_cast<float*>(dst) + at + b, n, nullptr));
    }
    LP_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return absl::OkStatus();
  }

  // Stacks the row blocks `parts` (all with the same cols) into one device matrix.
  absl::Status Stack(std::initializer_list<const WeightMatrix*> parts, DeviceMatrix* out) {
    out->rows = 0;
    out->cols = (*parts.begin())->cols;
    for (const WeightMatrix* m : parts) {
      if (m->empty()) continue;
      if (m->format != WeightFormat::kBf16) {
        return absl::UnimplementedError(absl::StrCat("the CUDA backend holds bf16 weights only, not ", m->Describe()));
      }
      if (m->cols != out->cols) return absl::InternalError("stacked matrices differ in width");
      out->rows += m->rows;
    }
    LP_RETURN_IF_ERROR(out->data.Allocate(static_cast<size_t>(out->rows * out->cols) * (fp32_ ? 4 : 2)));
    int64_t at = 0;
    for (const WeightMatrix* m : parts) {
      if (m->empty()) continue;
      LP_RETURN_IF_ERROR(Copy(m->bf16(), m->rows * m->cols, out->data.get(), at));
      at += m->rows * m->cols;
    }
    return absl::OkStatus();
  }

 private:
  bool fp32_;
  DeviceBuffer stage_;
};

absl::Status UploadFloats(const std::vector<const std::vector<float>*>& parts, DeviceBuffer* out,
                          std::vector<const float*>* starts) {
  size_t total = 0;
  for (const auto* p : parts) total += p->size();
  LP_RETURN_IF_ERROR(out->Allocate(total * sizeof(float)));
  size_t at = 0;
  for (const auto* p : parts) {
    LP_CUDA_RETURN_IF_ERROR(cudaMemcpy(out->as<float>() + at, p->data(), p->size() * sizeof(float),
                                       cudaMemcpyHostToDevice));
    starts->push_back(out->as<float>() + at);
    at += p->size();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceVision>> UploadVision(const VisionWeights& v, Uploader& up) {
  auto d = std::make_unique<DeviceVision>();
  LP_RETURN_IF_ERROR(up.Stack({&v.patch_dense}, &d->patch_dense));
  LP_RETURN_IF_ERROR(up.Stack({&v.projection}, &d->projection));
  std::vector<const float*> s;
  LP_RETURN_IF_ERROR(UploadFloats({&v.patch_ln1_weight, &v.patch_ln1_bias, &v.patch_dense_bias, &v.patch_ln2_weight,
                                   &v.patch_ln2_bias, &v.pos_embedding, &v.pos_norm_weight, &v.pos_norm_bias},
                                  &d->vectors, &s));
  d->patch_ln1_weight = s[0];
  d->patch_ln1_bias = s[1];
  d->patch_dense_bias = s[2];
  d->patch_ln2_weight = s[3];
  d->patch_ln2_bias = s[4];
  d->pos_embedding = s[5];
  d->pos_norm_weight = s[6];
  d->pos_norm_bias = s[7];
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const ModelWeights& w, bool fp32) {
  if (w.matrices_tiled()) {
    return absl::FailedPreconditionError(
        "the weights were loaded tiled for the CPU kernel; a GPU stage needs them row-major");
  }
  auto dw = std::make_unique<DeviceWeights>();
  dw->fp32_ = fp32;
  dw->layer_begin_ = w.selection().layer_begin;
  Uploader up(fp32);
  for (int l = w.selection().layer_begin; l < w.selection().layer_end; ++l) {
    const LayerWeights& L = w.layer(l);
    DeviceLayer d;
    d.has_v = !L.v_proj.empty();
    LP_RETURN_IF_ERROR(up.Stack({&L.q_proj, &L.k_proj, &L.v_proj}, &d.qkv));
    LP_RETURN_IF_ERROR(up.Stack({&L.o_proj}, &d.o));
    LP_RETURN_IF_ERROR(up.Stack({&L.gate_proj, &L.up_proj}, &d.gate_up));
    LP_RETURN_IF_ERROR(up.Stack({&L.down_proj}, &d.down));
    std::vector<const float*> s;
    LP_RETURN_IF_ERROR(UploadFloats({&L.input_layernorm, &L.post_attention_layernorm, &L.pre_feedforward_layernorm,
                                     &L.post_feedforward_layernorm, &L.q_norm, &L.k_norm},
                                    &d.norms, &s));
    d.input_ln = s[0];
    d.post_attn_ln = s[1];
    d.pre_ff_ln = s[2];
    d.post_ff_ln = s[3];
    d.q_norm = s[4];
    d.k_norm = s[5];
    d.layer_scalar = L.layer_scalar;
    dw->layers_.push_back(std::move(d));
  }
  if (!w.embed_tokens().empty()) LP_RETURN_IF_ERROR(up.Stack({&w.embed_tokens()}, &dw->embed_));
  if (w.selection().embedding && w.vision() != nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceVision>> v = UploadVision(*w.vision(), up);
    if (!v.ok()) return v.status();
    dw->vision_ = *std::move(v);
  }
  if (w.selection().embedding && w.audio_projection() != nullptr) {
    LP_RETURN_IF_ERROR(up.Stack({w.audio_projection()}, &dw->audio_));
  }
  if (!w.final_norm().empty()) {
    std::vector<const float*> s;
    LP_RETURN_IF_ERROR(UploadFloats({&w.final_norm()}, &dw->final_norm_, &s));
  }
  // cudaMemcpy from pageable memory may return before its DMA lands, and the backend's stream is
  // non-blocking (no implicit ordering with these legacy-stream copies): finish them here.
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return dw;
}

}  // namespace layerpipe::cuda
