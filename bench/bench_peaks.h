// What the CPU benchmarks share: best-of-n timing and the machine's multiply-add ceilings, measured
// the same way for every kernel they are held to.
#ifndef LAYERPIPE_BENCH_BENCH_PEAKS_H_
#define LAYERPIPE_BENCH_BENCH_PEAKS_H_

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"

namespace layerpipe::bench {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-`reps` seconds for fn().
template <typename Fn>
inline double BestTime(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    fn();
    best = std::min(best, Now() - t0);
  }
  return best;
}

// Independent accumulator chains per thread: enough to cover the multiply-add latency on every pipe
// that can run it. 512-bit code has 32 registers: 24 chains (12 measured vdpbf16ps ~7 % short of its
// peak on Zen 5, where the tiled kernel already runs 24). 256-bit AVX2 code has 16: 12 chains.
constexpr int kChains512 = 24;
constexpr int kChains256 = 12;

inline float FmaChains(int64_t iters) {
  __m256 a[kChains256];
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
  for (int i = 0; i < kChains256; ++i) a[i] = _mm256_set1_ps(float(i));
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains256; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
  }
  __m256 s = a[0];
  for (int i = 1; i < kChains256; ++i) s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) inline float Fma512Chains(int64_t iters) {
  __m512 a[kChains512];
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int i = 0; i < kChains512; ++i) a[i] = _mm512_set1_ps(float(i));
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains512; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < kChains512; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline float DpbfChains(int64_t iters) {
  __m512 a[kChains512];
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int i = 0; i < kChains512; ++i) a[i] = _mm512_set1_ps(float(i));
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains512; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < kChains512; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

// The ceilings the kernels are held to: fp32 FMA (AVX2, 8 lanes x 2 flops; AVX-512F, 16 lanes x 2 flops)
// and, where the CPU has it, vdpbf16ps (16 lanes x 2 pairs x 2 flops).
enum class Peak { kFma, kFma512, kBf16Dot };

// Every thread of the pool runs `iters` steps of the chains of `kind` (which the CPU must have);
// returns the flops done.
inline double RunPeakLoop(ThreadPool& pool, Peak kind, int64_t iters) {
  std::vector<float> sink(pool.size() * 16);
  pool.ParallelFor(pool.size(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      sink[t * 16] += kind == Peak::kFma      ? FmaChains(iters)
                      : kind == Peak::kFma512 ? Fma512Chains(iters)
                                              : DpbfChains(iters);
    }
  });
  const double flops_per_step = kind == Peak::kFma ? 16.0 * kChains256 : (kind == Peak::kFma512 ? 32.0 : 64.0) * kChains512;
  return flops_per_step * static_cast<double>(iters) * pool.size();
}

// Peak rate of `kind`: best of 10 calls of ~30 ms (a best of 3 on a shared VM read up to 5 % low now
// and then, which flattered every kernel held to it).
inline double PeakGflops(ThreadPool& pool, Peak kind) {
  constexpr int64_t kIters = int64_t{1} << 23;
  double flops = 0;
  const double t = BestTime(10, [&] { flops = RunPeakLoop(pool, kind, kIters); });
  return flops / t / 1e9;
}

struct Peaks {
  double fma = 0, fma512 = 0, bf16_dot = 0;
};

inline Peaks MeasurePeaks(ThreadPool& pool) {
  Peaks p;
  p.fma = PeakGflops(pool, Peak::kFma);
  if (CpuSupportsAvx512F()) p.fma512 = PeakGflops(pool, Peak::kFma512);
  if (CpuSupportsAvx512Bf16()) p.bf16_dot = PeakGflops(pool, Peak::kBf16Dot);
  return p;
}

}  // namespace layerpipe::bench

#endif  // LAYERPIPE_BENCH_BENCH_PEAKS_H_
