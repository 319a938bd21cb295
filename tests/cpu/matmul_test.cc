#include "engine/cpu/matmul.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/model/bf16.h"
#include "engine/model/tiled_rows.h"
#include "tests/cpu/runnable_isas.h"

namespace layerpipe {
namespace {

struct Problem {
  int64_t m, k, n;
  std::vector<float> x;
  std::vector<uint16_t> w;
};

Problem MakeProblem(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> xd(0.0f, 1.0f), wd(0.0f, 0.05f);
  Problem p{m, k, n, std::vector<float>(m * k), std::vector<uint16_t>(n * k)};
  for (float& v : p.x) v = xd(rng);
  for (uint16_t& v : p.w) v = F32ToBf16(wd(rng));
  return p;
}

std::vector<float> Compute(MatmulIsa isa, const Problem& p, ThreadPool& pool, bool x_as_bf16,
                           MatmulWidening widening = ActiveMatmulWidening()) {
  std::vector<float> y(p.m * p.n, std::nanf(""));
  MatmulWithIsa(isa, p.x.data(), p.m, WeightMatrix::Bf16(p.w.data(), p.n, p.k), y.data(), pool, x_as_bf16, widening);
  return y;
}

constexpr MatmulWidening kWidenings[] = {MatmulWidening::kRegisters, MatmulWidening::kBlock};

// Sequential roundings in one output's sum, at most: the column order runs one chain of k fused
// multiply-adds, the AVX-512 BF16 order one of k/2 vdpbf16ps steps of up to 2 roundings each.
double Roundings(int64_t k) { return static_cast<double>(k) + 4; }

// Compares with a float64 reference under a rigorous bound for fp32 accumulation: each of the
// kernel's sequential roundings is off by <= 2^-24 of the running |sum|.
void ExpectMatchesReference(const Problem& p, const std::vector<float>& y, MatmulIsa isa, bool x_as_bf16,
                            const std::string& what) {
  const double unit = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        const float xv = x_as_bf16 ? RoundToBf16(p.x[i * p.k + q]) : p.x[i * p.k + q];
        const double prod = static_cast<double>(xv) * Bf16ToF32(p.w[j * p.k + q]);
        sum += prod;
        abs_sum += std::fabs(prod);
      }
      const double tol = Roundings(p.k) * unit * abs_sum + 1e-30;
      ASSERT_LE(std::fabs(y[i * p.n + j] - sum), tol)
          << what << " m=" << p.m << " k=" << p.k << " n=" << p.n << " at (" << i << ", " << j << ")";
    }
  }
}

std::string Label(MatmulIsa isa, bool x_as_bf16) {
  return std::string(MatmulIsaName(isa)) + (x_as_bf16 ? " bf16-x" : " fp32-x");
}

TEST(MatmulTest, MatchesFloat64Reference) {
  ThreadPool pool(2);
  const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 31, 64, 100, 300};
  const int64_t ks[] = {96, 160, 256, 3840};
  const int64_t ns[] = {1, 5, 37, 101};
  uint32_t seed = 1;
  for (int64_t k : ks) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        if (k == 3840 && m * n > 3000) continue;  // keeps the float64 reference quick
        const Problem p = MakeProblem(m, k, n, seed++);
        for (MatmulIsa isa : RunnableIsas()) {
          for (bool x_as_bf16 : {true, false}) {
            ExpectMatchesReference(p, Compute(isa, p, pool, x_as_bf16), isa, x_as_bf16, Label(isa, x_as_bf16));
          }
        }
      }
    }
  }
  // The large case the skip above leaves out: many rows and columns with the production k.
  const Problem big = MakeProblem(300, 3840, 67, 99);
  for (MatmulIsa isa : RunnableIsas()) {
    for (bool x_as_bf16 : {true, false}) {
      ExpectMatchesReference(big, Compute(isa, big, pool, x_as_bf16), isa, x_as_bf16, Label(isa, x_as_bf16));
    }
  }
}

TEST(MatmulTest, HandlesKNotAMultipleOfTheVectorWidth) {
  ThreadPool pool(2);
  for (int64_t k : {1, 7, 9, 31, 33, 100, 300, 1000}) {
    for (int64_t m : {1, 6, 20, 70}) {
      const Problem p = MakeProblem(m, k, 29, static_cast<uint32_t>(k * 100 + m));
      for (MatmulIsa isa : RunnableIsas()) {
        for (bool x_as_bf16 : {true, false}) {
          ExpectMatchesReference(p, Compute(isa, p, pool, x_as_bf16), isa, x_as_bf16, Label(isa, x_as_bf16));
        }
      }
    }
  }
}

