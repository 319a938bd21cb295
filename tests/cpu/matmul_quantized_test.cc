// The quantized weight formats (int8, int4): their rules, their tiled layout, and their kernels, which must give
// the bits of a scalar loop over the dequantized weights (one fused multiply-add chain per output over
// k in increasing order, from +0) on every ISA, in decode and prefill, at any thread count.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/bf16.h"
#include "engine/model/quantize.h"
#include "engine/model/weight_matrix.h"
#include "tests/cpu/runnable_isas.h"

namespace layerpipe {
namespace {

TEST(QuantizeInt8Test, ScaleIsTheBf16OfTheLargestMagnitudeOver127AndValuesRoundHalfToEven) {
  // max |w| = 127: s = 1, so q is w rounded half to even.
  const float w[] = {127.0f, -63.5f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.49f};
  int8_t q[8];
  const uint16_t s = QuantizeGroupInt8(w, 8, q);
  EXPECT_EQ(Bf16ToF32(s), 1.0f);
  const int8_t want[] = {127, -64, 0, 2, 2, 0, -2, 3};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], want[i]) << i;
  // s is rounded to bf16 before dividing: 0.1 / 127 is not a bf16 value.
  const float small[] = {0.1f, -0.05f};
  const uint16_t s2 = QuantizeGroupInt8(small, 2, q);
  EXPECT_EQ(s2, F32ToBf16(0.1f / 127.0f));
  EXPECT_EQ(q[0], static_cast<int8_t>(std::rint(0.1f / Bf16ToF32(s2))));
  EXPECT_EQ(q[1], static_cast<int8_t>(std::rint(-0.05f / Bf16ToF32(s2))));
  // A group of zeros: s = 0, q = 0.
  const float zeros[3] = {0.0f, -0.0f, 0.0f};
  EXPECT_EQ(Bf16ToF32(QuantizeGroupInt8(zeros, 3, q)), 0.0f);
  EXPECT_EQ(q[0] | q[1] | q[2], 0);
}

TEST(QuantizeInt4Test, ScaleIsTheSignedLargestOverMinus8) {
  // m = -2.0 (the largest magnitude, negative): s = bf16(-2 / -8) = 0.25, q = rint(w / 0.25) in [-8, 7].
  const float w[] = {-2.0f, 1.75f, 0.125f, 0.375f, -0.3f, 1.0f};
  int8_t q[6];
  const uint16_t s = QuantizeGroupInt4(w, 6, q);
  EXPECT_EQ(Bf16ToF32(s), 0.25f);
  const int8_t want[] = {-8, 7, 0, 2, -1, 4};  // 0.125 / 0.25 = 0.5 rounds to 0, 0.375 / 0.25 = 1.5 to 2
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q[i], want[i]) << i;
  // m positive: s negative, so m itself is q = -8 and the opposite extreme clamps to 7.
  const float pos[] = {2.0f, -2.0f, 0.5f};
  const uint16_t s2 = QuantizeGroupInt4(pos, 3, q);
  EXPECT_EQ(Bf16ToF32(s2), -0.25f);
  EXPECT_EQ(q[0], -8);
  EXPECT_EQ(q[1], 7);
  EXPECT_EQ(q[2], -2);
  const float zeros[2] = {0.0f, -0.0f};
  EXPECT_EQ(Bf16ToF32(QuantizeGroupInt4(zeros, 2, q)), 0.0f);
  EXPECT_EQ(q[0] | q[1], 0);
}

constexpr WeightFormat kQuantized[] = {WeightFormat::kInt8, WeightFormat::kInt4};

struct Problem {
  int64_t m, k, n;
  std::vector<float> x;
  std::vector<uint16_t> w;            // bf16 [n, k]
  std::vector<uint8_t> storage;       // the int8 matrix
  WeightMatrix q;
};

Problem MakeProblem(int64_t m, int64_t k, int64_t n, uint32_t seed, WeightFormat format) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> xd(0.0f, 1.0f), wd(0.0f, 0.05f);
  Problem p{m, k, n, std::vector<float>(m * k), std::vector<uint16_t>(n * k), {}, {}};
  for (float& v : p.x) v = xd(rng);
  for (uint16_t& v : p.w) v = F32ToBf16(wd(rng));
  // One row of zeros (s = 0 throughout) and one group of a single large value.
  if (n > 2) {
    for (int64_t c = 0; c < k; ++c) p.w[1 * k + c] = 0;
    p.w[2 * k] = F32ToBf16(3.0f);
  }
  p.storage.resize(WeightBytes(format, n, k));
  p.q = Quantize(WeightMatrix::Bf16(p.w.data(), n, k), format, p.storage.data());
  return p;
}

