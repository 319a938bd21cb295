// The row norm against a float64 reference, for every row length around its 16-lane sum (tails of 0 to
// 15 values, rows shorter than one step), and its determinism: a row's bits do not depend on where the
// row lies in memory or on whether it is normalized in place.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"
#include "gtest/gtest.h"

namespace layerpipe {
namespace {

constexpr double kEps = 1e-6;

// Values over several binades, so that a lost or doubled square shows in the sum.
std::vector<float> RandomRow(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-6, 6);
  std::vector<float> v(n);
  for (float& e : v) e = std::ldexp(dist(rng), scale(rng));
  return v;
}

// x / sqrt(mean(x²) + eps) · w in float64, the mean over the exact squares.
std::vector<double> Reference(const std::vector<float>& x, const std::vector<float>& w, double eps) {
  long double ss = 0;
  for (float v : x) ss += static_cast<long double>(v) * v;
  const double inv = 1.0 / std::sqrt(static_cast<double>(ss / x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * (w.empty() ? 1.0 : w[i]);
  return out;
}

TEST(RmsNormTest, MatchesAFloat64ReferenceForEveryTailLength) {
  std::mt19937 rng(7);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n : {256, 257, 3840}) lengths.push_back(n);
  for (int64_t n : lengths) {
    for (bool weighted : {false, true}) {
      const std::vector<float> x = RandomRow(n, rng);
      const std::vector<float> w = weighted ? RandomRow(n, rng) : std::vector<float>();
      std::vector<float> out(n);
      RmsNorm(x.data(), weighted ? w.data() : nullptr, n, kEps, out.data());
      const std::vector<double> ref = Reference(x, w, kEps);
      for (int64_t i = 0; i < n; ++i) {
        // Two float roundings (the inverse, then each product) and the sum's double rounding.
        ASSERT_NEAR(out[i], ref[i], 4e-7 * std::abs(ref[i]) + 1e-30) << "n=" << n << " i=" << i << " w=" << weighted;
      }
    }
  }
}

TEST(RmsNormTest, BitsDoNotDependOnAlignmentOrAliasing) {
  std::mt19937 rng(11);
  for (int64_t n : {13, 16, 31, 256, 3840}) {
    const std::vector<float> x = RandomRow(n, rng), w = RandomRow(n, rng);
    std::vector<float> expected(n);
    RmsNorm(x.data(), w.data(), n, kEps, expected.data());
    for (int offset = 1; offset < 8; ++offset) {  // the row starting at every float within 32 bytes
      std::vector<float> buf(n + offset);
      std::copy(x.begin(), x.end(), buf.begin() + offset);
      RmsNorm(buf.data() + offset, w.data(), n, kEps, buf.data() + offset);  // in place
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(buf[offset + i], expected[i]) << "n=" << n << " offset=" << offset << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace layerpipe
