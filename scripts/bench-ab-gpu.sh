#!/usr/bin/env bash
# A/B speed comparison of kernel switches in ONE device call: builds latte (and the GPU tests) for the
# GPU, converts the 27-block random DeepSeek-V2-Lite Q4_K_M model while the GPU tests run, then runs
# `latte bench` once per case, alternating the cases so that drift shows as noise rather than as a
# difference. Every case is a set of environment variables (LATTE_PDL, LATTE_GEMV_X, LATTE_GEMV_MMA, ...);
# LATTE_AB_BINARY=baseline in a case runs the baseline build packed beside the new one
# (LATTE_PACK_BASELINE=1 scripts/pack-gpu-binaries.sh), so a code change is compared in the same call too.
#
#   LATTE_AB_CASES='base:X=1 nopdl:LATTE_PDL=0 warp:LATTE_GEMV_X=warp' scripts/bench-ab-gpu.sh
#   LATTE_AB_CASES='before:LATTE_AB_BINARY=baseline after:X=1' scripts/bench-ab-gpu.sh
#
# Settings:
#   LATTE_AB_CASES    space-separated NAME:VAR=VALUE[,VAR=VALUE...] (default: base:X=1)
#   LATTE_AB_ARGS     latte bench arguments (default: -p 512 -n 128 -r 2)
#   LATTE_AB_ATTENTION  mla | standard | mla,standard (default mla)
#   LATTE_AB_ROUNDS   how many times the list of cases runs (default 2)
#   LATTE_AB_TESTS    doctest filter for latte_gpu_tests run before the benches ("" skips; default '*')
#   LATTE_AB_LAYERS   convert only this many blocks (default: all 27; a cut converts and builds faster)
#   LATTE_GPU_ARCH, LATTE_JOBS as in gpu-common.sh; .deps/ from scripts/prepare-gpu-deps.sh; binaries
#   built elsewhere in .carry/bin.tar.xz (scripts/pack-gpu-binaries.sh) are used when they start.
# Output: the bench lines per case on stdout, logs in $OUT (or out/bench-ab/). Exit status 1 when the
# build, the tests or a bench failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/bench-ab}
mkdir -p "$LOG_DIR"
gpu_require_deps bench-ab-gpu
CASES=${LATTE_AB_CASES:-base:X=1}
ARGS=${LATTE_AB_ARGS:--p 512 -n 128 -r 2}
ATTENTION=${LATTE_AB_ATTENTION:-mla}
ROUNDS=${LATTE_AB_ROUNDS:-2}
TESTS=${LATTE_AB_TESTS-*}
LAYERS=${LATTE_AB_LAYERS:-}
failed=0

start=$SECONDS
if gpu_prebuilt; then
  echo "prebuilt binaries from .carry/bin.tar.xz"
else
  gpu_configure_command
  if ! { "${GPU_CONFIGURE[@]}" >"$LOG_DIR/configure.log" 2>&1 &&
    cmake --build build-gpu --parallel "$JOBS" --target latte_gpu_tests latte-cli >"$LOG_DIR/build.log" 2>&1; }; then
    echo "bench-ab-gpu: configure or build failed, see $LOG_DIR" >&2
    tail -n 30 "$LOG_DIR/build.log" >&2
    exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi

LATTE=$ROOT/build-gpu/tools/latte/latte
MODEL=$ROOT/build-gpu/v2-lite-${LAYERS:-27}L-q4_k_m.gguf
start=$SECONDS
convert_pid=
if [ ! -f "$MODEL" ]; then
  CONVERT=("$LATTE" convert --random --preset deepseek-v2-lite --vocab 129280 --type q4_k_m --no-progress -o "$MODEL")
  [ -n "$LAYERS" ] && CONVERT+=(--layers "$LAYERS")
  "${CONVERT[@]}" >"$LOG_DIR/convert.log" 2>&1 &
  convert_pid=$!
fi
if [ -n "$TESTS" ]; then
  LATTE_GPU_TEST_TRACE=1 timeout 300 build-gpu/tests/gpu/latte_gpu_tests -tc="$TESTS" >"$LOG_DIR/gpu-tests.log" 2>&1
  rc=$?
  echo "gpu tests ($TESTS): rc $rc, $((SECONDS - start)) s"
  grep -E "test cases|assertions" "$LOG_DIR/gpu-tests.log"
  grep -E "ERROR|THREW|MISMATCH" "$LOG_DIR/gpu-tests.log" | head -n 8
  [ $rc = 0 ] || failed=1
fi
if [ -n "$convert_pid" ] && ! wait "$convert_pid"; then
  echo "bench-ab-gpu: convert failed, see $LOG_DIR/convert.log" >&2
  exit 1
fi

for round in $(seq 1 "$ROUNDS"); do
  for c in $CASES; do
    name=${c%%:*}
    IFS=',' read -r -a vars <<<"${c#*:}"
    echo "== $name (round $round): ${vars[*]}"
    binary=$LATTE
    if [[ " ${vars[*]} " == *" LATTE_AB_BINARY=baseline "* ]]; then
      binary=$ROOT/build-gpu/prebuilt/baseline/latte
      if [ ! -x "$binary" ]; then
        echo "bench-ab-gpu: case $name asks for the baseline build, but .carry/bin.tar.xz has none" >&2
        exit 1
      fi
    fi
    # shellcheck disable=SC2086  # ARGS is a list of bench arguments
    if ! env "${vars[@]}" LATTE_NO_SELFTEST=1 timeout 150 "$binary" bench --model "$MODEL" --device cuda:0 \
      --attention "$ATTENTION" $ARGS >"$LOG_DIR/bench-$name-$round.log" 2>&1; then
      failed=1
      tail -n 3 "$LOG_DIR/bench-$name-$round.log"
    fi
    grep -E '\| (pp|tg)[0-9]' "$LOG_DIR/bench-$name-$round.log"
  done
done
exit $failed
