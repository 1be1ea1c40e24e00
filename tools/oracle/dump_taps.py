#!/usr/bin/env python3
"""Dumps the activation taps of a Hugging Face transformers checkpoint in latte's tap-dump layout, so
that `latte diagnose --model M.gguf --against DIR` compares latte with transformers tap by tap.

    python3 dump_taps.py --checkpoint tests/data/oracle/deepseek-v3 --prompt "Hello there" --out DIR
    python3 dump_taps.py --checkpoint CKPT --tokens "0 17 4 99" --out DIR [--dtype bfloat16] [--device cuda]

Supported: DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, GlmMoeDsaForCausalLM
(every model whose decoder layers have input_layernorm, self_attn.{q_proj | q_a_proj, q_a_layernorm,
q_b_proj}, kv_a_proj_with_mqa, kv_a_layernorm, o_proj, post_attention_layernorm and mlp).

Layout (the same as latte's --dump): DIR/<tap>.npy (NumPy format, float32, C order) and DIR/index.json
{"format": "latte-taps-1", "precision": "float32" | "bfloat16", "tokens": [...],
 "taps": [{"name", "layer", "shape", "file"}, ...]}. Tap names and shapes are those of
include/latte/diagnostics.hpp (T = prompt tokens, one batch row):
    token_embd, blk.N.{attn_norm, q, kv_latent, q_pe, k_pe, attn_heads, attn_out, ffn_norm,
    router_logits, expert_ids, expert_weights, ffn_out, residual}, output_norm, logits.
How each is taken from the transformers model (forward hooks; nothing in the model is changed):
    token_embd      embed_tokens output
    attn_norm       input_layernorm output
    q               q_b_proj (or q_proj) output, viewed [T, N, P+R]: before RoPE
    kv_latent       kv_a_layernorm output
    q_pe, k_pe      the rope parts (q[..., P:], kv_a_proj_with_mqa output[..., L:]) rotated here with
                    the model's own cos/sin (rotary_emb output), on interleaved pairs (2i, 2i+1) as
                    the GGUF layout and latte use; any amplitude transformers folds into cos/sin
                    (YaRN's attention factor) is divided out, because latte puts it into the softmax
                    scale instead. Left out when the rotary output has an unknown form.
    attn_heads      o_proj input, viewed [T, N, V]
    attn_out        o_proj output
    ffn_norm        post_attention_layernorm output
    router_logits   ffn_norm @ mlp.gate.weight^T in float32 (MoE layers)
    expert_ids,     what the MoE's route_tokens_to_experts returned when the class has that method;
    expert_weights  otherwise computed here from the config (softmax or sigmoid scores, the selection
                    bias e_score_correction_bias, group-limited top-k, renormalisation, scale);
                    per row sorted by expert id, ids as floats
    ffn_out         mlp output
    residual        decoder layer output
    output_norm     final norm output (every row, as latte diagnose computes logits for every row)
    logits          lm_head output
The dump's precision decides the bound latte diagnose uses (float32: 1e-4, else 2e-2); run with
--dtype float32 (the default) to compare against latte's fp32 CPU pass.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="a transformers checkpoint directory")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--prompt", help="text, encoded by the checkpoint's tokenizer (with its special tokens)")
    g.add_argument("--tokens", help="token ids separated by spaces or commas")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1)")
    return p.parse_args()


def encode(args):
    if args.tokens is not None:
        return [int(t) for t in args.tokens.replace(",", " ").split()]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.checkpoint)
    return list(tok(args.prompt)["input_ids"])


def first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        return x[0]
    raise TypeError(f"unexpected module output of type {type(x)}")


def to_rows(t, *tail):
    """A [1, T, ...] activation as a float32 numpy array [T, *tail]."""
    a = t.detach().to(torch.float32).cpu()
    if a.dim() >= 2 and a.shape[0] == 1:
        a = a[0]
    return a.reshape(a.shape[0], *tail).numpy() if tail else a.numpy()


def rotate_interleaved(x, cos, sin):
    """x [T, ..., R]; cos/sin [T, R/2]: pairs (2i, 2i+1) rotated by the angle of pair i."""
    shape = x.shape
    x = x.reshape(shape[0], -1, shape[-1])
    c = cos[:, None, :]
    s = sin[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = even * s + odd * c
    return out.reshape(shape)


def rotary_angles(rot_out, T, R):
    """(cos, sin) [T, R/2] of unit amplitude from a rotary embedding's output, or None."""
    half = R // 2
    if isinstance(rot_out, (tuple, list)) and len(rot_out) == 2:
        cos = rot_out[0].detach().to(torch.float64).cpu().reshape(-1, rot_out[0].shape[-1])[-T:]
        sin = rot_out[1].detach().to(torch.float64).cpu().reshape(-1, rot_out[1].shape[-1])[-T:]
        if cos.shape[-1] == R:  # cat(freqs, freqs): the first half holds one value per pair
            cos, sin = cos[:, :half], sin[:, :half]
        elif cos.shape[-1] != half:
            return None
    elif isinstance(rot_out, torch.Tensor) and rot_out.is_complex():
        f = rot_out.detach().to(torch.complex128).cpu().reshape(-1, rot_out.shape[-1])[-T:]
        if f.shape[-1] != half:
            return None
        cos, sin = f.real, f.imag
    else:
        return None
    amp = torch.sqrt(cos * cos + sin * sin)
    return (cos / amp).numpy().astype(np.float32), (sin / amp).numpy().astype(np.float32)


