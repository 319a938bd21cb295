#include "engine/model/tiled_rows.h"

#include <cstring>
#include <vector>

namespace layerpipe {

void TileRowsInPlace(uint16_t* data, int64_t rows, int64_t cols) {
  // Groups occupy the same bytes in both orders, so one group's copy is all the scratch needed. A pair
  // moves as one 32-bit value.
  const int64_t pairs = cols / 2;
  std::vector<uint32_t> group(static_cast<size_t>(kTileRows * pairs)), out(group.size());
  for (int64_t row0 = 0; row0 < rows; row0 += kTileRows) {
    const int64_t n = TileGroupRows(row0, rows);
    uint16_t* base = data + row0 * cols;
    std::memcpy(group.data(), base, sizeof(uint16_t) * n * cols);
    for (int64_t p = 0; p < pairs; ++p) {
      for (int64_t r = 0; r < n; ++r) out[p * n + r] = group[r * pairs + p];
    }
    std::memcpy(base, out.data(), sizeof(uint16_t) * n * cols);
  }
}

}  // namespace layerpipe
