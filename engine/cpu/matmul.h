// Dense matrix products y = x · Wᵀ for the CPU engine (Hugging Face layout: W is [n, k] row-major).
//
// Determinism contract: y[i, j] depends only on row i of x, row j of W and k -- never on m, on the
// other rows of x, on the thread count, on how columns are split among threads or on whether W is
// stored tiled. Every (i, j) dot product uses one fixed reduction order in both the small-m (decode) and
// the large-m (prefill) kernels, and threads split work over n only. The order is a property of the
// kernel (see MatmulIsa), so results are bit-identical across machines that run the same kernel.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/cpu/thread_pool.h"
#include "engine/model/weight_matrix.h"

namespace layerpipe {

// y[m, n] = x[m, k] · Wᵀ with W = w [n, k] = [w.rows, w.cols] in any weight format and layout
// (engine/model/weight_matrix.h), fp32 accumulation; the kernel comes from the (format × ISA) table of
// matmul_formats.h. y must not alias x or the weights.
// x_as_bf16: round x to bf16 first (the fast default mode; on AVX-512 BF16 machines bf16 weights run
// on vdpbf16ps). x_as_bf16 = false uses x exactly as given (the fp32 precision mode).
// k may be any value >= 0 (multiples of 32 are the fast case); n and m arbitrary. Tiled weights give
// the same bits as the same weights row-major, without transposing them per call.
void Matmul(const float* x, int64_t m, const WeightMatrix& w, float* y, ThreadPool& pool, bool x_as_bf16);

// Which kernel Matmul runs on bf16 weights, and its reduction order (matmul_kernels.h):
//  - kAvx2 and kAvx512F: the column order (one fused multiply-add chain per output over k in increasing
//    order, as a scalar loop would run it) on 256- or 512-bit registers, the same bits, both modes;
//  - kAvx512Bf16: its own order on vdpbf16ps for bf16-x mode; fp32 mode runs the column order.
enum class MatmulIsa { kAvx2, kAvx512F, kAvx512Bf16 };
inline constexpr int kMatmulIsaCount = 3;

// The fastest kernel this CPU runs: kAvx512Bf16 where it has AVX-512 BF16 and is not an Intel CPU
// (whose cores run vdpbf16ps at half the 512-bit FMA rate), else kAvx512F where it has AVX-512 F/BW/VL,
// else kAvx2; unless $LAYERPIPE_MATMUL_ISA names another: avx2 (so a cluster mixing CPU generations can
// still produce bit-identical tokens, or to compare kernels), avx512f (the column order on an AMD
// AVX-512 BF16 machine, as every machine without BF16 runs it) or avx512bf16 (vdpbf16ps on an Intel
// one, as AMD ones run it). Read once per process.
MatmulIsa ActiveMatmulIsa();
// How the fp32 kernels (kAvx2, kAvx512F) widen bf16 weights in prefill: in registers in every row tile
// that reads them (two vector ALU operations per pair of values), or, with kBlock and enough rows (AVX2
// 24, AVX-512F 48), once per chunk into an fp32 block every row tile then reads. The first is faster
// where those operations have ports of their own (AMD Zen), the second where they share the FMA ports
// (Intel cores). Same bits.
enum class MatmulWidening { kRegisters, kBlock };
// The CPU's better choice (kBlock on Intel, kRegisters elsewhere) unless $LAYERPIPE_MATMUL_WIDEN names
// one (registers, block). Read once per process.
MatmulWidening ActiveMatmulWidening();
std::string_view MatmulWideningName(MatmulWidening widening);

// One line for logs: the kernel ActiveMatmulIsa runs, its widening, what the CPU has, and, where
// $LAYERPIPE_MATMUL_ISA names a kernel this CPU lacks or no kernel at all, or $LAYERPIPE_MATMUL_WIDEN
// names no widening, that it was ignored (then MatmulEnvRequestIgnored() is true and the default runs).
std::string MatmulKernelSummary();
bool MatmulEnvRequestIgnored();
// AVX-512 F, BW and VL (every AVX-512 server CPU since Skylake-SP): what the kAvx512F kernel needs;
// without them it runs on AVX2 registers.
bool CpuSupportsAvx512F();
// AVX-512 F/BW/VL and BF16 per CPUID or, where CPUID hides BF16 (KVM guests of Sapphire/Emerald Rapids
// and Zen 4/5 hosts) and $LAYERPIPE_ASSUME_AVX512_BF16=1, once a probe ran vdpbf16ps and got its result.
bool CpuSupportsAvx512Bf16();
std::string_view MatmulIsaName(MatmulIsa isa);

// Matmul with an explicit ISA and widening, for tests and benchmarks. An ISA this CPU lacks runs the
// best one it has below it (avx512bf16, then avx512f, then avx2).
void MatmulWithIsa(MatmulIsa isa, const float* x, int64_t m, const WeightMatrix& w, float* y, ThreadPool& pool,
                   bool x_as_bf16, MatmulWidening widening = ActiveMatmulWidening());

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_H_
