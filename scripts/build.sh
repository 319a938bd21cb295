#!/usr/bin/env bash
# Configures and builds into build/ (binaries in build/bin/): everything (the programs, the CUDA plugin
# when a toolkit is there, its emulator, the tests and the benchmarks), or with --demo only what
# scripts/demo.sh runs (layerpipe, layerpipe-coordinator, layerpipe-worker; CPU only, no GoogleTest).
# Each run sets every option, so a demo build and a full build can take turns in the same directory.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --demo ]; then
  options=(-DLAYERPIPE_BUILD_TESTS=OFF -DLAYERPIPE_BUILD_BENCH=OFF -DLAYERPIPE_CUDA=OFF -DLAYERPIPE_CUDA_EMULATOR=OFF)
  targets=(--target layerpipe layerpipe-coordinator layerpipe-worker)
elif [ $# -eq 0 ]; then
  options=(-DLAYERPIPE_BUILD_TESTS=ON -DLAYERPIPE_BUILD_BENCH=ON -DLAYERPIPE_CUDA=ON -DLAYERPIPE_CUDA_EMULATOR=ON)
  targets=()
else
  echo "usage: scripts/build.sh [--demo]" >&2
  exit 2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${options[@]}" >/dev/null
cmake --build build -j "$(nproc)" "${targets[@]}"
