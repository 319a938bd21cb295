#include "engine/cpu/instruction_probe.h"

#include <immintrin.h>
#include <setjmp.h>
#include <signal.h>

#include <cstdint>

namespace layerpipe {
namespace {

sigjmp_buf probe_jump;

void OnIllegalInstruction(int) { siglongjmp(probe_jump, 1); }

// The inputs pass through volatile so the compiler cannot fold the instruction away.
__attribute__((target("avx512f,avx512bf16"), noinline)) bool DotGivesItsResult() {
  volatile uint16_t one_and_half = 0x3fc0, two = 0x4000;  // bf16 1.5 and 2.0
  volatile float one = 1.0f;
  const __m512bh a = (__m512bh)_mm512_set1_epi16(static_cast<short>(one_and_half));
  const __m512bh b = (__m512bh)_mm512_set1_epi16(static_cast<short>(two));
  const __m512 sum = _mm512_dpbf16_ps(_mm512_set1_ps(one), a, b);  // 1 + 1.5*2 + 1.5*2 in every lane
  return _mm512_cmpeq_ps_mask(sum, _mm512_set1_ps(7.0f)) == 0xffff;
}

}  // namespace

bool RunsWithoutIllegalInstruction(bool (*probe)()) {
  struct sigaction catching = {}, previous = {};
  catching.sa_handler = OnIllegalInstruction;
  sigemptyset(&catching.sa_mask);
  if (sigaction(SIGILL, &catching, &previous) != 0) return false;
  // volatile: a local written between sigsetjmp and siglongjmp keeps its value only so.
  volatile bool result = false;
  if (sigsetjmp(probe_jump, /*savemask=*/1) == 0) result = probe();
  sigaction(SIGILL, &previous, nullptr);
  return result;
}

// Without AVX-512 (or its register state enabled by the OS) the EVEX instruction raises SIGILL too.
bool Avx512Bf16DotRuns() { return RunsWithoutIllegalInstruction(DotGivesItsResult); }

}  // namespace layerpipe
