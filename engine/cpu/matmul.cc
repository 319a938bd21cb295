// Front end of the matmul kernels: picks the kernel, brings x into the kernel's layout (bf16
// rounding, zero padding of k), and splits the output columns among the pool's threads. Splitting
// only over columns keeps each (row, column) result on one thread with one reduction order.
#include "engine/cpu/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/model/bf16.h"
#include "engine/cpu/instruction_probe.h"
#include "engine/cpu/matmul_kernels.h"

namespace layerpipe {
namespace {

using matmul_internal::RoundUp;

// Threads receive whole units of columns: one AVX-512 vector of outputs (a thread's range may split a
// group of 48 tiled rows: whole groups left 2 threads 1056 and 992 of k_proj's 2048 columns).
constexpr int64_t kColumnUnit = 16;
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

// The kernel for `isa` and the mode: the AVX-512 BF16 one for bf16-x mode where the ISA is kAvx512Bf16
// (and the CPU has it), else the column order, on AVX-512F registers unless the ISA is kAvx2 (or the CPU
// lacks AVX-512 F/BW/VL), x rounded to bf16 values if x_as_bf16.
void Run(MatmulIsa isa, const float* x, int64_t m, int64_t k, const uint16_t* w, bool w_tiled, int64_t n, float* y,
         ThreadPool& pool, bool x_as_bf16, MatmulWidening widening) {
  const bool bf16_dot = isa == MatmulIsa::kAvx512Bf16 && x_as_bf16 && CpuSupportsAvx512Bf16();
  const bool wide = isa != MatmulIsa::kAvx2 && CpuSupportsAvx512F();
  matmul_internal::PairProblem p{};
  p.x = bf16_dot ? static_cast<const void*>(PrepareBf16(x, m, k, pool, &p.ldx))
                 : PrepareF32(x, m, k, x_as_bf16, pool, &p.ldx);
  p.m = m;
  p.k = k;
  p.w = w;
  p.w_tiled = w_tiled;
  p.widen_block = widening == MatmulWidening::kBlock;
  p.n = n;
  p.y = y;
  ForColumns(m, k, n, kColumnUnit, pool, [&p, bf16_dot, wide](int64_t j0, int64_t j1) {
    if (bf16_dot) {
      matmul_internal::Avx512Bf16Columns(p, j0, j1);
    } else if (wide) {
      matmul_internal::Avx512FColumns(p, j0, j1);
    } else {
      matmul_internal::Avx2Columns(p, j0, j1);
    }
  });
}

// Handles the shapes that leave the kernels nothing to do; returns true if the call is complete.
bool TrivialShape(int64_t m, int64_t k, int64_t n, float* y) {
  if (m <= 0 || n <= 0) return true;
  if (k <= 0) {
    std::fill(y, y + m * n, 0.0f);
    return true;
  }
  return false;
}

}  // namespace

bool CpuSupportsAvx512F() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl");
  return supported;
}

namespace {

// $LAYERPIPE_ASSUME_AVX512_BF16=1: vdpbf16ps is trusted where CPUID hides it, once a probe has run it.
// Only on request: a guest live-migrated to a host without the instruction would die of SIGILL.
struct Bf16Assumption {
  bool granted;
  std::string ignored;  // empty, or what was asked and why it was set aside
};

Bf16Assumption AssumeBf16() {
  const char* env = std::getenv("LAYERPIPE_ASSUME_AVX512_BF16");
  const std::string wanted = env != nullptr ? env : "";
  const std::string asked = "LAYERPIPE_ASSUME_AVX512_BF16=" + wanted;
  if (wanted.empty() || wanted == "0" || __builtin_cpu_supports("avx512bf16")) return {false, ""};
  if (wanted != "1") return {false, asked + " ignored: not 1 or 0"};
  if (!CpuSupportsAvx512F()) return {false, asked + " ignored: this CPU lacks AVX-512 F/BW/VL"};
  if (!Avx512Bf16DotRuns()) return {false, asked + " ignored: vdpbf16ps does not run here"};
  return {true, ""};
}

const Bf16Assumption& AssumedBf16() {
  static const Bf16Assumption assumption = AssumeBf16();
  return assumption;
}

}  // namespace

bool CpuSupportsAvx512Bf16() {
  static const bool supported =
      CpuSupportsAvx512F() && (__builtin_cpu_supports("avx512bf16") || AssumedBf16().granted);
  return supported;
}

