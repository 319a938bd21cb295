#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (a build dir of its own: LAYERPIPE_FUZZ=ON, no
# CUDA) and runs each for SECONDS on its seed corpus; fails when any target finds a crash, a leak, a
# sanitizer report, a timeout or an out-of-memory. ctest runs it with -DLAYERPIPE_FUZZ_SMOKE=ON (tests/fuzz/tests.cmake).
#
#   tests/fuzz/run_fuzzers.sh SECONDS [BUILD_DIR]     BUILD_DIR defaults to build-fuzz
#   FUZZ_TARGETS="step_frame_fuzz ..." limits the run to those targets.
#   FUZZ_SKIP_BUILD=1 runs the targets already built in BUILD_DIR (e.g. built under a build lock).
#
# First each target replays crashes/<target>/ (inputs that once crashed it: regression inputs once the
# bug is fixed; crashes/README.md lists them). New inputs go to a temporary corpus (removed afterwards);
# the repo's corpus/<target>/ is only read.
# What a target found is kept in BUILD_DIR/fuzz-artifacts/<target>/ (crash-*, leak-*, timeout-*,
# oom-*); replay one with BUILD_DIR/fuzz/<target> FILE. Exits 77 (ctest: skipped) without clang or
# libFuzzer.
set -euo pipefail
seconds=${1:?usage: run_fuzzers.sh SECONDS [BUILD_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${2:-$src/build-fuzz}
targets=(${FUZZ_TARGETS:-safetensors_header_fuzz model_config_fuzz tokenizer_json_fuzz step_frame_fuzz
                         hidden_codec_fuzz generate_request_fuzz image_decode_fuzz wav_decode_fuzz})

if ! command -v clang++ >/dev/null; then
  echo "run_fuzzers.sh: clang++ not found (scripts/install_deps.sh installs it); skipping" >&2
  exit 77
fi
runtime=$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)
if [ ! -f "$runtime" ]; then
  echo "run_fuzzers.sh: no libFuzzer runtime (libclang-rt-*-dev); skipping" >&2
  exit 77
fi

if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  start=$SECONDS
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DLAYERPIPE_CUDA=OFF -DLAYERPIPE_FUZZ=ON \
        -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target layerpipe_fuzzers
  echo "== fuzz build: $((SECONDS - start)) s"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  artifacts=$build/fuzz-artifacts/$t
  mkdir -p "$work/$t" "$artifacts"
  flags=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  [ -f "$here/dicts/$t.dict" ] && flags+=(-dict="$here/dicts/$t.dict")
  known=()
  [ -d "$here/crashes/$t" ] && mapfile -t known < <(find "$here/crashes/$t" -type f ! -name '*.md' | sort)
  if ((${#known[@]})); then
    echo "== $t: replaying ${#known[@]} input(s) of crashes/$t"
    if ! "$build/fuzz/$t" -timeout=10 -rss_limit_mb=2048 "${known[@]}" >"$work/$t.replay.log" 2>&1; then
      grep -E '^Running: |ERROR|SUMMARY|what\(\)|runtime error|_fuzz: ' "$work/$t.replay.log" | head -n 20
      echo "== $t FAILED on an input of crashes/$t"
      failed+=("$t")
      continue
    fi
  fi
  echo "== $t: ${seconds}s"
  if "$build/fuzz/$t" "${flags[@]}" "$work/$t" "$here/corpus/$t" >"$work/$t.log" 2>&1; then
    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec)' "$work/$t.log" || true
  else
    tail -n 60 "$work/$t.log"
    echo "== $t FAILED; its input is in $artifacts/"
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "run_fuzzers.sh: failed: ${failed[*]}"
  exit 1
fi
echo "run_fuzzers.sh: ${#targets[@]} targets, ${seconds}s each, no crash"
