// Front end of the matmul kernels: picks the ISA (what the CPU runs, what the environment asks) and
// calls the runner of the weights' format for it from the (format × ISA) table. The runners
// (matmul_formats.h) prepare x and split the columns among the threads.
#include "engine/cpu/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/model/bf16.h"
#include "engine/cpu/instruction_probe.h"
#include "engine/cpu/matmul_formats.h"
#include "engine/cpu/matmul_kernels.h"

namespace layerpipe {
namespace {

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

namespace {

using matmul_internal::FormatRunner;

// Rows: WeightFormat; columns: MatmulIsa. A format adds its row here and its runners' files.
constexpr FormatRunner kRunners[kWeightFormatCount][kMatmulIsaCount] = {
    /* bf16 */ {matmul_internal::RunBf16Avx2, matmul_internal::RunBf16Avx512F, matmul_internal::RunBf16Avx512Bf16},
    /* int8 */ {matmul_internal::RunInt8Avx2, matmul_internal::RunInt8Avx512F, matmul_internal::RunInt8Avx512F},
    /* int4 */ {matmul_internal::RunInt4Avx2, matmul_internal::RunInt4Avx512F, matmul_internal::RunInt4Avx512F},
};

// The ISA asked for, or the best this CPU runs below it.
MatmulIsa Runnable(MatmulIsa isa) {
  if (isa == MatmulIsa::kAvx512Bf16 && !CpuSupportsAvx512Bf16()) isa = MatmulIsa::kAvx512F;
  if (isa == MatmulIsa::kAvx512F && !CpuSupportsAvx512F()) isa = MatmulIsa::kAvx2;
  return isa;
}

}  // namespace

void MatmulWithIsa(MatmulIsa isa, const float* x, int64_t m, const WeightMatrix& w, float* y, ThreadPool& pool,
                   bool x_as_bf16, MatmulWidening widening) {
  if (TrivialShape(m, w.cols, w.rows, y)) return;
  const FormatRunner run = kRunners[static_cast<int>(w.format)][static_cast<int>(Runnable(isa))];
  run(matmul_internal::MatmulCall{x, m, &w, y, &pool, x_as_bf16, widening});
}

void Matmul(const float* x, int64_t m, const WeightMatrix& w, float* y, ThreadPool& pool, bool x_as_bf16) {
  MatmulWithIsa(ActiveMatmulIsa(), x, m, w, y, pool, x_as_bf16);
}

}  // namespace layerpipe
