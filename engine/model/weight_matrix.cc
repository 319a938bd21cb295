#include "engine/model/weight_matrix.h"

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/bf16.h"
#include "engine/model/tiled_rows.h"

namespace layerpipe {
namespace {

// What each format is, indexed by WeightFormat: the table a new format adds its row to.
struct FormatTraits {
  const char* name;
  size_t (*bytes)(int64_t rows, int64_t cols);
  bool (*can_tile)(int64_t cols);
  void (*tile_in_place)(void* data, int64_t rows, int64_t cols);
  void (*read_row)(const WeightMatrix& m, int64_t row, float* out);
  int bits;  // of a value
};

size_t Bf16Bytes(int64_t rows, int64_t cols) { return static_cast<size_t>(rows * cols) * sizeof(uint16_t); }

void Bf16TileInPlace(void* data, int64_t rows, int64_t cols) {
  TileRowsInPlace(static_cast<uint16_t*>(data), rows, cols);
}

void Bf16ReadRow(const WeightMatrix& m, int64_t row, float* out) {
  const uint16_t* w = m.bf16();
  if (!m.tiled()) {
    const uint16_t* src = w + row * m.cols;
    for (int64_t c = 0; c < m.cols; ++c) out[c] = Bf16ToF32(src[c]);
    return;
  }
  // A tiled row is one pair of values every group-width pairs (TiledOffset).
  const int64_t row0 = row / kTileRows * kTileRows;
  const int64_t stride = 2 * TileGroupRows(row0, m.rows);
  const uint16_t* pair = w + row0 * m.cols + (row - row0) * 2;
  for (int64_t c = 0; c < m.cols; c += 2, pair += stride) {
    out[c] = Bf16ToF32(pair[0]);
    out[c + 1] = Bf16ToF32(pair[1]);
  }
}

template <int kBits>
size_t PackedBytes(int64_t rows, int64_t cols) {
  const PackedTiled t = PackedTiled::Of(rows, cols, kBits);
  return t.value_bytes() + t.scale_bytes();
}

bool NeverRetiled(int64_t) { return false; }
void NoTiling(void*, int64_t, int64_t) {}

void PackedReadRow(const WeightMatrix& m, int64_t row, float* out) {
  for (int64_t c = 0; c < m.cols; ++c) out[c] = static_cast<float>(m.QuantizedValue(row, c)) * m.ScaleOf(row, c);
}

constexpr std::array<FormatTraits, kWeightFormatCount> kFormats = {{
    {"bf16", Bf16Bytes, CanTileRows, Bf16TileInPlace, Bf16ReadRow, 16},
    {"int8", PackedBytes<8>, NeverRetiled, NoTiling, PackedReadRow, 8},
    {"int4", PackedBytes<4>, NeverRetiled, NoTiling, PackedReadRow, 4},
}};

const FormatTraits& Traits(WeightFormat f) { return kFormats[static_cast<size_t>(f)]; }

}  // namespace

PackedTiled PackedTiled::Of(int64_t rows, int64_t cols, int64_t bits) {
  auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  return PackedTiled{round_up(rows, kPackedTileRows), round_up(cols, kQuantGroup), bits};
}

int WeightMatrix::QuantizedValue(int64_t row, int64_t col) const {
  const PackedTiled t = PackedTiled::Of(rows, cols, Traits(format).bits);
  const int64_t at = t.ValueAt(row, col);
  if (t.bits == 8) return int8()[at];
  // Sign-extend the nibble: shift it to the top of a byte, then back arithmetically.
  const int byte = static_cast<uint8_t>(int8()[at / 2]);
  return static_cast<int8_t>(static_cast<uint8_t>((at % 2 == 0 ? byte << 4 : byte) & 0xf0)) >> 4;
}

float WeightMatrix::ScaleOf(int64_t row, int64_t col) const {
  const PackedTiled t = PackedTiled::Of(rows, cols, Traits(format).bits);
  return Bf16ToF32(scales[t.ScaleAt(row, col / kQuantGroup)]);
}

int WeightValueBits(WeightFormat format) { return Traits(format).bits; }

std::string_view WeightFormatName(WeightFormat format) { return Traits(format).name; }

std::string KnownWeightFormats() {
  std::vector<std::string> names;
  for (const FormatTraits& t : kFormats) names.push_back(t.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<WeightFormat> ParseWeightFormat(std::string_view name) {
  for (size_t i = 0; i < kFormats.size(); ++i) {
    if (name == kFormats[i].name) return static_cast<WeightFormat>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown weight format \"", std::string(name), "\" (known: ", KnownWeightFormats(), ")"));
}

size_t WeightBytes(WeightFormat format, int64_t rows, int64_t cols) { return Traits(format).bytes(rows, cols); }

std::string WeightMatrix::Describe() const {
  return absl::StrCat(Traits(format).name, " [", rows, ", ", cols, "]", tiled() ? " tiled" : "");
}

bool CanTile(const WeightMatrix& m) { return !m.empty() && !m.tiled() && Traits(m.format).can_tile(m.cols); }

void TileInPlace(WeightMatrix* m) {
  Traits(m->format).tile_in_place(const_cast<void*>(m->data), m->rows, m->cols);
  m->layout = WeightLayout::kTiled;
}

void ReadRowF32(const WeightMatrix& m, int64_t row, float* out) { Traits(m.format).read_row(m, row, out); }

}  // namespace layerpipe
