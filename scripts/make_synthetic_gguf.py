#!/usr/bin/env python3
"""Writes a synthetic GGUF v3 file shaped like a DeepSeek-V3 conversion (arch deepseek2): full metadata,
a byte-level BPE vocabulary with merges, and MLA + MoE tensors quantized the way downloads are. The
tensor data is left as a hole (a sparse file of zeros), so a file of hundreds of GB takes seconds
and almost no disk. Standard library only; independent of latte's own writer.

  scripts/make_synthetic_gguf.py --out /tmp/v3.gguf                      # DeepSeek-V3 sizes
  scripts/make_synthetic_gguf.py --out tiny.gguf --tiny                  # a few KB, for tests
"""
import argparse
import struct

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
# ggml type id: (name, values per block, bytes per block)
GGML = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 8: ("q8_0", 32, 34), 12: ("q4_K", 256, 144), 14: ("q6_K", 256, 210)}
F32, F16, Q8_0, Q4_K, Q6_K = 0, 1, 8, 12, 14


def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def kv(key, value_type, payload):
    return gguf_string(key) + struct.pack("<I", value_type) + payload


def kv_u32(key, v):
    return kv(key, GGUF_U32, struct.pack("<I", v))


def kv_f32(key, v):
    return kv(key, GGUF_F32, struct.pack("<f", v))


def kv_str(key, v):
    return kv(key, GGUF_STRING, gguf_string(v))


def kv_strings(key, items):
    return kv(key, GGUF_ARRAY, struct.pack("<IQ", GGUF_STRING, len(items)) + b"".join(gguf_string(s) for s in items))


def kv_i32s(key, items):
    return kv(key, GGUF_ARRAY, struct.pack("<IQ", GGUF_I32, len(items)) + struct.pack(f"<{len(items)}i", *items))


def pick_type(preferred, ne0):
    """The preferred block type when the row divides into its blocks, else q8_0, else f16."""
    for t in (preferred, Q8_0, F16):
        if ne0 % GGML[t][1] == 0:
            return t
    return F32


def tensor_list(d):
    H, N, Lq, L, P, R, V, E, F = d["H"], d["N"], d["Lq"], d["L"], d["P"], d["R"], d["V"], d["E"], d["F"]
    out = [("token_embd.weight", Q4_K, [H, d["vocab"]])]
    for i in range(d["layers"]):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", F32, [H]),
            (b + "attn_q_a.weight", Q4_K, [H, Lq]),
            (b + "attn_q_a_norm.weight", F32, [Lq]),
            (b + "attn_q_b.weight", Q4_K, [Lq, N * (P + R)]),
            (b + "attn_kv_a_mqa.weight", Q4_K, [H, L + R]),
            (b + "attn_kv_a_norm.weight", F32, [L]),
            (b + "attn_k_b.weight", Q8_0, [P, L, N]),
            (b + "attn_v_b.weight", Q8_0, [L, V, N]),
            (b + "attn_output.weight", Q4_K, [N * V, H]),
            (b + "ffn_norm.weight", F32, [H]),
            (b + "ffn_gate_inp.weight", F32, [H, E]),
            (b + "exp_probs_b.bias", F32, [E]),
            (b + "ffn_gate_exps.weight", Q4_K, [H, F, E]),
            (b + "ffn_up_exps.weight", Q4_K, [H, F, E]),
            (b + "ffn_down_exps.weight", Q6_K, [F, H, E]),
            (b + "ffn_gate_shexp.weight", Q4_K, [H, F]),
            (b + "ffn_up_shexp.weight", Q4_K, [H, F]),
            (b + "ffn_down_shexp.weight", Q6_K, [F, H]),
        ]
    out += [("output_norm.weight", F32, [H]), ("output.weight", Q6_K, [H, d["vocab"]])]
    return [(name, pick_type(t, ne[0]), ne) for name, t, ne in out]


