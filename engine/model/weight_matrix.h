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
//    CPU kernels read (PackedTiled below).
//  - kInt4: the same with q a 4-bit two's complement value in [-8, 7].
enum class WeightFormat : uint8_t { kBf16, kInt8, kInt4 };
inline constexpr int kWeightFormatCount = 3;

// Values of k that share one scale in the quantized formats.
inline constexpr int64_t kQuantGroup = 32;
// The quantized formats' tiled order, for values of `bits` (8 or 4): rows in groups of kPackedTileRows (the
// last padded with zero rows), k padded with zeros to a multiple of kQuantGroup. A 32-bit word holds
// one row's 32 / bits consecutive values of k (value i in bits [bits·i, bits·(i + 1)), as the QAT
// checkpoint packs them); a group's 16 rows' words for the same values of k are one 64-byte line, one
// AVX-512 vector. The scales follow all the values: per row group, per group of k, its rows' 16 bf16.
inline constexpr int64_t kPackedTileRows = 16;
struct PackedTiled {
  int64_t rows_padded, k_padded, bits;
  static PackedTiled Of(int64_t rows, int64_t cols, int64_t bits);
  int64_t per_word() const { return 32 / bits; }
  size_t value_bytes() const { return static_cast<size_t>(rows_padded * k_padded * bits / 8); }
  size_t scale_bytes() const { return static_cast<size_t>(rows_padded * (k_padded / kQuantGroup)) * 2; }
  // Where q[row][col] lives, counted in values (bytes for int8, nibbles for int4, low nibble first), and
  // the scale of (row, group).
  int64_t ValueAt(int64_t row, int64_t col) const {
    const int64_t v = per_word();
    return (row / kPackedTileRows * (k_padded / v) + col / v) * v * kPackedTileRows + row % kPackedTileRows * v + col % v;
  }
  int64_t ScaleAt(int64_t row, int64_t group) const {
    return (row / kPackedTileRows * (k_padded / kQuantGroup) + group) * kPackedTileRows + row % kPackedTileRows;
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

// Bits of one stored value of `format` (scales not counted).
int WeightValueBits(WeightFormat format);

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
  // The values as bytes; only for a quantized matrix (int8: one value a byte; int4: two).
  const int8_t* int8() const { return static_cast<const int8_t*>(data); }
  // The quantized value at (row, col) and its scale; only for a quantized matrix.
  int QuantizedValue(int64_t row, int64_t col) const;
  float ScaleOf(int64_t row, int64_t col) const;
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
