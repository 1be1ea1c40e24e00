#!/usr/bin/env bash
# One GPU-machine run: trains the default model and makes the oracle fixtures. Expects the prepared
# Brown text in $1 (train.txt, chat_train.txt, heldout.txt) and writes everything under $OUT as a
# tar cut into 15 MB pieces (the transfer limit per file).
set -uo pipefail
data=$1
work=/tmp/latte_run1
rm -rf "$work" && mkdir -p "$work"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$work/gpu.txt"
python3 -c "import torch, transformers, tokenizers; print(torch.__version__, transformers.__version__, tokenizers.__version__)" | tee -a "$work/gpu.txt"
timeout 120 python3 tools/oracle/make_fixtures.py --text "$data/heldout.txt" --out "$work/fixtures" 2>&1 | tee "$work/fixtures.log"
timeout 400 python3 tools/train_tiny/train.py --data "$data" --out "$work/tiny" --seconds "${TRAIN_SECONDS:-330}" 2>&1 | tee "$work/train.log"
cd "$work" && tar cf - gpu.txt fixtures.log train.log fixtures tiny | split -b 15m - "$OUT/run1.tar.part-"
ls -la "$OUT"
