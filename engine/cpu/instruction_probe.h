// Running an instruction the CPU may lack, to learn whether it has it. For guests whose hypervisor hides
// a CPUID bit of hardware that has the instruction (KVM CPU models hide AVX-512 BF16 on Sapphire and
// Emerald Rapids hosts and on Zen 4/5 ones), where the user asks to trust the hardware.
#ifndef LAYERPIPE_ENGINE_CPU_INSTRUCTION_PROBE_H_
#define LAYERPIPE_ENGINE_CPU_INSTRUCTION_PROBE_H_

namespace layerpipe {

// probe() with SIGILL caught: its result, or false where it raised SIGILL. The process's SIGILL
// disposition is restored afterwards; call it before other threads could raise SIGILL themselves.
bool RunsWithoutIllegalInstruction(bool (*probe)());

// Whether vdpbf16ps runs here and gives its documented result on a few values, whatever CPUID says.
bool Avx512Bf16DotRuns();

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_INSTRUCTION_PROBE_H_
