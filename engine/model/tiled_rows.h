// A second storage order for bf16 weight matrices, read by the AVX-512 BF16 matmul kernel
// (engine/cpu/matmul_avx512.cc): rows in groups of kTileRows (the last group may hold fewer), and
// within a group, for each step of kTileDepth values of k, the group's rows' values back to back.
// A group is then one sequential stream, which is the order that kernel's tiles consume: stored this
// way once at load, the weights need no repacking per call (which cost a prefill GEMM 5-40 %).
#ifndef LAYERPIPE_ENGINE_MODEL_TILED_ROWS_H_
#define LAYERPIPE_ENGINE_MODEL_TILED_ROWS_H_

#include <algorithm>
#include <cstdint>

namespace layerpipe {

inline constexpr int64_t kTileRows = 3;
inline constexpr int64_t kTileDepth = 32;

// Only whole steps of k are tiled: the kernel's loads never straddle two rows.
inline bool CanTileRows(int64_t cols) { return cols > 0 && cols % kTileDepth == 0; }

// Rows in the group that starts at `row0` (a multiple of kTileRows).
inline int64_t TileGroupRows(int64_t row0, int64_t rows) { return std::min(kTileRows, rows - row0); }

// Where element (row, col) of a tiled [rows, cols] matrix lives.
inline int64_t TiledOffset(int64_t row, int64_t col, int64_t rows, int64_t cols) {
  const int64_t row0 = row / kTileRows * kTileRows;
  return row0 * cols + col / kTileDepth * kTileDepth * TileGroupRows(row0, rows) + (row - row0) * kTileDepth +
         col % kTileDepth;
}

// Rearranges a row-major [rows, cols] matrix into the tiled order, in place (CanTileRows(cols)).
void TileRowsInPlace(uint16_t* data, int64_t rows, int64_t cols);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_TILED_ROWS_H_
