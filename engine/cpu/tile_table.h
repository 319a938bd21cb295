// Compile-time tables of a register-tile template's instances, so a kernel can call the tile shape that
// fits the rows and columns left at a matrix's edges: TileTable<F, R, C>()[rows - 1][cols - 1] is
// F<rows, cols>::kFn.
#ifndef LAYERPIPE_ENGINE_CPU_TILE_TABLE_H_
#define LAYERPIPE_ENGINE_CPU_TILE_TABLE_H_

#include <array>
#include <utility>

namespace layerpipe::tile_table_internal {

template <template <int, int> class F, int R, int... Cs>
constexpr auto TableRow(std::integer_sequence<int, Cs...>) {
  return std::array{F<R, Cs + 1>::kFn...};
}
template <template <int, int> class F, int kColumns, int... Rs>
constexpr auto Table(std::integer_sequence<int, Rs...>) {
  return std::array{TableRow<F, Rs + 1>(std::make_integer_sequence<int, kColumns>())...};
}

}  // namespace layerpipe::tile_table_internal

namespace layerpipe {

template <template <int, int> class F, int kRows, int kColumns>
constexpr auto TileTable() {
  return tile_table_internal::Table<F, kColumns>(std::make_integer_sequence<int, kRows>());
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_TILE_TABLE_H_
