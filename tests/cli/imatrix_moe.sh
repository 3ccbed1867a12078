#!/usr/bin/env bash
# The importance matrix of a mixture of experts (qwen3moe), end to end on a
# tiny synth file: `pocketllm imatrix` gives each expert tensor
# (ffn_{gate,up,down}_exps) one row of sums and one count per expert, as
# llama-imatrix does for MUL_MAT_ID; `pocketllm quantize --imatrix` uses each
# expert's own slice; `synth --imatrix --type IQ2_XXS` writes what quantize
# writes from the same rows, loads and generates; and imatrices of the wrong
# shape, or missing a tensor the type needs, are refused with one line.
BIN=$1 FIX=$2
. "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
V="$FIX/models/tiny-qwen3-f16.gguf"
TEXT="$FIX/ladder/calib.txt"
# n_embd 256, 4 layers, 8 experts of which 2 are used, expert FFN 512 (so
# the down projection's rows, 512, differ from the others', 256)
SHAPE=(--arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:512 --vocab "$V" --seed 5 --threads 2)

# 1. synth Q4_K_M -> imatrix from a small text (3 chunks of 64 tokens)
"$BIN" synth "${SHAPE[@]}" --type Q4_K_M --out "$tmp/q4.gguf" 2>/dev/null || bad "synth Q4_K_M"
for th in 1 2; do
  "$BIN" imatrix -m "$tmp/q4.gguf" -f "$TEXT" --ctx 64 --chunks 3 --threads $th -o "$tmp/im$th.gguf" \
    >/dev/null 2>"$tmp/err" || bad "imatrix ($th threads): $(cat "$tmp/err")"
done
cmp -s "$tmp/im1.gguf" "$tmp/im2.gguf" && ok || bad "the imatrix depends on the thread count"