// The scalar loop the kernels must equal, bit for bit: the dequantized weights read back by
// ReadRowF32, x rounded to bf16 values in bf16 mode, k padded to the group with +0 products.
std::vector<float> Reference(const Problem& p, bool x_as_bf16) {
  const int64_t kp = PackedTiled::Of(p.n, p.k, WeightValueBits(p.q.format)).k_padded;
  std::vector<float> y(p.m * p.n), row(p.k);
  for (int64_t j = 0; j < p.n; ++j) {
    ReadRowF32(p.q, j, row.data());
    for (int64_t i = 0; i < p.m; ++i) {
      float acc = 0.0f;
      for (int64_t c = 0; c < kp; ++c) {
        const float x = c < p.k ? (x_as_bf16 ? RoundToBf16(p.x[i * p.k + c]) : p.x[i * p.k + c]) : 0.0f;
        acc = std::fma(x, c < p.k ? row[c] : 0.0f, acc);
      }
      y[i * p.n + j] = acc;
    }
  }
  return y;
}

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Each weight reads back as exactly q · s, within half a step of the bf16 value it came from (a step where
// it clamps), q in the format's range; the rows and k are padded to the tiled layout's.
TEST(MatmulQuantizedTest, WeightsDequantizeToQTimesS) {
  for (WeightFormat f : kQuantized) {
    const Problem p = MakeProblem(1, 70, 19, 3, f);
    EXPECT_EQ(p.q.format, f);
    EXPECT_TRUE(p.q.tiled());
    const int bits = WeightValueBits(f);
    const PackedTiled t = PackedTiled::Of(19, 70, bits);
    EXPECT_EQ(t.rows_padded, 32);
    EXPECT_EQ(t.k_padded, 96);
    EXPECT_EQ(p.q.bytes(), size_t{32 * 96 * static_cast<size_t>(bits) / 8 + 32 * 3 * 2});
    const int lo = f == WeightFormat::kInt8 ? -127 : -8, hi = f == WeightFormat::kInt8 ? 127 : 7;
    std::vector<float> row(70);
    for (int64_t r = 0; r < 19; ++r) {
      ReadRowF32(p.q, r, row.data());
      for (int64_t c = 0; c < 70; ++c) {
        const float s = p.q.ScaleOf(r, c);
        const int q = p.q.QuantizedValue(r, c);
        ASSERT_GE(q, lo);
        ASSERT_LE(q, hi);
        ASSERT_EQ(row[c], static_cast<float>(q) * s);
        // Half a step, or a whole one where int4's grid clamps (the group's extreme of the other sign).
        const float step = q == lo || q == hi ? std::fabs(s) : std::fabs(s) / 2;
        ASSERT_LE(std::fabs(row[c] - Bf16ToF32(p.w[r * 70 + c])), step) << WeightFormatName(f) << " " << r << ", " << c;
      }
    }
  }
}

// The int4 words hold a row's 8 consecutive values of k, value i in bits 4i .. 4i + 3 (the QAT packing).
TEST(MatmulQuantizedTest, Int4WordsHoldEightValuesLowNibbleFirst) {
  const Problem p = MakeProblem(1, 32, 16, 5, WeightFormat::kInt4);
  const auto* words = reinterpret_cast<const uint32_t*>(p.q.data);
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t c = 0; c < 32; ++c) {
      const uint32_t word = words[(c / 8) * 16 + r];
      const int nibble = static_cast<int>((word >> (4 * (c % 8))) & 0xf);
      ASSERT_EQ(nibble >= 8 ? nibble - 16 : nibble, p.q.QuantizedValue(r, c)) << r << ", " << c;
    }
  }
}

TEST(MatmulQuantizedTest, EveryIsaGivesTheBitsOfTheScalarLoop) {
  ThreadPool pool(2);
  for (WeightFormat f : kQuantized)
  for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17}) {
    for (int64_t n : {1, 15, 16, 17, 48, 50, 100}) {
      for (int64_t k : {32, 40, 96, 300, 600}) {
        const Problem p = MakeProblem(m, k, n, static_cast<uint32_t>(m * 1000 + n * 10 + k), f);
        for (bool x_as_bf16 : {false, true}) {
          const std::vector<float> want = Reference(p, x_as_bf16);
          for (MatmulIsa isa : RunnableIsas()) {
            std::vector<float> y(m * n, std::nanf(""));
            MatmulWithIsa(isa, p.x.data(), m, p.q, y.data(), pool, x_as_bf16);
            ExpectSameBits(y, want, std::string(WeightFormatName(f)) + " " + std::string(MatmulIsaName(isa)) + " m=" + std::to_string(m) + " n=" +
                                        std::to_string(n) + " k=" + std::to_string(k) + (x_as_bf16 ? " bf16" : " fp32"));
          }
        }
      }
    }
  }
}

// A row's result does not depend on the rows beside it (decode tiles up to 4 rows, the block path
// beyond), nor on the thread count, on a 12B-sized width split among threads.
TEST(MatmulQuantizedTest, RowResultsIndependentOfBatchAndThreads) {
  ThreadPool one(1), two(2);
  for (WeightFormat f : kQuantized)
  for (MatmulIsa isa : RunnableIsas()) {
    const Problem p = MakeProblem(13, 3840, 256, 11, f);
    std::vector<float> all(13 * 256), all_one(13 * 256), single(256);
    MatmulWithIsa(isa, p.x.data(), 13, p.q, all.data(), two, true);
    MatmulWithIsa(isa, p.x.data(), 13, p.q, all_one.data(), one, true);
    ExpectSameBits(all_one, all, "threads");
    for (int64_t i = 0; i < 13; ++i) {
      MatmulWithIsa(isa, p.x.data() + i * 3840, 1, p.q, single.data(), two, true);
      ExpectSameBits(single, std::vector<float>(all.begin() + i * 256, all.begin() + (i + 1) * 256),
                     "row " + std::to_string(i));
    }
  }
}

TEST(MatmulQuantizedTest, QuantizationNamesItsFormats) {
  EXPECT_EQ(*ParseQuantization("none"), WeightFormat::kBf16);
  EXPECT_EQ(*ParseQuantization("int8"), WeightFormat::kInt8);
  EXPECT_EQ(*ParseQuantization("int4"), WeightFormat::kInt4);
  EXPECT_EQ(WeightFormatName(WeightFormat::kInt4), "int4");
  auto bad = ParseQuantization("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"int3\""), std::string::npos) << bad.status();
  EXPECT_EQ(WeightFormatName(WeightFormat::kInt8), "int8");
  EXPECT_EQ(*ParseWeightFormat("int8"), WeightFormat::kInt8);
}

}  // namespace
}  // namespace layerpipe
