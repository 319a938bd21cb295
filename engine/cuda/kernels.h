// Host-callable launchers of the backend's CUDA kernels. Every launcher only enqueues on `stream` and
// returns the launch's error (cudaGetLastError), so it may be recorded into a CUDA graph.
//
// Activations that feed a matmul are written either as fp32 or, in the bf16 precision mode, rounded to
// bf16 (round to nearest even, like the CPU backend); `out_bf16` picks which. KV rows are fp32 or bf16
// by the same mode (`kv_bf16`).
#ifndef LAYERPIPE_ENGINE_CUDA_KERNELS_H_
#define LAYERPIPE_ENGINE_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/step_plan.h"

namespace layerpipe::cuda {

// out[r] = table[ids[r]] · scale; table is [vocab, hidden], bf16 or fp32.
cudaError_t LaunchEmbed(const void* table, bool table_bf16, const int32_t* ids, int64_t rows, int64_t hidden,
                        float scale, float* out, cudaStream_t stream);

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · w (the sum of squares in double, like the CPU).
cudaError_t LaunchRmsNorm(const float* x, const float* w, int64_t rows, int64_t n, double eps, void* out,
                          bool out_bf16, cudaStream_t stream);

// h += RmsNorm(o, post_attn); ff_in = RmsNorm(h, pre_ff).
cudaError_t LaunchPostAttention(const float* o, const float* post_attn, float* h, const float* pre_ff, int64_t rows,
                                int64_t n, double eps, void* ff_in, bool ff_in_bf16, cudaStream_t stream);

// h = (h + RmsNorm(o, post_ff)) · scalar.
cudaError_t LaunchPostFeedforward(const float* o, const float* post_ff, float* h, float scalar, int64_t rows,
                                  int64_t n, double eps, cudaStream_t stream);

// Per-head work between the QKV projection and attention, per row r:
//   q heads (in place in qkv): RmsNorm(q_norm), rotary;
//   k_new = rotary(RmsNorm(k, k_norm)), v_new = RmsNorm(v) without gain, where v is the raw k section
//   when has_v is false (k_eq_v). k_new / v_new are [rows][kv_heads·head_dim] in the KV precision.
struct QkvPrepParams {
  float* qkv;  // [rows][ld]: q (heads·hd), k (kv·hd), then v (kv·hd) when has_v
  int64_t ld;
  int64_t rows;
  int heads, kv_heads, head_dim;
  bool has_v;
  const float* q_norm;
  const float* k_norm;
  const float* cos_sin;  // [rows][2·pairs]: cos of each rotating pair, then sin
  int pairs;
  double eps;
  void* k_new;
  void* v_new;
  bool kv_bf16;
  // A joined cache's layer (engine/model/joined_kv.h, one KV head): q, k_new and v_new in its dim orders.
  bool joined;
};
cudaError_t LaunchQkvPrep(const QkvPrepParams& p, cudaStream_t stream);

// out[r][head] (heads·head_dim a row, fp32 or bf16) from a joined cache's value order back to the head's
// (engine/model/joined_kv.h), before o_proj reads it.
cudaError_t LaunchJoinedOutputOrder(void* out, bool out_bf16, int64_t rows, int heads, int head_dim, int pairs,
                                    cudaStream_t stream);

// Where a layer's keys and values are (attention_keys.cuh reads them): the step's own rows in k_new /
// v_new, older positions in the sequences' caches through the step's block pointers.
struct KeySource {
  const void* k_new;     // [step rows][kv_width], KV precision
  const void* v_new;
  int64_t kv_width;      // kv_heads · head_dim, also the cache row width
  const uint64_t* ptrs;  // the step's block pointers
  int64_t window;        // 0: full attention over pages; > 0: sliding over a ring of `window` slots
  int64_t joined;        // the cache's joined rows (engine/model/kv_layout.h); 0: K and V rows apart
};

// Causal (optionally sliding-window) GQA attention of the step's rows against their sequences' caches
// plus the step's own new keys, score scale 1. One block per (tile, KV head · head chunk, split).
struct AttentionParams {
  KeySource kv;  // the layer's keys and values
  // [rows]: the last key each row sees when image blocks widen a sliding layer's mask (kv_index.h
  // LastVisibleKey); null: causal. Those later keys are the step's own rows (a slice holds a block whole).
  const int64_t* last_key;
  const float* q;  // [rows][q_stride], heads·hd used
  int64_t q_stride;
  void* out;  // [rows][heads·hd]
  bool out_bf16;
  float* part_acc;  // splits > 1: [splits][rows·heads][hd]
  float* part_ml;   // splits > 1: [splits][rows·heads][2] (running max, sum)
  const SliceMeta* slices;
  const TileMeta* tiles;
  int num_tiles;
  const int32_t* kv_offset;  // this layer's row of the step's kv_offset table ([num_slices])
  int64_t rows;
  int heads, kv_heads, head_dim;
  AttentionBlocking blocking;
  int splits;
  bool kv_bf16;
};
cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream);
// Raises the attention kernels' dynamic shared memory limit to what kMaxHeadDim needs (a per-process
// setting, so every backend asks for the largest). Call before any launch and before graph capture.
cudaError_t PrepareAttentionKernels();

