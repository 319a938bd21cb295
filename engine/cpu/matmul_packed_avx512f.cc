// The quantized formats (int8, int4) on AVX-512 registers (16 fp32 lanes: one vector a row group). The loops are
// matmul_packed_kernel.h's; this file gives the operations. Everything here carries the target attribute;
// the front end calls in only where the CPU has AVX-512 F/BW/VL.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/cpu/matmul_packed.h"
#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/tile_table.h"

#define LP_PACKED_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace layerpipe::matmul_internal {
namespace {

struct Vec {
  static constexpr int kLanes = 16;
  using F = __m512;
  using I = __m512i;
  LP_PACKED_TARGET static F Zero() { return _mm512_setzero_ps(); }
  LP_PACKED_TARGET static I LoadRaw(const int8_t* p) { return _mm512_loadu_si512(p); }
  // Value kI of kBits of each 32-bit lane, sign-extended by a shift to the top and an arithmetic shift back.
  template <int kBits, int kI>
  LP_PACKED_TARGET static F Value(I raw) {
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(raw, 32 - kBits * (kI + 1)), 32 - kBits));
  }
  LP_PACKED_TARGET static F Scales(const uint16_t* s) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  LP_PACKED_TARGET static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  LP_PACKED_TARGET static F Fma(const float* x, F w, F acc) { return _mm512_fmadd_ps(_mm512_set1_ps(*x), w, acc); }
  LP_PACKED_TARGET static F Load(const float* p, int valid) {
    return valid == kLanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << valid) - 1), p);
  }
  LP_PACKED_TARGET static void Store(float* p, F v, int valid) {
    if (valid == kLanes) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << valid) - 1), v);
    }
  }
};

// 32 registers: decode 4 rows x 2 row groups of accumulators beside their scales and raw vectors;
// prefill 8 rows x 3 row groups beside the 3 weight vectors.
constexpr int kDecodeRows = 4, kDecodeGroups = 2;
constexpr int kBlockRows = 8, kBlockGroups = 3;

#include "engine/cpu/matmul_packed_kernel.h"

}  // namespace

void Int8Avx512FColumns(const PackedProblem& p, int64_t j_begin, int64_t j_end) {
  PackedColumns<8>(p, j_begin, j_end);
}
void Int4Avx512FColumns(const PackedProblem& p, int64_t j_begin, int64_t j_end) {
  PackedColumns<4>(p, j_begin, j_end);
}

}  // namespace layerpipe::matmul_internal
