#include "engine/model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
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

namespace {

using GroupRule = uint16_t (*)(const float* w, int64_t n, int8_t* q);

// Stores q at value index `at` of the tiled values (engine/model/weight_matrix.h: PackedTiled::ValueAt).
void Put(int8_t* values, int64_t bits, int64_t at, int8_t q) {
  if (bits == 8) {
    values[at] = q;
    return;
  }
  auto& byte = reinterpret_cast<uint8_t&>(values[at / 2]);
  const int shift = at % 2 == 0 ? 0 : 4;
  byte = static_cast<uint8_t>((byte & ~(0xf << shift)) | ((q & 0xf) << shift));
}

WeightMatrix QuantizePacked(const WeightMatrix& src, WeightFormat format, GroupRule rule, void* dst) {
  const PackedTiled t = PackedTiled::Of(src.rows, src.cols, WeightValueBits(format));
  auto* values = static_cast<int8_t*>(dst);
  auto* scales = reinterpret_cast<uint16_t*>(values + t.value_bytes());
  // Padding rows and columns stay zero (q = 0, s = 0): they add +0 products.
  std::memset(dst, 0, t.value_bytes() + t.scale_bytes());
  std::vector<float> row(src.cols);
  int8_t q[kQuantGroup];
  for (int64_t r = 0; r < src.rows; ++r) {
    ReadRowF32(src, r, row.data());
    for (int64_t g = 0; g * kQuantGroup < src.cols; ++g) {
      const int64_t c0 = g * kQuantGroup, n = std::min(kQuantGroup, src.cols - c0);
      scales[t.ScaleAt(r, g)] = rule(row.data() + c0, n, q);
      for (int64_t i = 0; i < n; ++i) Put(values, t.bits, t.ValueAt(r, c0 + i), q[i]);
    }
  }
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
