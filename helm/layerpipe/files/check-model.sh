#!/bin/sh
# check-model.sh [--tokenizer] [--no-weights] DIR
#
# Fails fast, with a message naming the file, when a checkpoint directory cannot serve: config.json,
# generation_config.json (if present) and every safetensors shard named by model.safetensors.index.json
# (or the single model.safetensors) must be readable regular files. With --tokenizer, tokenizer.json must be
# too, and when the `layerpipe` command is on PATH it must load it. --no-weights skips the shards: the
# coordinator reads only the JSON files, and its host may hold no weights.
# It reads a few bytes of each file, so a volume that is mounted but not readable by this user is caught
# here rather than as a worker's mmap error minutes into an assignment. POSIX sh: the same script runs as
# the chart's init container, as the images' layerpipe-check-model and as the systemd units' ExecStartPre.
set -eu

want_tokenizer=0
want_weights=1
while [ "$#" -gt 1 ]; do
  case "$1" in
    --tokenizer) want_tokenizer=1 ;;
    --no-weights) want_weights=0 ;;
    *) break ;;
  esac
  shift
done
if [ "$#" -ne 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: check-model.sh [--tokenizer] [--no-weights] DIR" >&2
  exit 2
fi
dir=$1

fail() {
  echo "check-model: $*" >&2
  exit 1
}

# A readable, non-empty regular file: `head` really reads, which a permission bit test done as root would not.
need_file() {
  [ -f "$1" ] || fail "$1 is missing (or not a regular file)"
  [ -s "$1" ] || fail "$1 is empty"
  head -c 8 "$1" >/dev/null 2>&1 || fail "$1 is not readable by uid $(id -u)"
}

[ -d "$dir" ] || fail "$dir is not a directory (is the model volume mounted?)"
need_file "$dir/config.json"
grep -q '"num_hidden_layers"' "$dir/config.json" || fail "$dir/config.json has no num_hidden_layers"
if [ -e "$dir/generation_config.json" ]; then
  need_file "$dir/generation_config.json"
fi

index="$dir/model.safetensors.index.json"
shards=0
if [ "$want_weights" -eq 0 ]; then
  :
elif [ -e "$index" ]; then
  need_file "$index"
  # The shard names are the values of weight_map: the only strings in the index that end in .safetensors.
  for shard in $(grep -o '"[^"]*\.safetensors"' "$index" | tr -d '"' | sort -u); do
    need_file "$dir/$shard"
    shards=$((shards + 1))
  done
  [ "$shards" -gt 0 ] || fail "$index names no .safetensors shard"
else
  need_file "$dir/model.safetensors"
  shards=1
fi

if [ "$want_tokenizer" -eq 1 ]; then
  need_file "$dir/tokenizer.json"
  if command -v layerpipe >/dev/null 2>&1; then
    layerpipe tokenize --model "$dir" --text "ok" >/dev/null || fail "$dir/tokenizer.json does not load"
  fi
fi

if [ "$want_weights" -eq 1 ]; then
  echo "check-model: $dir is complete ($shards safetensors file(s))"
else
  echo "check-model: $dir has the files the coordinator reads"
fi
