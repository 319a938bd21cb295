// The quantized formats (int8, int4) on AVX2 registers (8 fp32 lanes: a row group of 16 is two vectors). The loops
// are matmul_packed_kernel.h's; this file gives the operations.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/cpu/matmul_packed.h"
#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/tile_table.h"

#define LP_PACKED_TARGET

namespace layerpipe::matmul_internal {
namespace {

struct Vec {
  static constexpr int kLanes = 8;
  using F = __m256;
  using I = __m256i;
  static F Zero() { return _mm256_setzero_ps(); }
  static I LoadRaw(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  // Value kI of kBits of each 32-bit lane, sign-extended by a shift to the top and an arithmetic shift back.
  template <int kBits, int kI>
  static F Value(I raw) {
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(raw, 32 - kBits * (kI + 1)), 32 - kBits));
  }
  static F Scales(const uint16_t* s) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Fma(const float* x, F w, F acc) { return _mm256_fmadd_ps(_mm256_broadcast_ss(x), w, acc); }
  static __m256i Mask(int valid) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F Load(const float* p, int valid) {
    return valid == kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Mask(valid));
  }
  static void Store(float* p, F v, int valid) {
    if (valid == kLanes) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm256_maskstore_ps(p, Mask(valid), v);
    }
  }
};

// 16 registers: decode 4 rows x 2 vectors of accumulators beside 2 scales and 2 raw vectors; prefill
// 6 rows x 2 vectors beside the 2 weight vectors.
constexpr int kDecodeRows = 4, kDecodeGroups = 1;
constexpr int kBlockRows = 6, kBlockGroups = 1;

#include "engine/cpu/matmul_packed_kernel.h"

}  // namespace

void Int8Avx2Columns(const PackedProblem& p, int64_t j_begin, int64_t j_end) { PackedColumns<8>(p, j_begin, j_end); }
void Int4Avx2Columns(const PackedProblem& p, int64_t j_begin, int64_t j_end) { PackedColumns<4>(p, j_begin, j_end); }

}  // namespace layerpipe::matmul_internal
