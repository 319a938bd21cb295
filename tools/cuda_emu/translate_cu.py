#!/usr/bin/env python3
"""Turns a CUDA source file into host C++ for the CUDA emulator.

Only the two constructs host C++ cannot spell change; every other line is the kernel source as written,
and a #line directive keeps compiler messages pointing at the .cu file:
  kernel<<<grid, block[, smem[, stream]]>>>(args)
      ->  ::lpemu::Launch("kernel", grid, block, ...)(fn, [](const auto&... a) { kernel(a...); }, args)
      where fn is &kernel when the launch names a dynamic shared memory size (whose limit
      cudaFuncSetAttribute sets per kernel), nullptr otherwise (the kernel may be a template whose
      arguments only the call deduces)
  extern __shared__ [__align__(n)] T name[];      ->  T* name = static_cast<T*>(::lpemu::DynamicShared());
  reinterpret_cast<[const] uint4*>(p) (any CUDA vector type)
      ->  ::lpemu::VectorCast<[const] uint4*>(p), which faults on a misaligned address as a GPU does

usage: translate_cu.py IN.cu OUT.cc
"""
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\(\s*(\)?)", re.S)
VECTOR_CAST = re.compile(r"reinterpret_cast<\s*((?:const\s+)?(?:u?int|u?short|u?char|u?long|float|double)[1-4]\s*\*)\s*>")
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w\s]+?)\s+(\w+)\s*\[\s*\]\s*;")


def split_top_level(config):
    """The launch configuration's arguments, split at commas outside parentheses and angle brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(config):
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(config[start:i].strip())
            start = i + 1
    parts.append(config[start:].strip())
    return parts


def translate(source):
    def launch(m):
        kernel, config, closes = m.group(1), " ".join(m.group(2).split()), m.group(3)
        parts = split_top_level(config)
        fn = "reinterpret_cast<const void*>(&%s)" % kernel if len(parts) > 2 and parts[2] != "0" else "nullptr"
        head = '::lpemu::Launch("%s", %s)(%s, [](const auto&... lpemu_a) { %s(lpemu_a...); }' % (kernel, config, fn, kernel)
        return head + (")" if closes else ", ")

    def dynamic_shared(m):
        element, name = " ".join(m.group(1).split()), m.group(2)
        return "%s* %s = static_cast<%s*>(::lpemu::DynamicShared());" % (element, name, element)

    out, launches = LAUNCH.subn(launch, source)
    out = DYNAMIC_SHARED.sub(dynamic_shared, out)
    out = VECTOR_CAST.sub(lambda m: "::lpemu::VectorCast<%s>" % m.group(1), out)
    if "<<<" in out or re.search(r"extern\s+__shared__", out):
        raise SystemExit("translate_cu.py: a launch or dynamic shared array it cannot translate is left")
    return out, launches


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text, _ = translate(f.read())
    with open(dst, "w") as f:
        f.write('#include "tools/cuda_emu/device_builtins.h"\n#line 1 "%s"\n' % src)
        f.write(text)


if __name__ == "__main__":
    main()
