#!/usr/bin/env bash
# pocketllm synth --arch qwen3moe: a file written directly in a file type
# (--type Q4_K_M) gets, tensor by tensor, the types `pocketllm quantize`
# gives the same shape written in f16 (the quantizer's mix rules, expert
# tensors included); the writer streams tensor by tensor (peak RSS well under
# the file size); the result loads and generates; bad expert options are
# refused with one line.
BIN=$1 FIX=$2
. "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
V="$FIX/models/tiny-qwen3-f16.gguf"

# name -> ggml type of every tensor, and general.file_type
types() {
  python3 - "$1" <<'PY'
import sys, gguf_tensors
kv, ts = gguf_tensors.read(sys.argv[1])
print('file_type', kv.get('general.file_type'))
for name, (dims, t, _, _) in ts.items():
    print(name, t, 'x'.join(map(str, dims)))
PY
}

# 1. direct Q4_K_M == f16 then quantize, type for type (Fx 256: q4_K / q6_K experts)
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:256 --vocab "$V" --type f16 --seed 5 \
  --threads 1 --out "$tmp/f16.gguf" 2>/dev/null || bad "synth f16"
"$BIN" quantize "$tmp/f16.gguf" "$tmp/q.gguf" Q4_K_M --threads 1 --quiet >/dev/null 2>&1 || bad "quantize"
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:256 --vocab "$V" --type Q4_K_M --seed 5 \
  --threads 1 --out "$tmp/direct.gguf" 2>/dev/null || bad "synth Q4_K_M"
types "$tmp/q.gguf" | sort > "$tmp/q.types"
types "$tmp/direct.gguf" | sort > "$tmp/direct.types"
if diff "$tmp/q.types" "$tmp/direct.types" >/dev/null; then ok; else bad "types differ: $(diff "$tmp/q.types" "$tmp/direct.types" | head -5)"; fi
# the same for Q2_K (a name that is also a tensor type: upper case = the file
# type's mix, q3_K ffn_down), and lower-case q2_K = every matrix q2_K
"$BIN" quantize "$tmp/f16.gguf" "$tmp/q2.gguf" Q2_K --threads 1 --quiet >/dev/null 2>&1 || bad "quantize Q2_K"
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:256 --vocab "$V" --type Q2_K --seed 5 \
  --threads 1 --out "$tmp/direct-q2.gguf" 2>/dev/null || bad "synth Q2_K"
if diff <(types "$tmp/q2.gguf" | sort) <(types "$tmp/direct-q2.gguf" | sort) >/dev/null; then ok
else bad "Q2_K types differ: $(diff <(types "$tmp/q2.gguf" | sort) <(types "$tmp/direct-q2.gguf" | sort) | head -5)"; fi
types "$tmp/direct-q2.gguf" | grep -q '^blk.0.ffn_down_exps.weight 11 ' && ok || bad "Q2_K: ffn_down_exps q3_K"
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:256 --vocab "$V" --type q2_K --seed 5 \
  --threads 1 --out "$tmp/direct-q2k.gguf" 2>/dev/null || bad "synth q2_K"
[ "$(types "$tmp/direct-q2k.gguf" | awk 'NR > 1 && $2 != 0 && $2 != 10' | wc -l)" = 0 ] && ok || bad "q2_K: a matrix not q2_K"
grep -q '^file_type 15$' "$tmp/direct.types" && ok || bad "file_type of the direct file"
grep -q '^blk.0.ffn_gate_exps.weight 12 256x256x8$' "$tmp/direct.types" && ok || bad "ffn_gate_exps q4_K [256, 256, 8]"
grep -q '^blk.3.ffn_down_exps.weight 14 256x256x8$' "$tmp/direct.types" && ok || bad "last ffn_down_exps q6_K (use_more_bits)"
grep -q '^blk.0.ffn_gate_inp.weight 0 256x8$' "$tmp/direct.types" && ok || bad "router stays f32"

# 2. it loads and generates on both host backends
for d in ref cpu; do
  out=$("$BIN" run --model "$tmp/direct.gguf" --prompt "Hello" --max-tokens 3 --device $d --threads 1 2>&1) \
    && ok || bad "run on $d: $out"
done

# 3. streaming: peak RSS of a 24-layer direct write stays well under the file
# (not under AddressSanitizer, whose shadow memory and quarantine add tens of MiB)
if grep -aq __asan_init "$BIN"; then
  echo "synth_moe: peak RSS check skipped under AddressSanitizer"; ok
