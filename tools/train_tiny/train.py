#!/usr/bin/env python3
"""Trains latte's small default model: a DeepSeek-V3-architecture MLA model (q_lora, MoE with sigmoid
routing, a selection bias, group-limited routing, one shared expert, one dense first layer) of about
16 M parameters on the Brown corpus, with its own byte-level BPE vocabulary of 8192 tokens.

Runs on one GPU with PyTorch + transformers + tokenizers:
    python3 train.py --data DIR --out DIR [--seconds 330]
DIR holds train.txt, chat_train.txt and heldout.txt from prepare_brown.py.

Writes to --out: the checkpoint (bf16 safetensors shards, config.json), tokenizer.json,
tokenizer_config.json, and metrics.json (loss curve, held-out perplexity, a greedy sample).

Perplexity protocol (latte perplexity uses the same one): the held-out text is encoded with a BOS
first; the ids are cut into consecutive windows of 256 tokens; each window is evaluated from an empty
cache; every position but the first of a window is scored; PPL = exp(mean NLL).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_spec as spec  # noqa: E402

PPL_WINDOW = 256


def log(*a):
    print(*a, flush=True)


def model_config(vocab, bos, eos):
    from transformers import DeepseekV3Config
    kwargs = dict(vocab_size=vocab, hidden_size=256, intermediate_size=768, moe_intermediate_size=128,
                  num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=8, n_shared_experts=1,
                  n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                  kv_lora_rank=128, q_lora_rank=192, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64,
                  first_k_dense_replace=1, norm_topk_prob=True, max_position_embeddings=1024, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos, initializer_range=0.02,
                  attention_dropout=0.1)
    try:
        return DeepseekV3Config(**kwargs, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    except TypeError:
        return DeepseekV3Config(**kwargs, rope_theta=10000.0)


def heldout_ids(tok, text, bos):
    return [bos] + tok.encode(text, add_special_tokens=False).ids


@torch.no_grad()
def perplexity(model, ids, device, autocast):
    windows = [ids[i:i + PPL_WINDOW] for i in range(0, len(ids), PPL_WINDOW)]
    windows = [w for w in windows if len(w) >= 2]
    nll = []
    model.eval()
    for i in range(0, len(windows), 32):
        batch = windows[i:i + 32]
        full = [w for w in batch if len(w) == PPL_WINDOW]
        rest = [w for w in batch if len(w) != PPL_WINDOW]
        groups = ([torch.tensor(full, device=device)] if full else []) + [torch.tensor([w], device=device) for w in rest]
        for x in groups:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=x).logits.float()
            lp = F.log_softmax(logits[:, :-1], dim=-1)
            tgt = x[:, 1:]
            nll.append(-lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).flatten().double().cpu())
    model.train()
    nll = torch.cat(nll)
    mean = nll.mean().item()
    se = nll.std().item() / math.sqrt(len(nll))
    return math.exp(mean), mean, se, len(nll)


@torch.no_grad()
def greedy(model, tok, prompt_ids, n, device):
    ids = list(prompt_ids)
    model.eval()
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].float()
        ids.append(int(torch.argmax(logits)))
    model.train()
    return ids[len(prompt_ids):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--eval-every", type=float, default=10.0)
    args = ap.parse_args()
    t_start = time.time()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    device = "cuda"

    read = lambda name: open(os.path.join(args.data, name), encoding="utf-8").read()
    train_text, chat_text, held_text = read("train.txt"), read("chat_train.txt"), read("heldout.txt")
    paragraphs = [p for p in train_text.split("\n\n") if p.strip()]
    chats = [c.strip("\n") for c in chat_text.split("\n\x1e\n") if c.strip()]

    tok = spec.build_tokenizer(iter(paragraphs + chats), args.vocab)
    bos, eos = tok.token_to_id(spec.BOS), tok.token_to_id(spec.EOS)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(spec.tokenizer_config(1024), f, ensure_ascii=False, indent=1)
    log(f"tokenizer: {tok.get_vocab_size()} tokens, bos={bos} eos={eos}, {time.time() - t_start:.1f}s")

    # Training stream: blocks of six paragraphs (BOS + paragraphs joined by blank lines) and the chat
    # pairs (BOS + "User: ...\n\nAssistant: ..." + EOS, from documents not in the plain text), shuffled.
    plain = tok.encode_batch(paragraphs, add_special_tokens=False)
    random.shuffle(chats)
    chat_enc = tok.encode_batch(chats, add_special_tokens=False)
    sep = tok.encode("\n\n", add_special_tokens=False).ids
    blocks = []
    for i in range(0, len(plain), 6):
        ids = [bos]
        for e in plain[i:i + 6]:
            ids += e.ids + sep
        blocks.append(ids)
    blocks += [[bos] + e.ids + [eos] for e in chat_enc]
    random.shuffle(blocks)
    stream = torch.tensor([t for b in blocks for t in b], dtype=torch.long, device=device)
    held = heldout_ids(tok, held_text, bos)
    log(f"train stream {len(stream)} tokens, held-out {len(held)} tokens")

    from transformers import DeepseekV3ForCausalLM
    cfg = model_config(tok.get_vocab_size(), bos, eos)
    model = DeepseekV3ForCausalLM(cfg).to(device)
    # A fixed, non-zero selection bias so that the bias path of the router is exercised by every
    # engine that runs this model (it is not trained; DeepSeek-V3 updates it outside the gradient).
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, buf in list(model.named_buffers()) + list(model.named_parameters()):
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape, generator=gen) * 0.02)
                buf.requires_grad_(False)
    # Dropout on the embedding output and on every sub-layer output before the residual add: the
    # corpus is small (~1.8 M tokens) and a 16 M-parameter model memorises it within a few epochs.
    def drop(module, inputs, output):
        if isinstance(output, tuple):
            return (F.dropout(output[0], args.dropout, module.training),) + tuple(output[1:])
        return F.dropout(output, args.dropout, module.training)

    model.model.embed_tokens.register_forward_hook(drop)
    for layer in model.model.layers:
        layer.self_attn.o_proj.register_forward_hook(drop)
        layer.mlp.register_forward_hook(drop)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters; config: {cfg.to_json_string()[:400]}...")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    seq = PPL_WINDOW
    curve, best = [], (float("inf"), None, 0)
    step, t0, last_eval = 0, time.time(), time.time()
    budget = args.seconds - (time.time() - t_start) - 40  # leave time for the final evaluation and saving
    warmup = 150
    while True:
        elapsed = time.time() - t0
        frac = min(1.0, elapsed / budget)
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(stream) - seq - 1, (args.batch,), device=device)
        x = torch.stack([stream[s:s + seq + 1] for s in starts.tolist()])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        done = elapsed >= budget
        if step % 50 == 0 or done:
            curve.append({"step": step, "seconds": round(elapsed, 1), "lr": lr, "train_loss": round(loss.item(), 4)})
        if time.time() - last_eval > args.eval_every or done:
            ppl, mean, _, _ = perplexity(model, held, device, autocast=True)
            curve[-1]["heldout_nll"] = round(mean, 4)
            log(f"step {step} t={elapsed:.0f}s lr={lr:.2e} train {loss.item():.3f} held-out nll {mean:.3f} ppl {ppl:.1f}")
            if mean < best[0]:
                best = (mean, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
            last_eval = time.time()
        if done:
            break

    model.load_state_dict(best[1])
    # The shipped weights are the bf16 rounding of the best checkpoint: measure exactly those.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    ppl, mean, se, n = perplexity(model, held, device, autocast=False)
    log(f"final (best step {best[2]}, bf16 weights, fp32 compute): held-out ppl {ppl:.3f} (nll {mean:.4f} +- {se:.4f}, {n} tokens)")
    prompt = [bos] + tok.encode("User: What did the jury say about the election?\n\nAssistant:", add_special_tokens=False).ids
    sample = greedy(model, tok, prompt, 48, device)
    text = tok.decode(sample)
    log("greedy sample:", repr(text))
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True, max_shard_size="12MB")
    import transformers
    metrics = {
        "parameters": n_params, "steps": step, "best_step": best[2], "batch": args.batch, "seq": seq,
        "train_tokens_seen": step * args.batch * seq, "train_stream_tokens": len(stream),
        "heldout_tokens": len(held), "heldout_ppl": ppl, "heldout_nll": mean, "heldout_nll_se": se,
        "ppl_protocol": f"BOS + encode(heldout.txt); windows of {PPL_WINDOW}; score positions 1.. of each window",
        "greedy_prompt_ids": prompt, "greedy_ids": sample, "greedy_text": text, "curve": curve,
        "torch": torch.__version__, "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(),
        "seconds": round(time.time() - t_start, 1),
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    log(f"done in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
