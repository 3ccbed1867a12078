"""A pure-Python (numpy) GGUF reader, for inspection.

Independent of libpocketllm: written from the GGUF specification (versions
2 and 3, little-endian) and GGML's block layouts. It reads the metadata,
the tensor table, and decodes tensors of types f32, f16, bf16, q4_0, q4_1,
q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K and q6_K to float32, computing in
float32 in the same order as GGML's reference decoders (so the results are
bit-identical to them).

    from pocketllm import gguf
    with gguf.GGUFFile("model.gguf") as f:
        print(f.metadata["general.architecture"])
        for t in f.tensors:
            print(t.name, t.type.name, t.shape)
        w = f.tensor("token_embd.weight").dequantize()   # float32 [rows, ne0]

File layout (all little-endian):
    u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
    n_kv x (string key, u32 value type, value),
    n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 type, u64 offset),
    padding to general.alignment (default 32), then the tensor data.
A string is a u64 length and that many UTF-8 bytes; an array is a u32
element type, a u64 count and the elements.
"""
from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import FormatError

__all__ = ["GGUFFile", "GGUFError", "GGMLType", "ValueType", "TensorInfo", "TYPE_TRAITS", "dequantize",
           "can_dequantize"]

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4


class GGUFError(FormatError):
    """The file is not a valid GGUF file (the message names the problem)."""


class ValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR = {  # value type -> (struct format, numpy dtype)
    ValueType.UINT8: ("<B", np.uint8), ValueType.INT8: ("<b", np.int8),
    ValueType.UINT16: ("<H", np.uint16), ValueType.INT16: ("<h", np.int16),
    ValueType.UINT32: ("<I", np.uint32), ValueType.INT32: ("<i", np.int32),
    ValueType.FLOAT32: ("<f", np.float32), ValueType.BOOL: ("<?", np.bool_),
    ValueType.UINT64: ("<Q", np.uint64), ValueType.INT64: ("<q", np.int64),
    ValueType.FLOAT64: ("<d", np.float64),
}


class GGMLType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39

    @property
    def ggml_name(self) -> str:
        """GGML's spelling: "f16", "q4_K", "iq2_xxs", ..."""
        n = self.name.lower()
        return n[:-2] + "_K" if n.endswith("_k") else n


QK_K = 256
# type -> (elements per block, bytes per block), GGML's type traits.
TYPE_TRAITS: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4), GGMLType.F16: (1, 2), GGMLType.BF16: (1, 2), GGMLType.F64: (1, 8),
    GGMLType.I8: (1, 1), GGMLType.I16: (1, 2), GGMLType.I32: (1, 4), GGMLType.I64: (1, 8),
    GGMLType.Q4_0: (32, 18), GGMLType.Q4_1: (32, 20), GGMLType.Q5_0: (32, 22), GGMLType.Q5_1: (32, 24),
    GGMLType.Q8_0: (32, 34), GGMLType.Q8_1: (32, 36),
    GGMLType.Q2_K: (QK_K, 84), GGMLType.Q3_K: (QK_K, 110), GGMLType.Q4_K: (QK_K, 144),
    GGMLType.Q5_K: (QK_K, 176), GGMLType.Q6_K: (QK_K, 210), GGMLType.Q8_K: (QK_K, 292),
    GGMLType.IQ2_XXS: (QK_K, 66), GGMLType.IQ2_XS: (QK_K, 74), GGMLType.IQ3_XXS: (QK_K, 98),
    GGMLType.IQ1_S: (QK_K, 50), GGMLType.IQ4_NL: (32, 18), GGMLType.IQ3_S: (QK_K, 110),
    GGMLType.IQ2_S: (QK_K, 82), GGMLType.IQ4_XS: (QK_K, 136), GGMLType.IQ1_M: (QK_K, 56),
    GGMLType.TQ1_0: (QK_K, 54), GGMLType.TQ2_0: (QK_K, 66), GGMLType.MXFP4: (32, 17),
}


