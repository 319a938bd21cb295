#include "engine/cpu/joined_order.h"

#include "engine/cpu/thread_scratch.h"
#include "engine/model/joined_kv.h"

namespace layerpipe {
namespace {

enum class JoinedSlot { kHead };

// Two heads' worth of floats to permute through.
float* HeadScratch(int head_dim) { return ThreadScratch<float, JoinedSlot::kHead>(2 * static_cast<size_t>(head_dim)); }

}  // namespace

JoinedOrder::JoinedOrder(int head_dim, int pairs) : pairs_(pairs) {
  for (int j = 0; j < head_dim; ++j) {
    key_dims_.push_back(kv::JoinedKeyDim(j, head_dim, pairs));
    value_dims_.push_back(kv::JoinedValueDim(j, head_dim, pairs));
  }
}

void JoinedOrder::Rows(float* k, float* u) const {
  const int hd = head_dim();
  float* kt = HeadScratch(hd);
  float* ut = kt + hd;
  for (int j = 0; j < hd; ++j) {
    kt[j] = kv::JoinedKeyRotated(j, pairs_) ? k[key_dims_[j]] : u[key_dims_[j]];
    ut[j] = u[value_dims_[j]];
  }
  for (int j = 0; j < hd; ++j) {
    k[j] = kt[j];
    u[j] = ut[j];
  }
}

void JoinedOrder::Query(float* q, const float* k_norm) const {
  const int hd = head_dim();
  float* t = HeadScratch(hd);
  for (int j = 0; j < hd; ++j) {
    const int d = key_dims_[j];
    t[j] = kv::JoinedKeyRotated(j, pairs_) ? q[d] : q[d] * k_norm[d];
  }
  for (int j = 0; j < hd; ++j) q[j] = t[j];
}

void JoinedOrder::Output(float* o) const {
  const int hd = head_dim();
  float* t = HeadScratch(hd);
  for (int j = 0; j < hd; ++j) t[value_dims_[j]] = o[j];
  for (int j = 0; j < hd; ++j) o[j] = t[j];
}

}  // namespace layerpipe
