// The one weight type every matrix of a checkpoint goes through: its format (how a value is encoded),
// its layout (row-major or tiled), its data and bytes. Loading, tiling, token lookups, the worker's KV
// budget and both backends read matrices only through it, so a new format adds a WeightFormat, its
// entries in the format table (weight_matrix.cc), and its kernels (engine/cpu/matmul_formats.h), not a
// change across the engine.
#ifndef LAYERPIPE_ENGINE_MODEL_WEIGHT_MATRIX_H_
#define LAYERPIPE_ENGINE_MODEL_WEIGHT_MATRIX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace layerpipe {

// How a matrix's values are stored. kBf16: raw bf16 bits, the checkpoint's own dtype.
enum class WeightFormat : uint8_t { kBf16 };
inline constexpr int kWeightFormatCount = 1;

std::string_view WeightFormatName(WeightFormat format);
// The format a name (as WeightFormatName writes it) stands for; an unknown name is INVALID_ARGUMENT
// naming it and the known ones.
absl::StatusOr<WeightFormat> ParseWeightFormat(std::string_view name);
// The names of every format, comma-separated (for flag help and errors).
std::string KnownWeightFormats();

// Row-major [rows, cols], or tiled: rows in groups of kTileRows, a group's pairs of k back to back
// (engine/model/tiled_rows.h), the order every CPU kernel reads without transposing per call.
enum class WeightLayout : uint8_t { kRowMajor, kTiled };

// Bytes a [rows, cols] matrix of `format` occupies, in any layout (tiling moves values, adds none).
size_t WeightBytes(WeightFormat format, int64_t rows, int64_t cols);

// A [rows, cols] matrix (Hugging Face [out, in]; y = x·Wᵀ). The data is not owned: it lies in the
// checkpoint's mapping, its huge-page copy, or a buffer the loader keeps.
struct WeightMatrix {
  WeightFormat format = WeightFormat::kBf16;
  WeightLayout layout = WeightLayout::kRowMajor;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  static WeightMatrix Bf16(const uint16_t* data, int64_t rows, int64_t cols,
                           WeightLayout layout = WeightLayout::kRowMajor) {
    return WeightMatrix{WeightFormat::kBf16, layout, data, rows, cols};
  }
  bool empty() const { return data == nullptr; }
  bool tiled() const { return layout == WeightLayout::kTiled; }
  size_t bytes() const { return WeightBytes(format, rows, cols); }
  // The values as bf16 bits; only for a kBf16 matrix (the caller has checked its format).
  const uint16_t* bf16() const { return static_cast<const uint16_t*>(data); }
  // "bf16 [2048, 3840] tiled", for logs and errors.
  std::string Describe() const;
};

// Whether the matrix's format can be stored tiled at this width.
bool CanTile(const WeightMatrix& m);
// Rearranges a row-major matrix whose data this process owns (a huge-page copy) into the tiled layout,
// in place; CanTile(*m).
void TileInPlace(WeightMatrix* m);
// The values of one row as fp32, in column order, whatever the format and layout: what a token lookup
// of the tied embedding reads. out holds m.cols values.
void ReadRowF32(const WeightMatrix& m, int64_t row, float* out);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_WEIGHT_MATRIX_H_
