#!/usr/bin/env bash
# The issue-8 speed table on a GPU machine: builds `latte` for the GPU, writes the 27-layer
# DeepSeek-V2-Lite-shaped random model (vocab 129280, Q4_K_M) and runs `latte bench` on it with both
# attention backends:
#   pp512, tg128, batched decode of 8 / 32 / 128 sequences (512-token prompts, 128 steps),
#   pp512 @ d16384, tg128 @ d4096 and @ d16384,
# then `latte bench --kernels` (the kernel-bench cases at the model's shapes). Tables go to
# $OUT/bench-gpu-TAG.md, logs to $OUT/bench-gpu-TAG.log ($OUT defaults to out/bench-gpu/).
#
# Needs .deps/ from scripts/prepare-gpu-deps.sh (no network on the GPU machine). Settings:
#   LATTE_GPU_ARCH     CMAKE_CUDA_ARCHITECTURES (default 90a-real)
#   LATTE_BENCH_REPS   repetitions per test (default 3)
#   LATTE_BENCH_SKIP   space-separated parts to skip: build convert mla standard depth batched kernels
#   LATTE_BENCH_MODEL  use this GGUF instead of converting one
#   LATTE_BENCH_TAG    suffix of the output files (default "all"): bench-gpu-TAG.md / .log
# Every part runs under its own timeout; a part that times out or fails is reported and the rest
# still run. Once built and converted, the benches take ~8 minutes at most (the sum of the
# timeouts is larger). A device call is limited to 10 minutes and build-gpu/ stays on a warm
# machine, so the safe sequence is three calls:
#   LATTE_BENCH_SKIP="mla standard kernels" LATTE_BENCH_TAG=prep scripts/bench-gpu.sh   # build, convert
#   LATTE_BENCH_SKIP="standard" LATTE_BENCH_TAG=mla scripts/bench-gpu.sh               # mla + kernels
#   LATTE_BENCH_SKIP="mla kernels" LATTE_BENCH_TAG=standard scripts/bench-gpu.sh       # standard
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
OUT_DIR=${OUT:-$ROOT/out/bench-gpu}
mkdir -p "$OUT_DIR"
REPS=${LATTE_BENCH_REPS:-3}
SKIP=" ${LATTE_BENCH_SKIP:-} "
TAG=${LATTE_BENCH_TAG:-all}
TABLE=$OUT_DIR/bench-gpu-$TAG.md
LOG=$OUT_DIR/bench-gpu-$TAG.log
MODEL=${LATTE_BENCH_MODEL:-$ROOT/build-gpu/v2-lite-27L-q4_k_m.gguf}
LATTE=$ROOT/build-gpu/tools/latte/latte
: >"$TABLE"
: >"$LOG"
failed=0
part() {  # part TITLE SECONDS COMMAND...: runs with a timeout, appends stdout to the table
  local title=$1 limit=$2
  shift 2
  echo "== $title" | tee -a "$LOG"
  printf '\n### %s\n\n`%s`\n\n' "$title" "$*" >>"$TABLE"
  local start=$SECONDS
  timeout "$limit" "$@" >>"$TABLE" 2>>"$LOG"
  local rc=$?
  echo "   rc $rc, $((SECONDS - start)) s" | tee -a "$LOG"
  [ $rc = 0 ] || { failed=1; echo "(failed: rc $rc, see bench-gpu-$TAG.log)" >>"$TABLE"; }
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -n 1; } \
  >>"$TABLE" 2>&1 || true

if ! skipped build; then
  gpu_require_deps bench-gpu
  gpu_configure_command
  "${GPU_CONFIGURE[@]}" >>"$LOG" 2>&1 && cmake --build build-gpu --parallel "$JOBS" --target latte-cli >>"$LOG" 2>&1 ||
    { echo "bench-gpu: build failed, see $LOG" >&2; tail -n 30 "$LOG" >&2; exit 1; }
fi
if ! skipped convert && [ ! -f "$MODEL" ]; then
  part "convert (27 layers, vocab 129280, Q4_K_M)" 300 "$LATTE" convert --random --preset deepseek-v2-lite \
    --vocab 129280 --type q4_k_m -o "$MODEL"
fi

B=("$LATTE" bench --model "$MODEL" --device cuda:0 -r "$REPS")
for attention in mla standard; do
  skipped "$attention" && continue
  part "$attention: pp512, tg128" 60 "${B[@]}" --attention "$attention" -p 512 -n 128
  skipped batched || part "$attention: batched decode 8 / 32 / 128 x (pp512 + tg128)" 120 \
    "${B[@]}" --attention "$attention" -p 512 -n 128 --batch 8,32,128
  skipped depth || part "$attention: pp512 @ d16384" 60 "${B[@]}" --attention "$attention" -p 512 -n 0 -d 16384
  skipped depth || part "$attention: tg128 @ d4096, d16384" 75 \
    "${B[@]}" --attention "$attention" -p 0 -n 128 -d 4096,16384
done
skipped kernels || part "kernels at the model's shapes" 90 "${B[@]}" -p 0 -n 0 --kernels

echo
cat "$TABLE"
exit $failed
