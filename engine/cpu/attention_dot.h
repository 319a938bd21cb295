// Attention's two products on vdpbf16ps, for a bf16 KV cache on CPUs with AVX-512 BF16 (the machines whose
// matmuls already run on it, MatmulIsa::kAvx512Bf16). Queries and softmax weights are rounded to bf16,
// as the bf16 tier's reference does (tests/oracle: q and the probabilities pass through bf16), and every
// product is a bf16 pair dot product accumulated in fp32:
//  - a score is one fp32 lane's chain over the head's dim pairs (0,1), (2,3), ... in order;
//  - an output value is one lane's chain over key pairs at even absolute positions (2i, 2i + 1) in
//    order, a key outside the vector's range weighing exactly 0.
// Neither depends on the tile, block, group or thread a result falls in, so results depend only on the
// query and the keys it sees (attention.h's contract), at about twice the fp32 multiply-add rate and
// without widening the cache's rows.
#ifndef LAYERPIPE_ENGINE_CPU_ATTENTION_DOT_H_
#define LAYERPIPE_ENGINE_CPU_ATTENTION_DOT_H_

#include <cstdint>

#include "engine/cpu/attention.h"

namespace layerpipe::attention_dot {

// Whether a head width can: the products take dims in pairs.
inline bool Bf16DotFits(int hd) { return hd % 2 == 0; }

// scores[v * ld + (j - a)] = q16[v] · key j for the keys j in [a, e) of kv head `koff / hd`'s rows in
// the chunk (`koff` floats into each row): cache rows before c.pos0, the chunk's own rows after. q16:
// the query vectors rounded to bf16 (F32ToBf16Row), q_ld values apart.
void ScoreKeys(const AttentionChunk& c, int64_t koff, int hd, const uint16_t* q16, int64_t q_ld, int vectors,
               int64_t a, int64_t e, float* scores, int64_t ld);

// Turns one vector's scores over [lo, hi] (indices into its row of `keys`) into the weights the values
// are multiplied by: exp(s - max) rounded to bf16 (held in floats), zeros elsewhere in [0, keys); gives
// the max and the sum of the stored weights. 16 lanes at a time (libmvec's 16-lane expf), a partial last
// register masked rather than run apart, so a weight depends on its score and the max only; the sum runs
// in double over the lanes counted from lo.
void SegmentSoftmax(float* s, int64_t keys, int64_t lo, int64_t hi, float* max, double* sum);

// out[v][0 .. hd) += Σ_j p[v * ld + (j - a0)] · value j over the keys j in [a, e) in pairs from a0, the
// even position at or below a; every p is a bf16 value, and the weights of a0 (when a0 < a) and of e
// (when e - a0 is odd) are zeros the caller leaves there. The rows of keys outside [a, e) are not read.
void WeighValues(const AttentionChunk& c, int64_t koff, int hd, const float* p, int64_t ld, int vectors,
                 int64_t a, int64_t e, float* const* out);

}  // namespace layerpipe::attention_dot

#endif  // LAYERPIPE_ENGINE_CPU_ATTENTION_DOT_H_
