"""The tensor table of a GGUF file as plain Python values, for the CLI tests'
checks, read with the package's reader (python/pocketllm/gguf.py).

    kv, ts = read(path)
    kv:  key -> value (pocketllm.gguf's metadata)
    ts:  name -> (dims, ggml type as int, the tensor's bytes, file offset);
         dims in GGML order (dims[0] is the row length)
"""
import struct

from pocketllm import gguf


def read(path):
    with gguf.open(path) as f:
        ts = {t.name: (list(t.shape), int(t.type), t.data.tobytes(), t.file_offset) for t in f.tensors}
        return dict(f.metadata), ts


def floats(b, n):
    """The first n little-endian f32 values of bytes b."""
    return list(struct.unpack_from('<%df' % n, b))