def route(cfg, logits):
    """Expert choice from router logits [T, E] (float32), as DeepSeek V2/V3 and GLM define it."""
    scoring = getattr(cfg, "scoring_func", None) or ("sigmoid" if "V3" in type(cfg).__name__ or "Glm" in type(cfg).__name__ else "softmax")
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)
    return scores


def routed_choice(moe, cfg, logits):
    E = logits.shape[-1]
    K = cfg.num_experts_per_tok
    scores = route(cfg, logits)
    choice = scores.clone()
    bias = getattr(getattr(moe, "gate", None), "e_score_correction_bias", None)
    if bias is not None:
        choice = choice + bias.detach().to(torch.float32).cpu()
    n_group = getattr(cfg, "n_group", 1) or 1
    topk_group = getattr(cfg, "topk_group", 1) or 1
    if n_group > 1:
        g = choice.view(choice.shape[0], n_group, E // n_group)
        group_scores = g.topk(2, dim=-1).values.sum(-1)
        keep = group_scores.topk(topk_group, dim=-1).indices
        mask = torch.zeros_like(group_scores).scatter_(1, keep, 1.0)
        mask = mask.unsqueeze(-1).expand_as(g).reshape(choice.shape[0], E)
        choice = choice.masked_fill(mask == 0, float("-inf"))
    ids = choice.topk(K, dim=-1).indices
    weights = scores.gather(1, ids)
    if getattr(cfg, "norm_topk_prob", False):
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(2.0 ** -14)
    weights = weights * float(getattr(cfg, "routed_scaling_factor", 1.0) or 1.0)
    return ids, weights


def main():
    args = parse_args()
    from transformers import AutoModelForCausalLM
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=dtype, attn_implementation="eager")
    model.to(args.device).eval()
    cfg = model.config
    inner = model.model
    tokens = encode(args)
    T = len(tokens)
    N = cfg.num_attention_heads
    L = cfg.kv_lora_rank
    R = cfg.qk_rope_head_dim
    P = cfg.qk_nope_head_dim
    V = cfg.v_head_dim

    taps = []  # (name, layer, array) in forward order
    captured = {}

    def keep(name, layer, array):
        taps.append((name, layer, np.ascontiguousarray(array, dtype=np.float32)))

    hooks = []
    hooks.append(inner.embed_tokens.register_forward_hook(lambda m, i, o: captured.__setitem__("token_embd", to_rows(o))))
    if hasattr(inner, "rotary_emb"):
        hooks.append(inner.rotary_emb.register_forward_hook(lambda m, i, o: captured.__setitem__("rotary", o)))

    for il, layer in enumerate(inner.layers):
        att = layer.self_attn

        def hook(key):
            return lambda m, i, o: captured.__setitem__(key, first_tensor(o))

        hooks.append(layer.input_layernorm.register_forward_hook(hook(f"{il}.attn_norm")))
        q_mod = att.q_b_proj if getattr(att, "q_b_proj", None) is not None else att.q_proj
        hooks.append(q_mod.register_forward_hook(hook(f"{il}.q")))
        hooks.append(att.kv_a_proj_with_mqa.register_forward_hook(hook(f"{il}.kv_a")))
        hooks.append(att.kv_a_layernorm.register_forward_hook(hook(f"{il}.kv_latent")))
        hooks.append(att.o_proj.register_forward_pre_hook(lambda m, i, key=f"{il}.attn_heads": captured.__setitem__(key, i[0])))
        hooks.append(att.o_proj.register_forward_hook(hook(f"{il}.attn_out")))
        hooks.append(layer.post_attention_layernorm.register_forward_hook(hook(f"{il}.ffn_norm")))
        hooks.append(layer.mlp.register_forward_hook(hook(f"{il}.ffn_out")))
        hooks.append(layer.register_forward_hook(hook(f"{il}.residual")))
        moe = layer.mlp
        if hasattr(moe, "route_tokens_to_experts"):
            original = moe.route_tokens_to_experts

            def wrapped(*a, _orig=original, _key=f"{il}.route", **kw):
                out = _orig(*a, **kw)
                captured[_key] = out
                return out

            moe.route_tokens_to_experts = wrapped
    hooks.append(inner.norm.register_forward_hook(lambda m, i, o: captured.__setitem__("output_norm", first_tensor(o))))

    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens], device=args.device), use_cache=False)
    for h in hooks:
        h.remove()

    angles = rotary_angles(captured.get("rotary"), T, R) if "rotary" in captured else None
    if angles is None:
        print("note: the rotary embedding's output has an unknown form; q_pe and k_pe are left out", file=sys.stderr)

    keep("token_embd", -1, captured["token_embd"])
    for il, layer in enumerate(inner.layers):
        b = f"blk.{il}."
        keep(b + "attn_norm", il, to_rows(captured[f"{il}.attn_norm"]))
        q = to_rows(captured[f"{il}.q"], N, P + R)
        keep(b + "q", il, q)
        kv_a = to_rows(captured[f"{il}.kv_a"])
        keep(b + "kv_latent", il, to_rows(captured[f"{il}.kv_latent"]))
        if angles is not None:
            cos, sin = angles
            keep(b + "q_pe", il, rotate_interleaved(q[..., P:], cos, sin))
            keep(b + "k_pe", il, rotate_interleaved(kv_a[:, L:], cos, sin))
        keep(b + "attn_heads", il, to_rows(captured[f"{il}.attn_heads"], N, V))
        keep(b + "attn_out", il, to_rows(captured[f"{il}.attn_out"]))
        ffn_norm = to_rows(captured[f"{il}.ffn_norm"])
        keep(b + "ffn_norm", il, ffn_norm)
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and getattr(gate, "weight", None) is not None:
            w = gate.weight.detach().to(torch.float32).cpu()
            logits = torch.from_numpy(ffn_norm) @ w.T
            keep(b + "router_logits", il, logits.numpy())
            routed = captured.get(f"{il}.route")
            if isinstance(routed, (tuple, list)) and len(routed) == 2:
                ids, weights = (x.detach().cpu() for x in routed)
                ids, weights = ids.reshape(T, -1).long(), weights.reshape(T, -1).to(torch.float32)
            else:
                ids, weights = routed_choice(layer.mlp, cfg, logits)
            order = ids.argsort(dim=-1)
            keep(b + "expert_ids", il, ids.gather(1, order).to(torch.float32).numpy())
            keep(b + "expert_weights", il, weights.gather(1, order).numpy())
        keep(b + "ffn_out", il, to_rows(captured[f"{il}.ffn_out"]))
        keep(b + "residual", il, to_rows(captured[f"{il}.residual"]))
    keep("output_norm", -1, to_rows(captured["output_norm"]))
    keep("logits", -1, to_rows(out.logits))

    os.makedirs(args.out, exist_ok=True)
    index = {"format": "latte-taps-1", "precision": args.dtype, "tokens": tokens,
             "source": f"transformers {__import__('transformers').__version__}, {type(model).__name__}", "taps": []}
    for name, layer, array in taps:
        file = name + ".npy"
        np.save(os.path.join(args.out, file), array)
        index["taps"].append({"name": name, "layer": layer, "shape": list(array.shape), "file": file})
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print(f"wrote {len(taps)} taps of {T} tokens to {args.out}")


if __name__ == "__main__":
    main()
