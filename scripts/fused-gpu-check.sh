#!/usr/bin/env bash
# The fused decode step (src/cuda/decode_step*) on a GPU machine in ONE device call:
#   1. binaries: prebuilt from .carry/bin.tar.xz (scripts/pack-gpu-binaries.sh) when they start, else built
#   2. its GPU tests and the model tests that run it (CPU replay, taps, graphs), while the 27-block random
#      DeepSeek-V2-Lite Q4_K_M model converts
#   3. latte bench: tg128 and tg32 @ d4096, layered against fused (LATTE_FUSED_DECODE=1), alternated, and
#      fused with 32 KB ring stages (LATTE_STEP_STAGE_KB=32)
#   4. the fused step's per-phase timing table (LATTE_STEP_TIMING=1)
#   5. the kernel's resource use and local-memory instructions (cuobjdump), when cuobjdump is there
# Every step has its own timeout; the whole call stays under ~6 minutes after the machine starts.
#
#   scripts/fused-gpu-check.sh        (device call: carry .carry; output: the summary lines, logs in $OUT)
# Settings: LATTE_FUSED_ROUNDS (default 2), LATTE_FUSED_LAYERS (convert only this many blocks),
# LATTE_FUSED_STAGES ("6 4": also tg128 with the ring capped at that many stages, LATTE_STEP_STAGES; a
# LATTE_STEP_STAGES in the environment applies to the timing run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/fused}
mkdir -p "$LOG_DIR"
gpu_require_deps fused-gpu-check
ROUNDS=${LATTE_FUSED_ROUNDS:-2}
LAYERS=${LATTE_FUSED_LAYERS:-}
export LATTE_NO_SELFTEST=1
failed=0

start=$SECONDS
if gpu_prebuilt; then
  echo "binaries: prebuilt"
else
  gpu_configure_command -DLATTE_NCCL=OFF
  if ! { "${GPU_CONFIGURE[@]}" >"$LOG_DIR/configure.log" 2>&1 &&
    timeout 400 cmake --build build-gpu --parallel "$JOBS" --target latte_gpu_tests latte-cli >"$LOG_DIR/build.log" 2>&1; }; then
    echo "fused-gpu-check: build failed" >&2
    tail -n 20 "$LOG_DIR/build.log" >&2
    exit 1
  fi
  echo "binaries: built in $((SECONDS - start)) s"
fi
LATTE=$ROOT/build-gpu/tools/latte/latte
TESTS=$ROOT/build-gpu/tests/gpu/latte_gpu_tests
MODEL=/tmp/v2-lite-${LAYERS:-27}L-q4_k_m.gguf

CONVERT=("$LATTE" convert --random --preset deepseek-v2-lite --vocab 129280 --type q4_k_m --no-progress -o "$MODEL")
[ -n "$LAYERS" ] && CONVERT+=(--layers "$LAYERS")
timeout 240 "${CONVERT[@]}" >"$LOG_DIR/convert.log" 2>&1 &
convert_pid=$!

timeout 240 "$TESTS" -tc='*fused decode step*,*CUDA logits match the CPU*,*tap observer*,*graphs equal eager*' \
  >"$LOG_DIR/gpu-tests.log" 2>&1
rc=$?
echo "gpu tests: rc $rc"
grep -E "test cases|assertions" "$LOG_DIR/gpu-tests.log"
grep -E "ERROR|THREW|mla-fused|graphs vs eager fused" "$LOG_DIR/gpu-tests.log" | head -n 12
[ $rc = 0 ] || failed=1

if ! wait "$convert_pid"; then
  echo "fused-gpu-check: convert failed" >&2
  tail -n 5 "$LOG_DIR/convert.log" >&2
  exit 1
fi
echo "model converted at $((SECONDS - start)) s"

bench() {  # bench NAME FUSED ARGS...
  local name=$1 fused=$2
  shift 2
  env LATTE_FUSED_DECODE="$fused" LATTE_STEP_STAGE_KB="${LATTE_STEP_STAGE_KB:-16}" timeout 120 "$LATTE" bench --model "$MODEL" --device cuda:0 --attention mla "$@" \
    >"$LOG_DIR/bench-$name.log" 2>&1 || failed=1
  grep -E '\| (pp|tg)[0-9]' "$LOG_DIR/bench-$name.log" | sed "s/^/$name /"
}
for round in $(seq 1 "$ROUNDS"); do
  bench "layered-$round" 0 -p 0 -n 128 -r 2
  bench "fused-$round" 1 -p 0 -n 128 -r 2
done
LATTE_STEP_STAGE_KB=32 bench fused-stage32 1 -p 0 -n 128 -r 2
for n in ${LATTE_FUSED_STAGES:-}; do
  LATTE_STEP_STAGES=$n bench "fused-stages$n" 1 -p 0 -n 128 -r 2
done
bench layered-d4096 0 -p 0 -n 32 -d 4096 -r 1
bench fused-d4096 1 -p 0 -n 32 -d 4096 -r 1

LATTE_STEP_TIMING=1 LATTE_FUSED_DECODE=1 timeout 120 "$LATTE" bench --model "$MODEL" --device cuda:0 --attention mla \
  -p 0 -n 16 -r 1 >"$LOG_DIR/timing.log" 2>&1 || failed=1
# the last table printed (the timed run's session)
awk '/fused step phases/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$LOG_DIR/timing.log" | grep -vE '^\|'

if command -v cuobjdump >/dev/null 2>&1; then
  cuobjdump -res-usage "$LATTE" 2>/dev/null | grep -A1 decode_step_kernel | head -n 4
  cuobjdump -sass "$LATTE" 2>/dev/null |
    awk '/Function :/{keep = index($0, "decode_step_kernel") > 0} keep' >"$LOG_DIR/decode_step.sass"
  echo "SASS: $(wc -l <"$LOG_DIR/decode_step.sass") lines, $(grep -c 'LDL' "$LOG_DIR/decode_step.sass") LDL," \
    "$(grep -c 'STL' "$LOG_DIR/decode_step.sass") STL, $(grep -c 'IDP' "$LOG_DIR/decode_step.sass") IDP"
fi
echo "done at $((SECONDS - start)) s"
exit $failed
