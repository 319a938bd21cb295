#!/usr/bin/env bash
# Installs dependencies, builds, writes a small random checkpoint in the real Gemma 4 layout with the
# real Gemma tokenizer, starts a local cluster (a coordinator and 2 workers on loopback, each worker
# serving half the layers) and streams a chat completion through it. (Random weights: the text is
# gibberish, but every step — tokenizer, chat format, pipeline, sliding and global caches, sampling,
# streaming — is real.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh --demo
tokenizer=$(bash scripts/fetch_tokenizer.sh)
model=build/demo_model
if [ ! -f "$model/config.json" ]; then
  build/bin/layerpipe make-checkpoint --out "$model" --layers 6 --hidden 256 --intermediate 512 \
    --heads 4 --head-dim 64 --kv-heads 2 --global-head-dim 128 --global-kv-heads 1 --window 32 \
    --seed 1 --tokenizer "$tokenizer"
fi
build/bin/layerpipe cluster --model "$model" --workers 2 -- \
  generate --chat --prompt "${1:-Write a haiku about pipelines.}" \
  --max-new-tokens 48 --temperature 1.0 --top-k 64 --top-p 0.95 --seed 7 --print-ids