# 2. the file: per-expert layout, counts and sums
python3 - "$tmp/im1.gguf" <<'PY' && ok || bad "expert entries of the imatrix"
import sys; import gguf_tensors as gguf
kv, ts = gguf.read(sys.argv[1])
n_tok, k, X = 3 * 64, 2, 8
assert kv['general.type'] == 'imatrix' and kv['imatrix.chunk_count'] == 3 and kv['imatrix.chunk_size'] == 64, kv
def entry(name):
    d, t, b, _ = ts[name + '.in_sum2']; dc, tc, bc, _ = ts[name + '.counts']
    assert t == 0 and tc == 0, (name, t, tc)
    n = 1
    for x in d: n *= x
    return d, dc, gguf.floats(b, n), gguf.floats(bc, n // d[0])
for l in range(4):
    p = 'blk.%d.' % l
    counts = {}
    for w, cols in (('ffn_gate_exps', 256), ('ffn_up_exps', 256), ('ffn_down_exps', 512)):
        d, dc, s, c = entry(p + w + '.weight')
        # llama.cpp's layout for a 3-D weight: in_sum2 [n_per_row, n_expert], counts [1, n_expert]
        assert d == [cols, X] and dc == [1, X], (w, d, dc)
        # every token's k slots land in k experts
        assert sum(c) == n_tok * k, (w, c)
        assert all(x == int(x) and x >= 0 for x in c), c
        for e in range(X):
            row = s[e * cols:(e + 1) * cols]
            assert (c[e] == 0) == all(v == 0 for v in row), (w, e, c[e])
        counts[w] = c
    assert counts['ffn_gate_exps'] == counts['ffn_up_exps'] == counts['ffn_down_exps'], counts
    # gate and up read the same input with the same routing
    assert ts[p + 'ffn_gate_exps.weight.in_sum2'][2] == ts[p + 'ffn_up_exps.weight.in_sum2'][2]
    # dense equivalent: the router (a plain matmul, one count) reads the same
    # rows h; each token adds h^2 to k experts, so the experts' sums add up
    # to k times the router's
    d, dc, r, rc = entry(p + 'ffn_gate_inp.weight')
    assert d == [256] and rc == [n_tok], (d, rc)
    _, _, g, _ = entry(p + 'ffn_gate_exps.weight')
    for j in range(256):
        tot = sum(g[e * 256 + j] for e in range(X))
        assert abs(tot - k * r[j]) <= 1e-4 * k * r[j] + 1e-6, (l, j, tot, k * r[j])
PY

# 3. an expert never routed to: 64 experts, 1 used, 32 tokens -> at least 32
# experts see nothing (count 0, sums 0) and the counts add up to 32
"$BIN" synth --arch qwen3moe --preset 256:2:4:2:64:768 --experts 64:1:256 --vocab "$V" --seed 3 --threads 2 \
  --type Q8_0 --out "$tmp/x64.gguf" 2>/dev/null || bad "synth 64 experts"
"$BIN" imatrix -m "$tmp/x64.gguf" -f "$TEXT" --ctx 16 --chunks 2 --threads 2 -o "$tmp/im64.gguf" >/dev/null 2>&1 \
  || bad "imatrix of 64 experts"
python3 - "$tmp/im64.gguf" <<'PY' && ok || bad "unrouted experts"
import sys; import gguf_tensors as gguf
kv, ts = gguf.read(sys.argv[1])
for l in range(2):
    for w, cols in (('ffn_gate_exps', 256), ('ffn_down_exps', 256)):
        n = 'blk.%d.%s.weight' % (l, w)
        c = gguf.floats(ts[n + '.counts'][2], 64)
        s = gguf.floats(ts[n + '.in_sum2'][2], 64 * cols)
        assert sum(c) == 32 and sum(1 for x in c if x == 0) >= 32, (n, c)
        for e in range(64):
            row = s[e * cols:(e + 1) * cols]
            assert (c[e] == 0) == all(v == 0 for v in row), (n, e)
PY

# 4. quantize with it: the expert tensors change (vs without), deterministically;
# each expert uses its own slice (changing expert 3's slice of one tensor
# changes that expert's rows only)
"$BIN" synth "${SHAPE[@]}" --type f32 --out "$tmp/f32.gguf" 2>/dev/null || bad "synth f32"
"$BIN" quantize "$tmp/f32.gguf" "$tmp/qa.gguf" Q4_K_M --imatrix "$tmp/im1.gguf" --threads 2 --quiet >/dev/null 2>&1 || bad "quantize --imatrix"
"$BIN" quantize "$tmp/f32.gguf" "$tmp/qb.gguf" Q4_K_M --imatrix "$tmp/im1.gguf" --threads 1 --quiet >/dev/null 2>&1 || bad "quantize --imatrix (again)"
"$BIN" quantize "$tmp/f32.gguf" "$tmp/qn.gguf" Q4_K_M --threads 2 --quiet >/dev/null 2>&1 || bad "quantize"
cmp -s "$tmp/qa.gguf" "$tmp/qb.gguf" && ok || bad "quantize --imatrix is not deterministic"
python3 - "$tmp/im1.gguf" "$tmp/im-e3.gguf" <<'PY' || bad "writing the changed imatrix"
import struct, sys; import gguf_tensors as gguf
kv, ts = gguf.read(sys.argv[1])
data = bytearray(open(sys.argv[1], 'rb').read())
_, _, _, off = ts['blk.1.ffn_up_exps.weight.in_sum2']
for j in range(256):   # expert 3's row: reweight its columns
    o = off + (3 * 256 + j) * 4
    v = struct.unpack_from('<f', data, o)[0]
    struct.pack_into('<f', data, o, v * (1 + (j % 7)) + 0.5 * (j % 3))
open(sys.argv[2], 'wb').write(data)
PY
"$BIN" quantize "$tmp/f32.gguf" "$tmp/qe.gguf" Q4_K_M --imatrix "$tmp/im-e3.gguf" --threads 2 --quiet >/dev/null 2>&1 || bad "quantize with the changed imatrix"
python3 - "$tmp/qa.gguf" "$tmp/qn.gguf" "$tmp/qe.gguf" <<'PY' && ok || bad "quantize uses the experts' slices"
import sys; import gguf_tensors as gguf
_, a = gguf.read(sys.argv[1]); _, n = gguf.read(sys.argv[2]); _, e = gguf.read(sys.argv[3])
assert sorted(a) == sorted(n) == sorted(e)
changed = [t for t in a if 'exps' in t and a[t][2] != n[t][2]]
assert len(changed) == 12, changed   # every expert tensor of the 4 layers
for t in a:
    if t != 'blk.1.ffn_up_exps.weight': assert a[t][2] == e[t][2], t
dims, typ, qa, _ = a['blk.1.ffn_up_exps.weight']; qe = e['blk.1.ffn_up_exps.weight'][2]
per = len(qa) // 8   # one expert's rows
diff = [x for x in range(8) if qa[x * per:(x + 1) * per] != qe[x * per:(x + 1) * per]]
assert diff == [3], diff
PY

# 5. synth --imatrix: IQ2_XXS directly == f32 then quantize, tensor for tensor;
# it loads and generates on both host backends
"$BIN" synth "${SHAPE[@]}" --type IQ2_XXS --imatrix "$tmp/im1.gguf" --out "$tmp/iq2.gguf" 2>/dev/null || bad "synth IQ2_XXS --imatrix"
"$BIN" quantize "$tmp/f32.gguf" "$tmp/iq2q.gguf" IQ2_XXS --imatrix "$tmp/im1.gguf" --threads 2 --quiet >/dev/null 2>&1 || bad "quantize IQ2_XXS"
python3 - "$tmp/iq2.gguf" "$tmp/iq2q.gguf" <<'PY' && ok || bad "synth IQ2_XXS differs from quantize"
import sys; import gguf_tensors as gguf
kd, d = gguf.read(sys.argv[1]); kq, q = gguf.read(sys.argv[2])
assert sorted(d) == sorted(q)
for t in d: assert d[t][:3] == q[t][:3], (t, d[t][:2], q[t][:2])
assert d['blk.0.ffn_gate_exps.weight'][1] == 16   # iq2_xxs
assert kd['general.file_type'] == kq['general.file_type'] == 19, (kd['general.file_type'], kq['general.file_type'])
assert kd['quantize.imatrix.entries_count'] == 32 and kd['quantize.imatrix.chunks_count'] == 3
PY
for d in ref cpu; do
  out=$("$BIN" run --model "$tmp/iq2.gguf" --prompt "Hello" --max-tokens 3 --device $d --threads 1 2>&1) \
    && ok || bad "run IQ2_XXS on $d: $out"
done
# --distinct-rows keeps working with --imatrix
"$BIN" synth "${SHAPE[@]}" --type IQ2_XXS --imatrix "$tmp/im1.gguf" --distinct-rows 100000 --out "$tmp/iq2-big.gguf" \
  2>/dev/null || bad "synth --imatrix --distinct-rows 100000"
cmp -s "$tmp/iq2.gguf" "$tmp/iq2-big.gguf" && ok || bad "a pool above every row count changed the imatrix file"
"$BIN" synth "${SHAPE[@]}" --type IQ2_XXS --imatrix "$tmp/im1.gguf" --distinct-rows 3 --out "$tmp/iq2-3.gguf" \
  2>/dev/null || bad "synth --imatrix --distinct-rows 3"
[ "$(stat -c %s "$tmp/iq2.gguf")" = "$(stat -c %s "$tmp/iq2-3.gguf")" ] && ok || bad "--distinct-rows changed the size"
out=$("$BIN" run --model "$tmp/iq2-3.gguf" --prompt "Hello" --max-tokens 3 --device cpu --threads 1 2>&1) \
  && ok || bad "run the pooled IQ2_XXS file: $out"

# 6. refusals, one line each
# a dense model's imatrix has no expert entries
"$BIN" synth --arch qwen3 --preset 256:4:4:2:64:768 --vocab "$V" --seed 5 --threads 2 --type Q8_0 \
  --out "$tmp/dense.gguf" 2>/dev/null || bad "synth dense"
"$BIN" imatrix -m "$tmp/dense.gguf" -f "$TEXT" --ctx 64 --chunks 2 -o "$tmp/im-dense.gguf" >/dev/null 2>&1 || bad "imatrix dense"
# 4 experts instead of 8: rows of the right length, the wrong number of them
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 4:2:512 --vocab "$V" --seed 5 --threads 2 \
  --type Q8_0 --out "$tmp/x4.gguf" 2>/dev/null || bad "synth 4 experts"
"$BIN" imatrix -m "$tmp/x4.gguf" -f "$TEXT" --ctx 64 --chunks 2 -o "$tmp/im-x4.gguf" >/dev/null 2>&1 || bad "imatrix x4"
# n_embd 128: every row length differs
"$BIN" synth --arch qwen3moe --preset 128:4:4:2:32:768 --experts 8:2:512 --vocab "$V" --seed 5 --threads 2 \
  --type Q8_0 --out "$tmp/e128.gguf" 2>/dev/null || bad "synth n_embd 128"
"$BIN" imatrix -m "$tmp/e128.gguf" -f "$TEXT" --ctx 64 --chunks 2 -o "$tmp/im-e128.gguf" >/dev/null 2>&1 || bad "imatrix e128"
expect_error "needs --imatrix" synth "${SHAPE[@]}" --type IQ2_XXS --out "$tmp/x.gguf"
expect_error "no entry for blk.0.ffn_gate_exps.weight" synth "${SHAPE[@]}" --type IQ2_XXS --imatrix "$tmp/im-dense.gguf" --out "$tmp/x.gguf"
expect_error "blk.0.ffn_gate_exps.weight has 1024 values, the tensor needs 2048" synth "${SHAPE[@]}" --type IQ2_XXS --imatrix "$tmp/im-x4.gguf" --out "$tmp/x.gguf"
expect_error "blk.0.attn_q.weight has 128 values" synth "${SHAPE[@]}" --type Q4_K_M --imatrix "$tmp/im-e128.gguf" --out "$tmp/x.gguf"
expect_error "No such file" synth "${SHAPE[@]}" --type IQ2_XXS --imatrix "$tmp/none.gguf" --out "$tmp/x.gguf"
expect_error "needs an importance matrix for tensor blk.0.ffn_down_exps.weight" quantize "$tmp/f32.gguf" "$tmp/x.gguf" IQ2_XXS --imatrix "$tmp/im-dense.gguf"
expect_error "imatrix size 2048 is different from tensor size 4096 for blk.0.ffn_down_exps.weight" quantize "$tmp/f32.gguf" "$tmp/x.gguf" IQ2_XXS --imatrix "$tmp/im-x4.gguf"
[ ! -e "$tmp/x.gguf" ] && ok || bad "a refused synth or quantize left a file"

echo "imatrix_moe: $pass passed, $fail failed"
[ $fail -eq 0 ]
