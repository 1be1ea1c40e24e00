#!/usr/bin/env bash
# Compiles the library's CUDA code for every default target, the Blackwell cubins (sm_100, sm_120) included, with
# warnings as errors, and the compute_90 PTX: the check scripts/test.sh leaves out to keep CI short (it builds sm_90a
# only). Run it before each release of the sources. No GPU needed.
#   scripts/check-cuda-targets.sh [build-dir]   (default build-targets)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
source scripts/env.sh
dir=${1:-build-targets}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLATTE_WARNINGS_AS_ERRORS=ON \
      -DLATTE_CUDA_BLACKWELL_CUBINS=ON -DLATTE_CUDA_PTX=ON \
      -DLATTE_BUILD_TESTS=OFF -DLATTE_BUILD_EXAMPLES=OFF -DLATTE_BUILD_TOOLS=OFF "${LATTE_CMAKE_LAUNCHER[@]}"
cmake --build "$dir" --parallel "$LATTE_JOBS" --target latte
echo "check-cuda-targets: sm_90a, sm_100, sm_120 and compute_90 compiled ($SECONDS s)"
