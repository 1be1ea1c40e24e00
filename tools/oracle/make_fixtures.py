#!/usr/bin/env python3
"""Makes small random-weight Hugging Face checkpoints of every architecture latte supports and records
what transformers computes for them: the independent oracle for latte's loader, converter and forward.

    python3 make_fixtures.py --text heldout.txt --out DIR

For each flavour it writes DIR/<flavour>/: config.json + model.safetensors (bf16 weights; every value
is exactly representable, and transformers computes in float32 on them), tokenizer.json,
tokenizer_config.json, and reference.safetensors with
    prompt   int32 [T]        the prompt token ids
    logits   float32 [T, V]   float32 logits at every prompt position
    hidden.N float32 [T, H]   the residual stream after block N (N = 0 .. n_layer-1), and
    greedy   int32 [16]       a 16-token greedy continuation (full recomputation each step).
Also DIR/<flavour>/source.txt: the transformers version and the source of the modeling module used.

Flavours: deepseek-v2-lite (no q_lora, softmax gating, YaRN), deepseek-v3 (q_lora, sigmoid gating with
a selection bias, group-limited routing), glm-4.7-flash (Glm4MoeLite), glm-5-dense (GlmMoeDsa with
top_k larger than the context: equal to dense attention) and glm-5-sparse (top_k smaller than the
prompt). All use the real per-head dims (L 512, R 64, P 128 or 192, V 128 or 256).
"""
import argparse
import inspect
import json
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_tiny"))
import tokenizer_spec as spec  # noqa: E402

PROMPT_LEN = 24
GREEDY = 16


def rope(kind="default", **extra):
    return dict({"rope_type": kind, "rope_theta": 10000.0}, **extra)


def make_config(cls, common, rope_params):
    try:
        return cls(**common, rope_parameters=rope_params)
    except TypeError:
        legacy = dict(common, rope_theta=rope_params["rope_theta"])
        if rope_params["rope_type"] != "default":
            legacy["rope_scaling"] = {k if k != "rope_type" else "type": v for k, v in rope_params.items() if k != "rope_theta"}
        return cls(**legacy)


def flavours(vocab, bos, eos):
    import transformers as tf
    base = dict(vocab_size=vocab, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=512, qk_rope_head_dim=64,
                max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=bos,
                eos_token_id=eos, initializer_range=0.1, attention_dropout=0.0)
    out = {}
    out["deepseek-v2-lite"] = lambda: (tf.DeepseekV2ForCausalLM, make_config(tf.DeepseekV2Config, dict(
        base, num_hidden_layers=2, q_lora_rank=None, qk_nope_head_dim=128, v_head_dim=128, n_routed_experts=8,
        n_shared_experts=2, num_experts_per_tok=2, n_group=1, topk_group=1, topk_method="greedy",
        routed_scaling_factor=1.0, norm_topk_prob=False, first_k_dense_replace=1, moe_layer_freq=1),
        rope("yarn", factor=4.0, original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0,
             mscale=0.707, mscale_all_dim=0.707)))
    out["deepseek-v3"] = lambda: (tf.DeepseekV3ForCausalLM, make_config(tf.DeepseekV3Config, dict(
        base, num_hidden_layers=2, q_lora_rank=96, qk_nope_head_dim=128, v_head_dim=128, n_routed_experts=16,
        n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        norm_topk_prob=True, first_k_dense_replace=1), rope()))
    out["glm-4.7-flash"] = lambda: (tf.Glm4MoeLiteForCausalLM, make_config(tf.Glm4MoeLiteConfig, dict(
        base, num_hidden_layers=2, q_lora_rank=96, qk_nope_head_dim=192, v_head_dim=256, n_routed_experts=16,
        n_shared_experts=1, num_experts_per_tok=4, n_group=1, topk_group=1, routed_scaling_factor=1.8,
        norm_topk_prob=True, first_k_dense_replace=1), rope()))
    for name, topk in (("glm-5-dense", 64), ("glm-5-sparse", 8)):
        out[name] = (lambda topk=topk: (tf.GlmMoeDsaForCausalLM, make_config(tf.GlmMoeDsaConfig, dict(
            base, num_hidden_layers=2, q_lora_rank=96, qk_nope_head_dim=192, v_head_dim=256, n_routed_experts=16,
            n_shared_experts=1, num_experts_per_tok=4, n_group=1, topk_group=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, mlp_layer_types=["dense", "sparse"], index_topk=topk,
            index_head_dim=128, index_n_heads=4), rope())))
    return out


