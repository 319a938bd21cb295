#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"

namespace layerpipe {
namespace {

template <typename T>
void AttendRows(const AttentionChunk& c, int head, int kv_head, int hd, int64_t row_begin, int64_t row_end,
                std::vector<float>& s) {
  const int64_t koff = int64_t(kv_head) * hd;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t p = c.pos0 + i;
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
    const float* q = c.q + i * c.q_stride + int64_t(head) * hd;
    s.resize(static_cast<size_t>(p - lo + 1));
    const int64_t cached_end = std::min(p + 1, c.pos0);  // keys [lo, cached_end) come from the cache
    float mx = -INFINITY;
    for (int64_t j = lo; j <= p; ++j) {
      const float v = j < cached_end ? Dot(q, c.cache->K<T>(j) + koff, hd)
                                     : Dot(q, c.k_new + (j - c.pos0) * c.kv_stride + koff, hd);
      s[j - lo] = v;
      mx = std::max(mx, v);
    }
    double sum = 0;
    for (int64_t j = lo; j <= p; ++j) {
      const float e = std::exp(s[j - lo] - mx);
      s[j - lo] = e;
      sum += e;
    }
    float* out = c.out + i * c.out_stride + int64_t(head) * hd;
    std::memset(out, 0, sizeof(float) * hd);
    for (int64_t j = lo; j <= p; ++j) {
      if (j < cached_end) {
        Axpy(s[j - lo], c.cache->V<T>(j) + koff, out, hd);
      } else {
        Axpy(s[j - lo], c.v_new + (j - c.pos0) * c.kv_stride + koff, out, hd);
      }
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int d = 0; d < hd; ++d) out[d] *= inv;
  }
}

}  // namespace

void AttendHead(const AttentionChunk& c, int head, int kv_head, int head_dim, int64_t row_begin, int64_t row_end,
                std::vector<float>& scores) {
  if (c.precision == Precision::kFp32) {
    AttendRows<float>(c, head, kv_head, head_dim, row_begin, row_end, scores);
  } else {
    AttendRows<uint16_t>(c, head, kv_head, head_dim, row_begin, row_end, scores);
  }
}

void StoreChunk(const AttentionChunk& c) {
  const int64_t width = c.cache->row_width();
  c.cache->Reserve(c.pos0 + c.n);
  const int64_t first = c.window > 0 ? std::max<int64_t>(0, c.n - c.window) : 0;
  for (int64_t i = first; i < c.n; ++i) {
    const float* k = c.k_new + i * c.kv_stride;
    const float* v = c.v_new + i * c.kv_stride;
    if (c.precision == Precision::kFp32) {
      std::memcpy(c.cache->K<float>(c.pos0 + i), k, sizeof(float) * width);
      std::memcpy(c.cache->V<float>(c.pos0 + i), v, sizeof(float) * width);
    } else {
      ToBf16(k, c.cache->K<uint16_t>(c.pos0 + i), width);
      ToBf16(v, c.cache->V<uint16_t>(c.pos0 + i), width);
    }
  }
}

}  // namespace layerpipe
