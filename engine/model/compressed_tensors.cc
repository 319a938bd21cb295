#include "engine/model/compressed_tensors.h"

#include <immintrin.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/bf16.h"
#include "engine/model/quantize.h"

namespace layerpipe {
std::string PackedTensorName(std::string_view weight_name, std::string_view suffix) {
  constexpr std::string_view kWeight = ".weight";
  if (weight_name.size() >= kWeight.size() && weight_name.substr(weight_name.size() - kWeight.size()) == kWeight) {
    weight_name.remove_suffix(kWeight.size());
  }
  return absl::StrCat(std::string(weight_name), std::string(suffix));
}

std::string_view WeightNameOf(std::string_view tensor_name) {
  for (std::string_view suffix : {kPackedSuffix, kScaleSuffix, kShapeSuffix, kRefusedSuffixes[0], kRefusedSuffixes[1]}) {
    if (tensor_name.size() > suffix.size() && tensor_name.substr(tensor_name.size() - suffix.size()) == suffix) {
      // "<name>.weight_packed" → "<name>.weight": the suffix minus what follows ".weight".
      return tensor_name.substr(0, tensor_name.size() - suffix.size() + std::string_view(".weight").size());
    }
  }
  return tensor_name;
}

namespace {

// A scale as stored, widened to float (exact for bf16 and f16).
float ScaleValue(const TensorInfo& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return _cvtsh_ss(h);
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, t.data + 2 * i, 2);
      return Bf16ToF32(v);
    }
    default: return 0.0f;
  }
}

// Its bf16 bits, bf16 ones as stored (a NaN's payload included). CheckPackedTensors admits F32/F16 scales
// only when they are bf16 values, so the rounding of the others is exact.
uint16_t ScaleBits(const TensorInfo& t, int64_t i) {
  if (t.dtype != DType::kBF16) return F32ToBf16(ScaleValue(t, i));
  uint16_t v;
  std::memcpy(&v, t.data + 2 * i, 2);
  return v;
}

int64_t ShapeEntry(const TensorInfo& t, int i) {
  if (t.dtype == DType::kI64) {
    int64_t v;
    std::memcpy(&v, t.data + 8 * i, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

}  // namespace

absl::Status CheckPackedTensors(const PackedTensors& t, int64_t rows, int64_t cols, int64_t group_size) {
  auto bad = [](const TensorInfo& info, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(info.file, ": tensor ", info.name, " ", what));
  };
  if (t.packed->dtype != DType::kI32) {
    return bad(*t.packed, absl::StrCat("has dtype ", DTypeName(t.packed->dtype), " but packed int4 weights are I32"));
  }
  if (cols % group_size != 0) {
    return bad(*t.packed, absl::StrCat("has ", cols, " input values, which groups of ", group_size,
                                       " (quantization_config group_size) do not divide"));
  }
  const std::vector<int64_t> packed_shape = {rows, cols / 8}, scale_shape = {rows, cols / group_size};
  if (t.packed->shape != packed_shape) {
    return bad(*t.packed, absl::StrCat("has shape ", t.packed->ShapeString(), " but the config needs [",
                                       absl::StrJoin(packed_shape, ","), "] (8 int4 values a word)"));
  }
  if (!IsFloatDType(t.scale->dtype)) {
    return bad(*t.scale, absl::StrCat("has dtype ", DTypeName(t.scale->dtype), " but scales are floating point"));
  }
  if (t.scale->shape != scale_shape) {
    return bad(*t.scale, absl::StrCat("has shape ", t.scale->ShapeString(), " but the config needs [",
                                      absl::StrJoin(scale_shape, ","), "] (one scale per ", group_size, " values)"));
  }
  if (t.scale->dtype != DType::kBF16) {
    // Scales are held as bf16: one that is not exactly a bf16 value would change the weights.
    for (int64_t i = 0; i < t.scale->NumElements(); ++i) {
      const float v = ScaleValue(*t.scale, i);
      if (Bf16ToF32(ScaleBits(*t.scale, i)) != v) {
        return bad(*t.scale, absl::StrCat("holds ", v, " at ", i, ", which is not exactly a bf16 value (layerpipe "
                                          "keeps scales in bf16 and would change the weights)"));
      }
    }
  }
  if (t.shape != nullptr) {
    if ((t.shape->dtype != DType::kI32 && t.shape->dtype != DType::kI64) || t.shape->shape != std::vector<int64_t>{2}) {
      return bad(*t.shape, absl::StrCat("is ", DTypeName(t.shape->dtype), " ", t.shape->ShapeString(),
                                        " but a weight shape is I32 or I64 [2]"));
    }
    if (ShapeEntry(*t.shape, 0) != rows || ShapeEntry(*t.shape, 1) != cols) {
      return bad(*t.shape, absl::StrCat("says [", ShapeEntry(*t.shape, 0), ",", ShapeEntry(*t.shape, 1),
                                        "] but the config needs [", rows, ",", cols, "]"));
    }
  }
  return absl::OkStatus();
}

WeightMatrix UnpackInt4(const PackedTensors& t, int64_t rows, int64_t cols, int64_t group_size, void* dst) {
  const PackedTiled tiled = PackedTiled::Of(rows, cols, 4);
  auto* words = static_cast<uint32_t*>(dst);
  auto* scales = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(dst) + tiled.value_bytes());
  // Padding rows stay zero (q = 0, s = 0): they add +0 products.
  std::memset(dst, 0, tiled.value_bytes() + tiled.scale_bytes());
  const int64_t row_words = cols / 8, groups = cols / group_size, per_group = group_size / kQuantGroup;
  const auto* packed = reinterpret_cast<const uint8_t*>(t.packed->data);
  ForRowRanges(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint32_t* out = words + r / kPackedTileRows * row_words * kPackedTileRows + r % kPackedTileRows;
      const uint8_t* in = packed + r * row_words * 4;
      for (int64_t j = 0; j < row_words; ++j) {
        uint32_t word;
        std::memcpy(&word, in + 4 * j, 4);
        // Each nibble u = q + 8; q's 4-bit two's complement is (u - 8) mod 16 = u ^ 8.
        out[j * kPackedTileRows] = word ^ 0x88888888u;
      }
      for (int64_t g = 0; g < groups; ++g) {
        const uint16_t s = ScaleBits(*t.scale, r * groups + g);
        for (int64_t k = 0; k < per_group; ++k) scales[tiled.ScaleAt(r, g * per_group + k)] = s;
      }
    }
  });
  WeightMatrix m{WeightFormat::kInt4, WeightLayout::kTiled, dst, rows, cols};
  m.scales = scales;
  return m;
}

}  // namespace layerpipe