def perturb(model, seed):
    """Norm weights around 1 and a non-zero selection bias, so that their handling is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                t.copy_(torch.randn(t.shape, generator=g) * 0.1)
            elif t.dim() == 1 and ("norm" in name or "layernorm" in name) and name.endswith("weight"):
                t.copy_(1.0 + 0.2 * torch.randn(t.shape, generator=g))
            elif t.dim() == 1 and "norm" in name and name.endswith("bias"):
                t.copy_(0.1 * torch.randn(t.shape, generator=g))
            # round everything to bf16 so that the bf16 checkpoint holds exactly these values
            if t.is_floating_point():
                t.copy_(t.to(torch.bfloat16).float())


@torch.no_grad()
def record(cls, cfg, tok, prompt, out_dir, seed):
    from safetensors.torch import save_file
    torch.manual_seed(seed)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    perturb(model, seed)
    os.makedirs(out_dir, exist_ok=True)
    x = torch.tensor([prompt])
    res = model(input_ids=x, output_hidden_states=True)
    logits = res.logits[0].float()
    hidden = res.hidden_states
    ids = list(prompt)
    for _ in range(GREEDY):
        nxt = model(input_ids=torch.tensor([ids])).logits[0, -1]
        ids.append(int(torch.argmax(nxt)))
    tensors = {"prompt": torch.tensor(prompt, dtype=torch.int32), "logits": logits.contiguous(),
               "greedy": torch.tensor(ids[len(prompt):], dtype=torch.int32)}
    # hidden_states[0] is the embedding output; [i+1] the output of block i (the last may be post-norm).
    for i in range(1, len(hidden)):
        tensors[f"hidden.{i - 1}"] = hidden[i][0].float().contiguous()
    save_file(tensors, os.path.join(out_dir, "reference.safetensors"))
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(spec.tokenizer_config(256), f, ensure_ascii=False, indent=1)
    import transformers
    with open(os.path.join(out_dir, "source.txt"), "w") as f:
        f.write(f"transformers {transformers.__version__} torch {torch.__version__}\n")
        f.write(inspect.getsource(sys.modules[cls.__module__]))
    std = logits.std().item()
    gap = (logits.topk(2, dim=-1).values[:, 0] - logits.topk(2, dim=-1).values[:, 1]).min().item()
    return {"logit_std": std, "min_top2_gap": gap, "greedy": ids[len(prompt):],
            "params": sum(p.numel() for p in model.parameters())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    text = open(args.text, encoding="utf-8").read()
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    tok = spec.build_tokenizer(iter(paragraphs), 384)
    bos, eos = tok.token_to_id(spec.BOS), tok.token_to_id(spec.EOS)
    prompt = ([bos] + tok.encode(paragraphs[3], add_special_tokens=False).ids)[:PROMPT_LEN]
    summary = {}
    for seed, (name, make) in enumerate(flavours(tok.get_vocab_size(), bos, eos).items()):
        if args.only and name not in args.only.split(","):
            continue
        try:
            cls, cfg = make()
            summary[name] = record(cls, cfg, tok, prompt, os.path.join(args.out, name), 100 + seed)
            print(f"{name}: {summary[name]}", flush=True)
        except Exception as e:  # keep going: one flavour's failure must not hide the others
            summary[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
