"""pocketllm.gguf (pure numpy) against the C GGUF reader and the C reference
decoders (through the public pl_inspect_* API): same metadata, same tensor
table, bit-identical dequantization."""
import os

import numpy as np
import pytest

import pocketllm
from pocketllm import gguf
from pocketllm.native import InspectFile
from conftest import MODELS

ALL_FILES = sorted(p.name for p in MODELS.glob("*.gguf"))
# Every tensor of these is decoded by both and compared bit for bit.
DEQUANT_FILES = ["tiny-qwen3-f32.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3-bf16.gguf", "tiny-qwen3-q8_0.gguf",
                 "tiny-qwen3-q4_k_m.gguf", "tiny-qwen3-q6_k.gguf", "tiny-qwen3-q2_k.gguf",
                 "tiny-qwen3-untied-q4_k_m.gguf", "tiny-qwen2-q4_k_m.gguf"]


def test_fixture_list_is_complete():
    assert len(ALL_FILES) >= 19, ALL_FILES


def same_value(py, c, key):
    if isinstance(py, np.ndarray):
        assert len(py) == len(c), key
        a = np.asarray(c, dtype=np.float64 if py.dtype.kind == "f" else None)
        if py.dtype.kind == "f":
            np.testing.assert_array_equal(py.astype(np.float64), a, err_msg=key)
        else:
            assert py.tolist() == [type(x)(x) for x in c] if py.dtype != np.bool_ else py.tolist() == [bool(x) for x in c], key
    elif isinstance(py, float):
        assert py == pytest.approx(c, rel=0, abs=0), key
    else:
        assert py == c, key


@pytest.mark.parametrize("fname", ALL_FILES)
def test_reader_matches_c(fname):
    path = MODELS / fname
    py = gguf.GGUFFile(path)
    with InspectFile(path) as c:
        assert py.version == c.version
        assert py.alignment == c.alignment
        assert py.data_offset == c.data_offset
        assert list(py.metadata) == c.keys()
        for key, value in py.metadata.items():
            t, et, n = c.meta_type(key)
            vt, vet = py.value_types[key]
            assert int(vt) == t, key
            if vt == gguf.ValueType.ARRAY:
                assert int(vet) == et and len(value) == n, key
            same_value(value, c.get(key), key)
        ct = c.tensors()
        assert len(ct) == len(py.tensors)
        for a, b in zip(py.tensors, ct):
            assert a.name == b["name"]
            assert int(a.type) == b["type"] and a.type.ggml_name == b["type_name"], a.name
            assert a.shape == b["shape"], a.name
            assert a.offset == b["offset"] and a.nbytes == b["size"], a.name


@pytest.mark.parametrize("fname", [f for f in ALL_FILES if f != "tiny-imatrix.gguf"])
def test_model_meta_str_matches(fname):
    """pl_model_meta_str (the model's own accessor) agrees with the reader."""
    py = gguf.GGUFFile(MODELS / fname)
    with pocketllm.Model(MODELS / fname, vocab_only=True) as m:
        for key, value in py.metadata.items():
            if isinstance(value, str) and len(value.encode("utf-8", "surrogateescape")) < 65536:
                assert m.meta_str(key) == value, key
            elif not isinstance(value, str):
                assert m.meta_str(key) is None, key
        assert m.meta_str("no.such.key") is None


@pytest.mark.parametrize("fname", DEQUANT_FILES)
def test_dequantize_matches_c(fname):
    path = MODELS / fname
    py = gguf.GGUFFile(path)
    seen = set()
    with InspectFile(path) as c:
        for i, t in enumerate(py.tensors):
            assert gguf.can_dequantize(t.type), f"{t.name}: {t.type.ggml_name}"
            want = c.dequantize(i)
            got = t.dequantize()
            assert got.dtype == np.float32 and got.shape == want.shape, t.name
            # bit for bit (NaN-safe)
            diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            assert diff.size == 0, (f"{t.name} ({t.type.ggml_name}): {diff.size} elements differ, first at "
                                    f"{diff[0]}: {got.reshape(-1)[diff[0]]} vs {want.reshape(-1)[diff[0]]}")
            seen.add(t.type.ggml_name)
            # a row slice decodes the same rows
            if got.shape[0] > 3:
                np.testing.assert_array_equal(t.dequantize(slice(1, 3)), got[1:3])
                np.testing.assert_array_equal(c.dequantize(i, 1, 2), want[1:3])
    assert seen


def test_dequantize_covers_the_required_types():
    types = set()
    for f in DEQUANT_FILES:
        types |= {t.type.ggml_name for t in gguf.GGUFFile(MODELS / f).tensors}
    assert {"f32", "f16", "bf16", "q8_0", "q4_K", "q6_K"} <= types


