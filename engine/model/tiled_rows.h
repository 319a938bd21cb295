// A second storage order for bf16 weight matrices, read by the AVX-512 BF16 matmul kernel
// (engine/cpu/matmul_avx512.cc): rows in groups of kTileRows (the last group may hold fewer), and
// within a group of g rows, for each pair of k values (2p, 2p + 1), the g rows' pairs back to back.
// One pair of each of 16 rows is then one vector, the operand vdpbf16ps multiplies by a broadcast pair
// of an activation row; a group is one sequential stream. Stored this way once at load, the weights
// need no transposing per call.
#ifndef LAYERPIPE_ENGINE_MODEL_TILED_ROWS_H_
#define LAYERPIPE_ENGINE_MODEL_TILED_ROWS_H_

#include <algorithm>
#include <cstdint>

namespace layerpipe {

// Three vectors of 16 rows: the width of the kernel's register tiles.
inline constexpr int64_t kTileRows = 48;

// Only whole pairs of k are tiled.
inline bool CanTileRows(int64_t cols) { return cols > 0 && cols % 2 == 0; }

// Rows in the group that starts at `row0` (a multiple of kTileRows).
inline int64_t TileGroupRows(int64_t row0, int64_t rows) { return std::min(kTileRows, rows - row0); }

// Where element (row, col) of a tiled [rows, cols] matrix lives.
inline int64_t TiledOffset(int64_t row, int64_t col, int64_t rows, int64_t cols) {
  const int64_t row0 = row / kTileRows * kTileRows;
  return row0 * cols + col / 2 * 2 * TileGroupRows(row0, rows) + (row - row0) * 2 + col % 2;
}

// Rearranges a row-major [rows, cols] matrix into the tiled order, in place (CanTileRows(cols)).
void TileRowsInPlace(uint16_t* data, int64_t rows, int64_t cols);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_TILED_ROWS_H_