// Copies the step's new K/V rows into the caches (only the rows a ring keeps). Run after attention.
struct StoreKvParams {
  KeySource kv;  // the layer's keys and values
  const SliceMeta* slices;
  const int32_t* row_slice;
  const int32_t* kv_offset;
  int64_t rows;
  bool kv_bf16;
};
cudaError_t LaunchStoreKv(const StoreKvParams& p, cudaStream_t stream);

// out[r] = gelu_tanh(gu[r][0:I]) ⊙ gu[r][I:2I].
cudaError_t LaunchGeluMul(const float* gu, int64_t rows, int64_t inter, void* out, bool out_bf16,
                          cudaStream_t stream);

// x = cap · tanh(x / cap).
cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t stream);

// dst = widen(src) for bf16 raw bits.
cudaError_t LaunchBf16ToF32(const uint16_t* src, float* dst, int64_t n, cudaStream_t stream);

// ---- Prefill attention on tensor cores (kernels_attention_gemm.cu) for one query block of one slice
// (step_plan.h: GemmQueryBlock), bf16 KV only. Queries are stacked per KV head as (head in group, row),
// m = group · rows_pad rows, so each KV head's scores are one GEMM of its stacked queries by its keys.
struct GemmAttentionParams {
  KeySource kv;  // the layer's keys and values
  const int64_t* last_key;  // as in AttentionParams
  SliceMeta slice;
  int32_t slice_index;       // into kv_offset
  const int32_t* kv_offset;  // this layer's row of the step's kv_offset table
  const float* q;  // [step rows][q_stride]
  int64_t q_stride;
  int heads, kv_heads, head_dim;
  int64_t row_begin, rows, rows_pad, key_begin, keys, keys_pad;
  // Scratch; bf16 ones as raw 16-bit storage.
  uint16_t* q_hi;  // [kv][m][hd]
  uint16_t* q_lo;
  uint16_t* k;     // [kv][keys_pad][hd]
  uint16_t* v;
  float* scores;   // [kv][m][keys_pad]
  uint16_t* p_hi;  // [kv][m][keys_pad]
  uint16_t* p_lo;
  float* o;        // [kv][m][hd]
  void* out;       // the step's attention rows [rows][heads · hd]
  bool out_bf16;
};
// q_hi/q_lo, k, v from the step's queries and the caches.
cudaError_t LaunchGemmAttentionStage(const GemmAttentionParams& p, cudaStream_t stream);
// p_hi/p_lo = split(softmax(scores)) under the causal / window / image-block mask.
cudaError_t LaunchGemmAttentionSoftmax(const GemmAttentionParams& p, cudaStream_t stream);
// out rows of the block = o.
cudaError_t LaunchGemmAttentionScatter(const GemmAttentionParams& p, cudaStream_t stream);

// ---- Sampling on the device (kernels_sample.cu): each row's LogitRowSummary (engine/sampling/logit_summary.h)
// from the raw (softcapped) logits, selections unordered; the host sorts the few entries.
inline constexpr int kMaxSummaryBanned = 4;
struct SummaryRowParams {
  double u;         // a whole-row draw's uniform
  int32_t best;     // how many best entries of the prepared row
  int32_t top_raw;  // how many best entries of the raw row
  float penalty;    // repetition penalty, 1 = none
  int32_t penalized_begin, penalized_end;  // this row's ids in SummarizeParams::penalized (distinct)
  int32_t log_sum_exp;                     // 0: skip it (the stats say 0)
  int32_t draw;                            // 1: draw a token for u over the whole prepared row
  int32_t total_mass;                      // 1: sum the weights of the whole prepared row (top-p)
  float inv_temperature, min_p;            // the draw's and the sum's
};
struct SummaryRowStats {
  double log_sum_exp;
  int32_t fallback_id;
  float fallback_raw;
  int32_t best_count, top_count;
  int32_t drawn;  // the draw's token, -1 when nothing is above -inf (rows with draw only)
  float drawn_raw;
  double total_mass;  // rows with total_mass only
};
struct SelectedEntry {  // the layout of layerpipe::ScoredId
  int32_t id;
  float value;
  float raw;
};
struct SummarizeParams {
  const float* raw;  // [rows][vocab]
  float* prepared;   // [rows][vocab] scratch
  int64_t rows, vocab;
  const SummaryRowParams* row_params;  // [rows]
  const int32_t* penalized;
  int32_t banned[kMaxSummaryBanned];
  int num_banned;
  SummaryRowStats* stats;  // [rows]
  SelectedEntry* best;     // [rows][best_capacity]
  SelectedEntry* top;      // [rows][top_capacity]
  int best_capacity, top_capacity;
};
cudaError_t LaunchSummarize(const SummarizeParams& p, cudaStream_t stream);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_KERNELS_H_
