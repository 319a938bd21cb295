#!/usr/bin/env bash
# Two GPU workers on the emulated CUDA plugin, as tests/gpu/run.sh runs them on a real GPU: both on one
# device (their stages linked by CUDA IPC across the two processes) and on two devices (linked by NCCL).
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

# pipeline DEVICES TRANSPORT: a two-worker cluster on DEVICES whose stage 0 must send over TRANSPORT.
pipeline() {
  local log="$work/cluster_$2.log" got
  got=$(timeout 300 "$bin/layerpipe" cluster --model "$model" --workers 2 --device "$1" --precision fp32 -- \
        generate --ids $ids --max-new-tokens 24 --print-ids 2>"$log" | tail -1) || true
  echo "pipeline $1: $got"
  if [ "$got" != "$cuda_ids" ]; then
    echo "FAIL: the pipeline on $1 gave other tokens"; tail -20 "$log"; status=1
  elif ! grep -q "stage 0 sends activations to stage 1 over $2" "$log"; then
    echo "FAIL: stage 0 did not link to stage 1 over $2"; grep "sends activations" "$log" || true; status=1
  elif grep -q "pipeline fault" "$log"; then
    echo "FAIL: the pipeline on $1 recovered from a fault on the way"; grep "pipeline fault" "$log"; status=1
  fi
}
pipeline cuda:0 cuda-ipc
pipeline cuda:0,cuda:1 nccl
exit $status
