#!/usr/bin/env bash
# Tensor parallelism on a machine with 2 GPUs, in one command: builds the CUDA tests and the CLI with
# NCCL, then runs
#   0. two smoke steps: TP=2 steps eager, then TP=2 decode steps in CUDA graphs (NCCL captured); when
#      the graphs fail, the rest runs with LATTE_CUDA_GRAPHS=0; when eager steps hang, the rest is skipped
#   1. the TP gpu tests: TP=2 vs TP=1 logits (every flavour, both backends, both MoE splits), greedy
#      continuation, batched decode, truncate, graphs vs eager        latte_gpu_tests -tc='tensor-parallel*'
#   2. the error case with one GPU visible (CUDA_VISIBLE_DEVICES=0)
#   3. a random DeepSeek-V2-Lite-shaped model (8 layers, vocab 129280, Q8_0): `latte bench --tp 1,2`
#      (pp512, tg128, 8 batched sequences; mla) with its scaling lines
#   4. the NCCL launch test (two processes, one GPU each)            latte_nccl_launch_test
#      then a model split over two processes (tensor_parallel_from_launch): bit-identical logits on
#      both ranks, equal to TP=1 within bf16 bounds, greedy equal       latte_tp_launch_model_test
#   5. expert-parallel vs tensor-parallel MoE: the mla bench with --tp 2 --tp-moe expert,tensor
#   6. the bench of 3 with the output head split by vocabulary over the ranks (LATTE_TP_OUTPUT=split;
#      by default rank 0 holds the whole head), then with the standard backend; `latte generate --tp 1`
#      and `--tp 2` greedy (mla), and `latte generate --tp-launch` as two processes (rank 0 prints)
#   7. the TP gpu tests with LATTE_CUDA_GRAPHS=0 (decode steps eager; tells a graph+NCCL problem apart)
# Why Q8_0 and not Q4_K_M: V2-Lite's shared-expert down projection is 2816 wide, 1408 per rank, which
# cuts Q4_K/Q6_K blocks of 256 values; the plan refuses it (`latte inspect --tp 2` names the tensor).
# Q8_0 blocks are 32 values, so every split of V2-Lite (dense 10944, experts 1408, shared 2816) holds.
# Every step has its own timeout and log in $OUT (if set) or out/tp-gpu-check/; a summary table with
# each step's status comes last, then the failures' first lines and the bench tables.
#
# Needs .deps/ from scripts/prepare-gpu-deps.sh (no network on the GPU machine) and NCCL (the CUDA
# toolkit's or NCCL_ROOT). Settings:
#   LATTE_GPU_ARCH   CMAKE_CUDA_ARCHITECTURES (default 90a-real)
#   LATTE_TP_SKIP      space-separated steps to skip: tests error bench launch launch-model moe head
#                      generate eager
#   LATTE_BENCH_REPS   repetitions per bench test (default 2)
#   LATTE_TP_BUDGET_S  seconds the whole script may take (default 570: a device call ends at 600);
#                      steps are ordered by importance and each runs under the time left; those
#                      that no longer fit are listed as NOT RUN. On a warm machine (build-gpu/ and the
#                      converted model kept) a second call resumes with little build time.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/tp-gpu-check}
mkdir -p "$LOG_DIR"
SKIP=" ${LATTE_TP_SKIP:-} "
REPS=${LATTE_BENCH_REPS:-2}
gpu_require_deps tp-gpu-check

BUDGET=${LATTE_TP_BUDGET_S:-570}  # seconds for the whole script (a device call is cut at 600)
step() {  # step NAME LOGFILE TIMEOUT COMMAND... : runs under min(TIMEOUT, budget left), records status
  local name=$1 log=$2 limit=$3
  shift 3
  local left=$((BUDGET - SECONDS - 15))
  if [ $left -lt 20 ]; then
    echo "== $name: not run (time budget of ${BUDGET}s spent)"
    gpu_note "$name" "NOT RUN (budget)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (log: $log, limit ${limit}s) started $(date -u +%H:%M:%S), ${SECONDS}s in"
  echo "\$ $*" >"$LOG_DIR/$log"
  gpu_step "$name" "$log" 4 "124 137" timeout --kill-after=10 "$limit" "$@"
}

{
  nvidia-smi
  nvidia-smi topo -m
} >"$LOG_DIR/nvidia-smi.txt" 2>&1 || true
nvcc --version >"$LOG_DIR/nvcc.txt" 2>&1 || true
echo "GPUs: $(nvidia-smi -L 2>/dev/null | wc -l)  (nvidia-smi.txt has the topology)"

