"""Turns a deepseek2 / glm-dsa GGUF file back into Hugging Face parameters: the reverse of
`latte convert`'s tensor plan (src/convert/tensor_plan.cpp), written against the GGUF layouts that
llama.cpp documents rather than against latte's code. Also a minimal safetensors reader and writer.

    from gguf_dequant import GgufFile
    from gguf_to_hf import hf_state_dict, write_safetensors
    sd = hf_state_dict(GgufFile("m.gguf"))      # {"model.layers.0.self_attn.kv_b_proj.weight": (shape, values)}
    write_safetensors("model.safetensors", sd)  # float32, loads with transformers' from_pretrained

Values are flat float32 (numpy arrays or array('f'), as GgufFile.dequantize returns them), row-major in
the torch shape. Layouts undone here:
  attn_k_b {P, L, N} + attn_v_b {L, V, N} -> kv_b_proj [N (P + V), L]: head h's rows are its P key rows
      (attn_k_b of head h, transposed) followed by its V value rows (attn_v_b of head h as is);
  ffn_{gate,up,down}_exps {cols, rows, E} -> one [rows, cols] matrix per expert (mlp.experts.e.*);
  everything else: the torch shape is the GGUF shape reversed.
"""
import array
import json
import re
import struct
import sys

try:
    import numpy as _np
except ImportError:
    _np = None

# blk.N.<suffix> -> model.layers.N.<suffix>
_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight",
    "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "attn_kv_b.weight": "self_attn.kv_b_proj.weight",  # the legacy fused layout, as is
    "attn_output.weight": "self_attn.o_proj.weight",
    "indexer.k_norm.weight": "self_attn.indexer.k_norm.weight",
    "indexer.k_norm.bias": "self_attn.indexer.k_norm.bias",
    "indexer.proj.weight": "self_attn.indexer.weights_proj.weight",
    "indexer.attn_k.weight": "self_attn.indexer.wk.weight",
    "indexer.attn_q_b.weight": "self_attn.indexer.wq_b.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
    "nextn.eh_proj.weight": "eh_proj.weight",
    "nextn.embed_tokens.weight": "embed_tokens.weight",
    "nextn.enorm.weight": "enorm.weight",
    "nextn.hnorm.weight": "hnorm.weight",
    "nextn.shared_head_head.weight": "shared_head.head.weight",
    "nextn.shared_head_norm.weight": "shared_head.norm.weight",
}
_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
_EXPERTS = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj", "ffn_down_exps.weight": "down_proj"}
_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")


class MappingError(Exception):
    """A GGUF tensor with no Hugging Face counterpart, or inconsistent attn_k_b / attn_v_b shapes."""