def tensor_bytes(t, ne):
    _, block_values, block_bytes = GGML[t]
    rows = 1
    for n in ne[1:]:
        rows *= n
    return ne[0] // block_values * block_bytes * rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--vocab", type=int, default=129280)
    ap.add_argument("--tiny", action="store_true", help="small dimensions (hidden 256, 4 experts, 16 tokens)")
    ap.add_argument("--cut-bytes", type=int, default=0, help="make the file this many bytes short (a corrupt file)")
    args = ap.parse_args()
    if args.tiny:
        d = dict(H=256, N=2, Lq=256, L=256, P=32, R=32, V=32, E=4, F=256, layers=1, vocab=16)
    else:
        d = dict(H=7168, N=128, Lq=1536, L=512, P=128, R=64, V=128, E=256, F=2048, layers=args.layers,
                 vocab=args.vocab)
    alignment = 32
    arch = "deepseek2"
    # Byte-level BPE look-alike: the 256 byte symbols, then longer pieces, then special tokens.
    n_plain = d["vocab"] - 2
    tokens = [chr(0x100 + b) if b < 0x21 else chr(b) for b in range(min(256, n_plain))]
    tokens += [f"\u0120tok{i}" for i in range(n_plain - len(tokens))] + ["<|begin|>", "<|end|>"]
    merges = [f"\u0120t ok{i}" for i in range(max(d["vocab"] - 256, 0))]
    token_types = [1] * (len(tokens) - 2) + [3, 3]

    meta = [
        kv_str("general.architecture", arch),
        kv_str("general.name", "synthetic-deepseek-v3" if not args.tiny else "tiny-deepseek"),
        kv_u32(f"{arch}.block_count", d["layers"]),
        kv_u32(f"{arch}.context_length", 163840),
        kv_u32(f"{arch}.embedding_length", d["H"]),
        kv_u32(f"{arch}.feed_forward_length", 18432),
        kv_u32(f"{arch}.attention.head_count", d["N"]),
        kv_u32(f"{arch}.attention.head_count_kv", 1),
        kv_u32(f"{arch}.attention.q_lora_rank", d["Lq"]),
        kv_u32(f"{arch}.attention.kv_lora_rank", d["L"]),
        kv_u32(f"{arch}.attention.key_length", d["L"] + d["R"]),
        kv_u32(f"{arch}.attention.value_length", d["L"]),
        kv_u32(f"{arch}.attention.key_length_mla", d["P"] + d["R"]),
        kv_u32(f"{arch}.attention.value_length_mla", d["V"]),
        kv_f32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6),
        kv_u32(f"{arch}.rope.dimension_count", d["R"]),
        kv_f32(f"{arch}.rope.freq_base", 10000.0),
        kv_u32(f"{arch}.expert_count", d["E"]),
        kv_u32(f"{arch}.expert_used_count", min(8, d["E"])),
        kv_u32(f"{arch}.expert_feed_forward_length", d["F"]),
        kv_u32(f"{arch}.leading_dense_block_count", 0),
        kv_str("tokenizer.ggml.model", "gpt2"),
        kv_strings("tokenizer.ggml.tokens", tokens),
        kv_i32s("tokenizer.ggml.token_type", token_types),
        kv_strings("tokenizer.ggml.merges", merges),
        kv_u32("tokenizer.ggml.bos_token_id", len(tokens) - 2),
        kv_u32("tokenizer.ggml.eos_token_id", len(tokens) - 1),
    ]
    tensors = tensor_list(d)
    infos = []
    offset = 0
    for name, t, ne in tensors:
        infos.append(gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) +
                     struct.pack("<IQ", t, offset))
        offset = (offset + tensor_bytes(t, ne) + alignment - 1) // alignment * alignment
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
    header += b"\0" * (-len(header) % alignment)
    with open(args.out, "wb") as f:
        f.write(header)
        f.truncate(len(header) + offset - args.cut_bytes)  # the data section stays a hole of zeros
    print(f"{args.out}: {len(tensors)} tensors, {len(tokens)} tokens, {len(merges)} merges, "
          f"header {len(header)} bytes, file {len(header) + offset} bytes")


if __name__ == "__main__":
    main()