gpu_configure_command -DLATTE_NCCL=ON
step "configure (NCCL on)" configure.log 120 "${GPU_CONFIGURE[@]}"
grep -i "nccl" "$LOG_DIR/configure.log" | sed 's/^/   /'
build_ok=0
if [ "${STATUS[-1]}" = pass ]; then
  step "build ($ARCH)" build.log 420 cmake --build build-gpu --parallel "$JOBS" \
    --target latte_gpu_tests latte_nccl_launch_test latte_tp_launch_model_test latte-cli && build_ok=1
fi

if [ $build_ok = 1 ]; then
  T=build-gpu/tests/gpu
  LATTE=build-gpu/tools/latte/latte
  export LATTE_GPU_TEST_TRACE=1
  # NCCL's own account of what it set up (transport, channels); WARN level otherwise.
  export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT}
  # In order of importance, so that a run cut by the time budget keeps what matters most.
  # Two short smoke steps first: eager TP steps (batched decode over TP sessions), then TP decode steps
  # captured in CUDA graphs with the NCCL all-reduces inside. If the graphs step fails or hangs, every
  # later step runs with LATTE_CUDA_GRAPHS=0 so that the rest of the run still reports.
  fundamental_ok=1
  if ! skipped tests; then
    step "smoke: TP=2 eager steps" tp-smoke-eager.log 120 env LATTE_CUDA_GRAPHS=0 $T/latte_gpu_tests -s \
      -tc='*batched decode over TP sessions*' || [ "${STATUS[-1]}" != TIMEOUT ] || fundamental_ok=0
    if [ $fundamental_ok = 1 ]; then
      if ! step "smoke: TP=2 decode graphs (NCCL captured)" tp-smoke-graphs.log 90 $T/latte_gpu_tests -s \
        -tc='*graphs against eager*'; then
        export LATTE_CUDA_GRAPHS=0
        echo "   decode graphs under TP failed: the remaining steps run with LATTE_CUDA_GRAPHS=0"
        gpu_note "(remaining steps with LATTE_CUDA_GRAPHS=0)" NOTE
      fi
    fi
    # -s: every case prints its measured errors; each case names its flavour/split/backend on stderr first.
    [ $fundamental_ok = 1 ] && step "TP gpu tests" tp-tests.log 240 $T/latte_gpu_tests -s -tc='tensor-parallel*' \
      -tce='*graphs against eager*'
  fi
  skipped error || step "TP=2 with one GPU visible" tp-one-gpu.log \
    60 env CUDA_VISIBLE_DEVICES=0 $T/latte_gpu_tests -s -tc='*more ranks than GPUs*'

  MODEL_FILE=build-gpu/v2lite-8L-q8_0.gguf
  if [ $fundamental_ok = 0 ]; then
    echo "   eager TP steps hung: skipping the model benches (see tp-smoke-eager.log)"
    SKIP="$SKIP bench moe head generate eager "
  fi
  if ! skipped bench || ! skipped moe || ! skipped head || ! skipped generate; then
    [ -f "$MODEL_FILE" ] || step "convert random deepseek-v2-lite 8L q8_0" convert.log 180 $LATTE convert \
      --random --preset deepseek-v2-lite --vocab 129280 --layers 8 --type q8_0 --no-progress -o "$MODEL_FILE"
    step "inspect --tp 2" inspect.log 30 $LATTE inspect "$MODEL_FILE" --tp 2 --no-tensors
  fi
  if ! skipped bench && [ -f "$MODEL_FILE" ]; then
    step "bench --tp 1,2 (mla)" bench-mla.log 150 $LATTE bench --model "$MODEL_FILE" \
      --device cuda:0 --tp 1,2 --attention mla -p 512 -n 128 --batch 1,8 -r "$REPS"
  fi
  skipped launch || step "NCCL launch test (2 processes)" nccl-launch.log 90 $T/latte_nccl_launch_test
  skipped launch-model || step "TP=2 model over 2 processes (launch)" tp-launch-model.log 180 \
    $T/latte_tp_launch_model_test
  if ! skipped moe && [ -f "$MODEL_FILE" ]; then
    step "bench expert- vs tensor-parallel MoE (mla)" bench-moe.log 120 $LATTE bench --model "$MODEL_FILE" \
      --device cuda:0 --tp 2 --tp-moe expert,tensor --attention mla -p 512 -n 128 --batch 1,8 -r "$REPS"
  fi
  if ! skipped head && [ -f "$MODEL_FILE" ]; then
    step "bench --tp 1,2, output head split (mla)" bench-split-head.log 150 env LATTE_TP_OUTPUT=split $LATTE bench \
      --model "$MODEL_FILE" --device cuda:0 --tp 1,2 --attention mla -p 512 -n 128 --batch 1,8 -r "$REPS"
  fi
  if ! skipped bench && [ -f "$MODEL_FILE" ]; then
    step "bench --tp 1,2 (standard)" bench-standard.log 150 $LATTE bench --model "$MODEL_FILE" \
      --device cuda:0 --tp 1,2 --attention standard -p 512 -n 128 --batch 1,8 -r "$REPS"
  fi
  if ! skipped generate && [ -f "$MODEL_FILE" ]; then
    PROMPT=$(seq -s ' ' 100 163)  # 64 prompt tokens
    for tp in 1 2; do
      step "generate tp$tp (mla)" generate-mla-tp$tp.log 60 $LATTE generate \
        --model "$MODEL_FILE" --device cuda:0 --tp $tp --attention mla --tokens "$PROMPT" -n 32 --greedy --timing
    done
    a=$(grep -E '^[0-9 ]+$' "$LOG_DIR/generate-mla-tp1.log" 2>/dev/null | tail -n 1)
    b=$(grep -E '^[0-9 ]+$' "$LOG_DIR/generate-mla-tp2.log" 2>/dev/null | tail -n 1)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then r=pass; else r="DIFFERENT (random weights: near ties may flip)"; fi
    echo "   greedy tp1 vs tp2 (mla): $r"
    gpu_note "generate tp1 == tp2 (mla)" "$r"
    # The same as two processes, one GPU each, as two hosts would run it: rank 1 in the background
    # (quiet), rank 0 in the step; a fresh id file.
    ID_FILE=$(mktemp -u "${TMPDIR:-/tmp}/latte-tp-id.XXXXXX")
    LATTE_TP_RANK=1 LATTE_TP_WORLD=2 LATTE_TP_LOCAL_RANK=1 LATTE_TP_ID_FILE=$ID_FILE LATTE_TP_TIMEOUT_S=60 \
      timeout 90 $LATTE generate --tp-launch --model "$MODEL_FILE" --attention mla --tokens "$PROMPT" -n 32 \
      --greedy >"$LOG_DIR/generate-mla-launch-rank1.out" 2>"$LOG_DIR/generate-mla-launch-rank1.log" &
    rank1=$!
    step "generate --tp-launch, 2 processes (mla)" generate-mla-launch.log 90 env LATTE_TP_RANK=0 LATTE_TP_WORLD=2 \
      LATTE_TP_LOCAL_RANK=0 LATTE_TP_ID_FILE="$ID_FILE" LATTE_TP_TIMEOUT_S=60 $LATTE generate --tp-launch \
      --model "$MODEL_FILE" --attention mla --tokens "$PROMPT" -n 32 --greedy --timing
    wait $rank1; rc1=$?
    rm -f "$ID_FILE"
    c=$(grep -E '^[0-9 ]+$' "$LOG_DIR/generate-mla-launch.log" 2>/dev/null | tail -n 1)
    if [ $rc1 != 0 ]; then r="FAIL (rank 1 rc $rc1)"
    # NCCL_DEBUG=INFO (set above) writes NCCL's own lines to stdout; anything else from rank 1 is a failure.
    elif grep -qv "NCCL INFO" "$LOG_DIR/generate-mla-launch-rank1.out"; then r="FAIL (rank 1 printed)"
    elif [ -n "$b" ] && [ "$c" = "$b" ]; then r=pass
    else r="DIFFERENT (random weights: near ties may flip)"; fi
    echo "   greedy --tp 2 vs --tp-launch (mla): $r"
    gpu_note "generate --tp-launch == --tp 2 (mla)" "$r"
  fi
  skipped eager || step "TP gpu tests, LATTE_CUDA_GRAPHS=0" tp-tests-eager.log \
    240 env LATTE_CUDA_GRAPHS=0 $T/latte_gpu_tests -tc='tensor-parallel*' -tce='*graphs against eager*'
fi

echo
echo "== failures (first lines) =="
grep -h -E "ERROR|FAILED|error:|SKIPPED|what\(\)" "$LOG_DIR"/tp-*.log "$LOG_DIR"/nccl-launch.log \
  "$LOG_DIR"/generate-mla-launch*.log 2>/dev/null | head -n 40
echo
echo "== last case started in a test log that did not pass =="
for f in "$LOG_DIR"/tp-smoke-*.log "$LOG_DIR"/tp-tests.log "$LOG_DIR"/tp-tests-eager.log; do
  [ -f "$f" ] && ! grep -q "Status: SUCCESS" "$f" && { echo "$(basename "$f"):"; grep -E "^tp test:|^case:" "$f" | tail -n 2; }
done
for f in "$LOG_DIR"/bench-*.log; do
  [ -f "$f" ] && { echo; echo "== $(basename "$f") =="; grep -E "^\||^scaling|rror" "$f"; }
done
gpu_summary tp-gpu-check 52 pass "DIFFERENT*" NOTE
exit $?
