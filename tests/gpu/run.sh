#!/usr/bin/env bash
# Every GPU check and benchmark in one run, for a machine with one CUDA GPU (sized for an H200 and
# ~8 minutes): builds with the CUDA backend, then
#   1. the CUDA backend against the CPU backend (ctest -L gpu: gtest, both precisions), prefill
#      attention through GEMMs against the attention kernel, images and audio (embedders, image-block
#      masks), and sampling on the device against the host sampler;
#   2. the CUDA backend against the float64 oracle (tests/oracle/check_engine.py --device cuda);
#   3. a two-worker pipeline with both stages on the GPU, its greedy ids against the single-process engine
#      (one GPU: the stages share it and activations go device to device over a CUDA IPC link, since
#      NCCL refuses two ranks on one GPU; with two GPUs a second run on cuda:0 and cuda:1 must link them
#      over NCCL);
#   4. bench_cuda on a generated checkpoint of the full 12B shape (48 layers, bf16, 262,144 vocab), then its
#      4k prefill again with the attention kernel instead of GEMMs (LAYERPIPE_CUDA_GEMM_ATTENTION=0).
# Prints a summary line per part and exits non-zero if any check failed (benchmarks report figures only).
#
# The GPU machine lent to sessions has the CUDA toolkit but not this project's Debian libraries, so it
# cannot build: make gpu_bundle/ here first (bash tests/gpu/bundle.sh) and carry it; run.sh then uses
# it instead of building. Where the project does build (a GPU host with scripts/install_deps.sh run),
# no bundle is needed.
#
#   bash tests/gpu/run.sh [--skip-build] [--skip-bench] [--emulator]
# Environment: LAYERPIPE_GPU_WORK (scratch, default /tmp/layerpipe_gpu), BUILD_DIR (default build).
#
# --emulator runs the script itself on a machine without a GPU, against the CUDA emulator's builds in
# BUILD_DIR (tests/cuda_emu; CI does this, so a mistake in the script cannot cost a device run): parts 1
# to 3 with two emulated devices (one test of each GPU suite and one oracle case, which CI otherwise runs
# whole), without part 0 (it times real kernels) and the 12B benchmark (it needs 24 GB of weights and a
# GPU's speed; bench_cuda_emu_smoke runs bench_cuda on a small checkpoint).
set -uo pipefail
cd "$(dirname "$0")/../.."

skip_build=0 skip_bench=0 emulator=0
for a in "$@"; do
  case "$a" in
    --skip-build) skip_build=1 ;;
    --skip-bench) skip_bench=1 ;;
    --emulator) emulator=1 skip_build=1 skip_bench=1 ;;
    *) echo "run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
