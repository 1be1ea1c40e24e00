#!/bin/bash
# CPU forward-pass figures for BENCHMARKS.md: writes random-weight models with latte_write_test_model
# and times `latte generate --timing` (a 64-token prompt, then 64 greedy tokens) per thread count and
# attention backend.
#   scripts/bench-cpu-forward.sh BUILD_DIR OUT_DIR "1 4 16"
set -euo pipefail
build=$1 out=$2 threads=${3:-"1 2"}
writer=$build/tests/cli/latte_write_test_model
latte=$build/tools/latte/latte
mkdir -p "$out"
prompt=$(seq 1 64 | tr '\n' ' ')
run() {  # NAME PRESET TYPE LAYERS
  local file=$out/$1.gguf
  [ -f "$file" ] || "$writer" "$2" "$file" split "$3" "$4"
  for t in $threads; do
    for a in mla standard; do
      printf '%s %s threads=%s: ' "$1" "$a" "$t"
      "$latte" generate --model "$file" --tokens "$prompt" -n 65 --greedy --threads "$t" --attention "$a" --timing 2>&1 >/dev/null
    done
  done
}
run latte-tiny-f32 latte-tiny f32 6
run latte-tiny-q8_0 latte-tiny q8_0 6
run v2-lite-2blocks-q8_0 deepseek-v2-lite q8_0 2
