#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu-check.sh has built build-gpu/ (same tree, warm machine):
#   1. latte diagnose --selftest --device cuda:0       the self-test table (exit 0 pass, 2 mismatch)
#   2. for each oracle fixture (tests/data/oracle/*): latte convert -> GGUF, tools/oracle/dump_taps.py
#      (transformers, float32, on the CPU) -> tap dump, latte diagnose --against the dump (CPU fp32)
#   3. for each fixture: latte diagnose --compare cpu:mla,cuda:mla and cpu:mla,cuda:standard (CPU vs CUDA
#      tap by tap, bf16 bound)
# Everything goes to $OUT (if set) or out/diagnose-gpu/; a summary is printed last.
#   LATTE_DIAGNOSE_TOKENS   token ids of the compared prompt (default: 24 ids of the fixtures' vocabulary)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-common.sh
LOG_DIR=${OUT:-$ROOT/out/diagnose-gpu}
mkdir -p "$LOG_DIR"
LATTE=build-gpu/tools/latte/latte
TOKENS=${LATTE_DIAGNOSE_TOKENS:-"1 72 101 108 108 111 44 32 119 111 114 108 100 33 32 84 104 101 32 99 97 116 32 115"}
gpu_require_latte diagnose-gpu-check

summary=()
timeout 120 "$LATTE" diagnose --selftest --device cuda:0 >"$LOG_DIR/selftest.txt" 2>&1
rc=$?
cat "$LOG_DIR/selftest.txt"
summary+=("selftest cuda:0: rc $rc")

for dir in tests/data/oracle/*/; do
  name=$(basename "$dir")
  [ -f "$dir/config.json" ] || continue
  gguf="$LOG_DIR/$name.gguf"
  taps="$LOG_DIR/$name-hf-taps"
  if ! "$LATTE" convert "$dir" -o "$gguf" >"$LOG_DIR/$name-convert.log" 2>&1; then
    summary+=("$name: convert failed (see $name-convert.log)")
    continue
  fi
  for cuda_side in cuda:mla cuda:standard; do
    "$LATTE" diagnose --model "$gguf" --tokens "$TOKENS" --compare "cpu:mla,$cuda_side" \
      >"$LOG_DIR/$name-${cuda_side/:/-}.txt" 2>&1
    rc=$?
    summary+=("$name: diagnose --compare cpu:mla,$cuda_side: rc $rc, $(tail -n 1 "$LOG_DIR/$name-${cuda_side/:/-}.txt")")
  done
  if ! timeout 300 python3 tools/oracle/dump_taps.py --checkpoint "$dir" --tokens "$TOKENS" --out "$taps" \
    >"$LOG_DIR/$name-dump.log" 2>&1; then
    summary+=("$name: dump_taps.py failed (see $name-dump.log)")
    continue
  fi
  "$LATTE" diagnose --model "$gguf" --against "$taps" >"$LOG_DIR/$name-diagnose.txt" 2>&1
  rc=$?
  summary+=("$name: diagnose --against transformers: rc $rc, $(tail -n 1 "$LOG_DIR/$name-diagnose.txt")")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
