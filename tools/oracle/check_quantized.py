#!/usr/bin/env python3
"""The oracle check of quantized files: latte against transformers run on the *same* dequantized
weights, so that a loader or forward-pass error is never hidden in (or confused with) quantization
error.

    python3 check_quantized.py --latte build/tools/latte/latte [--fixtures tests/data/oracle] [--out DIR]
                               [--types f32,bf16,q8_0,q4_k_m] [--only deepseek-v3,...]

For each fixture folder (a Hugging Face checkpoint made by make_fixtures.py, with reference.safetensors)
and each type:
  1. `latte convert` the folder to GGUF with --type;
  2. read the GGUF with gguf_dequant.py (independent of latte; validate_dequant.py checks it bit for
     bit against latte in CI), map every tensor back to its Hugging Face name with gguf_to_hf.py,
     write those float32 tensors as a checkpoint next to the fixture's config.json and load it into
     the transformers class of config.json (float32, eager attention; the rotary inv_freq stays the
     float32 buffer transformers computes);
  3. transformers: logits at every prompt position and a 16-token greedy continuation (full
     recomputation each step, as make_fixtures.py does);
  4. latte, with --attention mla and standard: `latte logits --all` and `latte generate --greedy`;
  5. pass when, at every position, max |latte - transformers| <= 1e-3 x std(transformers' logits, all
     positions) and the greedy continuations are identical.
Also reported, not judged: how far quantization moved transformers' own logits (vs the f32 file), and
for f32 how far the reloaded model is from the fixture's recorded reference.

Prints a table (flavour x type x backend -> max error in std units, greedy match) and writes it as
oracle.md and oracle.json under --out. Exit status 1 when any row fails.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_dequant as gd  # noqa: E402
import gguf_to_hf as g2h  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

BOUND = 1e-3  # max |delta logit| / std(logits), at every position
GREEDY = 16
BACKENDS = ("mla", "standard")


def sh(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{what}: {' '.join(cmd)} exited with {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.stdout


# ---- transformers side ------------------------------------------------------------------------

def model_class(config_path):
    import transformers
    with open(config_path) as f:
        arch = json.load(f)["architectures"][0]
    return getattr(transformers, arch)


def load_direct(cls, folder, state):
    """Fallback loader: builds the model from config.json and copies `state` into its parameters,
    fusing per-expert matrices where the model keeps experts fused (gate_up_proj / down_proj)."""
    config = cls.config_class.from_pretrained(folder)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    model = cls(config).float().eval()
    target = model.state_dict()
    used = set()
    with torch.no_grad():
        for key, param in target.items():
            if key in state:
                src = state[key]
                used.add(key)
            elif key.endswith(("experts.gate_up_proj", "experts.down_proj")):
                prefix = key.rsplit(".", 1)[0]  # ...mlp.experts
                n_expert = param.shape[0]
                mats = []
                for e in range(n_expert):
                    if key.endswith("gate_up_proj"):
                        g, u = f"{prefix}.{e}.gate_proj.weight", f"{prefix}.{e}.up_proj.weight"
                        mats.append(torch.cat([state[g], state[u]], dim=0))
                        used.update((g, u))
                    else:
                        d = f"{prefix}.{e}.down_proj.weight"
                        mats.append(state[d])
                        used.add(d)
                src = torch.stack(mats)
                if tuple(src.shape) != tuple(param.shape) and tuple(src.transpose(1, 2).shape) == tuple(param.shape):
                    src = src.transpose(1, 2)
            elif "rotary_emb" in key:
                continue  # computed buffers, not weights
            else:
                raise RuntimeError(f"transformers parameter '{key}' has no tensor in the GGUF file")
            if tuple(src.shape) != tuple(param.shape):
                raise RuntimeError(f"'{key}': GGUF gives {list(src.shape)}, transformers wants {list(param.shape)}")
            param.copy_(src)
    unused = sorted(set(state) - used)
    if unused:
        raise RuntimeError(f"GGUF tensors with no transformers parameter: {unused[:6]}")
    return model


def load_model(fixture, state_np, work):
    """The transformers model of `fixture`'s config.json holding the weights `state_np`
    ({hf_name: (shape, float32 values)}). Returns (model, how it was loaded)."""
    cls = model_class(os.path.join(fixture, "config.json"))
    folder = os.path.join(work, "hf")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    shutil.copy(os.path.join(fixture, "config.json"), folder)
    g2h.write_safetensors(os.path.join(folder, "model.safetensors"), state_np)
    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float32).reshape(s).copy()) for k, (s, v) in state_np.items()}
    try:
        # transformers 5 takes dtype= and experts_implementation= (eager: one expert at a time, in
        # float32, as the fixtures were made); older versions torch_dtype= and no experts option.
        variants = [dict(dtype=torch.float32, experts_implementation="eager"), dict(dtype=torch.float32),
                    dict(torch_dtype=torch.float32)]
        for i, kwargs in enumerate(variants):
            try:
                model, info = cls.from_pretrained(folder, attn_implementation="eager", output_loading_info=True,
                                                  **kwargs)
                break
            except (TypeError, ValueError):
                if i + 1 == len(variants):
                    raise
        problems = {k: sorted(str(x) for x in info.get(k) or []) for k in ("unexpected_keys", "mismatched_keys",
                                                                          "error_msgs")}
        problems["missing_keys"] = sorted(k for k in info.get("missing_keys") or [] if "rotary_emb" not in k)
        problems = {k: v for k, v in problems.items() if v}
        if problems:
            raise RuntimeError(f"from_pretrained reported {json.dumps(problems, default=str)[:600]}")
        model = model.float().eval()
        how = "from_pretrained"
    except Exception as e:  # noqa: BLE001 - fall back, then say which path was used
        print(f"   from_pretrained failed ({type(e).__name__}: {str(e)[:300]}); loading parameters directly",
              flush=True)
        model = load_direct(cls, folder, state)
        how = "direct"
    rotary = keep_float32_rotary(cls, model)
    # Every parameter must hold the GGUF's values (catches silent re-initialisation on load).
    sd = model.state_dict()
    for k, v in state.items():
        if k in sd and not torch.equal(sd[k].float(), v):
            raise RuntimeError(f"'{k}' does not hold the GGUF's values after loading ({how})")
    return model, f"{how}; {rotary}"


@torch.no_grad()
def keep_float32_rotary(cls, model):
    """Makes every rotary inv_freq buffer hold the float32 values transformers computes for a model
    built in float32 (a load in another dtype would have rounded them). Says what it found."""
    fresh = dict(cls(model.config).named_buffers())
    n, changed = 0, 0
    for name, buf in model.named_buffers():
        if name.endswith("inv_freq") and name in fresh:
            n += 1
            ref = fresh[name].to(torch.float32)
            if buf.dtype != torch.float32 or not torch.equal(buf, ref):
                changed += 1
                buf.copy_(ref)
    if n == 0:
        raise RuntimeError("the transformers model has no rotary inv_freq buffer to check")
    return f"{n} inv_freq buffers float32" + (f" ({changed} recomputed)" if changed else " as loaded")


@torch.no_grad()
def torch_run(model, prompt):
    logits = model(input_ids=torch.tensor([prompt])).logits[0].float().numpy()
    ids, gaps = list(prompt), []  # gaps: top-1 minus top-2 logit at each greedy step
    for _ in range(GREEDY):
        nxt = model(input_ids=torch.tensor([ids])).logits[0, -1]
        top = torch.topk(nxt, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(nxt)))
    return logits, ids[len(prompt):], gaps


# ---- latte side -----------------------------------------------------------------------------------

def latte_run(latte, gguf, prompt, backend, threads):
    tokens = " ".join(str(t) for t in prompt)
    out = sh([latte, "logits", "--model", gguf, "--tokens", tokens, "--all", "--attention", backend,
              "--threads", str(threads)], f"latte logits ({backend})")
    logits = np.array(json.loads(out), dtype=np.float32)
    out = sh([latte, "generate", "--model", gguf, "--tokens", tokens, "-n", str(GREEDY), "--greedy",
              "--attention", backend, "--threads", str(threads)], f"latte generate ({backend})")
    return logits, [int(x) for x in out.split()]


def max_error_in_std(a, b, std):
    """Per-position max |a - b| / std, and its maximum."""
    per_pos = np.abs(a.astype(np.float64) - b.astype(np.float64)).max(axis=1) / std
    return float(per_pos.max()), per_pos


# ---- driver ---------------------------------------------------------------------------------------

def check_fixture(args, fixture, rows):
    flavour = os.path.basename(os.path.normpath(fixture))
    ref = g2h.read_safetensors(os.path.join(fixture, "reference.safetensors"))
    prompt = [int(x) for x in ref["prompt"][1]]
    ref_logits = np.asarray(ref["logits"][1], dtype=np.float32).reshape(ref["logits"][0])
    work = os.path.join(args.out, "work", flavour)
    os.makedirs(work, exist_ok=True)
    f32_logits = None
    for mix in args.types.split(","):
        row_base = {"flavour": flavour, "type": mix}
        t0 = time.time()
        try:
            gguf = os.path.join(work, f"{flavour}-{mix}.gguf")
            sh([args.latte, "convert", fixture, "-o", gguf, "--type", mix, "-t", str(args.threads), "--no-progress"],
               "latte convert")
            f = gd.GgufFile(gguf, use_numpy=True)
            kinds = sorted({t.type_name for t in f.tensors})
            state = g2h.hf_state_dict(f)
            model, how = load_model(fixture, state, work)
            print(f"{flavour:17s} {mix:7s} transformers model loaded ({how}); ggml types {' '.join(kinds)}", flush=True)
            t_logits, t_greedy, t_gaps = torch_run(model, prompt)
            std = float(t_logits.astype(np.float64).std())
            info = {"ggml_types": kinds, "loaded_by": how, "logit_std": std}
            if mix == "f32":
                f32_logits = t_logits
                info["vs_fixture_reference"] = max_error_in_std(t_logits, ref_logits, std)[0]
                if info["vs_fixture_reference"] > BOUND:
                    print(f"{flavour:17s} warning: the reloaded f32 model is {info['vs_fixture_reference']:.2e} std "
                          "from the fixture's recorded logits (mapping, load or transformers version?)", flush=True)
            if f32_logits is not None and mix != "f32":
                info["quantization_shift"] = max_error_in_std(t_logits, f32_logits, std)[0]
            for backend in BACKENDS:
                l_logits, l_greedy = latte_run(args.latte, gguf, prompt, backend, args.threads)
                if l_logits.shape != t_logits.shape:
                    raise RuntimeError(f"latte gave logits {list(l_logits.shape)}, transformers {list(t_logits.shape)}")
                err, per_pos = max_error_in_std(l_logits, t_logits, std)
                ok = err <= BOUND and l_greedy == t_greedy
                if l_greedy != t_greedy:  # was it a near tie? transformers' top-2 gap where they part
                    step = next((i for i, (a, b) in enumerate(zip(l_greedy, t_greedy)) if a != b),
                                min(len(l_greedy), len(t_greedy) - 1))
                    info_row = {"first_divergence": step, "top2_gap_std_there": t_gaps[step] / std}
                else:
                    info_row = {"min_top2_gap_std": min(t_gaps) / std}
                rows.append(dict(row_base, backend=backend, max_error_std=err, worst_position=int(per_pos.argmax()),
                                 greedy_match=l_greedy == t_greedy, latte_greedy=l_greedy, torch_greedy=t_greedy,
                                 passed=ok, seconds=round(time.time() - t0, 1), **info, **info_row))
                print(f"{flavour:17s} {mix:7s} {backend:8s} max err {err:.2e} std  greedy "
                      f"{'equal' if l_greedy == t_greedy else 'DIFFERENT'}  {'ok' if ok else 'FAIL'}", flush=True)
        except Exception as e:  # noqa: BLE001 - one failure must not hide the other rows
            done = {r["backend"] for r in rows if r["flavour"] == flavour and r["type"] == mix}
            for backend in (b for b in BACKENDS if b not in done):
                rows.append(dict(row_base, backend=backend, passed=False, error=f"{type(e).__name__}: {e}",
                                 trace=traceback.format_exc()))
            print(f"{flavour:17s} {mix:7s} FAILED: {type(e).__name__}: {e}", flush=True)


def greedy_cell(r):
    if r["greedy_match"]:
        return f"equal (min top-2 gap {r['min_top2_gap_std']:.2g} std)"
    return f"**different** from step {r['first_divergence']} (gap there {r['top2_gap_std_there']:.2g} std)"


def table(rows):
    lines = ["| flavour | type | backend | max \\|Δlogit\\| / std | greedy (16) | result | ggml types | "
             "quantization shift / std | f32 vs fixture reference / std |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['flavour']} | {r['type']} | {r['backend']} | – | – | **FAIL**: {r['error'][:160]} | | | |")
            continue
        shift = f"{r['quantization_shift']:.3g}" if "quantization_shift" in r else ""
        vs_ref = f"{r['vs_fixture_reference']:.3g}" if "vs_fixture_reference" in r else ""
        lines.append(f"| {r['flavour']} | {r['type']} | {r['backend']} | {r['max_error_std']:.2e} "
                     f"(pos {r['worst_position']}) | {greedy_cell(r)} | "
                     f"{'pass' if r['passed'] else '**FAIL**'} | {' '.join(r['ggml_types'])} | {shift} | {vs_ref} |")
    return "\n".join(lines)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser()
    ap.add_argument("--latte", required=True)
    ap.add_argument("--fixtures", default=os.path.join(root, "tests", "data", "oracle"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(root, "out", "oracle"))
    ap.add_argument("--types", default="f32,bf16,q8_0,q4_k_m")
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1))
    args = ap.parse_args()
    if args.types.split(",")[0] != "f32":
        args.types = "f32," + ",".join(t for t in args.types.split(",") if t != "f32")  # the shift baseline
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    import transformers
    versions = f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}"
    print(f"oracle check: {versions}; bound {BOUND} x std(logits) at every position", flush=True)
    fixtures = sorted(d for d in os.listdir(args.fixtures)
                      if os.path.isfile(os.path.join(args.fixtures, d, "reference.safetensors")))
    if args.only:
        fixtures = [d for d in fixtures if d in args.only.split(",")]
    if not fixtures:
        print(f"oracle check: no fixtures under {args.fixtures}", file=sys.stderr)
        return 1
    rows = []
    start = time.time()
    for d in fixtures:
        check_fixture(args, os.path.join(args.fixtures, d), rows)
    md = table(rows)
    failed = [r for r in rows if not r["passed"]]
    summary = (f"{len(rows) - len(failed)} of {len(rows)} rows pass ({versions}; "
               f"{time.time() - start:.0f} s)")
    print("\n" + md + "\n\n" + summary)
    with open(os.path.join(args.out, "oracle.md"), "w") as f:
        f.write(f"# Oracle check: latte vs transformers on the dequantized weights\n\n{md}\n\n{summary}\n")
    with open(os.path.join(args.out, "oracle.json"), "w") as f:
        json.dump({"bound_std": BOUND, "versions": versions, "rows": rows}, f, indent=1)
    shutil.rmtree(os.path.join(args.out, "work"), ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
