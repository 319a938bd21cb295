// lpemu_fiber_switch(void** save_sp, void* load_sp): saves the System V callee-saved registers and the
// stack pointer of the running context into *save_sp, and resumes the context whose stack pointer is
// load_sp (block_exec.cc lays out a fresh fiber's stack the same way). The SSE and x87 control words
// are not switched: kernels never change rounding modes, and restoring them would cost more than the
// rest of the switch.
// glibc's swapcontext would do, but it makes a sigprocmask system call on every switch, and an emulated
// block switches threads at every barrier and at both ends of every warp shuffle.
#if !defined(__x86_64__)
#error "the CUDA emulator's fibers are written for x86-64"
#endif

asm(R"(
    .text
    .globl lpemu_fiber_switch
    .type lpemu_fiber_switch, @function
lpemu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size lpemu_fiber_switch, .-lpemu_fiber_switch
)");
