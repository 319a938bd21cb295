#!/usr/bin/env bash
# Two GPU workers on the emulated CUDA plugin, as tests/gpu/run.sh runs them on a real GPU: both on one
# device (their stages linked by CUDA IPC across the two processes), on two devices (linked by NCCL),
# and started by mpirun (`layerpipe-mpi --device cuda`: a device per worker rank, linked by NCCL).
# Each pipeline's greedy tokens must equal the single-process CUDA engine's and the CPU engine's.
# Then the links are made to fail (LPEMU_FAIL: CUDA IPC refused as between containers that do not share
# an IPC namespace, NCCL ranks that cannot connect): the pipeline must recover once and finish over the
# host transport with the same tokens.
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

# pipeline NAME SENDS FAULTS COMMAND...: a two-worker pipeline whose stage 0 must log "sends activations
# SENDS" last, after exactly FAULTS recoveries.
pipeline() {
  local name=$1 sends=$2 faults=$3 log="$work/$1.log" got
  shift 3
  got=$(timeout 300 "$@" -- generate --ids $ids --max-new-tokens 24 --print-ids 2>"$log" | tail -1) || true
  echo "$name: $got"
  if [ "$got" != "$cuda_ids" ]; then
    echo "FAIL: $name gave other tokens"; tail -20 "$log"; status=1
  elif ! grep "stage 0 sends activations" "$log" | tail -1 | grep -q "sends activations $sends"; then
    echo "FAIL: $name: stage 0 did not end up sending activations $sends"; grep "sends activations" "$log" || true
    status=1
  elif [ "$(grep -c "pipeline fault" "$log")" != "$faults" ]; then
    echo "FAIL: $name: $faults recoveries expected"; grep "pipeline fault" "$log"; status=1
  fi
}
cluster=("$bin/layerpipe" cluster --model "$model" --workers 2 --precision fp32)
pipeline one_device "to stage 1 over cuda-ipc" 0 "${cluster[@]}" --device cuda:0
pipeline two_devices "to stage 1 over nccl" 0 "${cluster[@]}" --device cuda:0,cuda:1
pipeline mpirun "to stage 1 over nccl" 0 mpirun --allow-run-as-root --oversubscribe -np 3 -x LAYERPIPE_CUDA_PLUGIN -x LPEMU_DEVICE_COUNT \
  "$bin/layerpipe-mpi" --model "$model" --device cuda --precision fp32
fallback="over grpc: a device link from stage 0 failed before it carried a step"
LPEMU_FAIL=ipc-open pipeline ipc_refused "$fallback" 1 "${cluster[@]}" --device cuda:0
LPEMU_FAIL=nccl-connect pipeline nccl_unreachable "$fallback" 1 "${cluster[@]}" --device cuda:0,cuda:1
exit $status
