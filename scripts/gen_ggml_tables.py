#!/usr/bin/env python3
"""Generates src/quant/ggml_tables.{h,c} from tests/fixtures/quant/ggml-tables.json.

The JSON holds GGML's block-format constant tables (MIT): the codebooks of the
IQ quantization types (grids, sign tables, non-linear value sets). This script
is their provenance: it checks each table's element type, length and value
range, derives the few helper tables the SIMD kernels want (documented below,
each one checked against the table it comes from), and writes C arrays with a
stable layout. The output is a pure function of the JSON, byte for byte, so
re-running it on the committed JSON must leave the committed files unchanged:

    python3 scripts/gen_ggml_tables.py            # rewrite the two files
    python3 scripts/gen_ggml_tables.py --check    # exit 1 if they are stale
"""
import argparse
import json
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
JSON_PATH = os.path.join(ROOT, "tests", "fixtures", "quant", "ggml-tables.json")
OUT_H = os.path.join(ROOT, "src", "quant", "ggml_tables.h")
OUT_C = os.path.join(ROOT, "src", "quant", "ggml_tables.c")

# The tables we expect: JSON name -> (C type, length, C name, one-line meaning).
TABLES = [
    ("kmask_iq2xs", "uint8_t", 8, "pl_kmask_iq2xs",
     "bit j set (1 << j): picks sign bit j of a ksigns_iq2xs byte"),
    ("ksigns_iq2xs", "uint8_t", 128, "pl_ksigns_iq2xs",
     "7 stored sign bits -> 8 sign bits (bit 7 makes the count of set bits even)"),
    ("ksigns64", "uint64_t", 128, "pl_ksigns64",
     "ksigns_iq2xs spread to bytes: byte j = 0xFF if bit j is set, else 0x00"),
    ("iq2xxs_grid", "uint64_t", 256, "pl_iq2xxs_grid",
     "IQ2_XXS codebook: 8 magnitudes per entry, one per byte (values 8, 25, 43)"),
    ("iq2xs_grid", "uint64_t", 512, "pl_iq2xs_grid",
     "IQ2_XS codebook: 8 magnitudes per entry, one per byte (values 8, 25, 43)"),
    ("iq2s_grid", "uint64_t", 1024, "pl_iq2s_grid",
     "IQ2_S codebook: 8 magnitudes per entry, one per byte (values 8, 25, 43)"),
    ("iq3xxs_grid", "uint32_t", 256, "pl_iq3xxs_grid",
     "IQ3_XXS codebook: 4 magnitudes per entry, one per byte"),
    ("iq3s_grid", "uint32_t", 512, "pl_iq3s_grid",
     "IQ3_S codebook: 4 magnitudes per entry, one per byte"),
    ("kvalues_iq4nl", "int8_t", 16, "pl_kvalues_iq4nl",
     "IQ4_NL / IQ4_XS non-linear levels, indexed by the 4-bit code"),
    ("kvalues_fp4", "int8_t", 16, "pl_kvalues_fp4",
     "MXFP4 (E2M1) levels times 2, indexed by the 4-bit code"),
    ("iq1s_grid", "uint64_t", 2048, "pl_iq1s_grid",
     "IQ1_S / IQ1_M codebook: 8 int8 values in {-1, 0, +1} per entry, one per byte"),
]

RANGES = {"uint8_t": (0, 255), "int8_t": (-128, 127), "uint32_t": (0, 2**32 - 1), "uint64_t": (0, 2**64 - 1)}
CONSTANTS = [("NGRID_IQ1S", "PL_NGRID_IQ1S"), ("IQ1S_DELTA", "PL_IQ1S_DELTA"), ("IQ1M_DELTA", "PL_IQ1M_DELTA")]


def fail(msg):
    sys.stderr.write("gen_ggml_tables: %s\n" % msg)
    sys.exit(2)


def load(path):
    with open(path, "r", encoding="utf-8") as f:
        d = json.load(f)
    for k in ("source", "constants", "tables", "note"):
        if k not in d:
            fail("%s: missing key '%s'" % (path, k))
    tabs = {}
    for name, ctype, n, _, _ in TABLES:
        t = d["tables"].get(name)
        if t is None:
            fail("missing table %s" % name)
        if t.get("type") != ctype:
            fail("%s: type %r, expected %r" % (name, t.get("type"), ctype))
        vals = [int(v) for v in t["values"]]   # uint64 values are strings
        if len(vals) != n:
            fail("%s: %d values, expected %d" % (name, len(vals), n))
        lo, hi = RANGES[ctype]
        if any(v < lo or v > hi for v in vals):
            fail("%s: value out of %s range" % (name, ctype))
        tabs[name] = vals
    extra = sorted(set(d["tables"]) - {t[0] for t in TABLES})
    if extra:
        fail("unexpected tables %s (teach the script about them)" % extra)
    return d, tabs