def test_synthetic_blocks_all_decodable_types():
    """Random bytes of every type both decoders know (q4_0 .. q5_K included,
    which no fixture holds), through the C decoder via a written GGUF file."""
    rng = np.random.default_rng(1234)
    types = [t for t in gguf.GGMLType if gguf.can_dequantize(t)]
    tensors = []
    for t in types:
        bs, ts = gguf.TYPE_TRAITS[t]
        ne0 = 256 if bs == 256 else 64
        rows = 3
        raw = rng.integers(0, 256, size=rows * ne0 // bs * ts, dtype=np.uint8)
        if t in (gguf.GGMLType.F32,):
            raw = rng.standard_normal(rows * ne0).astype(np.float32).view(np.uint8)
        elif t in (gguf.GGMLType.F16,):
            raw = rng.standard_normal(rows * ne0).astype(np.float16).view(np.uint8)
        else:
            # keep f16 scales finite: rewrite every block's d/dmin with sane halves
            blocks = raw.reshape(-1, ts)
            for off in _half_offsets(t, ts):
                blocks[:, off:off + 2] = rng.uniform(-0.1, 0.1, blocks.shape[0]).astype(np.float16).view(
                    np.uint8).reshape(-1, 2)
        tensors.append((f"t.{t.name.lower()}", t, (ne0, rows), raw.tobytes()))
    path = _write_gguf(tensors)
    try:
        py = gguf.GGUFFile(path)
        with InspectFile(path) as c:
            for i, t in enumerate(py.tensors):
                want = c.dequantize(i)
                got = t.dequantize()
                np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=t.name)
    finally:
        os.unlink(path)


def _half_offsets(t, ts):
    T = gguf.GGMLType
    return {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82],
            T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.BF16: []}.get(t, [])


def _write_gguf(tensors, align=32):
    """A minimal GGUF v3 writer for the tests: general.alignment + tensors."""
    import struct
    import tempfile

    def s(x: bytes):
        return struct.pack("<Q", len(x)) + x

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    head += s(b"general.alignment") + struct.pack("<II", 4, align)
    data = b""
    infos = b""
    for name, t, shape, raw in tensors:
        off = len(data)
        infos += s(name.encode()) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        infos += struct.pack("<IQ", int(t), off)
        data += raw + b"\0" * (-len(raw) % align)
    blob = head + infos
    blob += b"\0" * (-len(blob) % align)
    fd, path = tempfile.mkstemp(suffix=".gguf")
    with os.fdopen(fd, "wb") as f:
        f.write(blob + data)
    return path


# ---- corrupt files: both readers refuse them -----------------------------------


def _corrupt(tmp_path, src, mutate, name="bad.gguf"):
    data = bytearray((MODELS / src).read_bytes())
    data = mutate(data)
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize("what,mutate", [
    ("truncated", lambda d: d[:len(d) // 2]),
    ("header only", lambda d: d[:20]),
    ("bad magic", lambda d: b"GGUX" + d[4:]),
    ("version 1", lambda d: d[:4] + (1).to_bytes(4, "little") + d[8:]),
    ("version 9", lambda d: d[:4] + (9).to_bytes(4, "little") + d[8:]),
])
def test_corrupt_files_rejected_by_both(tmp_path, what, mutate):
    p = _corrupt(tmp_path, "tiny-qwen3-q8_0.gguf", mutate)
    with pytest.raises(gguf.GGUFError):
        gguf.GGUFFile(p)
    with pytest.raises(pocketllm.FormatError) as e:
        InspectFile(p)
    assert "bad.gguf" in str(e.value)
    with pytest.raises(pocketllm.FormatError) as e2:
        pocketllm.Model(p)
    assert str(e2.value) == pocketllm.native.last_error()


def test_empty_file(tmp_path):
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    with pytest.raises(gguf.GGUFError, match="empty"):
        gguf.GGUFFile(p)
    with pytest.raises(pocketllm.PocketLLMError):
        InspectFile(p)


def test_reader_api():
    f = gguf.GGUFFile(MODELS / "tiny-qwen3-q4_k_m.gguf")
    assert f.architecture == "qwen3"
    assert f["general.architecture"] == "qwen3" and "general.architecture" in f
    emb = f.tensor("token_embd.weight")
    assert emb.numpy_shape == tuple(reversed(emb.shape))
    w = emb.dequantize()
    assert w.shape == (emb.shape[1], emb.shape[0]) and np.isfinite(w).all()
    assert isinstance(f.metadata["tokenizer.ggml.tokens"], list)
    assert "token_embd.weight" in f.summary()
    with pytest.raises(KeyError):
        f.tensor("nope")
    iq = gguf.GGUFFile(MODELS / "tiny-qwen3-iq2_xs.gguf")
    t = next(t for t in iq.tensors if t.type == gguf.GGMLType.IQ2_XS)
    with pytest.raises(pocketllm.UnsupportedError):
        t.dequantize()
    f.close()
