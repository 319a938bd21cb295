// The joined K/V row of a full layer with k_eq_v (engine/model/kv_layout.h): V is the raw key projection
// normed without a weight (u), K is u times k_norm's weight, rotated on the first `pairs` pairs of the
// rotate-half head (dims i and hd/2 + i, i < pairs). So K's other dims are u's times a weight that does
// not depend on the position, which the queries take instead, and a position is kept as
//   [K's rotated dims (2·pairs) | u's other dims (hd - 2·pairs) | u's rotated dims (2·pairs)]:
// the first hd values are what the queries are scored against, the hd from 2·pairs are V. Both views are
// the head's dims in another order; queries are put into the key order (their other dims times the
// weight) and outputs back from the value order. The scores are sums over the same dims, so only the
// order of additions and one rounding (the weight's product on the query, not the key) change.
// Host and device code both include this header.
#ifndef LAYERPIPE_ENGINE_MODEL_JOINED_KV_H_
#define LAYERPIPE_ENGINE_MODEL_JOINED_KV_H_

#include "engine/model/kv_layout.h"

namespace layerpipe::kv {

// The head dim at position j (< hd) of the key view: the rotated dims (i, then hd/2 + i), then the
// others in order.
LP_HOST_DEVICE inline int JoinedKeyDim(int j, int hd, int pairs) {
  const int half = hd / 2;
  if (j < pairs) return j;
  if (j < 2 * pairs) return half + j - pairs;
  const int other = j - 2 * pairs;
  return other < half - pairs ? pairs + other : half + pairs + (other - (half - pairs));
}

// The head dim at position j (< hd) of the value view: the other dims in order, then the rotated ones.
LP_HOST_DEVICE inline int JoinedValueDim(int j, int hd, int pairs) {
  const int other = hd - 2 * pairs;
  return j < other ? JoinedKeyDim(j + 2 * pairs, hd, pairs) : JoinedKeyDim(j - other, hd, pairs);
}

// Whether the key view's position j is a rotated dim (K's own value) or an other one (u's, weighted on
// the query).
LP_HOST_DEVICE inline bool JoinedKeyRotated(int j, int pairs) { return j < 2 * pairs; }

}  // namespace layerpipe::kv

#endif  // LAYERPIPE_ENGINE_MODEL_JOINED_KV_H_
