#include "transport/hidden_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/model/bf16.h"

namespace layerpipe {

int64_t HiddenDTypeBytes(internal::v1::HiddenDType dtype) {
  switch (dtype) {
    case internal::v1::HIDDEN_F32: return 4;
    case internal::v1::HIDDEN_BF16: return 2;
    default: return 0;
  }
}

absl::StatusOr<std::vector<float>> DecodeHidden(internal::v1::HiddenDType dtype, const std::string& bytes, int64_t rows,
                                                int64_t hidden_size) {
  const int64_t elem = HiddenDTypeBytes(dtype);
  if (elem == 0) return absl::InvalidArgumentError(absl::StrCat("unknown hidden_dtype ", static_cast<int>(dtype)));
  const int64_t values = rows * hidden_size;
  if (static_cast<int64_t>(bytes.size()) != values * elem) {
    return absl::InvalidArgumentError(absl::StrCat("hidden holds ", bytes.size(), " bytes but ", rows, " rows × ",
                                                   hidden_size, " × ", elem, " bytes (",
                                                   internal::v1::HiddenDType_Name(dtype), ") = ", values * elem,
                                                   " were expected"));
  }
  std::vector<float> out(static_cast<size_t>(values));
  if (dtype == internal::v1::HIDDEN_F32) {
    if (values > 0) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  // A string's buffer is heap-allocated and so 2-byte aligned in practice; copy if it ever is not.
  const uint16_t* src = reinterpret_cast<const uint16_t*>(bytes.data());
  std::vector<uint16_t> aligned;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint16_t) != 0) {
    aligned.resize(static_cast<size_t>(values));
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    src = aligned.data();
  }
  Bf16ToF32Row(src, out.data(), values);
  return out;
}

void EncodeHidden(const float* hidden, int64_t rows, int64_t hidden_size, internal::v1::HiddenDType dtype, std::string* out) {
  const int64_t values = rows * hidden_size;
  if (dtype == internal::v1::HIDDEN_BF16) {
    // Written in place: a string's heap buffer is suitably aligned for uint16_t.
    out->resize(static_cast<size_t>(values) * sizeof(uint16_t));
    F32ToBf16Row(hidden, reinterpret_cast<uint16_t*>(out->data()), values);
    return;
  }
  out->assign(reinterpret_cast<const char*>(hidden), static_cast<size_t>(values) * sizeof(float));
}

}  // namespace layerpipe
