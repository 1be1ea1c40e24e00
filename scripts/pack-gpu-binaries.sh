#!/usr/bin/env bash
# Builds the latte CLI and latte_gpu_tests for the GPU machine's architecture here (LATTE_GPU_ARCH,
# default sm_90a only, no NCCL) and packs them, stripped, into .carry/bin.tar.xz, with the header-only
# dependencies as .carry/deps.tar.xz: the GPU scripts (bench-ab-gpu.sh) then skip their build when the
# binaries start there. .carry/ is ignored by git; name it in the device call's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
[ -d .deps ] || ./scripts/prepare-gpu-deps.sh
gpu_configure_command -DLATTE_NCCL=OFF
"${GPU_CONFIGURE[@]}" >/dev/null
cmake --build build-gpu --parallel "$JOBS" --target latte-cli latte_gpu_tests
stage=$(mktemp -d)
cp build-gpu/tools/latte/latte build-gpu/tests/gpu/latte_gpu_tests "$stage/"
strip "$stage/latte" "$stage/latte_gpu_tests"
mkdir -p .carry
tar -C "$stage" -cf - latte latte_gpu_tests | xz -9e -T2 >.carry/bin.tar.xz  # -9e: the two binaries share their kernels
tar -cJf .carry/deps.tar.xz .deps
rm -rf "$stage"
du -h .carry/*
