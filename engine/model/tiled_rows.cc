#include "engine/model/tiled_rows.h"

#include <cstring>
#include <vector>

namespace layerpipe {

void TileRowsInPlace(uint16_t* data, int64_t rows, int64_t cols) {
  // Groups occupy the same bytes in both orders, so one group's copy is all the scratch needed.
  std::vector<uint16_t> group(static_cast<size_t>(kTileRows * cols));
  for (int64_t row0 = 0; row0 < rows; row0 += kTileRows) {
    const int64_t n = TileGroupRows(row0, rows);
    uint16_t* base = data + row0 * cols;
    std::memcpy(group.data(), base, sizeof(uint16_t) * n * cols);
    for (int64_t q = 0; q < cols; q += kTileDepth) {
      for (int64_t r = 0; r < n; ++r) {
        std::memcpy(base + q * n + r * kTileDepth, group.data() + r * cols + q, sizeof(uint16_t) * kTileDepth);
      }
    }
  }
}

}  // namespace layerpipe