# On the device machine $OUT comes back whole, where the command's output is cut to its last 12 KB.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  exec > >(tee -a "$OUT/run.log") 2>&1
fi
work="${LAYERPIPE_GPU_WORK:-/tmp/layerpipe_gpu}"
. tests/gpu/bundle_env.sh
build="${BUILD_DIR:-build}"
bin="$build/bin"
bundle=0
oracle_args=()
if [ "$emulator" -eq 1 ]; then
  # The GPU programs' names point at their emulated builds; the CUDA plugin is the emulated one.
  built=$(cd "$build/bin" && pwd)
  [ -x "$built/cuda_backend_test_emu" ] || { echo "run.sh: no emulated CUDA builds in $built" >&2; exit 1; }
  mkdir -p "$work/emu_bin"
  for f in "$built"/*; do ln -sf "$f" "$work/emu_bin/"; done
  for t in cuda_backend_test cuda_gemm_attention_test cuda_multimodal_test cuda_sampling_test bench_cuda; do
    ln -sf "$built/${t}_emu" "$work/emu_bin/$t"
  done
  bin="$work/emu_bin"
  export LAYERPIPE_CUDA_PLUGIN="$built/liblayerpipe_cuda_emu.so" LPEMU_DEVICE_COUNT=2
  # CI runs these suites whole (the emu/ tests) and the oracle check on every case
  # (oracle_exactness_cuda_emu); the dry run only has to show that the script drives them.
  export GTEST_FILTER="*DeviceNameAndPrecision*:*SeveralQueryBlocksPerSliceMatch:*BadRequestsAreRejected*:*BadBlocksAreRejected*:StepPlanTest.*"
  oracle_args=(--cases long128_win24)
elif gpu_bundle_env; then
  bundle=1
  skip_build=1
fi
# The oracle needs numpy: the system Python where it has it, else the machine's default one.
py=/usr/bin/python3
"$py" -c "import numpy" 2>/dev/null || py=python3
mkdir -p "$work"
start=$(date +%s)
declare -a summary
failed=0
section() { echo; echo "=== [$(($(date +%s) - start))s] $*"; }
record() {  # record NAME STATUS
  summary+=("$(printf '%-40s %s' "$1" "$([ "$2" -eq 0 ] && echo ok || echo "FAILED (exit $2)")")")
  [ "$2" -eq 0 ] || failed=1
}

section "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv 2>&1 || true
/usr/local/cuda/bin/nvcc --version 2>&1 | tail -1 || true
nproc

if [ "$skip_build" -eq 0 ]; then
  section "build (CUDA backend on)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAYERPIPE_CUDA=ON 2>&1 | grep -E "layerpipe:|Error|error" 
  cmake --build "$build" -j "$(nproc)" >"$work/build.log" 2>&1
  rc=$?
  tail -3 "$work/build.log"
  record "build" $rc
  [ $rc -eq 0 ] || { grep -E "error|Error" "$work/build.log" | head -30; exit 1; }
fi
if [ "$bundle" -eq 1 ]; then
  section "prebuilt gpu_bundle (commit $(cat gpu_bundle/commit 2>/dev/null))"
  ldd "$bin"/* | grep "not found" | sort -u
fi
if [ ! -x "$bin/bench_cuda" ]; then
  echo "run.sh: $bin/bench_cuda is missing: the build did not find the CUDA toolkit" >&2
  exit 1
fi

section "0. CUDA IPC events across two processes (what the same-GPU link relies on)"
if [ "$emulator" -eq 1 ]; then
  echo "emulator: not run (it times kernels on the device)"
else
  timeout 60 "$bin/ipc_event_check" 2>&1 | tail -5
  record "ipc events across processes" "${PIPESTATUS[0]}"
fi

section "1. CUDA backend vs CPU backend (the gpu-labelled tests)"
if [ "$bundle" -eq 1 ] || [ "$emulator" -eq 1 ]; then
  (rc=0
   for t in step_plan_test cuda_backend_test cuda_gemm_attention_test cuda_multimodal_test cuda_sampling_test; do
     timeout 180 "$bin/$t" || rc=1
   done
   exit $rc) 2>&1 | grep -vE "^\[ (RUN|      OK) " | tail -80
else
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 300) 2>&1 | tail -40
fi
record "cuda vs cpu" "${PIPESTATUS[0]}"

section "2. CUDA backend vs the float64 oracle"
timeout 240 "$py" tests/oracle/check_engine.py --bin "$bin" --device cuda --work "$work/oracle" "${oracle_args[@]}" 2>&1 | tail -30
record "cuda vs oracle" "${PIPESTATUS[0]}"

section "3. two workers on the GPU vs the single-process engine"
model="$work/pipe_model"
rm -rf "$model"
"$bin/layerpipe" make-checkpoint --out "$model" --layers 6 --hidden 128 --intermediate 256 --vocab 512 \
  --heads 4 --head-dim 32 --kv-heads 2 --global-head-dim 64 --global-kv-heads 1 --window 8 --full-period 3 \
  --seed 11 >/dev/null
ids=2,17,33,45,61,78,90,101,115,130,144,158
local_ids=$("$bin/layerpipe" generate --model "$model" --ids $ids --max-new-tokens 24 --print-ids --device cuda \
            --precision fp32 | tail -1)
cpu_ids=$("$bin/layerpipe" generate --model "$model" --ids $ids --max-new-tokens 24 --print-ids --device cpu \
          --precision fp32 | tail -1)
pipe_ids=$(timeout 120 "$bin/layerpipe" cluster --model "$model" --workers 2 --device cuda:0 --precision fp32 -- \
           generate --ids $ids --max-new-tokens 24 --print-ids 2>"$work/cluster.log" | tail -1)
echo "cpu engine:     $cpu_ids"
echo "cuda engine:    $local_ids"
echo "cuda pipeline:  $pipe_ids"
grep -E "sends activations" "$work/cluster.log" | head -5
[ -n "$pipe_ids" ] && [ "$pipe_ids" = "$local_ids" ] && [ "$local_ids" = "$cpu_ids" ]
record "2-worker GPU pipeline == engine" $?
grep -q "over cuda-ipc" "$work/cluster.log"
record "2 workers on one GPU linked by CUDA IPC" $?
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$emulator" -eq 1 ] && gpus=$LPEMU_DEVICE_COUNT
if [ "${gpus:-0}" -ge 2 ]; then
  nccl_ids=$(timeout 300 "$bin/layerpipe" cluster --model "$model" --workers 2 --device cuda:0,cuda:1 --precision fp32 \
             -- generate --ids $ids --max-new-tokens 24 --print-ids 2>"$work/cluster_nccl.log" | tail -1)
  echo "nccl pipeline:  $nccl_ids"
  grep -E "sends activations" "$work/cluster_nccl.log" | head -5
  [ "$nccl_ids" = "$local_ids" ] && grep -q "over nccl" "$work/cluster_nccl.log"
  record "2-GPU pipeline over NCCL == engine" $?
else
  echo "one GPU: the NCCL link needs two (NCCL refuses two ranks on one device); not run"
fi

if [ "$skip_bench" -eq 0 ]; then
  section "4. bench_cuda, full 12B shape"
  # The device tool stops a command at 600 s: the benchmarks get what is left, the comparison run only if
  # enough is.
  left=$((560 - ($(date +%s) - start)))
  if [ "$left" -gt 60 ]; then
    timeout "$left" "$bin/bench_cuda" --workdir "$work/bench" 2>&1 | tail -40
    record "bench_cuda (figures above)" "${PIPESTATUS[0]}"
  else
    echo "skipped: ${left}s left"
  fi
  left=$((560 - ($(date +%s) - start)))
  if [ "$left" -gt 90 ]; then
    echo "--- 4k prefill with the attention kernel instead of GEMMs"
    LAYERPIPE_CUDA_GEMM_ATTENTION=0 timeout "$left" "$bin/bench_cuda" --workdir "$work/bench" --batches "" 2>&1 | tail -3
  else
    echo "--- comparison with the attention kernel skipped: ${left}s left"
  fi
fi

section "summary ($(($(date +%s) - start))s)"
printf '%s\n' "${summary[@]}"
exit $failed
