// The SIGILL guard the AVX-512 BF16 assumption rests on: an instruction the CPU refuses reads as
// "does not run" and the process goes on, with its SIGILL disposition as it was.
#include "engine/cpu/instruction_probe.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace layerpipe {
namespace {

bool Refused() {
  __asm__ volatile("ud2");  // raises SIGILL on every x86 CPU
  return true;
}
bool RunsTrue() { return true; }
bool RunsFalse() { return false; }

void Unused(int) {}

TEST(InstructionProbeTest, AnIllegalInstructionReadsAsAbsentAndTheProcessGoesOn) {
  EXPECT_FALSE(RunsWithoutIllegalInstruction(Refused));
  EXPECT_FALSE(RunsWithoutIllegalInstruction(Refused));  // the guard is set up afresh each time
  EXPECT_TRUE(RunsWithoutIllegalInstruction(RunsTrue));
  EXPECT_FALSE(RunsWithoutIllegalInstruction(RunsFalse));
}

TEST(InstructionProbeTest, RestoresTheSigillDisposition) {
  struct sigaction mine = {}, before = {}, after = {};
  mine.sa_handler = Unused;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGILL, &mine, &before), 0);
  EXPECT_FALSE(RunsWithoutIllegalInstruction(Refused));
  ASSERT_EQ(sigaction(SIGILL, &before, &after), 0);
  EXPECT_EQ(after.sa_handler, &Unused);
}

// Where CPUID shows AVX-512 BF16 the probe must find it (a probe that always failed would pass
// everywhere else).
TEST(InstructionProbeTest, FindsVdpbf16psWhereCpuidShowsIt) {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512f")) {
    GTEST_SKIP() << "CPUID shows no AVX-512 BF16 here (the probe says " << Avx512Bf16DotRuns() << ")";
  }
  EXPECT_TRUE(Avx512Bf16DotRuns());
}

}  // namespace
}  // namespace layerpipe
