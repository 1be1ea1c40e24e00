"""A small, independent GGUF reader and ggml dequantizers, written from the file-format description
(not from latte's C++), so that the oracle check decodes quantized weights without trusting latte.

    from gguf_dequant import GgufFile
    f = GgufFile("model.gguf")                 # header, metadata and tensor table
    t = f.tensor("blk.0.attn_v_b.weight")      # name, type, ne (ggml order), torch shape
    values = f.dequantize(t)                   # flat float32 values, rows of ne[0]

Values come back as a numpy float32 array when numpy is importable (and use_numpy is not False), else
as array.array('f'). Both paths compute every value with the same float32 operations, in the same
order, as ggml's dequantize_row_* (e.g. Q4_K: (d * scale) * q - (dmin * min), each product and the
difference rounded to float32), so both are bit-identical to ggml and to latte.

Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (everything `latte convert`
writes, including the fall-backs of the K mixes for rows that are not a multiple of 256).
"""
import array
import struct
import sys

try:
    import numpy as _np
except ImportError:  # the pure-Python path still works
    _np = None

# ggml type id -> (name, values per block, bytes per block)
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2),
}
TYPE_IDS = {v[0]: k for k, v in TYPES.items()}

# GGUF metadata value types: id -> struct format (scalars); 8 string, 9 array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4


class GgufError(Exception):
    """A malformed or unsupported GGUF file; the message names the file, field and byte offset."""


class TensorInfo:
    def __init__(self, name, type_id, ne, offset):
        self.name = name
        self.type_id = type_id
        self.ne = tuple(ne)          # ggml order: ne[0] is the innermost (row) dimension
        self.offset = offset         # relative to the data section
        dims = list(ne)
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        self.shape = tuple(reversed(dims))  # torch order

    @property
    def type_name(self):
        return TYPES[self.type_id][0] if self.type_id in TYPES else f"type {self.type_id}"

    @property
    def n_values(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    def n_bytes(self):
        _, block, size = TYPES[self.type_id]
        return self.n_values // block * size


class _Cursor:
    def __init__(self, data, path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt, what):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise GgufError(f"{self.path}: {what} at byte offset {self.pos}: file truncated")
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return v

    def string(self, what):
        n = self.take("<Q", what)
        if self.pos + n > len(self.data):
            raise GgufError(f"{self.path}: {what} at byte offset {self.pos}: string of {n} bytes past the end")
        s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype, what):
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            item_type = self.take("<I", what)
            n = self.take("<Q", what)
            if item_type in _SCALAR and item_type != 7:
                fmt = _SCALAR[item_type]
                size = struct.calcsize(fmt)
                if self.pos + n * size > len(self.data):
                    raise GgufError(f"{self.path}: {what} at byte offset {self.pos}: array past the end")
                items = list(struct.unpack_from(f"<{n}{fmt[1]}", self.data, self.pos))
                self.pos += n * size
                return items
            return [self.value(item_type, what) for _ in range(n)]
        raise GgufError(f"{self.path}: {what} at byte offset {self.pos}: unknown value type {vtype}")


