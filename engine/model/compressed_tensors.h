// Checkpoints quantized ahead of time in the compressed-tensors layout that vLLM loads, the one Google's
// QAT int4 release (gemma-4-12b-it-qat-w4a16-ct) ships: a packed Linear's tensors turned into the
// engine's int4 format (weight_matrix.h) without re-quantizing. quantization_config.h reads what
// config.json says of them.
//
// A quantized Linear `<name>.weight` is stored as
//   <name>.weight_packed  I32 [out, in / 8]: value 8j + i of a row in bits 4i..4i+3 of word j, as q + 8;
//   <name>.weight_scale   [out, in / group_size] in the model dtype (bf16);
//   <name>.weight_shape   I32 or I64 [2] = [out, in];
// and its weight is q · scale of its group. Modules in `ignore` keep their `.weight` as stored.
#ifndef LAYERPIPE_ENGINE_MODEL_COMPRESSED_TENSORS_H_
#define LAYERPIPE_ENGINE_MODEL_COMPRESSED_TENSORS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/quantization_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight_matrix.h"

namespace layerpipe {

// The three suffixes of a packed Linear, in place of ".weight".
inline constexpr std::string_view kPackedSuffix = ".weight_packed";
inline constexpr std::string_view kScaleSuffix = ".weight_scale";
inline constexpr std::string_view kShapeSuffix = ".weight_shape";
// Tensors whose presence means a scheme layerpipe refuses (zero points; activation order).
inline constexpr std::string_view kRefusedSuffixes[] = {".weight_zero_point", ".weight_g_idx"};

// `<name>.weight` with its ".weight" replaced by `suffix`.
std::string PackedTensorName(std::string_view weight_name, std::string_view suffix);
// The `<name>.weight` a packed tensor (or a refused one) belongs to; any other name unchanged.
std::string_view WeightNameOf(std::string_view tensor_name);

// One packed Linear's tensors, as the checkpoint maps them.
struct PackedTensors {
  const TensorInfo* packed = nullptr;
  const TensorInfo* scale = nullptr;
  const TensorInfo* shape = nullptr;
};

// Checks dtypes and shapes against the [rows, cols] the config needs and the group size (which must
// divide cols); errors name the tensor.
absl::Status CheckPackedTensors(const PackedTensors& t, int64_t rows, int64_t cols, int64_t group_size);

// The int4 matrix over dst (WeightBytes(kInt4, rows, cols) bytes, 64-byte aligned) holding exactly the
// checkpoint's q and scales: each word's nibbles move from q + 8 to two's complement, each group's
// scale is repeated for every kQuantGroup values it covers. CheckPackedTensors has passed.
WeightMatrix UnpackInt4(const PackedTensors& t, int64_t rows, int64_t cols, int64_t group_size, void* dst);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_COMPRESSED_TENSORS_H_
