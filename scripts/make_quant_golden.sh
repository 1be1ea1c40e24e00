#!/usr/bin/env bash
# Regenerates tests/data/quant_golden.bin from a released ggml (see make_quant_golden.cpp): fetches
# libggml-base.so with fetch_ggml_oracle.sh, builds the generator and runs it. Needs npm and g++.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(./scripts/fetch_ggml_oracle.sh)
mkdir -p build
g++ -std=c++20 -O2 -Wall -Wextra -o build/make_quant_golden scripts/quant_golden/make_quant_golden.cpp
./build/make_quant_golden "$lib" tests/data/quant_golden.bin
