// Sampler's weight of a logit and its top-p bucket, shared by the host sampler (engine/sampling/sampler.cc) and
// the CUDA draw kernel (engine/cuda/kernels_sample.cu), which must agree bit for bit: every
// multiply-add is an explicit fused one and nothing is left for a compiler to contract (GCC contracts
// at -O2 but not at -O0, nvcc by default).
#ifndef LAYERPIPE_ENGINE_SAMPLING_SAMPLE_WEIGHT_H_
#define LAYERPIPE_ENGINE_SAMPLING_SAMPLE_WEIGHT_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#if !defined(__CUDACC__)
#include <bit>
#endif

#if defined(__CUDACC__)
#define LP_SAMPLE_WEIGHT_FN __host__ __device__ __forceinline__
#else
#define LP_SAMPLE_WEIGHT_FN inline
#endif

namespace layerpipe::sample_weight {

// Weights are e^x for the log-weight x = (logit - max) / T <= 0. Below e^-80 a weight is taken as
// 0: even over the whole vocabulary such weights cannot move a double total that is >= 1, nor be
// hit by a 53-bit draw, so those tokens are not candidates at all.
inline constexpr float kMinLogWeight = -80.0f;
// Top-p's histogram: bucket b holds log-weights within 1/8 of -b/4, i.e. bands of a quarter nat, in
// order of decreasing weight; the last bucket also takes everything below kMinLogWeight (weight 0).
inline constexpr int kLogBucketsPerNat = 4;
inline constexpr int kLogBuckets = static_cast<int>(-kMinLogWeight) * kLogBucketsPerNat + 1;
// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer, which can
// then be read from the low mantissa bits: no float-to-int conversion, which would block vectorising.
inline constexpr float kRound = 12582912.0f;

LP_SAMPLE_WEIGHT_FN uint32_t Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#elif defined(__CUDACC__)  // nvcc's host pass is C++17
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#else
  return std::bit_cast<uint32_t>(f);
#endif
}

LP_SAMPLE_WEIGHT_FN float FromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#elif defined(__CUDACC__)
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#else
  return std::bit_cast<float>(u);
#endif
}

LP_SAMPLE_WEIGHT_FN float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// `value` if `keep`, else +0. A select on the bits: GCC will not if-convert (and so not vectorise)
// a float select whose arm computes something that could raise an FP exception.
LP_SAMPLE_WEIGHT_FN float KeepIf(bool keep, float value) { return FromBits(Bits(value) & (keep ? ~0u : 0u)); }

// e^x for x <= 0 (0 below kMinLogWeight), within 1e-7 relative. Plain arithmetic, so loops over a
// logit row vectorise; a libm call per entry used to dominate sampling over a full vocabulary.
// x = k ln2 + f with integer k and |f| <= ln2 / 2 (ln2 split in two so k ln2 is exact), e^f from
// its degree-7 Taylor series, then 2^k added to the exponent (k >= -116 keeps the result normal).
LP_SAMPLE_WEIGHT_FN float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float rounded = Fma(x, kLog2e, kRound);
  const float k = rounded - kRound;
  // Unsigned: in lanes that get masked out these bits are garbage, and must not overflow an int.
  const uint32_t k_bits = Bits(rounded) - Bits(kRound);
  const float f = Fma(-k, kLn2Lo, Fma(-k, kLn2Hi, x));
  // Horner form of 1 + f + f^2/2! + ... + f^7/7!.
  float p = 1.0f / 5040;
  p = Fma(p, f, 1.0f / 720);
  p = Fma(p, f, 1.0f / 120);
  p = Fma(p, f, 1.0f / 24);
  p = Fma(p, f, 1.0f / 6);
  p = Fma(p, f, 1.0f / 2);
  p = Fma(p, f, 1.0f);
  p = Fma(p, f, 1.0f);
  // Below kMinLogWeight (-inf included) the arithmetic above is garbage and is masked out.
  return KeepIf(x >= kMinLogWeight, FromBits(Bits(p) + (k_bits << 23)));
}

// Log-weight of one logit. The best logit gets exactly 0, also when it is +inf or 1/T overflows.
LP_SAMPLE_WEIGHT_FN float LogWeight(float logit, float max_logit, float inv_t) {
  return KeepIf(logit != max_logit, (logit - max_logit) * inv_t);
}

LP_SAMPLE_WEIGHT_FN uint16_t LogBucket(float log_weight) {
  // For log_weight <= 0 the sum is >= kRound, so its bits grow with -log_weight: monotone even
  // where it no longer holds an exact integer, and the min catches those cases.
  const uint32_t band = Bits(Fma(-log_weight, static_cast<float>(kLogBucketsPerNat), kRound)) - Bits(kRound);
  return static_cast<uint16_t>(band < static_cast<uint32_t>(kLogBuckets - 1) ? band : kLogBuckets - 1);
}

}  // namespace layerpipe::sample_weight

#undef LP_SAMPLE_WEIGHT_FN

#endif  // LAYERPIPE_ENGINE_SAMPLING_SAMPLE_WEIGHT_H_
