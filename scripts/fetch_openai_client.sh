#!/usr/bin/env bash
# Installs OpenAI's official JavaScript client (npm `openai`), which the HTTP API's tests drive, into
# <repo>/third_party/npm/openai-client, and prints its node_modules path. Does nothing but print when the
# pinned version is already there.
set -euo pipefail

# The newest client needs Node.js 20; Debian 12's own nodejs is 18, for which the last 4.x is the one.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ((node_major >= 20)); then version=6.49.0; else version=4.104.0; fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/third_party/npm/openai-client"
manifest="$prefix/node_modules/openai/package.json"

installed=$(sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" 2>/dev/null | head -n 1 || true)
if [[ "$installed" != "$version" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_openai_client.sh: npm is required to install openai@$version" >&2
    exit 1
  fi
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error "openai@$version" >&2
fi
[[ -f "$manifest" ]] || { echo "fetch_openai_client.sh: npm finished but $manifest is missing" >&2; exit 1; }
echo "$prefix/node_modules"
