#ifndef LAYERPIPE_ENGINE_PRECISION_H_
#define LAYERPIPE_ENGINE_PRECISION_H_

#include <string_view>

namespace layerpipe {

// kBf16 (the fast default): matmul inputs rounded to bf16 and the KV cache stored in bf16, like the
// reference. kFp32: activations and KV cache in fp32, for exactness tests against the oracle.
enum class Precision { kBf16, kFp32 };

inline bool ParsePrecision(std::string_view s, Precision* out) {
  if (s == "bf16") return (*out = Precision::kBf16), true;
  if (s == "fp32") return (*out = Precision::kFp32), true;
  return false;
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_PRECISION_H_
