#!/usr/bin/env bash
# The one script to run on a GPU machine: builds the CUDA tests and tools for that GPU, then runs
#   1. latte_cuda_host_tests            device-code logic on the host
#   2. latte_gpu_tests                  every kernel against CPU references (default kernel path)
#   3. latte_gpu_tests, LATTE_CUDA_PORTABLE=1   the same with the portable path forced
#   4. compute-sanitizer memcheck and racecheck on a short subset
#   5. latte kernel-bench               times at DeepSeek-V2-Lite shapes vs measured ceilings
#   6. the whole model on CUDA: a random DeepSeek-V2-Lite-shaped Q4_K_M file (27 layers, vocab 129280)
#      through `latte generate --timing` (both backends) and `latte bench` where the CLI has it
# and prints a summary table last. Logs go to $OUT (if set) or out/gpu-check/.
#
# The GPU machine has CUDA, cmake and ninja but no Eigen/doctest and no network: run
# scripts/prepare-gpu-deps.sh on the build machine first and carry .deps/ with the tree.
#   LATTE_GPU_ARCH   CMAKE_CUDA_ARCHITECTURES (default 90a-real: Hopper only, fast to build)
#   LATTE_GPU_SKIP   space-separated steps to skip: host tests portable sanitizer bench model
#   LATTE_GPU_TESTS  doctest filter (-tc) for the gpu tests steps, e.g. '*CUDA*' for the whole-model cases
#   LATTE_GPU_BENCH_FILTER   passed to kernel-bench --filter
# A device call is limited to 10 minutes: the build output (build-gpu/) stays on a warm machine, so
# run it in two calls, e.g. LATTE_GPU_SKIP="sanitizer bench" then LATTE_GPU_SKIP="host tests portable".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG_DIR=${OUT:-$ROOT/out/gpu-check}
mkdir -p "$LOG_DIR"
ARCH=${LATTE_GPU_ARCH:-90a-real}
SKIP=" ${LATTE_GPU_SKIP:-} "
JOBS=${LATTE_JOBS:-$(nproc)}
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

for dep in eigen3 doctest nlohmann_json; do
  if [ ! -d ".deps/$dep" ]; then
    echo "gpu-check: .deps/$dep is missing: run scripts/prepare-gpu-deps.sh where the packages are installed" >&2
    exit 2
  fi
done

declare -a NAMES STATUS SECONDS_TAKEN
step() {  # step NAME LOGFILE COMMAND... : runs, records status and time
  local name=$1 log=$2
  shift 2
  local start=$SECONDS
  echo "== $name (log: $log)"
  "$@" >"$LOG_DIR/$log" 2>&1
  local rc=$?
  NAMES+=("$name")
  SECONDS_TAKEN+=($((SECONDS - start)))
  case $rc in
    0) STATUS+=("pass") ;;
    77) STATUS+=("skipped (no GPU)") ;;
    124) STATUS+=("TIMEOUT") ;;
    *) STATUS+=("FAIL (rc $rc)") ;;
  esac
  tail -n 3 "$LOG_DIR/$log" | sed 's/^/   /'
  return $rc
}
skipped() { [[ "$SKIP" == *" $1 "* ]]; }

LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
GENERATOR=(-G Ninja)
command -v ninja >/dev/null 2>&1 || GENERATOR=(-G "Unix Makefiles")
nvidia-smi >"$LOG_DIR/nvidia-smi.txt" 2>&1 || true
nvcc --version >"$LOG_DIR/nvcc.txt" 2>&1 || true

step "configure" configure.log cmake -S . -B build-gpu "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DLATTE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DLATTE_BUILD_EXAMPLES=OFF "${LAUNCHER[@]}" \
  -DCMAKE_PREFIX_PATH="$ROOT/.deps/eigen3;$ROOT/.deps/doctest;$ROOT/.deps/nlohmann_json" \
  -DEigen3_DIR="$ROOT/.deps/eigen3/share/eigen3/cmake" -Ddoctest_DIR="$ROOT/.deps/doctest/lib/cmake/doctest"
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
  if ! skipped sanitizer; then
    SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null || true)
    if [ -n "$SANITIZER" ]; then
      SUBSET='*gated*,*grouped*,*moe_sort*,*moe_experts*,*rms_norm*,*rope_yarn*'
      step "compute-sanitizer memcheck" memcheck.log timeout 300 "$SANITIZER" --tool memcheck \
        --leak-check full --error-exitcode 3 $T/latte_gpu_tests -tc="$SUBSET"
      step "compute-sanitizer racecheck" racecheck.log timeout 300 "$SANITIZER" --tool racecheck \
        --error-exitcode 3 $T/latte_gpu_tests -tc='*grouped*,*gated*,*moe_sort*,*layer_norm*'
      step "compute-sanitizer memcheck, whole model" memcheck-model.log timeout 300 "$SANITIZER" --tool memcheck \
        --error-exitcode 3 $T/latte_gpu_tests -tc='*prefill chunk and decode tokens*'
    else
      NAMES+=("compute-sanitizer"); STATUS+=("not installed"); SECONDS_TAKEN+=(0)
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
echo
echo "== gpu-check summary (logs in $LOG_DIR) =="
printf "%-36s %-18s %6s\n" step status seconds
failed=0
for i in "${!NAMES[@]}"; do
  printf "%-36s %-18s %6s\n" "${NAMES[$i]}" "${STATUS[$i]}" "${SECONDS_TAKEN[$i]}"
  [[ "${STATUS[$i]}" == pass || "${STATUS[$i]}" == "not installed" ]] || failed=1
done
exit $failed
