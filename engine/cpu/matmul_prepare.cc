// Shared steps of the formats' runners: activation preparation and the column split among threads.
#include <algorithm>
#include <cstring>
#include <functional>

#include "engine/cpu/matmul_formats.h"
#include "engine/cpu/matmul_kernels.h"
#include "engine/model/bf16.h"

namespace layerpipe::matmul_internal {
namespace {

// Below this many activation values the conversion runs on the calling thread.
constexpr int64_t kMinParallelValues = int64_t{1} << 16;

// fn(i) for every row i < m; rows of a long prefill are split among the threads (the conversion of
// 512 x 3840 values on one thread left the other idle for ~2 % of a GEMM).
void ForRows(int64_t m, int64_t k, ThreadPool& pool, const std::function<void(int64_t)>& fn) {
  auto rows = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  };
  if (m * k < kMinParallelValues) {
    rows(0, m);
  } else {
    pool.ParallelFor(m, rows);
  }
}

}  // namespace

// Below this many multiply-adds a call runs on the calling thread: waking workers would cost more.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

void ForColumns(int64_t m, int64_t k, int64_t n, int64_t unit, ThreadPool& pool,
                const std::function<void(int64_t, int64_t)>& columns) {
  if (m * k * n < kMinParallelMacs || pool.size() == 1) {
    columns(0, n);
    return;
  }
  const int64_t units = (n + unit - 1) / unit;
  pool.ParallelFor(units, [&](int64_t u0, int64_t u1) {
    columns(u0 * unit, std::min(n, u1 * unit));
  });
}

// Activations for the column-order kernels: fp32 rows (rounded to bf16 values if asked), padded with
// zeros to a multiple of kPairXPad. Always a copy: it is small next to the weights, and aligned.
const float* PrepareF32(const float* x, int64_t m, int64_t k, bool round_to_bf16, ThreadPool& pool, int64_t* ldx) {
  const int64_t kp = RoundUp(k, matmul_internal::kPairXPad);
  float* out = matmul_internal::ThreadScratch<float, matmul_internal::Slot::kActivations>(m * kp);
  ForRows(m, k, pool, [&](int64_t i) {
    float* row = out + i * kp;
    if (round_to_bf16) {
      RoundRowToBf16(x + i * k, row, k);
    } else {
      std::memcpy(row, x + i * k, k * sizeof(float));
    }
    std::fill(row + k, row + kp, 0.0f);
  });
  *ldx = kp;
  return out;
}

// Activations for the AVX-512 BF16 kernel: bf16 rows padded with zeros to a multiple of kPairXPad.
const uint16_t* PrepareBf16(const float* x, int64_t m, int64_t k, ThreadPool& pool, int64_t* ldx) {
  const int64_t kp = RoundUp(k, matmul_internal::kPairXPad);
  uint16_t* out = matmul_internal::ThreadScratch<uint16_t, matmul_internal::Slot::kActivations>(m * kp);
  ForRows(m, k, pool, [&](int64_t i) {
    uint16_t* row = out + i * kp;
    F32ToBf16Row(x + i * k, row, k);
    std::fill(row + k, row + kp, uint16_t{0});
  });
  *ldx = kp;
  return out;
}

}  // namespace layerpipe::matmul_internal
