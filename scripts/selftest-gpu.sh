#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu-check.sh has built build-gpu/ (latte-cli, latte_gpu_tests):
#   1. latte diagnose --selftest                     at the presets' shapes (deepseek-v2-lite, v3, glm-5)
#   2. latte diagnose --selftest --model M           at the shapes and weight types of random q4_k_m
#                                                    test-v3 and test-glm-dsa models
#   3. latte_gpu_tests -tc='*self-test*'             the self-test's GPU tests
# Each table lists every check (shape, error, bound, ok/MISMATCH) and ends "N checks, M mismatched, S s".
# Output goes to $OUT (if set) or out/selftest-gpu/; a summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$PWD/out/selftest-gpu}
mkdir -p "$LOG_DIR"
LATTE=build-gpu/tools/latte/latte
TESTS=build-gpu/tests/gpu/latte_gpu_tests
gpu_require_latte selftest-gpu
summary=()
run() {  # name, command...
  local name=$1
  shift
  timeout 300 "$@" >"$LOG_DIR/$name.txt" 2>&1
  local rc=$?
  echo "== $name (rc $rc)"
  cat "$LOG_DIR/$name.txt"
  summary+=("$name: rc $rc, $(tail -n 1 "$LOG_DIR/$name.txt")")
}
run selftest-presets "$LATTE" diagnose --selftest --device cuda:0
for preset in test-v3 test-glm-dsa; do
  model="$LOG_DIR/$preset-q4_k_m.gguf"
  if "$LATTE" convert --random --preset "$preset" --type q4_k_m --seed 5 -o "$model" >"$LOG_DIR/$preset-convert.log" 2>&1; then
    run "selftest-$preset" "$LATTE" diagnose --selftest --model "$model" --device cuda:0
  else
    summary+=("$preset: convert failed (see $preset-convert.log)")
  fi
done
if [ -x "$TESTS" ]; then
  run selftest-gpu-tests "$TESTS" -tc='*self-test*,*ensure_selftest*'
fi
echo "== summary"
printf '%s\n' "${summary[@]}"
