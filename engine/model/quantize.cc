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
  return absl::InvalidArgumentError(
      absl::StrCat("--quantize must be none or int8, got \"", std::string(name), "\""));
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

namespace {

WeightMatrix QuantizeInt8(const WeightMatrix& src, void* dst) {
  const Int8Tiled t = Int8Tiled::Of(src.rows, src.cols);
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
      scales[t.ScaleAt(r, g)] = QuantizeGroupInt8(row.data() + c0, n, q);
      for (int64_t i = 0; i < n; ++i) values[t.ValueAt(r, c0 + i)] = q[i];
    }
  }
  WeightMatrix m{WeightFormat::kInt8, WeightLayout::kTiled, dst, src.rows, src.cols};
  m.scales = scales;
  return m;
}

}  // namespace

WeightMatrix Quantize(const WeightMatrix& src, WeightFormat format, void* dst) {
  switch (format) {
    case WeightFormat::kInt8:
      return QuantizeInt8(src, dst);
    case WeightFormat::kBf16:
      break;
  }
  return src;  // bf16 is not a quantized format: nothing to do
}

}  // namespace layerpipe