@dataclass
class TensorInfo:
    """One entry of the tensor table.

    shape   GGML order: shape[0] is the innermost (contiguous) dimension
    offset  bytes from the start of the data section
    """
    name: str
    type: GGMLType
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    _file: "GGUFFile"

    @property
    def n_dims(self) -> int:
        return len(self.shape)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def numpy_shape(self) -> tuple[int, ...]:
        """The shape in numpy (row-major) order: reversed(shape)."""
        return tuple(reversed(self.shape))

    @property
    def file_offset(self) -> int:
        return self._file.data_offset + self.offset

    @property
    def data(self) -> np.ndarray:
        """The tensor's raw bytes (a read-only uint8 view into the file)."""
        return self._file._bytes(self.file_offset, self.nbytes)

    def dequantize(self, rows: slice | None = None) -> np.ndarray:
        """The tensor decoded to float32, shaped [n_rows, shape[0]] (all
        dimensions above the first flattened into rows). rows: a slice of
        rows to decode (default all)."""
        ne0 = self.shape[0]
        n_rows = self.n_elements // ne0 if ne0 else 0
        start, stop, step = (rows or slice(None)).indices(n_rows)
        if step != 1:
            raise ValueError("rows must be a contiguous slice")
        bs, ts = TYPE_TRAITS[self.type]
        row_bytes = ne0 // bs * ts
        n = max(stop - start, 0)
        raw = self._file._bytes(self.file_offset + start * row_bytes, n * row_bytes)
        return dequantize(raw, self.type, n * ne0).reshape(n, ne0)

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.type.ggml_name}, shape={self.shape}, offset={self.offset})"


