#!/usr/bin/env bash
# Nsight Compute on the fused decode step's kernel (one launch, every section, clocks left alone) on a
# DeepSeek-V2-Lite-shaped random Q4_K_M model of LATTE_FUSED_LAYERS blocks (default 4: the phases of a
# block are those of every block), after the fused step's GPU tests and a bench of both decode paths
# on that model. Prints the details page; the report, and the per-SASS-instruction
# stall samples as CSV (map the addresses with cuobjdump -sass on the same binary), go to $OUT.
#
#   scripts/fused-profile.sh        (device call: carry .carry, after scripts/pack-gpu-binaries.sh)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/fused-profile}
mkdir -p "$LOG_DIR"
gpu_require_deps fused-profile
gpu_prebuilt || { echo "fused-profile: needs the prebuilt binaries (.carry)" >&2; exit 2; }
LATTE=$ROOT/build-gpu/tools/latte/latte
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "fused-profile: ncu not found" >&2; exit 2; }
LAYERS=${LATTE_FUSED_LAYERS:-4}
MODEL=/tmp/v2-lite-${LAYERS}L-q4_k_m.gguf
export LATTE_NO_SELFTEST=1 LATTE_CUDA_GRAPHS=0 LATTE_FUSED_DECODE=1
timeout 200 "$LATTE" convert --random --preset deepseek-v2-lite --vocab 129280 --type q4_k_m --no-progress \
  --layers "$LAYERS" -o "$MODEL" >"$LOG_DIR/convert.log" 2>&1 || { tail -n 5 "$LOG_DIR/convert.log"; exit 1; }
timeout 120 "$ROOT/build-gpu/tests/gpu/latte_gpu_tests" -tc='*fused decode step*' >"$LOG_DIR/gpu-tests.log" 2>&1
echo "fused step GPU tests: rc $? $(grep -E 'test cases' "$LOG_DIR/gpu-tests.log")"
for fused in 0 1; do
  LATTE_FUSED_DECODE=$fused timeout 100 "$LATTE" bench --model "$MODEL" --device cuda:0 --attention mla -p 0 -n 64 -r 2 \
    2>&1 | grep -E '\| tg' | sed "s/^/fused=$fused /"
done
timeout 300 "$NCU" --clock-control none -k regex:decode_step_kernel --launch-skip 6 --launch-count 1 --set full \
  --import-source no -f -o "$LOG_DIR/fused" "$LATTE" bench --model "$MODEL" --device cuda:0 --attention mla \
  -p 0 -n 12 -r 1 >"$LOG_DIR/ncu.log" 2>&1
rc=$?
tail -n 3 "$LOG_DIR/ncu.log"
"$NCU" -i "$LOG_DIR/fused.ncu-rep" --page details >"$LOG_DIR/details.txt" 2>&1
grep -vE '^\s*$' "$LOG_DIR/details.txt" | grep -vE 'OPT|^\s+(This|The|See|Check|Consider|Use|Look|Compare|To|for|a |occupancy|is |are |of |in |issue)' | head -n 230
"$NCU" -i "$LOG_DIR/fused.ncu-rep" --page source --csv --print-source sass >"$LOG_DIR/sass.csv" 2>&1
gzip -f "$LOG_DIR/sass.csv"
exit $rc
