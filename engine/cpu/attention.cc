#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"

namespace layerpipe {
namespace {

// The last key query position p sees: itself, or the end of the image block it lies in.
int64_t LastKey(const AttentionChunk& c, int64_t p) {
  for (const PositionRange& b : c.image_blocks) {
    if (p < b.begin) break;
    if (p < b.end) return b.end - 1;
  }
  return p;
}

template <typename T>
void AttendRows(const AttentionChunk& c, int h0, int h1, int kv_head, int hd, int64_t row_begin, int64_t row_end,
                std::vector<float>& s) {
  const int64_t koff = int64_t(kv_head) * hd;
  const int heads = h1 - h0;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t p = c.pos0 + i;
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
    const int64_t hi = LastKey(c, p);
    const int64_t nk = hi - lo + 1;
    const float* q = c.q + i * c.q_stride + int64_t(h0) * hd;
    s.resize(static_cast<size_t>(nk * heads + heads));  // s[g * nk + (j - lo)], then 1/sum per head
    const int64_t cached_end = std::min(p + 1, c.pos0);  // keys [lo, cached_end) come from the cache
    for (int64_t j = lo; j <= hi; ++j) {
      for (int g = 0; g < heads; ++g) {
        s[g * nk + (j - lo)] = j < cached_end ? Dot(q + g * hd, c.cache->K<T>(j) + koff, hd)
                                              : Dot(q + g * hd, c.k_new + (j - c.pos0) * c.kv_stride + koff, hd);
      }
    }
    float* inv_sum = s.data() + nk * heads;
    for (int g = 0; g < heads; ++g) {
      float* sg = s.data() + g * nk;
      float mx = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) mx = std::max(mx, sg[j]);
      double sum = 0;
      for (int64_t j = 0; j < nk; ++j) {
        sg[j] = std::exp(sg[j] - mx);
        sum += sg[j];
      }
      inv_sum[g] = static_cast<float>(1.0 / sum);
      std::memset(c.out + i * c.out_stride + int64_t(h0 + g) * hd, 0, sizeof(float) * hd);
    }
    for (int64_t j = lo; j <= hi; ++j) {
      for (int g = 0; g < heads; ++g) {
        float* out = c.out + i * c.out_stride + int64_t(h0 + g) * hd;
        if (j < cached_end) {
          Axpy(s[g * nk + (j - lo)], c.cache->V<T>(j) + koff, out, hd);
        } else {
          Axpy(s[g * nk + (j - lo)], c.v_new + (j - c.pos0) * c.kv_stride + koff, out, hd);
        }
      }
    }
    for (int g = 0; g < heads; ++g) {
      float* out = c.out + i * c.out_stride + int64_t(h0 + g) * hd;
      for (int d = 0; d < hd; ++d) out[d] *= inv_sum[g];
    }
  }
}

}  // namespace

void AttendHeads(const AttentionChunk& c, int head_begin, int head_end, int kv_head, int head_dim,
                 int64_t row_begin, int64_t row_end, std::vector<float>& scores) {
  if (c.precision == Precision::kFp32) {
    AttendRows<float>(c, head_begin, head_end, kv_head, head_dim, row_begin, row_end, scores);
  } else {
    AttendRows<uint16_t>(c, head_begin, head_end, kv_head, head_dim, row_begin, row_end, scores);
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
