#!/usr/bin/env bash
# Profiles bench_cuda's batch-1 decode on the 12B shape with Nsight Compute and prints where one step's
# time goes, kernel by kernel (kernel_breakdown.py). For the device machine, after tests/gpu/bundle.sh:
#   run with carry ["gpu_bundle"]:  bash bench/gpu/profile_decode.sh
# ~2.5 minutes on an H200 (ncu replays every kernel). Leaves ncu.csv in $OUT when the device tool sets it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/bin
. tests/gpu/bundle_env.sh
gpu_bundle_env || true
work="${LAYERPIPE_GPU_WORK:-/tmp/layerpipe_gpu}/profile"
out="${OUT:-$work}"
mkdir -p "$work" "$out"
args=(--workdir "$work" --batches 1 --prompt_tokens 64 --context "${CONTEXT:-1024}" --decode_tokens 2)
"$bin/bench_cuda" "${args[@]}" | tail -1  # makes the checkpoint; the unprofiled figures
/usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw \
  "$bin/bench_cuda" "${args[@]}" >"$out/ncu.csv" 2>"$out/ncu.err"
python3 bench/gpu/kernel_breakdown.py "$out/ncu.csv"
