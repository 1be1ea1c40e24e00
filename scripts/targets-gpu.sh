#!/usr/bin/env bash
# The figures issue 8 sets targets for, in one device call of under 10 minutes, with binaries built here
# (scripts/pack-gpu-binaries.sh, carried as .carry/): the MLA and standard decode kernels alone
# (kernel-bench), the whole 27-block random DeepSeek-V2-Lite Q4_K_M model at depth (pp512 @ d16384, tg @
# d4096 / d8192 / d16384 with both backends) and batched decode, then an ncu profile of a batched step.
#
#   LATTE_TARGETS="kernels depth batched profile" scripts/targets-gpu.sh
#
# Settings:
#   LATTE_TARGETS          parts to run (default: all four)
#   LATTE_TARGETS_BATCHES  --batch list of the batched part (default 8,32,128)
#   LATTE_PROFILE_BATCH    sequences of the profiled batched step (default 128; one-token prompts, so every
#                          step of the profile is a B-row step)
# Output: the tables on stdout, logs in $OUT (or out/targets/). Exit status 1 when a part failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/targets}
mkdir -p "$LOG_DIR"
PARTS=" ${LATTE_TARGETS:-kernels depth batched profile} "
BATCHES=${LATTE_TARGETS_BATCHES:-8,32,128}
PROFILE_BATCH=${LATTE_PROFILE_BATCH:-128}
failed=0
export LATTE_NO_SELFTEST=1

if ! gpu_prebuilt; then
  gpu_require_deps targets-gpu
  gpu_configure_command -DLATTE_NCCL=OFF
  { "${GPU_CONFIGURE[@]}" && cmake --build build-gpu --parallel "$JOBS" --target latte-cli; } >"$LOG_DIR/build.log" 2>&1 ||
    { echo "targets-gpu: build failed, see $LOG_DIR/build.log" >&2; tail -n 20 "$LOG_DIR/build.log" >&2; exit 1; }
fi
LATTE=$ROOT/build-gpu/tools/latte/latte
MODEL=$ROOT/build-gpu/v2-lite-27L-q4_k_m.gguf
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

convert_pid=
if [ ! -f "$MODEL" ]; then
  "$LATTE" convert --random --preset deepseek-v2-lite --vocab 129280 --type q4_k_m --no-progress -o "$MODEL" \
    >"$LOG_DIR/convert.log" 2>&1 &
  convert_pid=$!
fi

part() {  # part NAME SECONDS COMMAND...: runs with a timeout, log in $LOG_DIR/NAME.log, tables to stdout
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$LOG_DIR/$name.log" 2>&1
  local rc=$?
  grep -E '^\|' "$LOG_DIR/$name.log"
  echo "   ($name: rc $rc, $((SECONDS - start)) s)"
  [ $rc = 0 ] || { failed=1; tail -n 5 "$LOG_DIR/$name.log"; }
}

if [[ "$PARTS" == *" kernels "* ]]; then
  part kernels-mla 120 "$LATTE" kernel-bench --filter "mla decode"
  part kernels-standard 60 "$LATTE" kernel-bench --filter "standard decode"
fi
if [ -n "$convert_pid" ] && ! wait "$convert_pid"; then
  echo "targets-gpu: convert failed" >&2
  tail -n 5 "$LOG_DIR/convert.log" >&2
  exit 1
fi
B=("$LATTE" bench --model "$MODEL" --device cuda:0)
if [[ "$PARTS" == *" depth "* ]]; then
  part pp-depth 90 "${B[@]}" --attention mla -p 512 -n 0 -d 16384 -r 2
  part tg-depth 150 "${B[@]}" --attention mla,standard -p 0 -n 64 -d 4096,8192,16384 -r 1
fi
if [[ "$PARTS" == *" batched "* ]]; then
  part batched 150 "${B[@]}" --attention mla -p 512 -n 32 --batch "$BATCHES" -r 1
fi
if [[ "$PARTS" == *" profile "* ]]; then
  # one-token prompts: every step of the run (the prompt's and the decode's) has PROFILE_BATCH rows
  echo "== profile: $PROFILE_BATCH-row steps"
  LATTE_PROFILE_PHASES=decode LATTE_PROFILE_BATCH=$PROFILE_BATCH timeout 240 \
    scripts/profile-gpu.sh "$MODEL" 1 2 mla >"$LOG_DIR/profile.txt" 2>&1 || failed=1
  cat "$LOG_DIR/profile.txt"
fi
exit $failed