def derive(d, tabs):
    """Consistency checks and the derived tables."""
    if int(d["constants"]["NGRID_IQ1S"]) != len(tabs["iq1s_grid"]):
        fail("NGRID_IQ1S does not match iq1s_grid")
    for i in range(8):
        if tabs["kmask_iq2xs"][i] != 1 << i:
            fail("kmask_iq2xs[%d]" % i)
    pm1 = []
    for i, s in enumerate(tabs["ksigns_iq2xs"]):
        # the stored 7 bits are the low bits; bit 7 is the parity of them
        if s & 127 != i or (bin(s).count("1") & 1):
            fail("ksigns_iq2xs[%d] = %d is not i + even parity" % (i, s))
        m = sum((0xFF << (8 * j)) for j in range(8) if s >> j & 1)
        if tabs["ksigns64"][i] != m:
            fail("ksigns64[%d] does not spread ksigns_iq2xs[%d]" % (i, i))
        pm1.append(m | 0x0101010101010101)
    for name in ("iq2xxs_grid", "iq2xs_grid", "iq2s_grid"):
        for v in tabs[name]:
            if any((v >> (8 * j)) & 0xFF not in (8, 25, 43) for j in range(8)):
                fail("%s: magnitude outside {8, 25, 43}" % name)
    for v in tabs["iq1s_grid"]:
        if any((v >> (8 * j)) & 0xFF not in (0x00, 0x01, 0xFF) for j in range(8)):
            fail("iq1s_grid: byte outside {-1, 0, 1}")
    return {"ksigns_pm1": pm1}


def fmt_c_float(s):
    s = s.strip()
    return s if s.endswith("f") else s + "f"


def emit_array(ctype, cname, vals, per_line, width):
    out = ["const %s %s[%d] = {" % (ctype, cname, len(vals))]
    for i in range(0, len(vals), per_line):
        chunk = vals[i:i + per_line]
        if ctype == "uint64_t":
            items = ["0x%016xu" % v for v in chunk]
        elif ctype == "uint32_t":
            items = ["0x%08xu" % v for v in chunk]
        else:
            items = ["%*d" % (width, v) for v in chunk]
        out.append("    " + ", ".join(items) + ",")
    out.append("};")
    return "\n".join(out) + "\n"


def provenance_comment(d, what):
    return """/*
 * %s
 *
 * GENERATED by scripts/gen_ggml_tables.py from tests/fixtures/quant/ggml-tables.json;
 * do not edit by hand (re-run the script; `--check` verifies the files are current).
 *
 * Source: %s
 * Note: %s
 *
 * The table values are data from ggml (https://github.com/ggml-org/ggml,
 * https://github.com/ggml-org/llama.cpp), which is distributed under the MIT
 * License:
 *
 *   Copyright (c) 2023-2026 The ggml authors
 *
 *   Permission is hereby granted, free of charge, to any person obtaining a copy
 *   of this software and associated documentation files (the "Software"), to deal
 *   in the Software without restriction, including without limitation the rights
 *   to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 *   copies of the Software, and to permit persons to whom the Software is
 *   furnished to do so, subject to the following conditions:
 *
 *   The above copyright notice and this permission notice shall be included in all
 *   copies or substantial portions of the Software.
 *
 *   THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 *   IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 *   FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 *   AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 *   LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 *   OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 *   SOFTWARE.
 */
""" % (what, d["source"], wrap_note(d["note"]))


def wrap_note(note, width=76):
    words, lines, cur = note.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w) if cur else w
    if cur:
        lines.append(cur)
    return "\n * ".join(lines)


def gen_header(d, tabs, derived):
    h = [provenance_comment(d, "GGML's quantization codebooks as C tables (declarations)."),
         "#ifndef PL_QUANT_GGML_TABLES_H\n#define PL_QUANT_GGML_TABLES_H\n#include <stdint.h>\n\n"]
    for key, cname in CONSTANTS:
        v = d["constants"][key]
        h.append("#define %s %s\n" % (cname, fmt_c_float(v) if "." in v else v))
    h.append("\n")
    for name, ctype, n, cname, meaning in TABLES:
        h.append("/* %s */\nextern const %s %s[%d];\n" % (meaning, ctype, cname, n))
    h.append("\n/* Derived here (not in ggml's table set): ksigns_iq2xs as multipliers for\n"
             " * _mm256_sign_epi8, byte j = 0xFF (-1) if sign bit j is set, else 0x01 (+1);\n"
             " * equals pl_ksigns64[i] | 0x0101010101010101. */\n")
    h.append("extern const uint64_t pl_ksigns_pm1_iq2xs[%d];\n" % len(derived["ksigns_pm1"]))
    h.append("\n#endif\n")
    return "".join(h)


def gen_source(d, tabs, derived):
    c = [provenance_comment(d, "GGML's quantization codebooks as C tables (definitions)."),
         '#include "quant/ggml_tables.h"\n']
    for name, ctype, n, cname, meaning in TABLES:
        per = 4 if ctype == "uint64_t" else 8 if ctype == "uint32_t" else 16
        c.append("\n/* %s: %s */\n" % (name, meaning))
        c.append(emit_array(ctype, cname, tabs[name], per, 4 if ctype == "int8_t" else 3))
    c.append("\n/* derived from ksigns_iq2xs (see the header) */\n")
    c.append(emit_array("uint64_t", "pl_ksigns_pm1_iq2xs", derived["ksigns_pm1"], 4, 0))
    return "".join(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=JSON_PATH)
    ap.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    args = ap.parse_args()
    d, tabs = load(args.json)
    derived = derive(d, tabs)
    outs = {OUT_H: gen_header(d, tabs, derived), OUT_C: gen_source(d, tabs, derived)}
    stale = []
    for path, text in outs.items():
        old = None
        if os.path.exists(path):
            with open(path, "r", encoding="utf-8") as f:
                old = f.read()
        if old == text:
            continue
        if args.check:
            stale.append(os.path.relpath(path, ROOT))
        else:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            print("wrote %s" % os.path.relpath(path, ROOT))
    if stale:
        sys.stderr.write("stale: %s (run scripts/gen_ggml_tables.py)\n" % ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