def _product(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _kv_b(k_b, k_ne, v_b, v_ne, where):
    """kv_b_proj [N (P + V), L] from attn_k_b {P, L, N} and attn_v_b {L, V, N} (flat values)."""
    P, L, N = k_ne
    L2, V, N2 = v_ne
    if L != L2 or N != N2:
        raise MappingError(f"{where}: attn_k_b {list(k_ne)} and attn_v_b {list(v_ne)} disagree on L or N")
    if _np is not None and not isinstance(k_b, array.array):
        k = _np.asarray(k_b).reshape(N, L, P).transpose(0, 2, 1)  # (N, P, L)
        v = _np.asarray(v_b).reshape(N, V, L)
        return (N * (P + V), L), _np.ascontiguousarray(_np.concatenate([k, v], axis=1)).reshape(-1)
    out = array.array("f", bytes(4 * N * (P + V) * L))
    for h in range(N):
        base = h * (P + V) * L
        for p in range(P):  # kv_b row h(P+V) + p, column l = attn_k_b[h][l][p]
            out[base + p * L:base + (p + 1) * L] = array.array("f", k_b[h * L * P + p:(h + 1) * L * P:P])
        out[base + P * L:base + (P + V) * L] = v_b[h * V * L:(h + 1) * V * L]
    return (N * (P + V), L), out


def hf_state_dict(gguf, skip_nextn=True):
    """{hf_name: (torch_shape, flat float32 values)} for every tensor of `gguf` (a GgufFile).

    Multi-token-prediction tensors (blk.N.nextn.* and the ordinary tensors of those blocks) are left
    out when skip_nextn: transformers' models have no place for them."""
    nextn_blocks = {int(m.group(1)) for t in gguf.tensors if (m := _BLK.match(t.name)) and
                    m.group(2).startswith("nextn.")}
    out = {}
    pending_kv = {}  # block -> {"k": (values, ne), "v": (values, ne)}
    for t in gguf.tensors:
        m = _BLK.match(t.name)
        if t.name in _GLOBAL:
            out[_GLOBAL[t.name]] = (t.shape, gguf.dequantize(t))
            continue
        if not m:
            raise MappingError(f"{gguf.path}: tensor '{t.name}' has no Hugging Face counterpart")
        il, suffix = int(m.group(1)), m.group(2)
        if skip_nextn and il in nextn_blocks:
            continue
        prefix = f"model.layers.{il}."
        if suffix in ("attn_k_b.weight", "attn_v_b.weight"):
            if len(t.ne) != 3:
                raise MappingError(f"{gguf.path}: tensor '{t.name}' has shape {list(t.ne)}; expected 3 dimensions")
            pending_kv.setdefault(il, {})["k" if suffix.startswith("attn_k") else "v"] = (gguf.dequantize(t), t.ne)
            parts = pending_kv[il]
            if len(parts) == 2:
                shape, values = _kv_b(parts["k"][0], parts["k"][1], parts["v"][0], parts["v"][1], f"{gguf.path}: blk.{il}")
                out[prefix + "self_attn.kv_b_proj.weight"] = (shape, values)
                del pending_kv[il]
        elif suffix in _EXPERTS:
            cols, rows, n_expert = t.ne[0], t.ne[1], (t.ne[2] if len(t.ne) > 2 else 1)
            values = gguf.dequantize(t)
            per = rows * cols
            for e in range(n_expert):
                out[f"{prefix}mlp.experts.{e}.{_EXPERTS[suffix]}.weight"] = ((rows, cols), values[e * per:(e + 1) * per])
        elif suffix in _BLOCK:
            out[prefix + _BLOCK[suffix]] = (t.shape, gguf.dequantize(t))
        else:
            raise MappingError(f"{gguf.path}: tensor '{t.name}' has no Hugging Face counterpart")
    if pending_kv:
        il = sorted(pending_kv)[0]
        raise MappingError(f"{gguf.path}: block {il} has {'attn_k_b' if 'k' in pending_kv[il] else 'attn_v_b'} "
                           "without its other half")
    return out


# ---- safetensors ---------------------------------------------------------------------------------

_DTYPES = {"F32": ("f", 4), "F16": ("e", 2), "BF16": ("bf16", 2), "I32": ("i", 4), "I64": ("q", 8)}


def read_safetensors(path, use_numpy=None):
    """{name: (shape, flat values)}: floats as float32, integers as Python ints (array) or numpy."""
    use_numpy = (_np is not None) if use_numpy is None else use_numpy
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    n = struct.unpack_from("<Q", data, 0)[0]
    if 8 + n > len(data):
        raise ValueError(f"{path}: header of {n} bytes extends past the end of the file")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has dtype {dtype}, which this reader does not decode")
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        shape = tuple(info["shape"])
        if end - begin != _product(shape) * _DTYPES[dtype][1] or base + end > len(data):
            raise ValueError(f"{path}: tensor '{name}' data [{begin}, {end}) does not fit shape {list(shape)}")
        if use_numpy:
            if dtype == "BF16":
                values = (_np.frombuffer(raw, "<u2").astype(_np.uint32) << 16).view(_np.float32)
            else:
                values = _np.frombuffer(raw, {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8"}[dtype])
                if dtype == "F16":
                    values = values.astype(_np.float32)
        elif dtype == "BF16":
            halves = array.array("H", raw)
            values = array.array("f", array.array("I", (h << 16 for h in halves)).tobytes())
        elif dtype == "F16":
            values = array.array("f", struct.unpack(f"<{len(raw) // 2}e", raw))
        else:
            values = array.array(_DTYPES[dtype][0], raw)
        if sys.byteorder != "little" and dtype in ("F32", "I32", "I64"):
            values.byteswap()
        out[name] = (shape, values)
    return out


def to_bytes(values):
    """Little-endian float32 bytes of flat values (numpy or array('f'))."""
    if isinstance(values, array.array):
        a = values if values.typecode == "f" else array.array("f", values)
        if sys.byteorder != "little":
            a = array.array("f", a)
            a.byteswap()
        return a.tobytes()
    return _np.ascontiguousarray(values, dtype="<f4").tobytes()


def write_safetensors(path, tensors):
    """Writes {name: (shape, flat float32 values)} as an F32 safetensors file."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = to_bytes(values)
        if len(blob) != 4 * _product(shape):
            raise ValueError(f"tensor '{name}': {len(blob) // 4} values for shape {list(shape)}")
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
