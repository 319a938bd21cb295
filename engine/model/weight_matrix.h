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

// How a matrix's values are stored.
//  - kBf16: raw bf16 bits, the checkpoint's own dtype; row-major or tiled.
//  - kInt8: w = q · s, q an int8 in [-127, 127], s one bf16 scale per row and group of kQuantGroup
//    values along k (engine/model/quantize.h: the rule that makes them). Always tiled, in the order the
//    CPU kernels read (Int8Tiled below).
enum class WeightFormat : uint8_t { kBf16, kInt8 };
inline constexpr int kWeightFormatCount = 2;

// Values of k that share one scale in the quantized formats.
inline constexpr int64_t kQuantGroup = 32;
// The int8 tiled order: rows in groups of kInt8TileRows (the last padded with zero rows), k padded with
// zeros to a multiple of kQuantGroup; in a group, for each quad of k (4t .. 4t + 3) its rows' four
// values back to back (byte 4·lane + i: row lane, value 4t + i), 64 bytes, one AVX-512 vector of
// 16 rows' quads. The scales follow all the values: per row group, per group of k, its rows' 16 bf16.
inline constexpr int64_t kInt8TileRows = 16;
struct Int8Tiled {
  int64_t rows_padded, k_padded;
  static Int8Tiled Of(int64_t rows, int64_t cols);
  size_t value_bytes() const { return static_cast<size_t>(rows_padded * k_padded); }
  size_t scale_bytes() const { return static_cast<size_t>(rows_padded * (k_padded / kQuantGroup)) * 2; }
  // Where q[row][col] and the scale of (row, group) live.
  int64_t ValueAt(int64_t row, int64_t col) const {
    return (row / kInt8TileRows * (k_padded / 4) + col / 4) * 4 * kInt8TileRows + row % kInt8TileRows * 4 + col % 4;
  }
  int64_t ScaleAt(int64_t row, int64_t group) const {
    return (row / kInt8TileRows * (k_padded / kQuantGroup) + group) * kInt8TileRows + row % kInt8TileRows;
  }
};

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
  // Quantized formats: the bf16 scales (their place in the format's layout); null for bf16.
  const uint16_t* scales = nullptr;

  static WeightMatrix Bf16(const uint16_t* data, int64_t rows, int64_t cols,
                           WeightLayout layout = WeightLayout::kRowMajor) {
    return WeightMatrix{WeightFormat::kBf16, layout, data, rows, cols};
  }
  bool empty() const { return data == nullptr; }
  bool tiled() const { return layout == WeightLayout::kTiled; }
  size_t bytes() const { return WeightBytes(format, rows, cols); }
  // The values as bf16 bits; only for a kBf16 matrix (the caller has checked its format).
  const uint16_t* bf16() const { return static_cast<const uint16_t*>(data); }
  // The values as int8; only for a kInt8 matrix.
  const int8_t* int8() const { return static_cast<const int8_t*>(data); }
  // "bf16 [2048, 3840] tiled", for logs and errors.
  std::string Describe() const;
};

// Whether the matrix can be rearranged into the tiled layout (a row-major bf16 one of even width;
// quantized formats are made tiled).
bool CanTile(const WeightMatrix& m);
// Rearranges a row-major matrix whose data this process owns (a huge-page copy) into the tiled layout,
// in place; CanTile(*m).
void TileInPlace(WeightMatrix* m);
// The values of one row as fp32, in column order, whatever the format and layout: what a token lookup
// of the tied embedding reads. out holds m.cols values.
void ReadRowF32(const WeightMatrix& m, int64_t row, float* out);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_WEIGHT_MATRIX_H_
