#!/usr/bin/env python3
"""Copies a GGUF file with one string metadata value set (added or replaced),
its bytes read verbatim from a file (so they may hold anything, NUL included):

    gguf_set_str.py IN.gguf OUT.gguf KEY VALUE_FILE

Tensor infos and data are copied unchanged (their offsets are relative to the
data section, which is re-aligned after the new header). Used by
tests/cli/chat_template_meta.sh and to make the seeds of
tests/fuzz/fuzz_chat_template_gguf.c."""
import struct
import sys

# Sizes of GGUF's fixed-size value types; 8 = string, 9 = array.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(buf, off, vtype):
    if vtype in FIXED:
        return off + FIXED[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, off)
        return off + 8 + n
    if vtype == 9:
        etype, n = struct.unpack_from("<IQ", buf, off)
        off += 12
        if etype in FIXED:
            return off + FIXED[etype] * n
        for _ in range(n):
            off = skip_value(buf, off, etype)
        return off
    raise SystemExit(f"unknown GGUF value type {vtype}")


def read_str(buf, off):
    (n,) = struct.unpack_from("<Q", buf, off)
    return buf[off + 8:off + 8 + n], off + 8 + n


def gguf_str(b):
    return struct.pack("<Q", len(b)) + b


def main():
    src, dst, key, value_file = sys.argv[1:5]
    buf = open(src, "rb").read()
    value = open(value_file, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version < 2:
        raise SystemExit(f"{src}: not a GGUF v2+ file")
    off = 24
    kvs = []          # (key, raw bytes of type + value)
    alignment = 32
    for _ in range(n_kv):
        k, off = read_str(buf, off)
        (vtype,) = struct.unpack_from("<I", buf, off)
        end = skip_value(buf, off + 4, vtype)
        if k == b"general.alignment" and vtype == 4:
            (alignment,) = struct.unpack_from("<I", buf, off + 4)
        kvs.append((k, buf[off:end]))
        off = end
    tinfo_start = off
    for _ in range(n_tensors):
        _, off = read_str(buf, off)
        (n_dims,) = struct.unpack_from("<I", buf, off)
        off += 4 + 8 * n_dims + 4 + 8
    tinfos = buf[tinfo_start:off]
    data_start = (off + alignment - 1) // alignment * alignment if n_tensors else off
    data = buf[data_start:] if n_tensors else b""

    new_val = struct.pack("<I", 8) + gguf_str(value)
    kvs = [(k, new_val if k == key.encode() else v) for k, v in kvs]
    if not any(k == key.encode() for k, _ in kvs):
        kvs.append((key.encode(), new_val))
    out = bytearray(struct.pack("<4sIQQ", b"GGUF", version, n_tensors, len(kvs)))
    for k, v in kvs:
        out += gguf_str(k) + v
    out += tinfos
    if n_tensors:
        out += b"\0" * ((-len(out)) % alignment)
        out += data
    open(dst, "wb").write(out)


if __name__ == "__main__":
    main()
