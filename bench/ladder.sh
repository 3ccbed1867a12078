#!/usr/bin/env bash
# The quantization ladder side by side with llama.cpp (issue 21, item 4).
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp bench/ladder.sh MODEL-F16.gguf [IMATRIX.gguf]
#
# Quantizes one F16 (or BF16/F32) model down every rung with BOTH engines'
# quantizers (llama-quantize and `pocketllm quantize`, same imatrix), checks
# that the two files are byte-identical, then runs bench/compare-llama.sh on
# the rung files (both engines on the same file, interleaved rounds) and
# prints, per rung: file size, ppP and tgN at each thread
# count for llama.cpp and us, the ratio, our decode GB/s and its share of the
# streaming-read ceiling measured in the same run, and whether the ladder is
# monotonic (a smaller file never decodes slower than a larger one).
#
# The IQ rungs need an importance matrix. Without IMATRIX.gguf one is made
# with `pocketllm imatrix` (llama-imatrix's GGUF format, which llama-quantize
# reads) from TEXT (default: this repository's README and docs).
#
# Environment: RUNGS (default "Q4_K_M Q2_K IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0
# TQ1_0"), QUANTIZERS (both: the default; pocketllm: only ours, which is
# byte-identical to llama-quantize on the ladder fixtures, tests/cli/ladder.sh;
# the IQ rungs take minutes each on 2 cores), WORK (where the rung files go; default a folder next to the
# model, kept for reuse: existing files are not quantized again), TEXT,
# MARKDOWN=1, OUT (JSON), and everything compare-llama.sh reads (THREADS, P,
# N, D, ROUNDS, POCKETLLM).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
: "${LLAMA_CPP_DIR:?set LLAMA_CPP_DIR to a built llama.cpp}"
[ $# -ge 1 ] || { echo "usage: LLAMA_CPP_DIR=... $0 MODEL-F16.gguf [IMATRIX.gguf]" >&2; exit 1; }
src="$1"
imatrix="${2:-}"
QUANTIZERS="${QUANTIZERS:-both}"
quantize=""
for c in "$LLAMA_CPP_DIR/build/bin/llama-quantize" "$LLAMA_CPP_DIR/bin/llama-quantize" "$LLAMA_CPP_DIR/llama-quantize"; do
  if [ -x "$c" ]; then quantize="$c"; break; fi
done
[ -n "$quantize" ] || [ "$QUANTIZERS" = pocketllm ] || { echo "no llama-quantize under $LLAMA_CPP_DIR" >&2; exit 1; }
# shellcheck source=bench/find-pocketllm.sh
. "$root/bench/find-pocketllm.sh"

RUNGS="${RUNGS:-Q4_K_M Q2_K IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0 TQ1_0}"
base="$(basename "$src" .gguf)"
WORK="${WORK:-$(dirname "$src")/$base-ladder}"
mkdir -p "$WORK"

if [ -z "$imatrix" ]; then
  imatrix="$WORK/imatrix.gguf"
  if [ ! -s "$imatrix" ]; then
    text="${TEXT:-$WORK/imatrix-text.txt}"
    [ -n "${TEXT:-}" ] || cat "$root/README.md" "$root"/docs/*.md > "$text"
    echo "# imatrix from $text" >&2
    "$pocketllm" imatrix --model "$src" --file "$text" -o "$imatrix" --chunks 4 --ctx 256 >&2
  fi
fi

files=()
for r in $RUNGS; do
  ref="$WORK/$base-$r.llama.gguf"
  ours="$WORK/$base-$r.pocketllm.gguf"
  [ -s "$ours" ] || { echo "# pocketllm quantize $r" >&2; "$pocketllm" quantize "$src" "$ours" "$r" --imatrix "$imatrix" --quiet ||
                      { echo "pocketllm quantize failed for $r" >&2; exit 1; }; }
  if [ "$QUANTIZERS" = pocketllm ]; then files+=("$ours"); continue; fi
  [ -s "$ref" ] || { echo "# llama-quantize $r" >&2; "$quantize" --imatrix "$imatrix" "$src" "$ref" "$r" >/dev/null 2>&1 ||
                     { echo "llama-quantize failed for $r" >&2; exit 1; }; }
  if cmp -s "$ref" "$ours"; then echo "# $r: the two quantizers wrote identical files" >&2
  else echo "# $r: the two quantizers' files DIFFER (benchmarking llama-quantize's)" >&2; fi
  files+=("$ref")
done

json="${OUT:-$WORK/ladder.json}"
MARKDOWN=0 OUT="$json" "$here/compare-llama.sh" "${files[@]}" >&2

python3 - "$json" "${MARKDOWN:-0}" "$RUNGS" "${files[@]}" <<'EOF'
import json, os, sys
path, md, rungs = sys.argv[1:4]
files = sys.argv[4:]
rungs = rungs.split()
res = json.load(open(path))["results"]

rows, tg = [], {}
for rung, f in zip(rungs, files):
    size = os.path.getsize(f)
    name = os.path.basename(f)
    for r in [r for r in res if r["model"] == name]:
        row = [rung, "%.0f" % (size / 2**20), str(r["threads"]), r["test"], "%.2f" % r["llama"], "%.2f" % r["pocketllm"],
               "%.2fx" % r["ratio"]]
        if "bytes_per_token" in r:
            row += ["%.1f" % r["pocketllm_gb_s"], "%.0f%%" % (100 * r["pocketllm_of_ceiling"])]
            tg.setdefault(r["threads"], []).append((size, rung, r["pocketllm"]))
        else:
            row += ["", ""]
        rows.append(row)
hdr = ["rung", "MiB", "thr", "test", "llama.cpp t/s", "PocketLLM t/s", "ratio", "our GB/s", "of ceiling"]
if md == "1":
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join(["---"] * len(hdr)) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
else:
    w = [max(len(x[i]) for x in [hdr] + rows) for i in range(len(hdr))]
    for r in [hdr] + rows:
        print("  ".join(x.ljust(w[i]) for i, x in enumerate(r)))
# Monotonic: ordered by file size, a smaller file never decodes slower.
print()
for th, v in sorted(tg.items()):
    v.sort(key=lambda x: -x[0])
    bad = [(a[1], b[1]) for a, b in zip(v, v[1:]) if b[2] < a[2]]
    order = " > ".join("%s %.1f" % (x[1], x[2]) for x in v)
    print("decode, %d thread(s), largest file first: %s -> %s" % (
        th, order, "monotonic" if not bad else "NOT monotonic: " + ", ".join("%s slower than %s" % (b, a) for a, b in bad)))
EOF