class _Reader:
    def __init__(self, buf: np.ndarray, name: str):
        self.buf = buf
        self.pos = 0
        self.name = name

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.buf.size:
            raise GGUFError(f"{self.name}: file is truncated in {what} (offset {self.pos})")

    def scalar(self, vt: ValueType, what: str):
        fmt, _ = _SCALAR[vt]
        size = struct.calcsize(fmt)
        self.need(size, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        return self.scalar(ValueType.UINT32, what)

    def u64(self, what: str) -> int:
        return self.scalar(ValueType.UINT64, what)

    def raw_string(self, what: str) -> bytes:
        n = self.u64(what)
        self.need(n, what)
        b = self.buf[self.pos:self.pos + n].tobytes()
        self.pos += n
        return b

    def string(self, what: str) -> str:
        return self.raw_string(what).decode("utf-8", "surrogateescape")

    def value(self, vt: int, what: str, depth: int = 0):
        try:
            vt = ValueType(vt)
        except ValueError:
            raise GGUFError(f"{self.name}: {what} has unknown value type {vt}") from None
        if vt == ValueType.STRING:
            return self.string(what)
        if vt == ValueType.ARRAY:
            if depth > 8:
                raise GGUFError(f"{self.name}: {what}: arrays nested too deeply")
            et = self.u32(what)
            n = self.u64(what)
            try:
                et = ValueType(et)
            except ValueError:
                raise GGUFError(f"{self.name}: {what} has unknown array element type {et}") from None
            if et in _SCALAR:
                fmt, dt = _SCALAR[et]
                size = struct.calcsize(fmt)
                if n > self.buf.size // size + 1:
                    raise GGUFError(f"{self.name}: file is truncated in {what} (array of {n} elements)")
                self.need(n * size, what)
                a = np.frombuffer(self.buf, dtype=np.dtype(dt).newbyteorder("<"), count=n, offset=self.pos)
                self.pos += n * size
                return a.copy() if et != ValueType.BOOL else a.astype(bool)
            if n > self.buf.size // 8 + 1:
                raise GGUFError(f"{self.name}: file is truncated in {what} (array of {n} elements)")
            return [self.value(et, what, depth + 1) for _ in range(n)]
        return self.scalar(vt, what)


class GGUFFile:
    """A GGUF file, memory-mapped and validated on open.

    version       GGUF version (2 or 3)
    metadata      dict key -> value: int / float / bool / str, numpy array
                  for numeric arrays, list for string (or nested) arrays.
                  Strings are UTF-8 decoded with 'surrogateescape' (lossless)
    value_types   dict key -> (ValueType, element ValueType or None)
    tensors       list of TensorInfo, in file order
    alignment     general.alignment (default 32)
    data_offset   file offset of the data section
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        name = os.path.basename(self.path)
        if os.path.getsize(self.path) == 0:
            raise GGUFError(f"{name}: file is empty")
        self._buf = np.memmap(self.path, dtype=np.uint8, mode="r")
        r = _Reader(self._buf, name)
        r.need(4, "the magic")
        magic = self._buf[:4].tobytes()
        r.pos = 4
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{name}: not a GGUF file (magic {magic!r})")
        self.version = r.u32("the GGUF version")
        if self.version not in (2, 3):
            raise GGUFError(f"{name}: unsupported GGUF version {self.version} (only versions 2 and 3)")
        n_tensors = r.u64("the tensor count")
        n_kv = r.u64("the key/value count")
        if n_kv > self._buf.size // 12 + 1 or n_tensors > self._buf.size // 24 + 1:
            raise GGUFError(f"{name}: implausible counts ({n_tensors} tensors, {n_kv} keys) for the file size")

        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, tuple[ValueType, ValueType | None]] = {}
        for i in range(n_kv):
            key = r.string(f"key {i}")
            vt = r.u32(f"the type of key '{key}'")
            et = None
            if vt == ValueType.ARRAY:
                save = r.pos
                et_raw = r.u32(f"key '{key}'")
                r.pos = save
                et = ValueType(et_raw) if et_raw in ValueType._value2member_map_ else None
            v = r.value(vt, f"key '{key}'")
            if key in self.metadata:
                raise GGUFError(f"{name}: duplicate key '{key}'")
            self.metadata[key] = v
            self.value_types[key] = (ValueType(vt), et)

        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.metadata:
            a = self.metadata["general.alignment"]
            if self.value_types["general.alignment"][0] != ValueType.UINT32:
                raise GGUFError(f"{name}: general.alignment must be u32")
            if a == 0 or a & (a - 1):
                raise GGUFError(f"{name}: general.alignment {a} is not a nonzero power of two")
            self.alignment = a

        self.tensors: list[TensorInfo] = []
        self._by_name: dict[str, TensorInfo] = {}
        for i in range(n_tensors):
            tname = r.string(f"the name of tensor {i}")
            n_dims = r.u32(f"tensor '{tname}'")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(f"{name}: tensor '{tname}' has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
            shape = tuple(r.u64(f"tensor '{tname}'") for _ in range(n_dims))
            t = r.u32(f"tensor '{tname}'")
            offset = r.u64(f"tensor '{tname}'")
            try:
                gt = GGMLType(t)
            except ValueError:
                raise GGUFError(f"{name}: tensor '{tname}' has unknown type {t}") from None
            bs, ts = TYPE_TRAITS[gt]
            n_el = 1
            for d in shape:
                if d >= 2**63:
                    raise GGUFError(f"{name}: tensor '{tname}' has a bad dimension {d}")
                n_el *= d
            if n_el >= 2**63:
                raise GGUFError(f"{name}: tensor '{tname}' has too many elements")
            if shape[0] % bs:
                raise GGUFError(f"{name}: tensor '{tname}': row of {shape[0]} elements is not a multiple of "
                                f"the {gt.ggml_name} block size {bs}")
            if offset % self.alignment:
                raise GGUFError(f"{name}: tensor '{tname}' offset {offset} is not a multiple of the alignment "
                                f"{self.alignment}")
            if tname in self._by_name:
                raise GGUFError(f"{name}: duplicate tensor name '{tname}'")
            info = TensorInfo(tname, gt, shape, offset, n_el // bs * ts, self)
            self.tensors.append(info)
            self._by_name[tname] = info

        self.data_offset = -(-r.pos // self.alignment) * self.alignment
        size = self._buf.size
        for t in self.tensors:
            if self.data_offset + t.offset + t.nbytes > size:
                raise GGUFError(f"{name}: tensor '{t.name}' extends past end of file")

    # ---- access ----

    def _bytes(self, offset: int, n: int) -> np.ndarray:
        if self._buf is None:
            raise ValueError("the GGUF file is closed")
        return self._buf[offset:offset + n]

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no tensor named '{name}'") from None

    def __contains__(self, key: str) -> bool:
        return key in self.metadata

    def __getitem__(self, key: str):
        return self.metadata[key]

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    def close(self) -> None:
        """Drops the mapping (arrays already taken from it stay valid)."""
        self._buf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def summary(self) -> str:
        """A short human-readable description."""
        lines = [f"{self.path}: GGUF v{self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors"]
        for k, v in self.metadata.items():
            if isinstance(v, (list, np.ndarray)):
                s = f"[{len(v)} x {self.value_types[k][1].name.lower() if self.value_types[k][1] else '?'}]"
            else:
                s = repr(v)
                if len(s) > 80:
                    s = s[:77] + "..."
            lines.append(f"  {k} = {s}")
        for t in self.tensors:
            lines.append(f"  {t.name}: {t.type.ggml_name} {list(t.shape)}")
        return "\n".join(lines)


def open(path: str | os.PathLike) -> GGUFFile:  # noqa: A001 - mirrors gguf.open-style helpers
    return GGUFFile(path)


# ---- dequantization -----------------------------------------------------------

_F32 = np.float32


def _blocks(raw: np.ndarray, t: GGMLType, n: int) -> np.ndarray:
    bs, ts = TYPE_TRAITS[t]
    if n % bs:
        raise ValueError(f"{n} elements is not a multiple of the {t.ggml_name} block size {bs}")
    nb = n // bs
    if raw.size < nb * ts:
        raise ValueError(f"{raw.size} bytes hold fewer than {nb} {t.ggml_name} blocks")
    return np.ascontiguousarray(raw[:nb * ts]).reshape(nb, ts)


def _half_col(b: np.ndarray, off: int) -> np.ndarray:
    """The f16 at byte offset off of every block, as float32 [nb, 1]."""
    return b[:, off:off + 2].copy().view("<f2").astype(_F32)


def _deq_f32(raw, n):
    return np.ascontiguousarray(raw[:4 * n]).view("<f4").astype(_F32)


def _deq_f16(raw, n):
    return np.ascontiguousarray(raw[:2 * n]).view("<f2").astype(_F32)


def _deq_bf16(raw, n):
    u = np.ascontiguousarray(raw[:2 * n]).view("<u2").astype(np.uint32) << 16
    return u.view(_F32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Element j in the low nibble of qs[j], element j+16 in its high nibble."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _deq_q4_0(raw, n):
    b = _blocks(raw, GGMLType.Q4_0, n)
    d = _half_col(b, 0)
    q = _nibbles(b[:, 2:18]).astype(np.int32) - 8
    return (q.astype(_F32) * d).reshape(-1)


def _deq_q4_1(raw, n):
    b = _blocks(raw, GGMLType.Q4_1, n)
    d, m = _half_col(b, 0), _half_col(b, 2)
    q = _nibbles(b[:, 4:20]).astype(_F32)
    return (q * d + m).reshape(-1)


def _q5_high(qh_bytes: np.ndarray) -> np.ndarray:
    """Bit j of the little-endian u32 qh, for j in 0..31, as [nb, 32] 0/16."""
    qh = np.ascontiguousarray(qh_bytes).view("<u4").astype(np.uint32)   # [nb, 1]
    bits = (qh >> np.arange(32, dtype=np.uint32)) & 1
    return (bits << 4).astype(np.int32)


def _deq_q5_0(raw, n):
    b = _blocks(raw, GGMLType.Q5_0, n)
    d = _half_col(b, 0)
    q = _nibbles(b[:, 6:22]).astype(np.int32) | _q5_high(b[:, 2:6])
    return ((q - 16).astype(_F32) * d).reshape(-1)


def _deq_q5_1(raw, n):
    b = _blocks(raw, GGMLType.Q5_1, n)
    d, m = _half_col(b, 0), _half_col(b, 2)
    q = _nibbles(b[:, 8:24]).astype(np.int32) | _q5_high(b[:, 4:8])
    return (q.astype(_F32) * d + m).reshape(-1)


def _deq_q8_0(raw, n):
    b = _blocks(raw, GGMLType.Q8_0, n)
    d = _half_col(b, 0)
    q = b[:, 2:34].view(np.int8).astype(_F32)
    return (q * d).reshape(-1)


def _deq_q2_K(raw, n):
    # scales[16], qs[64], d, dmin. For each 128-element half h (qs bytes
    # 32h..32h+31) and shift s = 0,2,4,6: elements 32*(4h + s/2) + l, l < 32,
    # are (qs[32h + l] >> s) & 3, sub-block scale index 8h + s + (l >= 16).
    b = _blocks(raw, GGMLType.Q2_K, n)
    nb = b.shape[0]
    sc = b[:, 0:16]
    qs = b[:, 16:80].reshape(nb, 2, 1, 32)
    d, dmin = _half_col(b, 80), _half_col(b, 82)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    q = ((qs >> shifts) & 3).reshape(nb, 16, 16)           # [nb, sub-block, 16]
    dl = d * (sc & 0xF).astype(_F32)                        # [nb, 16]
    ml = dmin * (sc >> 4).astype(_F32)
    return (dl[:, :, None] * q.astype(_F32) - ml[:, :, None]).reshape(-1)


def _deq_q3_K(raw, n):
    # hmask[32], qs[64], scales[12], d.
    b = _blocks(raw, GGMLType.Q3_K, n)
    nb = b.shape[0]
    hm = b[:, 0:32]
    qs = b[:, 32:96].reshape(nb, 2, 1, 32)
    aux = np.ascontiguousarray(b[:, 96:108]).view("<u4").astype(np.uint32)   # [nb, 3]
    d = _half_col(b, 108)
    km1, km2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
    a0, a1, tmp = aux[:, 0], aux[:, 1], aux[:, 2]
    s = np.stack([(a0 & km2) | (((tmp >> 0) & km1) << 4),
                  (a1 & km2) | (((tmp >> 2) & km1) << 4),
                  ((a0 >> 4) & km2) | (((tmp >> 4) & km1) << 4),
                  ((a1 >> 4) & km2) | (((tmp >> 6) & km1) << 4)], axis=1).astype("<u4")
    scales = np.ascontiguousarray(s).view(np.int8).reshape(nb, 16).astype(np.int32)   # 16 x 6-bit, as int8
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    low = ((qs >> shifts) & 3).astype(np.int32).reshape(nb, 8, 32)      # [nb, 2 halves * 4 shifts, 32]
    # The high bit of element group g (0..7, 32 elements each) is bit g of hm[l].
    hbit = ((hm[:, None, :] >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1).astype(np.int32)
    q = (low - np.where(hbit != 0, 0, 4)).reshape(nb, 16, 16)
    dl = d * (scales - 32).astype(_F32)
    return (dl[:, :, None] * q.astype(_F32)).reshape(-1)


def _k4_scales(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 (scale, min) 6-bit pairs packed in 12 bytes (q4_K, q5_K)."""
    sc = sc.astype(np.uint8)
    lo_s = sc[:, 0:4] & 63
    lo_m = sc[:, 4:8] & 63
    hi_s = (sc[:, 8:12] & 0x0F) | ((sc[:, 0:4] >> 6) << 4)
    hi_m = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return np.concatenate([lo_s, hi_s], axis=1), np.concatenate([lo_m, hi_m], axis=1)


def _deq_q4_K(raw, n):
    # d, dmin, scales[12], qs[128]: per 64 elements, 32 bytes; the first 32
    # elements in the low nibbles, the next 32 in the high ones.
    b = _blocks(raw, GGMLType.Q4_K, n)
    nb = b.shape[0]
    d, dmin = _half_col(b, 0), _half_col(b, 2)
    sc, mn = _k4_scales(b[:, 4:16])
    qs = b[:, 16:144].reshape(nb, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(nb, 8, 32)
    d1 = d * sc.astype(_F32)
    m1 = dmin * mn.astype(_F32)
    return (d1[:, :, None] * q.astype(_F32) - m1[:, :, None]).reshape(-1)


def _deq_q5_K(raw, n):
    # d, dmin, scales[12], qh[32], qs[128]; the fifth bit of sub-block g
    # (0..7) element l is bit g of qh[l].
    b = _blocks(raw, GGMLType.Q5_K, n)
    nb = b.shape[0]
    d, dmin = _half_col(b, 0), _half_col(b, 2)
    sc, mn = _k4_scales(b[:, 4:16])
    qh = b[:, 16:48]
    qs = b[:, 48:176].reshape(nb, 4, 32)
    low = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(nb, 8, 32).astype(np.int32)
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1).astype(np.int32) << 4
    q = low + high
    d1 = d * sc.astype(_F32)
    m1 = dmin * mn.astype(_F32)
    return (d1[:, :, None] * q.astype(_F32) - m1[:, :, None]).reshape(-1)


def _deq_q6_K(raw, n):
    # ql[128], qh[64], scales[16] (int8), d. Per 128-element half h:
    # ql bytes 64h.., qh bytes 32h.., scales 8h..; for l < 32:
    #   element l      : low nibble of ql[l],    qh[l] bits 0-1, scale l/16
    #   element l + 32 : low nibble of ql[l+32], qh[l] bits 2-3, scale 2 + l/16
    #   element l + 64 : high nibble of ql[l],   qh[l] bits 4-5, scale 4 + l/16
    #   element l + 96 : high nibble of ql[l+32], qh[l] bits 6-7, scale 6 + l/16
    b = _blocks(raw, GGMLType.Q6_K, n)
    nb = b.shape[0]
    ql = b[:, 0:128].reshape(nb, 2, 2, 32)        # [nb, half, (l, l+32), 32]
    qh = b[:, 128:192].reshape(nb, 2, 1, 32)
    scales = b[:, 192:208].view(np.int8).astype(_F32).reshape(nb, 2, 4, 2)   # [nb, half, group, l/16]
    d = _half_col(b, 208).reshape(nb, 1, 1, 1)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)   # groups 0..3: ql[l]&F, ql[l+32]&F, ql[l]>>4, ql[l+32]>>4
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (qh >> shifts) & 3                              # [nb, 2, 4, 32]
    q = ((low.astype(np.int32) | (high.astype(np.int32) << 4)) - 32).astype(_F32)
    # scale for (group g, l) = scales[8h + 2g + l/16]
    s = np.repeat(scales, 16, axis=3)                      # [nb, 2, 4, 32]
    return ((d * s) * q).reshape(-1)


