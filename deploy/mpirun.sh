#!/usr/bin/env bash
# Starts a layerpipe cluster as one MPI (or Slurm) job: rank 0 is the coordinator, ranks 1..N-1 are the
# pipeline stages in rank order. MPI is used only to place and start the processes; they find each other
# through files in a rendezvous directory, so no MPI library is linked into layerpipe.
#
#   mpirun -np N deploy/mpirun.sh --model DIR [options] [-- CLIENT COMMAND...]
#   srun        deploy/mpirun.sh --model DIR [options] [-- CLIENT COMMAND...]
#
# Options:
#   --model DIR             checkpoint, at the same path on every node (required)
#   --base-port P           coordinator client port; worker of rank r listens on P+r (default 50100)
#   --rendezvous DIR        where workers publish their addresses; must be on a filesystem shared by all
#                           nodes when the job spans several (default: $TMPDIR when every rank is on one
#                           node, else DIR/../.layerpipe-rendezvous next to the model)
#   --advertise-host HOST   name or address the other ranks reach this one at (default: `hostname -f`);
#                           127.0.0.1 is right when every rank is on one host
#   --precision bf16|fp32   passed to the coordinator
#   --threads T             compute threads per worker (0: all cores)
#   --device D              where workers run their layers: cpu (default), cuda or cuda:N
#   --kv-budget SIZE        KV cache budget per worker, e.g. 4G (default: the worker's own default)
#   --layer-split RANGES    explicit stage ranges, e.g. 0-23,24-47
#   --state-dir DIR         where rank 0's coordinator keeps its jobs, so that they survive a restart of
#                           the job (default: $LAYERPIPE_STATE_DIR, else $XDG_STATE_HOME/layerpipe, else
#                           ~/.local/state/layerpipe, on rank 0's node; '' keeps them in memory only)
#   --bin-dir DIR           where the layerpipe binaries are (default: $LAYERPIPE_BIN, else the
#                           repository's build/bin next to this script, else $PATH)
#   --rendezvous-timeout S  how long rank 0 waits for the workers' addresses (default 300)
#   --ready-timeout S       how long rank 0 waits for the coordinator to serve (default 1200)
#   -- CLIENT COMMAND...    a layerpipe client command (e.g. `generate --ids 2,5 --max-new-tokens 8`);
#                           rank 0 runs it against the coordinator once the pipeline serves, then stops
#                           every rank, and the job exits with the client's status. Without it every rank
#                           serves until killed.
#
# Server logs go to RUN_DIR/rank-R.log (RUN_DIR is a per-job directory inside the rendezvous directory);
# rank 0 prints a log's tail when a server fails.
set -euo pipefail

die() { echo "mpirun.sh[rank ${rank:-?}]: error: $*" >&2; exit 2; }
note() { echo "mpirun.sh[rank ${rank:-?}]: $*" >&2; }

model="" base_port=50100 rendezvous="" advertise_host="" precision="" threads="" device="" kv_budget="" layer_split=""
state_dir="${LAYERPIPE_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/layerpipe}"
bin_dir="${LAYERPIPE_BIN:-}" rendezvous_timeout=300 ready_timeout=1200
client=()
while (($#)); do
  case "$1" in
    --model) model="${2:?--model needs a value}"; shift 2 ;;
    --base-port) base_port="${2:?--base-port needs a value}"; shift 2 ;;
    --rendezvous) rendezvous="${2:?--rendezvous needs a value}"; shift 2 ;;
    --advertise-host) advertise_host="${2:?--advertise-host needs a value}"; shift 2 ;;
    --precision) precision="${2:?--precision needs a value}"; shift 2 ;;
    --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
    --kv-budget) kv_budget="${2:?--kv-budget needs a value}"; shift 2 ;;
    --device) device="${2:?--device needs a value}"; shift 2 ;;
    --layer-split) layer_split="${2:?--layer-split needs a value}"; shift 2 ;;
    --state-dir) (($# >= 2)) || die "--state-dir needs a value"; state_dir="$2"; shift 2 ;;
    --bin-dir) bin_dir="${2:?--bin-dir needs a value}"; shift 2 ;;
    --rendezvous-timeout) rendezvous_timeout="${2:?--rendezvous-timeout needs a value}"; shift 2 ;;
    --ready-timeout) ready_timeout="${2:?--ready-timeout needs a value}"; shift 2 ;;
    --) shift; client=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# Every launcher names the rank differently; the first one set wins.
rank="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-${SLURM_PROCID:-}}}}"
size="${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-${SLURM_NTASKS:-}}}"
[ -n "$rank" ] && [ -n "$size" ] ||
  die "no rank found (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID): start this under mpirun or srun"
[ -n "$model" ] || die "--model DIR is required"
[[ "$base_port" =~ ^[0-9]+$ ]] || die "--base-port must be a number, got '$base_port'"
((size >= 2)) || die "needs at least 2 ranks (rank 0 is the coordinator, ranks 1.. are workers); got -np $size"
((base_port + size - 1 <= 65535)) || die "--base-port $base_port + $((size - 1)) workers exceeds port 65535"
[ -d "$model" ] || die "model directory '$model' does not exist on $(hostname)"
# The coordinator sends its own model path to the workers, so it must be absolute and the same everywhere.
model="$(cd "$model" && pwd)"

if [ -z "$bin_dir" ]; then
  repo_bin="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/bin"
  if [ -x "$repo_bin/layerpipe-worker" ]; then bin_dir="$repo_bin"; fi
fi
find_bin() {
  if [ -n "$bin_dir" ]; then
    [ -x "$bin_dir/$1" ] || die "$bin_dir/$1 is missing or not executable"
    echo "$bin_dir/$1"
  else
    command -v "$1" || die "$1 is not on PATH (pass --bin-dir)"
  fi
}

