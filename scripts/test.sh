#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cd build
# Tests labelled "gpu" need a CUDA device; tests/gpu/run.sh runs them on one.
ctest --output-on-failure -j "$(nproc)" --timeout 900 -LE gpu