TEST(MatmulTest, DegenerateShapes) {
  ThreadPool pool(2);
  std::vector<float> y(6, 5.0f);
  const std::vector<float> x(6, 1.0f);
  const std::vector<uint16_t> w(6, F32ToBf16(1.0f));
  Matmul(x.data(), 2, WeightMatrix::Bf16(w.data(), 3, 0), y.data(), pool, true);
  for (float v : y) EXPECT_EQ(v, 0.0f);  // k = 0: empty sums
  y.assign(6, 5.0f);
  Matmul(x.data(), 0, WeightMatrix::Bf16(w.data(), 2, 3), y.data(), pool, true);
  Matmul(x.data(), 2, WeightMatrix::Bf16(w.data(), 0, 3), y.data(), pool, true);
  for (float v : y) EXPECT_EQ(v, 5.0f);  // nothing to write
}

TEST(MatmulTest, Bf16ModeRoundsXAndFp32ModeDoesNot) {
  ThreadPool pool(1);
  // x = 1 + 2^-10 is not a bf16 value; it rounds to 1.
  const int64_t k = 32;
  std::vector<float> x(k, 0.0f);
  x[0] = 1.0f + 0x1p-10f;
  std::vector<uint16_t> w(k, 0);
  w[0] = F32ToBf16(1.0f);
  float y = 0;
  for (MatmulIsa isa : RunnableIsas()) {
    MatmulWithIsa(isa, x.data(), 1, WeightMatrix::Bf16(w.data(), 1, k), &y, pool, /*x_as_bf16=*/true);
    EXPECT_EQ(y, 1.0f) << MatmulIsaName(isa);
    MatmulWithIsa(isa, x.data(), 1, WeightMatrix::Bf16(w.data(), 1, k), &y, pool, /*x_as_bf16=*/false);
    EXPECT_EQ(y, 1.0f + 0x1p-10f) << MatmulIsaName(isa);
  }
}