namespace {

bool CpuIsIntel() {
  static const bool intel = __builtin_cpu_is("intel");
  return intel;
}

// vdpbf16ps does twice the flops of a 512-bit FMA a cycle on AMD Zen 4, but half on the Intel cores
// measured (Emerald Rapids, 2 cores: 168 against 343 GFLOP/s; 6 layers' 1024-token prefill 63-68
// against 125 tok/s on the FMA kernel, decode alike), so Intel CPUs run the FMA kernels by default.
bool Bf16DotOutrunsFma() { return !CpuIsIntel(); }

// The kernel this process runs, and why $LAYERPIPE_MATMUL_ISA or $LAYERPIPE_MATMUL_WIDEN was not
// followed where it was not.
struct IsaChoice {
  MatmulIsa isa;
  std::string ignored;  // empty, or what was asked and why it was set aside
};
struct WideningChoice {
  MatmulWidening widening;
  std::string ignored;
};

MatmulIsa BestIsa() {
  if (CpuSupportsAvx512Bf16() && Bf16DotOutrunsFma()) return MatmulIsa::kAvx512Bf16;
  return CpuSupportsAvx512F() ? MatmulIsa::kAvx512F : MatmulIsa::kAvx2;
}

IsaChoice ChooseIsa() {
  const char* env = std::getenv("LAYERPIPE_MATMUL_ISA");
  const std::string wanted = env != nullptr ? env : "";
  const std::string asked = "LAYERPIPE_MATMUL_ISA=" + wanted;
  if (wanted.empty()) return {BestIsa(), ""};
  if (wanted == "avx2") return {MatmulIsa::kAvx2, ""};
  if (wanted == "avx512f") {
    if (CpuSupportsAvx512F()) return {MatmulIsa::kAvx512F, ""};
    return {MatmulIsa::kAvx2, asked + " ignored: this CPU lacks AVX-512 F/BW/VL"};
  }
  if (wanted == "avx512bf16") {
    if (CpuSupportsAvx512Bf16()) return {MatmulIsa::kAvx512Bf16, ""};
    return {BestIsa(), asked + " ignored: this CPU lacks AVX-512 BF16"};
  }
  return {BestIsa(), asked + " ignored: not one of avx2, avx512f, avx512bf16"};
}

const IsaChoice& ActiveChoice() {
  static const IsaChoice choice = ChooseIsa();
  return choice;
}

// Intel cores issue 256-bit shifts only on the two FMA ports and 512-bit vector ALU work only on the
// FMA ports; AMD Zen has vector ALU pipes beside its FMA pipes.
WideningChoice ChooseWidening() {
  const MatmulWidening best = CpuIsIntel() ? MatmulWidening::kBlock : MatmulWidening::kRegisters;
  const char* env = std::getenv("LAYERPIPE_MATMUL_WIDEN");
  const std::string wanted = env != nullptr ? env : "";
  if (wanted.empty()) return {best, ""};
  if (wanted == "registers") return {MatmulWidening::kRegisters, ""};
  if (wanted == "block") return {MatmulWidening::kBlock, ""};
  return {best, "LAYERPIPE_MATMUL_WIDEN=" + wanted + " ignored: not one of registers, block"};
}

const WideningChoice& ActiveWidening() {
  static const WideningChoice choice = ChooseWidening();
  return choice;
}

}  // namespace

namespace matmul_internal {
bool DecodePrefetchesToL2() { return CpuIsIntel(); }
bool SecondRowTileWalksNextChunk() { return CpuIsIntel(); }
}  // namespace matmul_internal

MatmulIsa ActiveMatmulIsa() { return ActiveChoice().isa; }
MatmulWidening ActiveMatmulWidening() { return ActiveWidening().widening; }

std::string_view MatmulWideningName(MatmulWidening widening) {
  return widening == MatmulWidening::kBlock ? "block" : "registers";
}

std::string MatmulKernelSummary() {
  const IsaChoice& c = ActiveChoice();
  std::string s = "matmul kernel " + std::string(MatmulIsaName(c.isa)) + " (CPU: AVX-512 F " +
                  (CpuSupportsAvx512F() ? "yes" : "no") + ", AVX-512 BF16 " + (CpuSupportsAvx512Bf16() ? "yes" : "no") +
                  "), prefill widening " + std::string(MatmulWideningName(ActiveMatmulWidening()));
  if (AssumedBf16().granted) {
    s += "; AVX-512 BF16 assumed (LAYERPIPE_ASSUME_AVX512_BF16=1): CPUID hides it, vdpbf16ps ran";
  }
  if (CpuSupportsAvx512Bf16() && !Bf16DotOutrunsFma() && c.isa == MatmulIsa::kAvx512F) {
    s += "; not avx512bf16: vdpbf16ps runs at half the 512-bit FMA rate on Intel cores";
  }
  if (!c.ignored.empty()) s += "; " + c.ignored;
  if (!ActiveWidening().ignored.empty()) s += "; " + ActiveWidening().ignored;
  if (!AssumedBf16().ignored.empty()) s += "; " + AssumedBf16().ignored;
  return s;
}

bool MatmulEnvRequestIgnored() {
  return !ActiveChoice().ignored.empty() || !ActiveWidening().ignored.empty() || !AssumedBf16().ignored.empty();
}

std::string_view MatmulIsaName(MatmulIsa isa) {
  switch (isa) {
    case MatmulIsa::kAvx2:
      return "avx2";
    case MatmulIsa::kAvx512F:
      return "avx512f";
    case MatmulIsa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

void MatmulBf16WithIsa(MatmulIsa isa, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                       float* y, ThreadPool& pool, bool x_as_bf16, MatmulWidening widening) {
  if (TrivialShape(m, k, n, y)) return;
  Run(isa, x, m, k, w, /*w_tiled=*/false, n, y, pool, x_as_bf16, widening);
}

void MatmulBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                ThreadPool& pool, bool x_as_bf16) {
  MatmulBf16WithIsa(ActiveMatmulIsa(), x, m, k, w, n, y, pool, x_as_bf16);
}

void MatmulBf16TiledWithIsa(MatmulIsa isa, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                            float* y, ThreadPool& pool, bool x_as_bf16, MatmulWidening widening) {
  if (TrivialShape(m, k, n, y)) return;
  Run(isa, x, m, k, w, /*w_tiled=*/true, n, y, pool, x_as_bf16, widening);
}

void MatmulBf16Tiled(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                     ThreadPool& pool, bool x_as_bf16) {
  MatmulBf16TiledWithIsa(ActiveMatmulIsa(), x, m, k, w, n, y, pool, x_as_bf16);
}

}  // namespace layerpipe
