#!/usr/bin/env bash
# Builds latte and runs its test suite, as CI does:
#   1. the main build (when nvcc is present, CUDA kernels compiled for sm_90a only: scripts/check-cuda-targets.sh
#      compiles the Blackwell cubins and the compute_90 PTX of the default build), warnings as errors, and every
#      CPU test (each once per attention backend), CLI and package tests; then the fused decode step's, the GEMVs' and the MLA decode's kernels on the CPU emulation of CUDA (when the CUDA
#      headers are there);
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build of the CPU suite (LeakSanitizer on);
#   3. a ThreadSanitizer build of the library and latte_thread_tests (sessions on several threads);
#   4. the libFuzzer harnesses (scripts/fuzz.sh), each for LATTE_FUZZ_SECONDS (default 10), when
#      Clang is installed.
# LATTE_SKIP_SANITIZERS=1 skips 2-4, LATTE_SKIP_FUZZ=1 skips 4.
# GPU tests (label `gpu`) run only where a GPU is present: see scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
source scripts/env.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLATTE_WARNINGS_AS_ERRORS=ON -DLATTE_CUDA_BLACKWELL_CUBINS=OFF -DLATTE_CUDA_PTX=OFF \
      "${LATTE_CMAKE_LAUNCHER[@]}"
cmake --build build --parallel "$LATTE_JOBS"
ctest --test-dir build --output-on-failure --label-exclude gpu --parallel "$LATTE_JOBS"
echo "test.sh: main build and tests done at $SECONDS s"

# split_run LOG FIRST REST CMD...: CMD's cases matching FIRST in the background (output in LOG) and those matching
# REST but not FIRST in the foreground, one per core; LOG is shown when its run fails.
split_run() {
  local log=$1 first=$2 rest=$3 pid
  shift 3
  "$@" -tc="$first" >"$log" 2>&1 &
  pid=$!
  "$@" -tc="$rest" -tce="$first"
  if ! wait "$pid"; then
    cat "$log"
    return 1
  fi
  tail -n 3 "$log"
}

# The fused decode step's kernel itself on the CPU emulation of CUDA (tests/emulation), against its
# float64 reference: the one check of that kernel's logic that needs no GPU. Needs the CUDA headers.
if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ]; then
  # -g0: no debug info (half the emulation's compile time); tests/emulation/build.sh alone keeps -g
  LATTE_EMU_ONLY=fused tests/emulation/build.sh build-emu-fused -g0 >/dev/null
  LATTE_EMU_ORDER=random LATTE_EMU_SMS=5 build-emu-fused/latte_emulated_gpu_tests
  echo "test.sh: emulated fused step done at $SECONDS s"
  # the GEMV kernels (fp32 and split-int8 x) and the int8 records likewise, against float64 products
  LATTE_EMU_ONLY=gemv tests/emulation/build.sh build-emu-gemv -g0 >/dev/null
  # few SMs: blocks walk several tiles; the tensor-core group case alone is ~45% of the run
  split_run build-emu-gemv/several.log "*groups of several tokens on the tensor cores*" "*" \
    env LATTE_EMU_SMS=5 build-emu-gemv/latte_emulated_gpu_tests
  # two group cases again with the int8 16-token Q4_K build the fp16 one replaced by default, and the staged types'
  # 16-token groups dealt as whole blocks per group instead of (group, tile) pairs (all of them: gpu-check.sh)
  LATTE_GEMV_F16=0 LATTE_GEMV_MMA_PAIRS=0 LATTE_EMU_SMS=5 build-emu-gemv/latte_emulated_gpu_tests \
    -tc="*more expert groups than one wave*,*span 1e-15*"
  echo "test.sh: emulated GEMVs done at $SECONDS s"
  # the MLA decode kernel, its split combine and the splits merged in a thread-block cluster, against float64
  LATTE_EMU_ONLY=decode-attention tests/emulation/build.sh build-emu-attention -g0 >/dev/null
  # the first two cases are ~60% of the run
  split_run build-emu-attention/first.log "*mla decode matches the float64 reference*,*sparse mla decode*" \
    "*mla decode*" env LATTE_EMU_ORDER=random build-emu-attention/latte_emulated_gpu_tests
  echo "test.sh: emulated MLA decode done at $SECONDS s"
fi

if [ "${LATTE_SKIP_SANITIZERS:-0}" != 1 ]; then
  # -O1 -g1 (line tables for the reports): half the compile time of -O2 -g, which made this the longest stage
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1 -DNDEBUG" \
        -DLATTE_CUDA=OFF -DLATTE_SANITIZE=ON \
        -DLATTE_BUILD_EXAMPLES=OFF -DLATTE_WARNINGS_AS_ERRORS=ON "${LATTE_CMAKE_LAUNCHER[@]}"
  cmake --build build-asan --parallel "$LATTE_JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure --label-exclude "gpu|package" --parallel "$LATTE_JOBS"
  echo "test.sh: sanitizer build and tests done at $SECONDS s"

  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" -DLATTE_CUDA=OFF \
        -DLATTE_SANITIZE=ON -DLATTE_SANITIZE_KIND=thread -DLATTE_BUILD_EXAMPLES=OFF -DLATTE_BUILD_TOOLS=OFF "${LATTE_CMAKE_LAUNCHER[@]}"
  cmake --build build-tsan --parallel "$LATTE_JOBS" --target latte_thread_tests
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/latte_thread_tests
  echo "test.sh: thread sanitizer done at $SECONDS s"

  if [ "${LATTE_SKIP_FUZZ:-0}" != 1 ] && command -v clang++ >/dev/null 2>&1; then
    ./scripts/fuzz.sh "${LATTE_FUZZ_SECONDS:-10}"
  fi
fi
echo "latte: all tests passed ($SECONDS s)"