class GgufFile:
    def __init__(self, path, use_numpy=None):
        self.path = path
        self.use_numpy = (_np is not None) if use_numpy is None else bool(use_numpy)
        if self.use_numpy and _np is None:
            raise GgufError("numpy is not installed")
        with open(path, "rb") as f:
            self.data = f.read()
        c = _Cursor(self.data, path)
        if c.take("<4s", "magic") != b"GGUF":
            raise GgufError(f"{path}: magic at byte offset 0: not a GGUF file")
        self.version = c.take("<I", "version")
        if self.version not in (2, 3):
            raise GgufError(f"{path}: version at byte offset 4: GGUF v{self.version} is not supported")
        n_tensors = c.take("<Q", "tensor count")
        n_kv = c.take("<Q", "metadata count")
        self.metadata = {}
        for i in range(n_kv):
            key = c.string(f"metadata key {i}")
            vtype = c.take("<I", f"type of '{key}'")
            self.metadata[key] = c.value(vtype, f"value of '{key}'")
        self.tensors = []
        self._by_name = {}
        for i in range(n_tensors):
            name = c.string(f"tensor {i} name")
            n_dims = c.take("<I", f"tensor '{name}' dims")
            if not 1 <= n_dims <= _MAX_DIMS:
                raise GgufError(f"{path}: tensor '{name}' at byte offset {c.pos}: {n_dims} dimensions")
            ne = [c.take("<Q", f"tensor '{name}' shape") for _ in range(n_dims)]
            type_id = c.take("<I", f"tensor '{name}' type")
            offset = c.take("<Q", f"tensor '{name}' offset")
            t = TensorInfo(name, type_id, ne, offset)
            if type_id in TYPES and ne[0] % TYPES[type_id][1] != 0:
                raise GgufError(f"{path}: tensor '{name}': row of {ne[0]} values is not a whole number of "
                                f"{t.type_name} blocks")
            self.tensors.append(t)
            self._by_name[name] = t
        alignment = self.metadata.get("general.alignment", 32)
        self.data_offset = (c.pos + alignment - 1) // alignment * alignment

    def tensor(self, name):
        if name not in self._by_name:
            raise GgufError(f"{self.path}: no tensor '{name}'")
        return self._by_name[name]

    def raw(self, t):
        if t.type_id not in TYPES:
            raise GgufError(f"{self.path}: tensor '{t.name}' has {t.type_name}, which this reader cannot decode")
        begin = self.data_offset + t.offset
        end = begin + t.n_bytes()
        if end > len(self.data):
            raise GgufError(f"{self.path}: tensor '{t.name}' data [{begin}, {end}) extends past the end of the file")
        return memoryview(self.data)[begin:end]

    def dequantize(self, t):
        """Flat float32 values of tensor t (ne[0] fastest)."""
        raw = self.raw(t)
        name = TYPES[t.type_id][0]
        if self.use_numpy:
            return _NUMPY[name](_np.frombuffer(raw, dtype=_np.uint8))
        return _PURE[name](raw)


# ---- numpy decoders: each takes the raw bytes as uint8 and returns flat float32 -----------------

def _np_blocks(raw, size):
    return raw.reshape(-1, size)


def _np_half(b):  # (nb, 2) uint8 -> (nb, 1) float32, exact widening
    return _np.ascontiguousarray(b).view("<f2").astype(_np.float32)


def _np_f32(raw):
    return raw.view("<f4").astype(_np.float32)


def _np_f16(raw):
    return raw.view("<f2").astype(_np.float32)


def _np_bf16(raw):
    return (raw.view("<u2").astype(_np.uint32) << 16).view(_np.float32)


def _np_q4_0(raw):
    b = _np_blocks(raw, 18)
    d = _np_half(b[:, 0:2])
    qs = b[:, 2:18]
    q = _np.concatenate([(qs & 0x0F), (qs >> 4)], axis=1).astype(_np.int16) - 8
    return (q.astype(_np.float32) * d).reshape(-1)


def _np_q4_1(raw):
    b = _np_blocks(raw, 20)
    d, m = _np_half(b[:, 0:2]), _np_half(b[:, 2:4])
    qs = b[:, 4:20]
    q = _np.concatenate([(qs & 0x0F), (qs >> 4)], axis=1)
    return (q.astype(_np.float32) * d + m).reshape(-1)


def _np_q5_levels(qs, qh):  # qs (nb, 16) uint8, qh (nb,) uint32 -> (nb, 32) levels 0..31
    j = _np.arange(16, dtype=_np.uint32)
    lo = (qs & 0x0F).astype(_np.uint32) | (((qh[:, None] >> j) & 1) << 4)
    hi = (qs >> 4).astype(_np.uint32) | (((qh[:, None] >> (j + 16)) & 1) << 4)
    return _np.concatenate([lo, hi], axis=1).astype(_np.int32)


def _np_q5_0(raw):
    b = _np_blocks(raw, 22)
    d = _np_half(b[:, 0:2])
    qh = _np.ascontiguousarray(b[:, 2:6]).view("<u4")[:, 0]
    q = _np_q5_levels(b[:, 6:22], qh) - 16
    return (q.astype(_np.float32) * d).reshape(-1)


def _np_q5_1(raw):
    b = _np_blocks(raw, 24)
    d, m = _np_half(b[:, 0:2]), _np_half(b[:, 2:4])
    qh = _np.ascontiguousarray(b[:, 4:8]).view("<u4")[:, 0]
    q = _np_q5_levels(b[:, 8:24], qh)
    return (q.astype(_np.float32) * d + m).reshape(-1)


def _np_q8_0(raw):
    b = _np_blocks(raw, 34)
    d = _np_half(b[:, 0:2])
    q = _np.ascontiguousarray(b[:, 2:34]).view(_np.int8)
    return (q.astype(_np.float32) * d).reshape(-1)


