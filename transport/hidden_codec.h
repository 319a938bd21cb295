// Hidden-state blocks on the wire: [rows, hidden_size] row-major, fp32 or bf16 (StepFrame.hidden).
#ifndef LAYERPIPE_TRANSPORT_HIDDEN_CODEC_H_
#define LAYERPIPE_TRANSPORT_HIDDEN_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/internal.pb.h"

namespace layerpipe {

// Bytes one value takes on the wire; 0 for a dtype this build does not know.
int64_t HiddenDTypeBytes(internal::v1::HiddenDType dtype);

// InvalidArgument unless `bytes` holds exactly rows × hidden_size values of `dtype`; else the floats.
absl::StatusOr<std::vector<float>> DecodeHidden(internal::v1::HiddenDType dtype, const std::string& bytes, int64_t rows,
                                                int64_t hidden_size);

// Writes rows × hidden_size floats as `dtype` (bf16: rounded to nearest even) into *out.
void EncodeHidden(const float* hidden, int64_t rows, int64_t hidden_size, internal::v1::HiddenDType dtype, std::string* out);

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_HIDDEN_CODEC_H_
