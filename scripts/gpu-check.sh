#!/usr/bin/env bash
# The one script to run on a GPU machine: builds the CUDA tests and tools for that GPU, then runs
#   1. latte_cuda_host_tests            device-code logic on the host
#   2. latte_gpu_tests                  every kernel against CPU references (default kernel path)
#   3. latte_gpu_tests, LATTE_CUDA_PORTABLE=1   the same with the portable path forced, then the GEMV, MLA
#      decode and whole-model cases with the kernel builds that are off by default switched on
#   4. compute-sanitizer memcheck and racecheck on a short subset
#   5. latte kernel-bench               times at DeepSeek-V2-Lite shapes vs measured ceilings
#   6. the whole model on CUDA: a random DeepSeek-V2-Lite-shaped Q4_K_M file (27 layers, vocab 129280)
#      through `latte generate --timing` (both backends) and `latte bench` where the CLI has it
# and prints a summary table last. Logs go to $OUT (if set) or out/gpu-check/.
#
# The GPU machine has CUDA, cmake and ninja but no Eigen/doctest and no network: run
# scripts/prepare-gpu-deps.sh on the build machine first and carry .deps/ with the tree.
#   LATTE_GPU_ARCH   CMAKE_CUDA_ARCHITECTURES (default 90a-real: Hopper only, fast to build)
#   LATTE_GPU_SKIP   space-separated steps to skip: host tests portable switches sanitizer bench model
#   LATTE_GPU_TESTS  doctest filter (-tc) for the gpu tests steps, e.g. '*CUDA*' for the whole-model cases
#   LATTE_GPU_BENCH_FILTER   passed to kernel-bench --filter
# A device call is limited to 10 minutes: the build output (build-gpu/) stays on a warm machine, so
# run it in two calls, e.g. LATTE_GPU_SKIP="sanitizer bench" then LATTE_GPU_SKIP="host tests portable".
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/gpu-check}
mkdir -p "$LOG_DIR"
SKIP=" ${LATTE_GPU_SKIP:-} "
gpu_require_deps gpu-check

step() {  # step NAME LOGFILE COMMAND... : runs, records status and time
  echo "== $1 (log: $2)"
  : >"$LOG_DIR/$2"
  gpu_step "$1" "$2" 3 124 "${@:3}"
}

nvidia-smi >"$LOG_DIR/nvidia-smi.txt" 2>&1 || true
nvcc --version >"$LOG_DIR/nvcc.txt" 2>&1 || true

gpu_configure_command
step "configure" configure.log "${GPU_CONFIGURE[@]}"
build_ok=0
if [ "${STATUS[-1]}" = pass ]; then
  step "build ($ARCH)" build.log cmake --build build-gpu --parallel "$JOBS" \
    --target latte_gpu_tests latte_cuda_host_tests latte-cli && build_ok=1
fi

if [ $build_ok = 1 ]; then
  T=build-gpu/tests/gpu
  skipped host || step "host tests (decoders)" host-tests.log timeout 300 $T/latte_cuda_host_tests
  export LATTE_GPU_TEST_TRACE=1  # the log names the last case started before a crash
  FILTER=()
  [ -n "${LATTE_GPU_TESTS:-}" ] && FILTER=(-tc="$LATTE_GPU_TESTS")
  skipped tests || step "gpu tests" gpu-tests.log timeout 300 $T/latte_gpu_tests "${FILTER[@]}"
  skipped portable || step "gpu tests, LATTE_CUDA_PORTABLE=1" gpu-tests-portable.log \
    env LATTE_CUDA_PORTABLE=1 timeout 300 $T/latte_gpu_tests "${FILTER[@]}"
  # the kernel builds and paths that are off by default (docs/environment.md): the GEMV, MLA decode, MoE and
  # whole-model cases with each of them taken
  skipped switches || step "gpu tests, kernel builds off by default" gpu-tests-switches.log \
    env LATTE_MLA_DECODE_TILE=32 LATTE_GEMV_DENSE_ROWS=128 LATTE_MOE_DOWN_QUANTIZE=16 LATTE_MLA_HEADS_KERNEL=0 \
    LATTE_NORM_BF16=0 LATTE_MOE_ROUTE_IN_SORT=0 LATTE_MLA_EARLY_TILES=0 LATTE_GEMV_F16=0 \
    LATTE_GEMV_MMA_PAIRS=0 LATTE_LOGITS_CHUNKS=0 LATTE_DIRECT_BF16=0 LATTE_GEMV_NORM=0 timeout 300 $T/latte_gpu_tests \
    -tc='*gemv*,*mla decode*,*CUDA logits match the CPU reference*,*batched decode*,*decode_batch*,*moe*'
  if ! skipped sanitizer; then
    SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null || true)
    if [ -n "$SANITIZER" ]; then
      SUBSET='*gated*,*grouped*,*moe_sort*,*moe_experts*,*rms_norm*,*rope_yarn*,*heads_product*'
      step "compute-sanitizer memcheck" memcheck.log timeout 300 "$SANITIZER" --tool memcheck \
        --leak-check full --error-exitcode 3 $T/latte_gpu_tests -tc="$SUBSET"
      step "compute-sanitizer racecheck" racecheck.log timeout 300 "$SANITIZER" --tool racecheck \
        --error-exitcode 3 $T/latte_gpu_tests -tc='*grouped*,*gated*,*moe_sort*,*layer_norm*'
      step "compute-sanitizer memcheck, whole model" memcheck-model.log timeout 300 "$SANITIZER" --tool memcheck \
        --error-exitcode 3 $T/latte_gpu_tests -tc='*prefill chunk and decode tokens*'
    else
      gpu_note "compute-sanitizer" "not installed"
    fi
  fi
  if ! skipped model; then
    LATTE=build-gpu/tools/latte/latte
    MODEL_FILE=build-gpu/v2lite-q4km.gguf
    [ -f "$MODEL_FILE" ] || step "convert random deepseek-v2-lite q4_k_m" convert.log timeout 300 $LATTE convert \
      --random --preset deepseek-v2-lite --vocab 129280 --type q4_k_m --no-progress -o "$MODEL_FILE"
    PROMPT=$(seq -s ' ' 100 611)  # 512 prompt tokens
    for backend in mla standard; do
      step "generate pp512 + tg128 ($backend)" generate-$backend.log timeout 200 $LATTE generate \
        --model "$MODEL_FILE" --device cuda:0 --attention $backend --tokens "$PROMPT" -n 128 --greedy --timing
    done
    if $LATTE bench --help >/dev/null 2>&1; then
      step "latte bench" model-bench.log timeout 300 $LATTE bench --model "$MODEL_FILE" -p 512 -n 128 -r 3
    fi
  fi
  skipped bench || step "kernel-bench" kernel-bench.log timeout 420 build-gpu/tools/latte/latte kernel-bench \
    ${LATTE_GPU_BENCH_FILTER:+--filter "$LATTE_GPU_BENCH_FILTER"}
fi

echo
echo "== failures (first lines) =="
grep -h -E "ERROR|FAILED|error:" "$LOG_DIR"/gpu-tests*.log "$LOG_DIR"/*check.log 2>/dev/null | head -n 40
for f in "$LOG_DIR"/generate-*.log "$LOG_DIR"/model-bench.log; do
  [ -f "$f" ] && { echo; echo "== $(basename "$f") =="; tail -n 6 "$f"; }
done
if [ -f "$LOG_DIR/kernel-bench.log" ]; then
  echo
  echo "== kernel-bench =="
  cat "$LOG_DIR/kernel-bench.log"
fi
gpu_summary gpu-check 36 pass "not installed"
exit $?
