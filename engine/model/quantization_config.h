// What config.json's quantization_config says of a checkpoint quantized ahead of time in the
// compressed-tensors layout (Google's QAT int4 release; compressed_tensors.h loads its tensors). Apart
// from the tensors so that the config reader (and its fuzzer) needs nothing of the weights.
#ifndef LAYERPIPE_ENGINE_MODEL_QUANTIZATION_CONFIG_H_
#define LAYERPIPE_ENGINE_MODEL_QUANTIZATION_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json_fwd.hpp"

namespace layerpipe {

// What a checkpoint's quantization_config declares: only the scheme layerpipe serves exactly
// (pack-quantized, symmetric int4 in groups along k) gets here; anything else is refused when parsed.
struct CheckpointQuantization {
  bool packed = false;               // the checkpoint has a quantization_config
  int64_t group_size = 0;            // values of k that share a scale (a multiple of 32)
  std::vector<std::string> ignore;   // modules stored unquantized, as the config lists them
  // "compressed-tensors int4 in groups of 32", for logs and errors.
  std::string Describe() const;
};

// Reads root["quantization_config"] (absent or null: nothing packed). A method, format or scheme that
// layerpipe cannot serve as shipped (asymmetric, zero points, actorder / g_idx, other num_bits, a group
// size that is not a multiple of 32, float-quantized FP8, quantized activations or KV cache) is
// INVALID_ARGUMENT naming the field and its value.
absl::Status ParseCheckpointQuantization(const nlohmann::json& root, const std::string& source,
                                         CheckpointQuantization* out);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_QUANTIZATION_CONFIG_H_
