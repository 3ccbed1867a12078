#!/usr/bin/env bash
# Is the ladder monotonic? Our decode speed alone, on the rung files in ladder
# order, in interleaved rounds (issue 21).
#
#   bench/ladder-decode.sh RUNG1.gguf RUNG2.gguf ...   (highest rung first)
#
# bench/ladder.sh runs each rung once beside llama.cpp, so neighbouring rungs a
# few percent apart can swap places on this shared machine's drift. Here every
# round runs `pocketllm bench -p 0 -n N` on every file in turn (the order
# reversed every other round, so no file always follows the same neighbour),
# and the mean over ROUNDS decides. Printed per thread count: each rung's mean
# tok/s, its spread (min-max) and its ratio to the rung above, the bytes a
# token reads (weights + the f16 cache at the mean depth N / 2), our decode
# GB/s and its share of the streaming-read ceiling (bench/stream_read.c, best
# pass, measured at the start of every round), then whether every lower rung
# decodes at least as fast as the one above it. A slower step is reported
# with the change in bytes a token: where a lower rung reads MORE (the TQ
# rungs' mix keeps a q6_K output matrix, the IQ mixes a q5_K one) and both
# decode near the ceiling, it cannot be faster.
#
# Environment: THREADS ("1 2"), N (128), ROUNDS (3), POCKETLLM (as compare-llama.sh),
# MARKDOWN=1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=bench/find-pocketllm.sh
. "$root/bench/find-pocketllm.sh"
[ $# -ge 2 ] || { echo "usage: $0 RUNG1.gguf RUNG2.gguf ... (highest rung first)" >&2; exit 1; }
THREADS="${THREADS:-1 2}"
N="${N:-128}"
ROUNDS="${ROUNDS:-3}"
tmp="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -rf "$tmp" "$work"' EXIT
cc -O2 -mavx2 -pthread "$here/stream_read.c" -o "$work/stream_read" 2>/dev/null ||
  cc -O2 -pthread "$here/stream_read.c" -o "$work/stream_read"
for t in $THREADS; do
  for ((r = 0; r < ROUNDS; r++)); do
    c="$("$work/stream_read" "$t" 1024 5 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["best_gb_s"])')"
    echo "$t ceiling $c" >>"$tmp"
    files=("$@")
    if ((r % 2)); then
      for ((i = 0, j = ${#files[@]} - 1; i < j; i++, j--)); do x="${files[i]}"; files[i]="${files[j]}"; files[j]="$x"; done
    fi
    for f in "${files[@]}"; do
      s="$("$pocketllm" bench -m "$f" -p 0 -n "$N" -r 1 --threads "$t" --json 2>/dev/null |
           python3 -c 'import json,sys; r = json.load(sys.stdin)[0]; print(r["tok_s"], r["model_bytes"])')"
      echo "$t $f $s" >>"$tmp"
      echo "# t=$t round $((r + 1)) $(basename "$f"): ${s% *} tok/s" >&2
    done
  done
done
python3 - "$tmp" "${MARKDOWN:-0}" "$root/python" "$@" <<'EOF'
import os, sys
path, md, pydir, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
N = int(os.environ.get("N", "128"))
sys.path.insert(0, pydir)

def kv_bytes_per_pos(model):
    """f16 K and V of one position (our default cache), 0 if unknown."""
    try:
        from pocketllm import gguf
        f = gguf.open(model)
        arch = f.metadata["general.architecture"]
        g = lambda k, d=None: f.metadata.get(arch + "." + k, d)
        n_head = g("attention.head_count")
        hd = g("attention.key_length", g("embedding_length") // n_head)
        return g("block_count") * g("attention.head_count_kv", n_head) * hd * 2 * 2
    except Exception:
        return 0

runs, wbytes, ceiling = {}, {}, {}
for line in open(path):
    x = line.split()
    t = int(x[0])
    if x[1] == "ceiling":
        ceiling[t] = max(ceiling.get(t, 0.0), float(x[2]))
        continue
    runs.setdefault((t, x[1]), []).append(float(x[2]))
    wbytes[x[1]] = int(x[3])
for t in sorted({k[0] for k in runs}):
    c = ceiling.get(t, float("nan"))
    print("\n%d thread(s), tg%d, mean of %d interleaved rounds; streaming-read ceiling %.1f GB/s:"
          % (t, N, len(runs[(t, files[0])]), c))
    hdr = ["rung file", "MiB", "tok/s", "min-max", "vs rung above", "MB a token", "GB/s", "of ceiling"]
    rows, bad, more, prev = [], [], [], None
    for f in files:
        v = runs[(t, f)]
        m = sum(v) / len(v)
        per_tok = wbytes[f] + kv_bytes_per_pos(f) * N / 2
        rows.append([os.path.basename(f), "%.0f" % (os.path.getsize(f) / 2**20), "%.2f" % m,
                     "%.2f-%.2f" % (min(v), max(v)), "" if prev is None else "%.3f" % (m / prev[1]),
                     "%.1f" % (per_tok / 1e6), "%.1f" % (m * per_tok / 1e9), "%.0f%%" % (100 * m * per_tok / 1e9 / c)])
        if prev is not None and m < prev[1]:
            d = per_tok / prev[2] - 1
            msg = "%s slower than %s (%.3f; bytes a token %+.1f%%)" % (os.path.basename(f), os.path.basename(prev[0]),
                                                                       m / prev[1], 100 * d)
            (bad if d < 0 else more).append(msg)
        prev = (f, m, per_tok)
    if md == "1":
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join(["---"] * len(hdr)) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(x[i]) for x in [hdr] + rows) for i in range(len(hdr))]
        for r in [hdr] + rows:
            print("  ".join(x.ljust(w[i]) for i, x in enumerate(r)))
    if not bad and not more:
        print("-> monotonic")
    else:
        print("-> NOT monotonic" + ("" if bad else " (only where a lower rung reads more bytes)") + ":")
        for x in bad:
            print("   %s: fewer bytes, yet slower" % x)
        for x in more:
            print("   %s: the lower rung reads more" % x)
EOF