def _np_k_scale_min(s):  # (nb, 12) uint8 -> scales (nb, 8), mins (nb, 8) as float32
    s = s.astype(_np.uint8)
    sc = _np.empty((s.shape[0], 8), dtype=_np.uint8)
    mn = _np.empty((s.shape[0], 8), dtype=_np.uint8)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        mn[:, j] = s[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (s[:, j + 4] & 0x0F) | ((s[:, j - 4] >> 6) << 4)
        mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc.astype(_np.float32), mn.astype(_np.float32)


def _np_kquant_4_5(b, qs, qh):
    d, dmin = _np_half(b[:, 0:2]), _np_half(b[:, 2:4])
    sc, mn = _np_k_scale_min(b[:, 4:16])
    scale = d * sc    # (nb, 8), rounded to float32
    minimum = dmin * mn
    out = _np.empty((b.shape[0], 256), dtype=_np.float32)
    for c in range(4):
        q = qs[:, 32 * c:32 * c + 32]
        lo, hi = (q & 0x0F), (q >> 4)
        if qh is not None:
            lo = lo | (((qh >> (2 * c)) & 1) << 4)
            hi = hi | (((qh >> (2 * c + 1)) & 1) << 4)
        out[:, 64 * c:64 * c + 32] = scale[:, 2 * c:2 * c + 1] * lo.astype(_np.float32) - minimum[:, 2 * c:2 * c + 1]
        out[:, 64 * c + 32:64 * c + 64] = (scale[:, 2 * c + 1:2 * c + 2] * hi.astype(_np.float32)
                                           - minimum[:, 2 * c + 1:2 * c + 2])
    return out.reshape(-1)


def _np_q4_k(raw):
    b = _np_blocks(raw, 144)
    return _np_kquant_4_5(b, b[:, 16:144], None)


def _np_q5_k(raw):
    b = _np_blocks(raw, 176)
    return _np_kquant_4_5(b, b[:, 48:176], b[:, 16:48])


def _np_q6_k(raw):
    b = _np_blocks(raw, 210)
    ql, qh = b[:, 0:128], b[:, 128:192]
    sc = _np.ascontiguousarray(b[:, 192:208]).view(_np.int8).astype(_np.float32)
    d = _np_half(b[:, 208:210])
    out = _np.empty((b.shape[0], 256), dtype=_np.float32)
    for h in range(2):
        l_lo, l_hi, hh = ql[:, 64 * h:64 * h + 32], ql[:, 64 * h + 32:64 * h + 64], qh[:, 32 * h:32 * h + 32]
        quarters = [(l_lo & 0x0F) | (((hh >> 0) & 3) << 4), (l_hi & 0x0F) | (((hh >> 2) & 3) << 4),
                    (l_lo >> 4) | (((hh >> 4) & 3) << 4), (l_hi >> 4) | (((hh >> 6) & 3) << 4)]
        for k, q in enumerate(quarters):
            qf = (q.astype(_np.int32) - 32).astype(_np.float32)
            for half in range(2):  # values l in [16 half, 16 half + 16) use scale 8h + half + 2k
                s = d * sc[:, 8 * h + half + 2 * k:8 * h + half + 2 * k + 1]
                base = 128 * h + 32 * k + 16 * half
                out[:, base:base + 16] = s * qf[:, 16 * half:16 * half + 16]
    return out.reshape(-1)


_NUMPY = {"F32": _np_f32, "F16": _np_f16, "BF16": _np_bf16, "Q4_0": _np_q4_0, "Q4_1": _np_q4_1,
          "Q5_0": _np_q5_0, "Q5_1": _np_q5_1, "Q8_0": _np_q8_0, "Q4_K": _np_q4_k, "Q5_K": _np_q5_k,
          "Q6_K": _np_q6_k}


# ---- pure-Python decoders: doubles rounded to float32 after every operation ----------------------
# A product or difference of two float32 values computed in double and then rounded to float32 equals
# the float32 operation (double has more than 2 * 24 + 2 bits), so array('f', ...) after each step
# reproduces float32 arithmetic exactly.

def _f32(values):
    return array.array("f", values)


def _native(a):  # array('f'/'H'/'I') holds native byte order; GGUF is little-endian
    if sys.byteorder != "little":
        a.byteswap()
    return a


def _pure_f32(raw):
    return _native(array.array("f", bytes(raw)))


def _pure_f16(raw):
    n = len(raw) // 2
    return _f32(struct.unpack(f"<{n}e", raw))


def _pure_bf16(raw):
    halves = _native(array.array("H", bytes(raw)))
    words = array.array("I", (h << 16 for h in halves))
    return array.array("f", words.tobytes())


def _half(raw, pos):
    return struct.unpack_from("<e", raw, pos)[0]


def _pure_small(raw, size, layout):
    """Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0: value = level * d (+ m)."""
    scales, levels, mins = [], [], []
    for pos in range(0, len(raw), size):
        d = _half(raw, pos)
        if layout == "q8_0":
            lv = struct.unpack_from("<32b", raw, pos + 2)
            m, qh, qs = None, 0, None
        else:
            m = _half(raw, pos + 2) if layout in ("q4_1", "q5_1") else None
            head = 4 if m is not None else 2
            qh = struct.unpack_from("<I", raw, pos + head)[0] if layout in ("q5_0", "q5_1") else 0
            qs = raw[pos + size - 16:pos + size]
            lo = [(qs[j] & 0x0F) | (((qh >> j) & 1) << 4) for j in range(16)]
            hi = [(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) for j in range(16)]
            offset = {"q4_0": 8, "q5_0": 16}.get(layout, 0)
            lv = [x - offset for x in lo + hi]
        scales.extend([d] * 32)
        levels.extend(lv)
        if m is not None:
            mins.extend([m] * 32)
    prod = _f32([q * d for q, d in zip(levels, scales)])
    if not mins:
        return prod
    return _f32([p + m for p, m in zip(prod, mins)])


def _pure_k_scale_min(s, j):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def _pure_kquant_4_5(raw, size, with_high_bit):
    sub_scales, sub_mins, levels = [], [], []  # per 32-value sub-block; levels per value
    for pos in range(0, len(raw), size):
        d, dmin = _half(raw, pos), _half(raw, pos + 2)
        s = raw[pos + 4:pos + 16]
        qh = raw[pos + 16:pos + 48] if with_high_bit else None
        qs = raw[pos + size - 128:pos + size]
        for j in range(8):
            sc, mn = _pure_k_scale_min(s, j)
            sub_scales.append(d * sc)
            sub_mins.append(dmin * mn)
        for c in range(4):
            q = qs[32 * c:32 * c + 32]
            lo = [x & 0x0F for x in q]
            hi = [x >> 4 for x in q]
            if qh is not None:
                lo = [lo[l] | (((qh[l] >> (2 * c)) & 1) << 4) for l in range(32)]
                hi = [hi[l] | (((qh[l] >> (2 * c + 1)) & 1) << 4) for l in range(32)]
            levels.extend(lo)
            levels.extend(hi)
    sub_scales, sub_mins = _f32(sub_scales), _f32(sub_mins)
    prod = _f32([sub_scales[i >> 5] * q for i, q in enumerate(levels)])
    return _f32([p - sub_mins[i >> 5] for i, p in enumerate(prod)])


def _pure_q6_k(raw):
    sub_scales, levels = [], []  # one scale per 16 values, in output order
    for pos in range(0, len(raw), 210):
        ql, qh = raw[pos:pos + 128], raw[pos + 128:pos + 192]
        sc = struct.unpack_from("<16b", raw, pos + 192)
        d = _half(raw, pos + 208)
        block = [0] * 256
        for h in range(2):
            for l in range(32):
                a, b, hh = ql[64 * h + l], ql[64 * h + l + 32], qh[32 * h + l]
                block[128 * h + l] = ((a & 0x0F) | (((hh >> 0) & 3) << 4)) - 32
                block[128 * h + l + 32] = ((b & 0x0F) | (((hh >> 2) & 3) << 4)) - 32
                block[128 * h + l + 64] = ((a >> 4) | (((hh >> 4) & 3) << 4)) - 32
                block[128 * h + l + 96] = ((b >> 4) | (((hh >> 6) & 3) << 4)) - 32
            for k in range(4):
                for half in range(2):
                    sub_scales.append(d * sc[8 * h + half + 2 * k])
        levels.extend(block)
    sub_scales = _f32(sub_scales)
    return _f32([sub_scales[i >> 4] * q for i, q in enumerate(levels)])


_PURE = {"F32": _pure_f32, "F16": _pure_f16, "BF16": _pure_bf16,
         "Q4_0": lambda r: _pure_small(r, 18, "q4_0"), "Q4_1": lambda r: _pure_small(r, 20, "q4_1"),
         "Q5_0": lambda r: _pure_small(r, 22, "q5_0"), "Q5_1": lambda r: _pure_small(r, 24, "q5_1"),
         "Q8_0": lambda r: _pure_small(r, 34, "q8_0"),
         "Q4_K": lambda r: _pure_kquant_4_5(r, 144, False), "Q5_K": lambda r: _pure_kquant_4_5(r, 176, True),
         "Q6_K": _pure_q6_k}
