#include "engine/model/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace layerpipe {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

// Independent reference: pick whichever neighbouring bf16 value is nearer, in exact double
// arithmetic; on a tie the one with an even last bit. NaN -> quiet NaN with the same sign.
uint16_t ReferenceRound(float f) {
  const uint32_t b = Bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x40);
  if (std::isinf(f)) return static_cast<uint16_t>(b >> 16);
  const uint16_t down = static_cast<uint16_t>(b >> 16);  // truncation, toward zero
  const uint16_t up = static_cast<uint16_t>(down + 1);   // next magnitude (may be inf)
  const double vd = std::fabs(static_cast<double>(Bf16ToF32(down)));
  // The magnitude one bf16 step up, computed in double so the step to "infinity" is 2^128.
  const double vu = (up & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(Bf16ToF32(up)));
  const double v = std::fabs(static_cast<double>(f));
  if (v - vd < vu - v) return down;
  if (v - vd > vu - v) return up;
  return (down & 1) ? up : down;
}

TEST(Bf16Test, EveryBf16ValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    EXPECT_EQ(Bits(f), h << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(f))));
    } else {
      ASSERT_EQ(F32ToBf16(f), h) << std::hex << h;
    }
  }
}

TEST(Bf16Test, TiesRoundToEven) {
  // bf16 spacing at 1.0 is 2^-7; 1 + 2^-8 is exactly half-way between 1.0 (even) and 1 + 2^-7 (odd).
  EXPECT_EQ(F32ToBf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3·2^-8 is half-way between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(F32ToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(F32ToBf16(-(1.0f + 0x1p-8f)), 0xbf80);
  EXPECT_EQ(F32ToBf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
  // Just off the tie goes to the nearer neighbour.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000)), 0x3f82);
}

TEST(Bf16Test, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToBf16(inf), 0x7f80);
  EXPECT_EQ(F32ToBf16(-inf), 0xff80);
  EXPECT_EQ(F32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  // Finite values beyond the largest bf16 plus half a step round to infinity; below stay finite.
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7f8000)), 0x7f80);  // tie, odd 0x7f7f -> even "0x7f80" = inf
  // NaNs stay NaN (never become infinity by truncation), are quiet, and keep their sign.
  EXPECT_EQ(F32ToBf16(FromBits(0x7fc00000)), 0x7fc0);
  EXPECT_EQ(F32ToBf16(FromBits(0x7f800001)), 0x7fc0);  // signalling NaN with only low payload bits
  EXPECT_EQ(F32ToBf16(FromBits(0xffa00000)), 0xffe0);
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::quiet_NaN())));
  // Denormals are rounded, not flushed.
  EXPECT_EQ(F32ToBf16(FromBits(0x00010000)), 0x0001);
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000)), 0x0002);  // tie -> even
  EXPECT_EQ(F32ToBf16(FromBits(0x00008000)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(F32ToBf16(FromBits(0x00008001)), 0x0001);
}

TEST(Bf16Test, MatchesIndependentReferenceOnRandomBitPatterns) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    ASSERT_EQ(F32ToBf16(f), ReferenceRound(f)) << std::hex << Bits(f);
  }
  // Every tie pattern at a few exponents.
  for (uint32_t hi : {0x0000u, 0x0001u, 0x3f80u, 0x3f81u, 0x7f7eu, 0x7f7fu, 0x8001u, 0xbf81u}) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float f = FromBits(hi << 16 | lo);
      EXPECT_EQ(F32ToBf16(f), ReferenceRound(f)) << std::hex << Bits(f);
    }
  }
}

std::vector<float> MixedValues(size_t n, std::mt19937& rng) {
  const uint32_t specials[] = {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffa00000, 0x00000001,
                               0x80018000, 0x3f808000, 0x3f818000, 0x7f7fffff, 0x00000000, 0x80000000};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (rng() % 4 == 0) ? FromBits(specials[rng() % std::size(specials)]) : FromBits(static_cast<uint32_t>(rng()));
  }
  return v;
}

TEST(Bf16Test, RowConversionsMatchScalar) {
  std::mt19937 rng(11);
  for (size_t n = 0; n <= 70; ++n) {
    const std::vector<float> src = MixedValues(n, rng);
    std::vector<uint16_t> packed(n + 1, 0xdead);
    F32ToBf16Row(src.data(), packed.data(), static_cast<int64_t>(n));
    std::vector<float> rounded(n);
    RoundRowToBf16(src.data(), rounded.data(), static_cast<int64_t>(n));
    std::vector<float> widened(n);
    Bf16ToF32Row(packed.data(), widened.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(packed[i], F32ToBf16(src[i])) << "n=" << n << " i=" << i;
      ASSERT_EQ(Bits(rounded[i]), Bits(RoundToBf16(src[i]))) << "n=" << n << " i=" << i;
      ASSERT_EQ(Bits(widened[i]), static_cast<uint32_t>(packed[i]) << 16);
    }
    EXPECT_EQ(packed[n], 0xdead) << "wrote past the end, n=" << n;
  }
}

TEST(Bf16Test, RoundRowWorksInPlace) {
  std::mt19937 rng(3);
  std::vector<float> v = MixedValues(37, rng);
  std::vector<float> expected(v.size());
  for (size_t i = 0; i < v.size(); ++i) expected[i] = RoundToBf16(v[i]);
  RoundRowToBf16(v.data(), v.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(Bits(v[i]), Bits(expected[i]));
}

}  // namespace
}  // namespace layerpipe
