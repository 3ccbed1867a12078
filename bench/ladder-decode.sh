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
# tok/s, its spread (min-max) and its ratio to the rung above, then whether
# every lower rung decodes at least as fast as the one above it.
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
trap 'rm -f "$tmp"' EXIT
for t in $THREADS; do
  for ((r = 0; r < ROUNDS; r++)); do
    files=("$@")
    if ((r % 2)); then
      for ((i = 0, j = ${#files[@]} - 1; i < j; i++, j--)); do x="${files[i]}"; files[i]="${files[j]}"; files[j]="$x"; done
    fi
    for f in "${files[@]}"; do
      s="$("$pocketllm" bench -m "$f" -p 0 -n "$N" -r 1 --threads "$t" --json 2>/dev/null |
           python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["tok_s"])')"
      echo "$t $f $s" >>"$tmp"
      echo "# t=$t round $((r + 1)) $(basename "$f"): $s tok/s" >&2
    done
  done
done
python3 - "$tmp" "${MARKDOWN:-0}" "$@" <<'EOF'
import os, sys
path, md, files = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = {}
for line in open(path):
    t, f, s = line.split()
    runs.setdefault((int(t), f), []).append(float(s))
for t in sorted({k[0] for k in runs}):
    print("\n%d thread(s), tg%s, mean of %d interleaved rounds:" % (t, os.environ.get("N", "128"), len(runs[(t, files[0])])))
    hdr = ["rung file", "MiB", "tok/s", "min-max", "vs rung above"]
    rows, bad, prev = [], [], None
    for f in files:
        v = runs[(t, f)]
        m = sum(v) / len(v)
        rows.append([os.path.basename(f), "%.0f" % (os.path.getsize(f) / 2**20), "%.2f" % m,
                     "%.2f-%.2f" % (min(v), max(v)), "" if prev is None else "%.3f" % (m / prev[1])])
        if prev is not None and m < prev[1]:
            bad.append("%s slower than %s" % (os.path.basename(f), os.path.basename(prev[0])))
        prev = (f, m)
    if md == "1":
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join(["---"] * len(hdr)) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(x[i]) for x in [hdr] + rows) for i in range(len(hdr))]
        for r in [hdr] + rows:
            print("  ".join(x.ljust(w[i]) for i, x in enumerate(r)))
    print("-> " + ("monotonic" if not bad else "NOT monotonic: " + ", ".join(bad)))
EOF