_DEQUANT = {
    GGMLType.F32: _deq_f32, GGMLType.F16: _deq_f16, GGMLType.BF16: _deq_bf16,
    GGMLType.Q4_0: _deq_q4_0, GGMLType.Q4_1: _deq_q4_1, GGMLType.Q5_0: _deq_q5_0, GGMLType.Q5_1: _deq_q5_1,
    GGMLType.Q8_0: _deq_q8_0, GGMLType.Q2_K: _deq_q2_K, GGMLType.Q3_K: _deq_q3_K, GGMLType.Q4_K: _deq_q4_K,
    GGMLType.Q5_K: _deq_q5_K, GGMLType.Q6_K: _deq_q6_K,
}


def can_dequantize(t: int) -> bool:
    return t in _DEQUANT


def dequantize(raw, t: int, n: int) -> np.ndarray:
    """Decodes the first n elements (a multiple of the block size) of raw
    bytes of GGML type t to a float32 array of n."""
    t = GGMLType(t)
    fn = _DEQUANT.get(t)
    if fn is None:
        from .errors import UnsupportedError
        raise UnsupportedError(f"no decoder for type {t.ggml_name} in pocketllm.gguf")
    raw = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    bs, ts = TYPE_TRAITS[t]
    if n % bs:
        raise ValueError(f"{n} elements is not a multiple of the {t.ggml_name} block size {bs}")
    if raw.size < n // bs * ts:
        raise ValueError(f"{raw.size} bytes hold fewer than {n} {t.ggml_name} elements")
    if n == 0:
        return np.empty(0, dtype=_F32)
    return fn(raw, n)