else
python3 - "$BIN" "$V" "$tmp/big.gguf" <<'PY' && ok || bad "synth peak RSS"
import os, resource, subprocess, sys
b, v, out = sys.argv[1:]
subprocess.run([b, 'synth', '--arch', 'qwen3moe', '--preset', '256:24:4:2:64:768', '--experts', '8:2:512',
                '--vocab', v, '--type', 'Q4_K_M', '--seed', '1', '--threads', '1', '--out', out],
               check=True, stderr=subprocess.DEVNULL)
size = os.path.getsize(out)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(f'synth: file {size / 2**20:.1f} MiB, peak RSS {rss / 2**20:.1f} MiB')
sys.exit(0 if rss < size / 2 else 1)
PY
fi

# 5. --distinct-rows P: a pool larger than any matrix changes nothing; a small
# pool keeps every tensor's size and type, each matrix has at most P distinct
# rows, and the file still loads and generates
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:256 --vocab "$V" --type Q4_K_M --seed 5 \
  --threads 1 --distinct-rows 100000 --out "$tmp/pool-big.gguf" 2>/dev/null || bad "synth --distinct-rows 100000"
cmp -s "$tmp/direct.gguf" "$tmp/pool-big.gguf" && ok || bad "a pool above every row count changed the file"
"$BIN" synth --arch qwen3moe --preset 256:4:4:2:64:768 --experts 8:2:256 --vocab "$V" --type Q4_K_M --seed 5 \
  --threads 2 --distinct-rows 3 --out "$tmp/pool3.gguf" 2>/dev/null || bad "synth --distinct-rows 3"
types "$tmp/pool3.gguf" | sort > "$tmp/pool3.types"
diff -q "$tmp/direct.types" "$tmp/pool3.types" >/dev/null && ok || bad "--distinct-rows changed tensor types or shapes"
[ "$(stat -c %s "$tmp/direct.gguf")" = "$(stat -c %s "$tmp/pool3.gguf")" ] && ok || bad "--distinct-rows changed the file size"
cmp -s "$tmp/direct.gguf" "$tmp/pool3.gguf" && bad "--distinct-rows 3 wrote the same bytes" || ok
python3 - "$tmp/pool3.gguf" <<'PY' && ok || bad "distinct rows of the pooled matrices"
import sys, gguf_tensors
_, tensors = gguf_tensors.read(sys.argv[1])
BLK = {12: (256, 144), 14: (256, 210)}   # q4_K, q6_K: (block elements, bytes)
checked = 0
for name, (dims, t, data, _) in tensors.items():
    if t not in BLK or len(dims) < 2: continue
    be, bb = BLK[t]
    rb = dims[0] // be * bb
    rows = 1
    for d in dims[1:]: rows *= d
    if rows <= 3: continue
    got = {data[r * rb:(r + 1) * rb] for r in range(rows)}
    if len(got) > 3: sys.exit(f'{name}: {len(got)} distinct rows of {rows}')
    checked += 1
sys.exit(0 if checked >= 10 else f'only {checked} matrices checked')
PY
out=$("$BIN" run --model "$tmp/pool3.gguf" --prompt "Hello" --max-tokens 3 --device cpu --threads 1 2>&1) \
  && ok || bad "run of the pooled file: $out"

# 4. bad options: one line, non-zero
expect_error "needs --experts" synth --arch qwen3moe --preset 256:2:4:2:64:768 --vocab "$V" --out "$tmp/x.gguf"
expect_error "bad --experts" synth --arch qwen3moe --preset 256:2:4:2:64:768 --experts 4:5:8 --vocab "$V" --out "$tmp/x.gguf"
expect_error "--experts is for" synth --arch qwen3 --preset 256:2:4:2:64:768 --experts 4:2:8 --vocab "$V" --out "$tmp/x.gguf"
expect_error "needs --imatrix" synth --arch qwen3moe --preset 30b-a3b --type IQ2_XXS --vocab "$V" --out "$tmp/x.gguf"
expect_error "bad --distinct-rows" synth --arch qwen3moe --preset 30b-a3b --distinct-rows 0 --vocab "$V" --out "$tmp/x.gguf"
echo "synth_moe: $pass passed, $fail failed"
[ $fail -eq 0 ]