bool SameBits(const float* a, const float* b, int64_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

// The column order, spelled out in scalar code: one fused multiply-add per value of k, in increasing k.
float ColumnOrderDot(const float* x, const uint16_t* w, int64_t k) {
  float acc = 0.0f;
  for (int64_t q = 0; q < k; ++q) acc = std::fma(x[q], Bf16ToF32(w[q]), acc);
  return acc;
}

// The kernels that promise the column order (AVX2 and AVX-512F in both modes, AVX-512 BF16 in fp32 mode) give
// its bits on the shapes their paths split differently: decode rows (AVX-512: one or two rows on registers fed
// straight from transposes, pairs of tiled groups up to 2 rows, a single tile up to 8; AVX2: one row two whole
// groups at a time, as n = 247 gives each of 2 threads, more rows 2 at a time, row-major weights transposed in
// 64 pairs up to 8 rows and 1024 beyond), blocked rows with partial row tiles, columns across groups, partial
// groups, vectors and tiles, k across chunks and ragged or odd ends; row-major weights and, for even k, the
// same weights stored tiled. Prefill both ways of widening the weights (in registers, or once into a block).
TEST(MatmulTest, ColumnOrderKernelsAreOneFusedChainPerOutput) {
  ThreadPool pool(2);
  for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 66, 259}) {
    for (int64_t n : {1, 13, 47, 49, 97, 247}) {
      for (int64_t k : {8, 99, 1030, 4160}) {
        const Problem p = MakeProblem(m, k, n, static_cast<uint32_t>(m * 31 + n * 7 + k));
        std::vector<uint16_t> tiled = p.w;
        if (CanTileRows(k)) TileRowsInPlace(tiled.data(), n, k);
        for (MatmulIsa isa : RunnableIsas()) {
          for (bool x_as_bf16 : {true, false}) {
            if (isa == MatmulIsa::kAvx512Bf16 && x_as_bf16) continue;  // its own order
            std::vector<float> xr(p.x);
            if (x_as_bf16) RoundRowToBf16(xr.data(), xr.data(), static_cast<int64_t>(xr.size()));
            for (MatmulWidening widening : kWidenings) {
              std::vector<std::vector<float>> results = {Compute(isa, p, pool, x_as_bf16, widening)};
              if (CanTileRows(k)) {
                results.emplace_back(m * n, std::nanf(""));
                MatmulWithIsa(isa, p.x.data(), m, WeightMatrix::Bf16(tiled.data(), n, k, WeightLayout::kTiled), results.back().data(), pool, x_as_bf16, widening);
              }
              for (size_t t = 0; t < results.size(); ++t) {
                for (int64_t i = 0; i < m; ++i) {
                  for (int64_t j = 0; j < n; ++j) {
                    const float expected = ColumnOrderDot(xr.data() + i * k, p.w.data() + j * k, k);
                    ASSERT_EQ(std::bit_cast<uint32_t>(results[t][i * n + j]), std::bit_cast<uint32_t>(expected))
                        << Label(isa, x_as_bf16) << (t == 1 ? " tiled" : " row-major") << " widening "
                        << MatmulWideningName(widening) << " m=" << m << " n=" << n << " k=" << k << " (" << i << ", "
                        << j << ")";
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Every row of a big batch equals the same row computed alone (m = 1), and the same row placed at
// various positions among unrelated rows of batches of various sizes (decode and prefill kernels). The
// big batch spans several of the blocked kernels' row blocks (AVX2: 512 rows; AVX-512 BF16: equal
// passes of at most 512 rows, here 3 of 368); k = 9000 is packed in 3 chunks of k with partial sums
// kept across them (AVX-512 BF16), and 5 at up to 64 rows, as is k = 3840 in 2.
TEST(MatmulTest, RowResultsIndependentOfBatchCompositionAndPosition) {
  ThreadPool pool(2);
  for (int64_t k : {96, 160, 3840, 9000}) {
    const int64_t n = 53;
    const Problem full = MakeProblem(1100, k, n, static_cast<uint32_t>(k));
    for (MatmulIsa isa : RunnableIsas()) {
      for (bool x_as_bf16 : {true, false}) {
        const std::vector<float> y_full = Compute(isa, full, pool, x_as_bf16);
        std::vector<int64_t> rows = {127, 128, 255, 256, 367, 368, 511, 512, 515, 516, 735, 736, 1023, 1024, full.m - 1};  // row blocks' edges
        for (int64_t i = 0; i < full.m; i += (k >= 3840 ? 23 : 7)) rows.push_back(i);
        for (int64_t i : rows) {
          Problem one{1, k, n, std::vector<float>(full.x.begin() + i * k, full.x.begin() + (i + 1) * k), full.w};
          const std::vector<float> y_one = Compute(isa, one, pool, x_as_bf16);
          ASSERT_TRUE(SameBits(y_one.data(), y_full.data() + i * n, n))
              << Label(isa, x_as_bf16) << " k=" << k << " row " << i << " alone vs in a batch of " << full.m;
        }
        // Row 17 of `full` placed at several positions inside other batches.
        const int64_t target = 17;
        for (int64_t batch : {2, 5, 8, 9, 13, 64, 129}) {
          for (int64_t pos : {int64_t{0}, batch / 2, batch - 1}) {
            Problem mixed = MakeProblem(batch, k, n, static_cast<uint32_t>(batch * 1000 + pos));
            mixed.w = full.w;
            std::copy(full.x.begin() + target * k, full.x.begin() + (target + 1) * k, mixed.x.begin() + pos * k);
            const std::vector<float> y = Compute(isa, mixed, pool, x_as_bf16);
            ASSERT_TRUE(SameBits(y.data() + pos * n, y_full.data() + target * n, n))
                << Label(isa, x_as_bf16) << " k=" << k << " batch " << batch << " position " << pos;
          }
        }
      }
    }
  }
}

TEST(MatmulTest, ResultsIndependentOfThreadCount) {
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : {1, 2, 3, 5}) pools.push_back(std::make_unique<ThreadPool>(t));
  for (int64_t m : {1, 4, 8, 33, 200}) {
    for (int64_t n : {7, 101, 1000}) {
      const Problem p = MakeProblem(m, 3840, n, static_cast<uint32_t>(m * 7 + n));
      for (MatmulIsa isa : RunnableIsas()) {
        for (bool x_as_bf16 : {true, false}) {
          const std::vector<float> y1 = Compute(isa, p, *pools[0], x_as_bf16);
          for (size_t t = 1; t < pools.size(); ++t) {
            ASSERT_TRUE(SameBits(Compute(isa, p, *pools[t], x_as_bf16).data(), y1.data(), m * n))
                << Label(isa, x_as_bf16) << " m=" << m << " n=" << n << " threads=" << pools[t]->size();
          }
        }
      }
    }
  }
}

// Weights stored tiled at load (engine/model/tiled_rows.h) are read in place by every kernel; the results are
// those of the row-major weights, bit for bit, in both modes: partial row groups (n not a multiple of 48,
// groups of fewer than 16 rows), k not a multiple of 32 and k in one, two or three chunks, any thread count,
// and decode's pairs of whole groups from the two halves of a thread's groups (247 rows: 5 whole groups and 7
// rows; a thread's range may start or end inside a group).
TEST(MatmulTest, TiledWeightsGiveTheRowMajorBits) {
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : {1, 3}) pools.push_back(std::make_unique<ThreadPool>(t));
  for (int64_t k : {2, 34, 96, 4160, 9024}) {
    for (int64_t n : {1, 5, 16, 17, 48, 50, 101, 247}) {
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17, 64, 130}) {
        const Problem p = MakeProblem(m, k, n, static_cast<uint32_t>(k * 31 + n * 7 + m));
        std::vector<uint16_t> tiled = p.w;
        TileRowsInPlace(tiled.data(), n, k);
        for (MatmulIsa isa : RunnableIsas()) {
          for (bool x_as_bf16 : {true, false}) {
            for (auto& pool : pools) {
              const std::vector<float> expected = Compute(isa, p, *pool, x_as_bf16);
              std::vector<float> y(m * n, std::nanf(""));
              MatmulWithIsa(isa, p.x.data(), m, WeightMatrix::Bf16(tiled.data(), n, k, WeightLayout::kTiled), y.data(), *pool, x_as_bf16);
              ASSERT_TRUE(SameBits(y.data(), expected.data(), m * n))
                  << Label(isa, x_as_bf16) << " m=" << m << " k=" << k << " n=" << n << " threads=" << pool->size();
            }
          }
        }
      }
    }
  }
}

// A prefill chunk longer than one pass of the kernels (512 rows, or 8-16 MiB of x) is taken in equal
// passes over the weights; rows in every pass get the bits they get alone.
TEST(MatmulTest, RowsBeyondTheFirstPassOfXKeepTheirBits) {
  ThreadPool pool(2);
  // AVX-512 BF16: 35 MiB of bf16 x, 3 passes of 400 rows; AVX-512F: 70 MiB of fp32 x, 5 passes of 240
  // rows; AVX2 (8 MiB passes): 9 passes of 136 rows.
  const int64_t m = 1200, k = 15360, n = 50;
  const Problem p = MakeProblem(m, k, n, 77);
  std::vector<uint16_t> tiled = p.w;
  TileRowsInPlace(tiled.data(), n, k);
  for (MatmulIsa isa : RunnableIsas()) {
    for (bool x_as_bf16 : {true, false}) {
      for (MatmulWidening widening : kWidenings) {
        const std::string label = Label(isa, x_as_bf16) + " widening " + std::string(MatmulWideningName(widening));
        std::vector<float> all(m * n), tiled_all(m * n);
        MatmulWithIsa(isa, p.x.data(), m, WeightMatrix::Bf16(p.w.data(), n, k), all.data(), pool, x_as_bf16, widening);
        MatmulWithIsa(isa, p.x.data(), m, WeightMatrix::Bf16(tiled.data(), n, k, WeightLayout::kTiled), tiled_all.data(), pool, x_as_bf16, widening);
        ASSERT_TRUE(SameBits(all.data(), tiled_all.data(), m * n)) << label;
        for (int64_t i : {int64_t{0}, int64_t{135}, int64_t{136}, int64_t{239}, int64_t{240}, int64_t{399},
                          int64_t{400}, int64_t{799}, int64_t{800}, m - 1}) {
          std::vector<float> one(n);
          MatmulWithIsa(isa, p.x.data() + i * k, 1, WeightMatrix::Bf16(p.w.data(), n, k), one.data(), pool, x_as_bf16);
          ASSERT_TRUE(SameBits(one.data(), all.data() + i * n, n)) << label << " row " << i;
        }
      }
    }
  }
}

// The default is the fastest kernel: vdpbf16ps off Intel CPUs (twice the 512-bit FMA's flops on Zen 4),
// the 512-bit FMA on Intel ones (twice vdpbf16ps's on Emerald Rapids), AVX2 without AVX-512. ctest runs
// this binary with $LAYERPIPE_ASSUME_AVX512_BF16=1, so an Intel VM that hides BF16 checks the rule too.
TEST(MatmulTest, ActiveIsaIsTheFastestRunnable) {
  const MatmulIsa isa = ActiveMatmulIsa();
  if (std::getenv("LAYERPIPE_MATMUL_ISA") == nullptr) {
    const MatmulIsa fastest = CpuSupportsAvx512Bf16() && !__builtin_cpu_is("intel") ? MatmulIsa::kAvx512Bf16
                              : CpuSupportsAvx512F()                                 ? MatmulIsa::kAvx512F
                                                                                     : MatmulIsa::kAvx2;
    EXPECT_EQ(MatmulIsaName(isa), MatmulIsaName(fastest));
  }
  if (isa == MatmulIsa::kAvx512Bf16) {
    EXPECT_TRUE(CpuSupportsAvx512Bf16());
  }
  const Problem p = MakeProblem(3, 256, 9, 5);
  std::vector<float> y(27);
  Matmul(p.x.data(), 3, WeightMatrix::Bf16(p.w.data(), 9, 256), y.data(), DefaultThreadPool(), true);
  ExpectMatchesReference(p, y, isa, true, std::string(MatmulIsaName(isa)));
}

}  // namespace
}  // namespace layerpipe
