#!/usr/bin/env python3
"""Checks the oracle's own GGUF reader, dequantizers and GGUF -> Hugging Face mapping against latte,
with nothing but the Python standard library (numpy is used too when it is installed):

  1. `latte convert` a fixture checkpoint with every --type;
  2. `latte dequant` each file, and decode every tensor with gguf_dequant.py (pure Python, and numpy
     when present): the values must be bit-identical to latte's, for every ggml type the mixes write;
  3. map the f32 and bf16 conversions back to Hugging Face names with gguf_to_hf.py: the tensor set
     and every value must equal the checkpoint's own model.safetensors (its weights are bf16).

    python3 validate_dequant.py --latte build/tools/latte/latte --fixture tests/data/oracle/deepseek-v2-lite \
        --work /tmp/dq [--types f32,bf16,...]

Exits 1 with a message naming the fixture, type and tensor at the first difference.
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_dequant as gd  # noqa: E402
import gguf_to_hf as g2h  # noqa: E402

ALL_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"]
# ggml types the --type mixes produce for the fixtures' shapes; each must be seen and checked.
EXPECTED_GGML = {"F32", "F16", "BF16", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1"}


def fail(message):
    print(f"validate_dequant: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and not (x != x and y != y):
            return i, x, y
    return None


def compare_bytes(what, mine, theirs):
    mb, tb = g2h.to_bytes(mine), g2h.to_bytes(theirs)
    if mb == tb:
        return
    if len(mb) != len(tb):
        fail(f"{what}: {len(mb) // 4} values here, {len(tb) // 4} expected")
    d = first_difference(list(mine), list(theirs))
    fail(f"{what}: value {d[0] if d else '?'} is {d[1] if d else '?'} here but {d[2] if d else '?'} expected")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latte", required=True)
    ap.add_argument("--fixture", required=True, action="append")
    ap.add_argument("--work", required=True)
    ap.add_argument("--types", default=",".join(ALL_TYPES))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    modes = [False] + ([True] if gd._np is not None else [])
    seen = set()
    start = time.time()
    for fixture in args.fixture:
        flavour = os.path.basename(os.path.normpath(fixture))
        checkpoint = g2h.read_safetensors(os.path.join(fixture, "model.safetensors"), use_numpy=False)
        for mix in args.types.split(","):
            path = os.path.join(args.work, f"{flavour}-{mix}.gguf")
            dump = path[:-5] + ".latte.safetensors"
            run([args.latte, "convert", fixture, "-o", path, "--type", mix, "-t", "2", "--no-progress"])
            run([args.latte, "dequant", path, "-o", dump])
            reference = g2h.read_safetensors(dump, use_numpy=False)
            for use_numpy in modes:
                f = gd.GgufFile(path, use_numpy=use_numpy)
                names = [t.name for t in f.tensors]
                if sorted(names) != sorted(reference):
                    fail(f"{path}: tensor list differs from latte dequant's")
                for t in f.tensors:
                    shape, expected = reference[t.name]
                    if tuple(shape) != t.shape:
                        fail(f"{path}: tensor '{t.name}' has shape {list(t.shape)} here, {list(shape)} in latte")
                    compare_bytes(f"{path}: tensor '{t.name}' ({t.type_name}, numpy={use_numpy})",
                                  f.dequantize(t), expected)
                    seen.add(t.type_name)
                if mix in ("f32", "bf16"):
                    # the weights are bf16 values: both files hold them exactly, so the mapping back
                    # must give the checkpoint itself
                    state = g2h.hf_state_dict(f)
                    if sorted(state) != sorted(checkpoint):
                        missing = sorted(set(checkpoint) - set(state))[:4]
                        extra = sorted(set(state) - set(checkpoint))[:4]
                        fail(f"{path}: mapped names differ from the checkpoint's: missing {missing}, extra {extra}")
                    for name, (shape, values) in state.items():
                        if tuple(shape) != tuple(checkpoint[name][0]):
                            fail(f"{path}: '{name}' maps to shape {list(shape)}, checkpoint {list(checkpoint[name][0])}")
                        compare_bytes(f"{path}: '{name}' mapped back (numpy={use_numpy})", values, checkpoint[name][1])
            print(f"{flavour} {mix}: {len(reference)} tensors bit-identical to latte dequant"
                  + (", mapped back to the checkpoint exactly" if mix in ("f32", "bf16") else ""), flush=True)
    if args.types == ",".join(ALL_TYPES) and not EXPECTED_GGML <= seen:
        fail(f"ggml types never exercised: {sorted(EXPECTED_GGML - seen)}")
    print(f"validate_dequant: ok: ggml types {sorted(seen)} in {time.time() - start:.1f} s "
          f"({'pure Python and numpy' if len(modes) == 2 else 'pure Python'})")


if __name__ == "__main__":
    main()
