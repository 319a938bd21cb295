#!/usr/bin/env bash
# Two GPU workers on the emulated CUDA plugin, as tests/gpu/run.sh runs them on a real GPU: both on one
# device (their stages linked by CUDA IPC across the two processes), on two devices (linked by NCCL),
# and started by mpirun (`layerpipe-mpi --device cuda`: a device per worker rank, linked by NCCL).
# Each pipeline's greedy tokens must equal the single-process CUDA engine's and the CPU engine's.
# usage: cluster_check.sh BIN_DIR WORK_DIR   (LAYERPIPE_CUDA_PLUGIN names the emulated plugin)
set -euo pipefail
bin=$1
work=$2
export LPEMU_DEVICE_COUNT=2
rm -rf "$work"
mkdir -p "$work"
model="$work/model"
"$bin/layerpipe" make-checkpoint --out "$model" --layers 6 --hidden 128 --intermediate 256 --vocab 512 \
  --heads 4 --head-dim 32 --kv-heads 2 --global-head-dim 64 --global-kv-heads 1 --window 8 --full-period 3 \
  --seed 11 >/dev/null
ids=2,17,33,45,61,78,90,101,115,130,144,158
generate() { "$bin/layerpipe" generate --model "$model" --ids $ids --max-new-tokens 24 --print-ids --precision fp32 "$@" | tail -1; }
cpu_ids=$(generate --device cpu)
cuda_ids=$(generate --device cuda)
echo "cpu engine:   $cpu_ids"
echo "cuda engine:  $cuda_ids"
status=0
[ "$cuda_ids" = "$cpu_ids" ] || { echo "FAIL: the CUDA engine's tokens differ from the CPU engine's"; status=1; }

# pipeline NAME TRANSPORT COMMAND...: a two-worker pipeline whose stage 0 must send over TRANSPORT.
pipeline() {
  local name=$1 transport=$2 log="$work/$1.log" got
  shift 2
  got=$(timeout 300 "$@" -- generate --ids $ids --max-new-tokens 24 --print-ids 2>"$log" | tail -1) || true
  echo "$name: $got"
  if [ "$got" != "$cuda_ids" ]; then
    echo "FAIL: $name gave other tokens"; tail -20 "$log"; status=1
  elif ! grep -q "stage 0 sends activations to stage 1 over $transport" "$log"; then
    echo "FAIL: $name: stage 0 did not link to stage 1 over $transport"; grep "sends activations" "$log" || true
    status=1
  elif grep -q "pipeline fault" "$log"; then
    echo "FAIL: $name recovered from a fault on the way"; grep "pipeline fault" "$log"; status=1
  fi
}
cluster=("$bin/layerpipe" cluster --model "$model" --workers 2 --precision fp32)
pipeline one_device cuda-ipc "${cluster[@]}" --device cuda:0
pipeline two_devices nccl "${cluster[@]}" --device cuda:0,cuda:1
pipeline mpirun nccl mpirun --allow-run-as-root --oversubscribe -np 3 -x LAYERPIPE_CUDA_PLUGIN -x LPEMU_DEVICE_COUNT \
  "$bin/layerpipe-mpi" --model "$model" --device cuda --precision fp32
exit $status
