#!/usr/bin/env bash
# Builds the latte CLI and latte_gpu_tests for the GPU machine's architecture here (LATTE_GPU_ARCH,
# default sm_90a only, no NCCL) and packs them, stripped, into .carry/bin.tar.xz, with the header-only
# dependencies as .carry/deps.tar.xz: the GPU scripts (bench-ab-gpu.sh) then skip their build when the
# binaries start there. .carry/ is ignored by git; name it in the device call's carry list.
#   LATTE_PACK_BASELINE=1   keep the latte CLI of the pack being replaced as baseline/latte in the new one (the
#                           three binaries share their kernels, so the archive grows little): bench-ab-gpu.sh
#                           cases with LATTE_AB_BINARY=baseline run it, before and after a change in one call.
#                           A baseline already in the old pack is kept as it is; LATTE_PACK_BASELINE=replace
#                           takes the old pack's latte CLI instead (compare against the build just before).
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
members=(latte latte_gpu_tests)
if [ "${LATTE_PACK_BASELINE:-0}" = 1 ] || [ "${LATTE_PACK_BASELINE:-0}" = replace ]; then
  if [ ! -f .carry/bin.tar.xz ]; then
    echo "pack-gpu-binaries: LATTE_PACK_BASELINE=1 but there is no earlier .carry/bin.tar.xz to take it from" >&2
    exit 1
  fi
  old=$(mktemp -d)
  tar -C "$old" -xJf .carry/bin.tar.xz
  mkdir -p "$stage/baseline"
  if [ -f "$old/baseline/latte" ] && [ "$LATTE_PACK_BASELINE" = 1 ]; then
    cp "$old/baseline/latte" "$stage/baseline/latte"
  else
    cp "$old/latte" "$stage/baseline/latte"
  fi
  rm -rf "$old"
  members+=(baseline/latte)
fi
mkdir -p .carry
tar -C "$stage" -cf - "${members[@]}" | xz -9e -T2 >.carry/bin.tar.xz  # -9e: the binaries share their kernels
tar -cJf .carry/deps.tar.xz .deps
rm -rf "$stage"
du -h .carry/*
