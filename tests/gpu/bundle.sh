#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs into gpu_bundle/ (git-ignored): the GPU machine's image has the CUDA
# toolkit but none of this project's Debian libraries (gRPC, abseil, protobuf, civetweb) and no package
# registry, so it cannot build the project. Built here, the binaries travel with the libraries they
# load, minus glibc's, the C++ runtime's and CUDA's (the GPU machine has its own, newer or equal). Then run on the GPU machine with
# the device tool's carry naming gpu_bundle:   bash tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${BUILD_DIR:-build}"
if [ ! -x "$build/bin/bench_cuda" ] || [ ! -f "$build/bin/liblayerpipe_cuda.so" ]; then
  echo "bundle.sh: $build has no CUDA build; building" >&2
  bash scripts/build.sh
fi
out=gpu_bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in layerpipe layerpipe-worker layerpipe-coordinator cuda_backend_test cuda_gemm_attention_test \
         cuda_multimodal_test cuda_sampling_test step_plan_test ipc_event_check bench_cuda; do
  strip -o "$out/bin/$b" "$build/bin/$b"
done
# Keeps the dynamic symbols the binaries look up (layerpipe_cuda_plugin and the test entry points).
strip --strip-unneeded -o "$out/bin/liblayerpipe_cuda.so" "$build/bin/liblayerpipe_cuda.so"
ldd "$out"/bin/* 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s)\.so|/ld-linux|/libcuda\.|/libcudart|/libcublas|/libnccl|/gpu_bundle/' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
git rev-parse HEAD > "$out/commit"
du -sh "$out"
echo "gpu_bundle/ holds $(ls "$out/bin" | wc -l) programs and $(ls "$out/lib" | wc -l) libraries from commit $(cat "$out/commit")"
