#!/usr/bin/env bash
# The whole oracle check in one command, for a machine with python3 + torch + transformers + numpy
# (the GPU machine; the check itself runs on its CPU cores):
#   1. builds the latte CLI, CPU only, in build-oracle/ (Eigen and nlohmann-json from .deps/, as
#      scripts/gpu-check.sh does: run scripts/prepare-gpu-deps.sh first and carry .deps/);
#   2. checks the oracle's own GGUF decoders (pure Python and numpy) and its GGUF -> Hugging Face
#      mapping bit for bit against `latte dequant` (tools/oracle/validate_dequant.py);
#   3. runs tools/oracle/check_quantized.py: every fixture in tests/data/oracle x f32, bf16, q8_0,
#      q4_k_m x attention mla and standard, latte against transformers on the dequantized weights.
# Prints the table last and writes oracle.md / oracle.json (and the logs) to $OUT or out/oracle/.
# Exit status 0 only when every row passes.
#   LATTE_ORACLE_TYPES   --types for check_quantized.py (default f32,bf16,q8_0,q4_k_m)
#   LATTE_ORACLE_ONLY    comma-separated fixture names to check (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT_DIR=${OUT:-$ROOT/out/oracle}
mkdir -p "$OUT_DIR"
JOBS=${LATTE_JOBS:-$(nproc)}

for dep in eigen3 nlohmann_json; do
  if [ ! -d ".deps/$dep" ] && [ ! -d /usr/include/eigen3 ]; then
    echo "oracle-check: .deps/$dep is missing: run scripts/prepare-gpu-deps.sh where the packages are installed" >&2
    exit 2
  fi
done
python3 -c "import torch, transformers, numpy" 2>/dev/null || {
  echo "oracle-check: python3 needs torch, transformers and numpy" >&2
  exit 2
}

LAUNCHER=()
command -v ccache >/dev/null 2>&1 && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
GENERATOR=(-G Ninja)
command -v ninja >/dev/null 2>&1 || GENERATOR=(-G "Unix Makefiles")
start=$SECONDS
echo "== build latte (CPU only, log: $OUT_DIR/build.log)"
if ! { cmake -S . -B build-oracle "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DLATTE_CUDA=OFF \
         -DLATTE_BUILD_TESTS=OFF -DLATTE_BUILD_EXAMPLES=OFF "${LAUNCHER[@]}" \
         -DCMAKE_PREFIX_PATH="$ROOT/.deps/eigen3;$ROOT/.deps/nlohmann_json" \
         -DEigen3_DIR="$ROOT/.deps/eigen3/share/eigen3/cmake" &&
       cmake --build build-oracle --parallel "$JOBS" --target latte-cli; } >"$OUT_DIR/build.log" 2>&1; then
  tail -n 30 "$OUT_DIR/build.log"
  echo "oracle-check: build failed" >&2
  exit 1
fi
LATTE=$ROOT/build-oracle/tools/latte/latte
echo "   built in $((SECONDS - start)) s"

echo "== the oracle's GGUF decoders and mapping vs latte dequant (log: $OUT_DIR/validate.log)"
if ! python3 tools/oracle/validate_dequant.py --latte "$LATTE" --fixture tests/data/oracle/deepseek-v2-lite \
       --fixture tests/data/oracle/glm-5-sparse --work "$OUT_DIR/validate" >"$OUT_DIR/validate.log" 2>&1; then
  tail -n 20 "$OUT_DIR/validate.log"
  echo "oracle-check: the oracle's own decoders disagree with latte: the check below would mean nothing" >&2
  exit 1
fi
tail -n 1 "$OUT_DIR/validate.log"
rm -rf "$OUT_DIR/validate"

echo "== latte vs transformers on the dequantized weights"
python3 tools/oracle/check_quantized.py --latte "$LATTE" --out "$OUT_DIR" \
  --types "${LATTE_ORACLE_TYPES:-f32,bf16,q8_0,q4_k_m}" ${LATTE_ORACLE_ONLY:+--only "$LATTE_ORACLE_ONLY"} \
  2>&1 | tee "$OUT_DIR/check.log"
rc=${PIPESTATUS[0]}
echo "oracle-check: $([ "$rc" = 0 ] && echo pass || echo FAIL) in $((SECONDS - start)) s (table: $OUT_DIR/oracle.md)"
exit "$rc"
