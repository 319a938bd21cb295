// The weight type's format table: names, refusal of unknown names, bytes by format, and the row read
// back whatever the layout.
#include "engine/model/weight_matrix.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/model/bf16.h"

namespace layerpipe {
namespace {

TEST(WeightFormatTest, EveryFormatParsesBackFromItsName) {
  for (int i = 0; i < kWeightFormatCount; ++i) {
    const auto f = static_cast<WeightFormat>(i);
    auto parsed = ParseWeightFormat(WeightFormatName(f));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, f);
    EXPECT_NE(KnownWeightFormats().find(std::string(WeightFormatName(f))), std::string::npos);
  }
  EXPECT_EQ(WeightFormatName(WeightFormat::kBf16), "bf16");
}

TEST(WeightFormatTest, AnUnknownFormatIsRefusedByName) {
  for (const char* name : {"int3", "BF16", "", "fp8"}) {
    auto parsed = ParseWeightFormat(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(std::string("\"") + name + "\""), std::string::npos)
        << parsed.status();
    EXPECT_NE(parsed.status().message().find(KnownWeightFormats()), std::string::npos) << parsed.status();
  }
}

TEST(WeightFormatTest, BytesAreThoseOfTheFormat) {
  EXPECT_EQ(WeightBytes(WeightFormat::kBf16, 2048, 3840), size_t{2048} * 3840 * 2);
  const std::vector<uint16_t> data(6 * 4);
  const WeightMatrix m = WeightMatrix::Bf16(data.data(), 6, 4);
  EXPECT_EQ(m.bytes(), 48u);
  EXPECT_EQ(m.Describe(), "bf16 [6, 4]");
  EXPECT_EQ(WeightMatrix::Bf16(data.data(), 6, 4, WeightLayout::kTiled).Describe(), "bf16 [6, 4] tiled");
  EXPECT_TRUE(WeightMatrix().empty());
  EXPECT_FALSE(CanTile(WeightMatrix()));
  EXPECT_FALSE(CanTile(WeightMatrix::Bf16(data.data(), 8, 3)));  // only whole pairs of k tile
}

// Tiling moves values, and ReadRowF32 reads any row back in column order from either layout, for a
// partial last group of rows too.
TEST(WeightFormatTest, RowsReadBackTheSameFromBothLayouts) {
  const int64_t rows = 53, cols = 10;
  std::vector<uint16_t> row_major(rows * cols);
  for (size_t i = 0; i < row_major.size(); ++i) row_major[i] = F32ToBf16(0.25f * static_cast<float>(i) - 17.0f);
  std::vector<uint16_t> copy = row_major;
  WeightMatrix tiled = WeightMatrix::Bf16(copy.data(), rows, cols);
  ASSERT_TRUE(CanTile(tiled));
  TileInPlace(&tiled);
  EXPECT_TRUE(tiled.tiled());
  EXPECT_NE(copy, row_major);
  const WeightMatrix plain = WeightMatrix::Bf16(row_major.data(), rows, cols);
  std::vector<float> a(cols), b(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ReadRowF32(plain, r, a.data());
    ReadRowF32(tiled, r, b.data());
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(a[c], Bf16ToF32(row_major[r * cols + c])) << r << ", " << c;
      ASSERT_EQ(b[c], a[c]) << r << ", " << c;
    }
  }
}

}  // namespace
}  // namespace layerpipe
