// The dim orders of a joined K/V row (engine/model/joined_kv.h) for one head on the CPU: the rows the
// backend hands to attention and the cache are built in them, queries put into the key order, outputs
// back from the value order. Tables, so a row is one gather.
#ifndef LAYERPIPE_ENGINE_CPU_JOINED_ORDER_H_
#define LAYERPIPE_ENGINE_CPU_JOINED_ORDER_H_

#include <vector>

namespace layerpipe {

class JoinedOrder {
 public:
  JoinedOrder(int head_dim, int pairs);

  int head_dim() const { return static_cast<int>(key_dims_.size()); }
  // k: K (normed with k_norm, rotated), u: V (normed), one head each, already in the cache's precision;
  // rewritten in place as the key view and the value view.
  void Rows(float* k, float* u) const;
  // q (one head, normed and rotated) into the key order, its other dims times k_norm's weight.
  void Query(float* q, const float* k_norm) const;
  // One head's attention output from the value order back to the head's.
  void Output(float* o) const;

 private:
  std::vector<int> key_dims_, value_dims_;
  int pairs_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_JOINED_ORDER_H_
