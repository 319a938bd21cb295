#include "engine/model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/bf16.h"

namespace layerpipe {

absl::StatusOr<WeightFormat> ParseQuantization(std::string_view name) {
  if (name == "none") return WeightFormat::kBf16;
  if (name == "int8") return WeightFormat::kInt8;
  if (name == "int4") return WeightFormat::kInt4;
  return absl::InvalidArgumentError(
      absl::StrCat("--quantize must be none, int8 or int4, got \"", std::string(name), "\""));
}

absl::StatusOr<WeightFormat> ParseHeadQuantization(std::string_view name) {
  if (name == "none") return WeightFormat::kBf16;
  if (name == "int8") return WeightFormat::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("--quantize-head must be none or int8, got \"", std::string(name), "\""));
}

std::string QuantizationName(WeightFormat format) {
  return format == WeightFormat::kBf16 ? "none" : std::string(WeightFormatName(format));
}

uint16_t QuantizeGroupInt8(const float* w, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
  const uint16_t s_bits = F32ToBf16(amax / 127.0f);
  const float s = Bf16ToF32(s_bits);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = s == 0.0f ? int8_t{0} : static_cast<int8_t>(std::clamp(std::rint(w[i] / s), -127.0f, 127.0f));
  }
  return s_bits;
}

uint16_t QuantizeGroupInt4(const float* w, int64_t n, int8_t* q) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(w[i]) > std::fabs(m)) m = w[i];
  }
  const uint16_t s_bits = F32ToBf16(m / -8.0f);
  const float s = Bf16ToF32(s_bits);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = s == 0.0f ? int8_t{0} : static_cast<int8_t>(std::clamp(std::rint(w[i] / s), -8.0f, 7.0f));
  }
  return s_bits;
}

void ForRowRanges(int64_t rows, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  const int64_t part = (rows + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t r0 = part; r0 < rows; r0 += part) pool.emplace_back(fn, r0, std::min(rows, r0 + part));
  if (rows > 0) fn(0, std::min(rows, part));
  for (std::thread& th : pool) th.join();
}

namespace {

using GroupRule = uint16_t (*)(const float* w, int64_t n, int8_t* q);

// Rows [r0, r1) of `src` into the tiled values and scales of t: a group's values packed into its
// row's 32-bit words (value i of a word in bits [bits·i, bits·(i + 1)), PackedTiled), each word written once.
void QuantizeRows(const WeightMatrix& src, const PackedTiled& t, GroupRule rule, int64_t r0, int64_t r1,
                  uint32_t* words, uint16_t* scales) {
  const int64_t per_word = t.per_word(), words_per_line = kPackedTileRows;
  const uint32_t mask = (1u << t.bits) - 1;
  std::vector<float> row(src.cols);
  int8_t q[kQuantGroup];
  for (int64_t r = r0; r < r1; ++r) {
    ReadRowF32(src, r, row.data());
    uint32_t* row_words = words + r / kPackedTileRows * (t.k_padded / per_word) * words_per_line + r % kPackedTileRows;
    for (int64_t g = 0; g * kQuantGroup < src.cols; ++g) {
      const int64_t c0 = g * kQuantGroup, n = std::min(kQuantGroup, src.cols - c0);
      scales[t.ScaleAt(r, g)] = rule(row.data() + c0, n, q);
      std::fill(q + n, q + kQuantGroup, int8_t{0});  // padding of a short last group
      for (int64_t w = 0; w < kQuantGroup / per_word; ++w) {
        uint32_t word = 0;
        for (int64_t i = 0; i < per_word; ++i) {
          word |= (static_cast<uint32_t>(q[w * per_word + i]) & mask) << (t.bits * i);
        }
        row_words[(c0 / per_word + w) * words_per_line] = word;
      }
    }
  }
}

WeightMatrix QuantizePacked(const WeightMatrix& src, WeightFormat format, GroupRule rule, void* dst) {
  const PackedTiled t = PackedTiled::Of(src.rows, src.cols, WeightValueBits(format));
  auto* words = static_cast<uint32_t*>(dst);  // 64-byte aligned by the loader
  auto* scales = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(dst) + t.value_bytes());
  // Padding rows and columns stay zero (q = 0, s = 0): they add +0 products.
  std::memset(dst, 0, t.value_bytes() + t.scale_bytes());
  ForRowRanges(src.rows, [&](int64_t r0, int64_t r1) { QuantizeRows(src, t, rule, r0, r1, words, scales); });
  WeightMatrix m{format, WeightLayout::kTiled, dst, src.rows, src.cols};
  m.scales = scales;
  return m;
}

}  // namespace

WeightMatrix Quantize(const WeightMatrix& src, WeightFormat format, void* dst) {
  switch (format) {
    case WeightFormat::kInt8:
      return QuantizePacked(src, format, QuantizeGroupInt8, dst);
    case WeightFormat::kInt4:
      return QuantizePacked(src, format, QuantizeGroupInt4, dst);
    case WeightFormat::kBf16:
      break;
  }
  return src;  // bf16 is not a quantized format: nothing to do
}

}  // namespace layerpipe
