#!/usr/bin/env bash
# Where the time of a whole-model step goes on a GPU: runs `latte bench` under Nsight Compute
# (ncu, hardware timer only, clocks left alone), once for a prefill of P tokens and once for N decode
# steps, and prints per kernel: launches, total and mean time, and the share of the step.
# CUDA graphs are off while profiling so every kernel is seen as itself.
#
#   scripts/profile-gpu.sh MODEL.gguf [P] [N] [ATTENTION]     (defaults: 512 4 mla)
#
# LATTE_PROFILE_PHASES ("prefill decode"), LATTE_PROFILE_DETAIL=N (decode: the last N launches one by one),
# LATTE_PROFILE_PREFILL_GROUP=N (prefill: the last N launches grouped by kernel instance and grid),
# LATTE_PROFILE_DEPTH=D (decode after a D-token context: `latte bench -d D`; DETAIL shows the decode's launches),
# LATTE_PROFILE_BATCH=B (decode: B sequences of P-token prompts, N batched steps: `latte bench --batch B -p P`).
# Needs a GPU build in build-gpu/ (scripts/gpu-check.sh makes it) and ncu on the PATH or in
# /opt/nvidia/nsight-compute/. Output: a table per phase on stdout, raw CSV in $OUT or out/profile/; the exit
# status is 1 when ncu or the bench failed in a phase.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
MODEL=${1:?usage: scripts/profile-gpu.sh MODEL.gguf [P] [N] [ATTENTION]}
P=${2:-512}
N=${3:-4}
ATTN=${4:-mla}
OUT_DIR=${OUT:-out/profile}
mkdir -p "$OUT_DIR"
LATTE=build-gpu/tools/latte/latte
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
if [ -z "$NCU" ]; then
  echo "profile-gpu: ncu not found" >&2
  exit 2
fi
export LATTE_NO_SELFTEST=1 LATTE_CUDA_GRAPHS=0

profile() {  # profile TAG BENCH-ARGS...
  local tag=$1
  shift
  "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active --csv --page raw \
    "$LATTE" bench --model "$MODEL" --device cuda:0 --attention "$ATTN" -r 1 "$@" \
    >"$OUT_DIR/$tag.csv" 2>"$OUT_DIR/$tag.log"
  local rc=$?
  if [ $rc != 0 ]; then
    echo "profile-gpu: $tag: ncu or latte bench failed (rc $rc), see $OUT_DIR/$tag.log" >&2
    tail -n 5 "$OUT_DIR/$tag.log" >&2
    failed=1
  fi
  python3 - "$OUT_DIR/$tag.csv" "$tag" <<'EOF'
import csv, sys, collections
path, tag = sys.argv[1], sys.argv[2]
rows = []
with open(path) as f:
    lines = [l for l in f if l.startswith('"')]
reader = csv.DictReader(lines)
for r in reader:
    v = r.get("gpu__time_duration.sum", "")
    try:
        t = float(v.replace(",", ""))
    except ValueError:
        continue  # the units row
    name = r.get("Kernel Name", "?")
    short = name.split("(")[0].split("<")[0].replace("void ", "").strip()
    def num(key):
        try:
            return float(r.get(key, "").replace(",", ""))
        except ValueError:
            return 0.0
    rows.append((short, name, t, num("dram__bytes_read.sum") + num("dram__bytes_write.sum"),
                 r.get("launch__grid_size", ""), r.get("launch__registers_per_thread", ""),
                 num("sm__warps_active.avg.pct_of_peak_sustained_active")))
total = sum(r[2] for r in rows)
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for short, _, t, b, *_ in rows:
    agg[short][0] += 1
    agg[short][1] += t
    agg[short][2] += b
print(f"== {tag}: {len(rows)} kernels, {total/1e3:.1f} us of kernel time (ns units assumed)")
print(f"{'kernel':48s} {'launches':>8s} {'total us':>10s} {'mean us':>9s} {'share':>6s} {'DRAM GB/s':>9s}")
for k, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:30]:
    print(f"{k[:48]:48s} {n:8d} {t/1e3:10.1f} {t/n/1e3:9.2f} {100*t/total:5.1f}% {b/t:9.0f}")
detail = int(__import__("os").environ.get("LATTE_PROFILE_DETAIL", "0"))
if detail:
    print(f"-- the last {detail} launches: kernel, grid, registers, occupancy %, us, DRAM MB, GB/s")
    for short, name, t, b, grid, regs, occ in rows[-detail:]:
        tmpl = name.split("(")[0].replace("void ", "")
        tmpl = tmpl.replace("latte::cuda::", "").replace("(anonymous namespace)::", "")
        print(f"  {tmpl[:70]:70s} {grid:>7s} {regs:>4s} {occ:5.1f} {t/1e3:8.2f} {b/1e6:8.2f} {b/t:6.0f}")
group = int(__import__("os").environ.get("LATTE_PROFILE_GROUP", "0"))
if group:
    print(f"-- the last {group} launches by kernel instance and grid: launches, total us, DRAM GB/s")
    g = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for short, name, t, b, grid, regs, occ in rows[-group:]:
        tmpl = name.split("(")[0].replace("void ", "").replace("latte::cuda::", "").replace("(anonymous namespace)::", "")
        key = (tmpl[:70], grid)
        g[key][0] += 1; g[key][1] += t; g[key][2] += b
    for (tmpl, grid), (n, t, b) in sorted(g.items(), key=lambda kv: -kv[1][1])[:40]:
        print(f"  {tmpl:70s} {grid:>7s} {n:5d} {t/1e3:9.1f} {b/t:6.0f}")
EOF
}

failed=0
PHASES=" ${LATTE_PROFILE_PHASES:-prefill decode} "
[[ "$PHASES" == *" prefill "* ]] &&
  LATTE_PROFILE_DETAIL=0 LATTE_PROFILE_GROUP=${LATTE_PROFILE_PREFILL_GROUP:-0} profile prefill -p "$P" -n 0
DEPTH=()
[ -n "${LATTE_PROFILE_DEPTH:-}" ] && DEPTH=(-d "$LATTE_PROFILE_DEPTH")
DECODE_PROMPT=(-p 0)
[ -n "${LATTE_PROFILE_BATCH:-}" ] && DECODE_PROMPT=(-p "$P" --batch "$LATTE_PROFILE_BATCH")
[[ "$PHASES" == *" decode "* ]] && LATTE_PROFILE_GROUP=0 profile decode "${DECODE_PROMPT[@]}" -n "$N" "${DEPTH[@]}"
exit $failed
