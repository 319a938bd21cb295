// Quantization at load (--quantize): a bf16 matrix into a quantized format, by rules fixed to the bit
// so that every machine, and the float64 oracle, derives the same q and s from the same checkpoint.
//  int8, per row and group of kQuantGroup values along k (the last group may be shorter):
//    s = bf16(max|w| / 127) (fp32 division, rounded to nearest even), q = clamp(rint(w / s), -127, 127)
//    (fp32 division; rint rounds half to even); a group of zeros has s = 0 and q = 0.
//  int4 (the grid of Google's QAT checkpoints), per row and group of kQuantGroup: with m the group's value
//    of largest magnitude (signed; the first of them in k order), s = bf16(m / -8), q = clamp(rint(w / s),
//    -8, 7); a group of zeros has s = 0 and q = 0.
// The weight the kernels multiply is then exactly q · s.
#ifndef LAYERPIPE_ENGINE_MODEL_QUANTIZE_H_
#define LAYERPIPE_ENGINE_MODEL_QUANTIZE_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/weight_matrix.h"

namespace layerpipe {

// The format a --quantize value asks for: "none" keeps the checkpoint's matrices (kBf16), "int8" or
// "int4" quantizes them; anything else is INVALID_ARGUMENT naming it and the known values.
absl::StatusOr<WeightFormat> ParseQuantization(std::string_view name);

// The format a --quantize-head value asks for the embedding (tied head): "none" keeps it as stored
// (kBf16), "int8" quantizes it by the int8 rule; anything else is INVALID_ARGUMENT naming it.
absl::StatusOr<WeightFormat> ParseHeadQuantization(std::string_view name);

// The --quantize / --quantize-head value that stands for `format` ("none" for kBf16).
std::string QuantizationName(WeightFormat format);

// The scale and values of one group of n (<= kQuantGroup) values by the int8 rule.
uint16_t QuantizeGroupInt8(const float* w, int64_t n, int8_t* q);
// The same by the int4 rule (q in [-8, 7]).
uint16_t QuantizeGroupInt4(const float* w, int64_t n, int8_t* q);

// Calls fn(r0, r1) on contiguous ranges of [0, rows) from up to one thread per core, and returns when all
// have run: a load turns ~11 G values of a 12B stage into its format, one row independent of the next.
void ForRowRanges(int64_t rows, const std::function<void(int64_t r0, int64_t r1)>& fn);

// Quantizes the bf16 [rows, cols] matrix `src` (row-major or tiled) into `format` (a quantized one) at
// dst, which holds WeightBytes(format, rows, cols) bytes; returns the matrix over dst.
WeightMatrix Quantize(const WeightMatrix& src, WeightFormat format, void* dst);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_QUANTIZE_H_
