// Row-wise CPU kernels of the forward pass: norms, rotary, activation (bf16 rounding is in engine/model/bf16.h). Every reduction
// runs in one fixed order per row, so a row's result never depends on what else is in the batch.
#ifndef LAYERPIPE_ENGINE_CPU_OPS_H_
#define LAYERPIPE_ENGINE_CPU_OPS_H_

#include <cstdint>
#include <vector>

#include "engine/model/config.h"

namespace layerpipe {

// out = x / sqrt(mean(x²) + eps) · w  (w as stored; w == nullptr means no weight). out may alias x.
void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* out);

// The same per head: x is [heads, head_dim].
void RmsNormHeads(float* x, const float* w, int heads, int head_dim, double eps);

// Rotary tables for one layer type: inv_freq[i] for i < head_dim/2 (zero past rope.Pairs(head_dim)).
std::vector<double> RopeInvFreq(int head_dim, const RopeConfig& rope);

// Rotate-half rotary of one [heads, head_dim] row at `pos` (dim j pairs with j + head_dim/2).
// cos_sin holds cos then sin for the pairs that rotate (see RopeCosSin).
void ApplyRope(float* x, int heads, int head_dim, const float* cos_sin, int rotary_pairs);

// cos/sin of pos · inv_freq for the first rotary_pairs pairs, computed in double: [cos × pairs, sin × pairs].
void RopeCosSin(int64_t pos, const std::vector<double>& inv_freq, int rotary_pairs, float* out);

// gelu_tanh(g) ⊙ u, into g.
void GeluTanhMul(float* g, const float* u, int64_t n);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_OPS_H_
