#!/usr/bin/env bash
# Fetches a released ggml build to cross-check latte's quantization code against: the prebuilt
# libggml-base.so (ggml 0.23.0) inside npm's @node-llama-cpp/linux-x64 package, version pinned below.
# Prints the library's path; use it as
#   LATTE_GGML_LIB=$(scripts/fetch_ggml_oracle.sh) ./build/tests/latte_tests -tc="*oracle*"
# Needs npm and the npm registry. Usage: fetch_ggml_oracle.sh [DIR] (default: build/ggml-oracle).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/ggml-oracle}
version=3.21.1
lib="$dir/package/bins/linux-x64/libggml-base.so"
if [ ! -f "$lib" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent "@node-llama-cpp/linux-x64@$version" >/dev/null &&
     tar xzf "node-llama-cpp-linux-x64-$version.tgz")
fi
realpath "$lib"
