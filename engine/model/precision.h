#ifndef LAYERPIPE_ENGINE_MODEL_PRECISION_H_
#define LAYERPIPE_ENGINE_MODEL_PRECISION_H_

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace layerpipe {

// kBf16 (the fast default): matmul inputs rounded to bf16 and the KV cache stored in bf16, like the
// reference. kFp32: activations and KV cache in fp32, for exactness tests against the oracle.
enum class Precision { kBf16, kFp32 };

inline bool ParsePrecision(std::string_view s, Precision* out) {
  if (s == "bf16") return (*out = Precision::kBf16), true;
  if (s == "fp32") return (*out = Precision::kFp32), true;
  return false;
}

// The name ParsePrecision takes (and the wire's AssignRequest.precision carries).
inline const char* PrecisionName(Precision p) { return p == Precision::kFp32 ? "fp32" : "bf16"; }

// So that a Precision can be an absl flag (ABSL_FLAG(Precision, ...)): a bad value is refused at parsing.
inline bool AbslParseFlag(absl::string_view text, Precision* out, std::string* error) {
  if (ParsePrecision(std::string_view(text.data(), text.size()), out)) return true;
  *error = "must be bf16 or fp32";
  return false;
}
inline std::string AbslUnparseFlag(Precision p) { return PrecisionName(p); }

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_PRECISION_H_