if [ -z "$advertise_host" ]; then
  advertise_host="$(hostname -f 2>/dev/null || true)"
  [ -n "$advertise_host" ] || advertise_host="$(hostname)"
fi

# One directory per job inside the rendezvous directory, so files a previous job left cannot be mistaken
# for this job's workers. Every rank derives the same id from the launcher.
job_id="${SLURM_JOB_ID:+slurm-${SLURM_JOB_ID}.${SLURM_STEP_ID:-0}}"
job_id="${job_id:-${OMPI_MCA_ess_base_jobid:+ompi-$OMPI_MCA_ess_base_jobid}}"
job_id="${job_id:-${PMIX_NAMESPACE:+pmix-$PMIX_NAMESPACE}}"
job_id="${job_id:-${PMI_ID:+pmi-$PMI_ID}}"
[ -n "$job_id" ] || die "cannot tell this job from others (no SLURM_JOB_ID, OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE)"
if [ -z "$rendezvous" ]; then
  local_size="${OMPI_COMM_WORLD_LOCAL_SIZE:-${MPI_LOCALNRANKS:-}}"
  if [ "${SLURM_NNODES:-}" = 1 ] || [ "$local_size" = "$size" ]; then
    rendezvous="${TMPDIR:-/tmp}/layerpipe-rendezvous"
  else
    rendezvous="$(dirname "$model")/.layerpipe-rendezvous"
  fi
fi
run_dir="$rendezvous/$job_id"
mkdir -p "$run_dir" || die "cannot create rendezvous directory $run_dir"
log="$run_dir/rank-$rank.log"

server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    # Both servers drain on SIGTERM; do not let a stuck one outlive the job.
    for _ in $(seq 1 150); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [ -n "$server_pid" ]; then wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
show_log() { [ -f "$log" ] && { echo "--- last lines of $log:" >&2; tail -n 20 "$log" >&2; } || true; }

# Waits until the server's log says it listens; fails if it exits first or the time runs out.
wait_listening() {
  local what="$1" timeout_s="$2" deadline=$((SECONDS + $2))
  until grep -q "$what listening on" "$log" 2>/dev/null; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      show_log; server_pid=""; die "$what exited before it was ready"
    fi
    ((SECONDS < deadline)) || { show_log; die "$what not ready after ${timeout_s}s"; }
    sleep 0.2
  done
}

run_worker() {
  local port=$((base_port + rank)) args=()
  args=(--listen "0.0.0.0:$port" --model "$model")
  [ -z "$threads" ] || args+=(--threads "$threads")
  [ -z "$kv_budget" ] || args+=(--kv-budget "$kv_budget")
  [ -z "$device" ] || args+=(--device "$device")
  trap 'stop_server' EXIT
  trap 'stop_server; exit 143' TERM
  trap 'stop_server; exit 130' INT
  "$(find_bin layerpipe-worker)" "${args[@]}" >"$log" 2>&1 </dev/null &
  server_pid=$!
  wait_listening layerpipe-worker 120
  # Written under a temporary name and renamed, so rank 0 never reads half an address.
  echo "$advertise_host:$port" >"$run_dir/.worker-$rank.tmp"
  mv "$run_dir/.worker-$rank.tmp" "$run_dir/worker-$rank.addr"
  while [ ! -e "$run_dir/done" ]; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      local rc=0; wait "$server_pid" || rc=$?
      server_pid=""; show_log; die "layerpipe-worker exited unexpectedly (status $rc)"
    fi
    sleep 0.5
  done
  stop_server
}

run_coordinator() {
  local addr_files=() workers="" i
  # A stale done file from an earlier run with the same id would stop the workers at once.
  rm -f "$run_dir/done"
  trap 'stop_server; touch "$run_dir/done"' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  local deadline=$((SECONDS + rendezvous_timeout))
  for ((i = 1; i < size; i++)); do
    while [ ! -s "$run_dir/worker-$i.addr" ]; do
      ((SECONDS < deadline)) ||
        die "worker of rank $i did not publish its address in $run_dir within ${rendezvous_timeout}s" \
            "(is $rendezvous shared by every node? see rank-$i.log there)"
      sleep 0.2
    done
    workers+="${workers:+,}$(cat "$run_dir/worker-$i.addr")"
  done
  note "workers: $workers"
  local args=(--listen "0.0.0.0:$base_port" --advertise "$advertise_host:$base_port" --model "$model"
              --workers "$workers" --state-dir "$state_dir")
  [ -z "$precision" ] || args+=(--precision "$precision")
  [ -z "$layer_split" ] || args+=(--layer-split "$layer_split")
  "$(find_bin layerpipe-coordinator)" "${args[@]}" >"$log" 2>&1 </dev/null &
  server_pid=$!
  wait_listening layerpipe-coordinator "$ready_timeout"
  note "coordinator serving on $advertise_host:$base_port (logs in $run_dir)"

  if ((${#client[@]} == 0)); then
    local rc=0; wait "$server_pid" || rc=$?
    server_pid=""; show_log; die "layerpipe-coordinator exited (status $rc)"
  fi
  # `-- generate ...` and `-- layerpipe generate ...` both mean the layerpipe client.
  [ "$(basename "${client[0]}")" != layerpipe ] || client=("${client[@]:1}")
  ((${#client[@]})) || die "the client command after -- is empty"
  local cmd=("$(find_bin layerpipe)" "${client[0]}")
  [[ " ${client[*]} " == *" --coordinator "* ]] || cmd+=(--coordinator "127.0.0.1:$base_port")
  cmd+=("${client[@]:1}")
  local rc=0
  "${cmd[@]}" </dev/null || rc=$?
  exit "$rc"
}

if ((rank == 0)); then run_coordinator; else run_worker; fi
