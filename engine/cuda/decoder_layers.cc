#include "engine/cuda/decoder_layers.h"

#include <cstdint>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"
#include "engine/model/kv_bytes.h"

namespace layerpipe::cuda {

absl::Status DecoderLayers::Run(const StepShape& shape) {
  for (int l = layer_begin_; l < layer_end_; ++l) LP_RETURN_IF_ERROR(RunLayer(l, shape));
  return absl::OkStatus();
}

absl::Status DecoderLayers::RunLayer(int l, const StepShape& shape) {
  const DeviceLayer& L = dw_.layer(l);
  const StepBuffers& s = scratch_.buffers();
  const bool full = cfg_.layer_types[l] == LayerType::kFull;
  const int64_t M = shape.rows, H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int nh = cfg_.num_heads, hd = cfg_.HeadDim(l), kvh = cfg_.KvHeads(l);
  const int64_t qw = int64_t(nh) * hd, kw = int64_t(kvh) * hd;
  const double eps = cfg_.rms_norm_eps;
  const StepLayout& lay = shape.layout;
  const uint8_t* meta = s.meta.as<uint8_t>();
  const auto* slices = reinterpret_cast<const SliceMeta*>(meta + lay.slices);
  const auto* row_slice = reinterpret_cast<const int32_t*>(meta + lay.row_slice);
  const auto* kv_offset =
      reinterpret_cast<const int32_t*>(meta + lay.kv_offset) + int64_t(l - layer_begin_) * shape.num_slices;
  const auto* ptrs = reinterpret_cast<const uint64_t*>(meta + lay.ptrs);
  const int64_t window = full ? 0 : cfg_.sliding_window;
  const int64_t joined = KvJoinedValues(cfg_, l);
  // Image blocks see each other both ways on sliding layers only; full layers stay causal.
  const auto* last_key =
      full || !shape.last_keys ? nullptr : reinterpret_cast<const int64_t*>(meta + lay.last_key);

  LP_CUDA_RETURN_IF_ERROR(LaunchRmsNorm(s.h.as<float>(), L.input_ln, M, H, eps, s.x.get(), bf16_, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(s.x.get(), L.qkv.data.get(), bf16_, M, L.qkv.rows, H, s.qkv.as<float>(), stream_));

  QkvPrepParams prep{};
  prep.qkv = s.qkv.as<float>();
  prep.ld = L.qkv.rows;
  prep.rows = M;
  prep.heads = nh;
  prep.kv_heads = kvh;
  prep.head_dim = hd;
  prep.has_v = L.has_v;
  prep.q_norm = L.q_norm;
  prep.k_norm = L.k_norm;
  prep.cos_sin = reinterpret_cast<const float*>(meta + (full ? lay.cs_full : lay.cs_sliding));
  prep.pairs = planner_.pairs(full);
  prep.eps = eps;
  prep.k_new = s.k_new.get();
  prep.v_new = s.v_new.get();
  prep.kv_bf16 = bf16_;
  prep.joined = joined > 0;
  LP_CUDA_RETURN_IF_ERROR(LaunchQkvPrep(prep, stream_));

  const KeySource kv{s.k_new.get(), s.v_new.get(), kw, ptrs, window, joined};
  AttentionParams at{};
  at.q = s.qkv.as<float>();
  at.q_stride = L.qkv.rows;
  at.kv = kv;
  at.last_key = last_key;
  at.out = s.attn.get();
  at.out_bf16 = bf16_;
  at.part_acc = s.part_acc.as<float>();
  at.part_ml = s.part_ml.as<float>();
  at.slices = slices;
  at.tiles = reinterpret_cast<const TileMeta*>(meta + (full ? lay.tiles_full : lay.tiles_sliding));
  at.num_tiles = full ? shape.tiles_full : shape.tiles_sliding;
  at.kv_offset = kv_offset;
  at.rows = M;
  at.heads = nh;
  at.kv_heads = kvh;
  at.head_dim = hd;
  at.blocking = planner_.blocking(full);
  at.splits = full ? shape.splits_full : shape.splits_sliding;
  at.kv_bf16 = bf16_;
  LP_CUDA_RETURN_IF_ERROR(LaunchAttention(at, stream_));
  // The GEMM slices have no tiles above; they run after it because a split-K reduce writes every row
  // of the step (the GEMM slices' with meaningless values) and the scatter below must have the last word.
  GemmAttentionParams gp{};
  gp.kv_offset = kv_offset;
  gp.kv = kv;
  gp.last_key = last_key;
  gp.q = s.qkv.as<float>();
  gp.q_stride = L.qkv.rows;
  gp.heads = nh;
  gp.kv_heads = kvh;
  gp.head_dim = hd;
  gp.out = s.attn.get();
  gp.out_bf16 = bf16_;
  LP_RETURN_IF_ERROR(gemm_attention_->Run(gp, full));

  StoreKvParams store{};
  store.kv = kv;
  store.slices = slices;
  store.row_slice = row_slice;
  store.kv_offset = kv_offset;
  store.rows = M;
  store.kv_bf16 = bf16_;
  LP_CUDA_RETURN_IF_ERROR(LaunchStoreKv(store, stream_));
  if (joined > 0) {
    LP_CUDA_RETURN_IF_ERROR(LaunchJoinedOutputOrder(s.attn.get(), bf16_, M, nh, hd, prep.pairs, stream_));
  }

  LP_RETURN_IF_ERROR(gemm_->Run(s.attn.get(), L.o.data.get(), bf16_, M, H, qw, s.o.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(LaunchPostAttention(s.o.as<float>(), L.post_attn_ln, s.h.as<float>(), L.pre_ff_ln, M, H,
                                              eps, s.x.get(), bf16_, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(s.x.get(), L.gate_up.data.get(), bf16_, M, 2 * I, H, s.gu.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(LaunchGeluMul(s.gu.as<float>(), M, I, s.act.get(), bf16_, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(s.act.get(), L.down.data.get(), bf16_, M, H, I, s.o.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(
      LaunchPostFeedforward(s.o.as<float>(), L.post_ff_ln, s.h.as<float>(), L.layer_scalar, M, H, eps, stream_));
  return absl::OkStatus();
}

}  // namespace layerpipe::cuda
