// Dense matrix products y = x · Wᵀ for the CPU engine (Hugging Face layout: W is [n, k] row-major).
//
// Determinism contract: y[i, j] depends only on row i of x, row j of W and k -- never on m, on the
// other rows of x, on the thread count or on how columns are split among threads. Every (i, j) dot
// product uses one fixed reduction order (fixed SIMD lanes over k, fixed final horizontal sum) in both
// the small-m (decode) and the large-m (prefill) kernels, and threads split work over n only.
// The reduction order is a property of the instruction set, so results are bit-identical across
// machines that run the same kernel (see MatmulIsa); fp32 mode always has the AVX2 order.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_H_

#include <cstdint>
#include <string_view>

#include "engine/cpu/thread_pool.h"

namespace layerpipe {

// y[m, n] = x[m, k] · Wᵀ with W [n, k] bf16 (raw bits), fp32 accumulation. y must not alias x or w.
// x_as_bf16: round x to bf16 first (the fast default mode; on AVX-512 BF16 machines it runs on
// vdpbf16ps). x_as_bf16 = false uses x exactly as given (the fp32 precision mode).
// k may be any value >= 0 (multiples of 32 are the fast case); n and m arbitrary.
void MatmulBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                ThreadPool& pool, bool x_as_bf16);

// Same contract with fp32 weights and fp32 x, always in the AVX2 order (on AVX-512F registers where the
// CPU has them and $LAYERPIPE_MATMUL_ISA is not avx2).
void MatmulF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
               ThreadPool& pool);

// Which kernel MatmulBf16 runs for x_as_bf16 = true. kAvx2 and kAvx512F share one reduction order
// (bit-identical results; kAvx512F runs long chunks on 512-bit registers, two output columns per
// register); kAvx512Bf16 has its own (vdpbf16ps). fp32 mode always has the AVX2 order, on AVX-512F
// registers unless the ISA is kAvx2.
enum class MatmulIsa { kAvx2, kAvx512F, kAvx512Bf16 };

// The best ISA this CPU supports, unless $LAYERPIPE_MATMUL_ISA names another: avx2 (so a cluster mixing
// CPU generations can still produce bit-identical tokens, or to compare kernels) or avx512f (the AVX2
// order on an AVX-512 BF16 machine, at AVX-512 width). Read once per process.
MatmulIsa ActiveMatmulIsa();
bool CpuSupportsAvx512F();
bool CpuSupportsAvx512Bf16();
std::string_view MatmulIsaName(MatmulIsa isa);

// Whether MatmulBf16 in bf16-x mode runs the AVX-512 BF16 kernel here, the one kernel that also reads
// weights stored tiled (engine/model/tiled_rows.h; a CPU stage stores them so when this holds).
bool MatmulReadsTiledWeights();

// MatmulBf16(x_as_bf16 = true) with w stored tiled (TileRowsInPlace; CanTileRows(k)): the
// same bits as MatmulBf16 on the row-major weights, without repacking them per call. Only where
// MatmulReadsTiledWeights().
void MatmulBf16Tiled(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                     ThreadPool& pool);

// MatmulBf16 with an explicit ISA; `isa` must be supported by this CPU. For tests and benchmarks.
void MatmulBf16WithIsa(MatmulIsa isa, const float* x, int64_t m, int64_t k, const uint16_t* w,
                       int64_t n, float* y, ThreadPool& pool, bool x_as_bf16);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_H_
