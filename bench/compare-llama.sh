#!/usr/bin/env bash
# Side-by-side speed of PocketLLM and llama.cpp on the same GGUF files.
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp bench/compare-llama.sh MODEL.gguf [MODEL.gguf ...]
#
# LLAMA_CPP_DIR is a llama.cpp checkout that is already built (this script
# never builds it): its llama-bench is looked up in $LLAMA_CPP_DIR/build/bin,
# then $LLAMA_CPP_DIR/bin, then $LLAMA_CPP_DIR itself.
#
# For every model and thread count, both engines run the same tests (llama-bench
# semantics: ppP = one batch of P prompt tokens, tgN = N single-token decode
# steps), interleaved: ROUNDS rounds, each running both engines once (one
# warm-up + 1 timed repetition per invocation), the order alternating between
# rounds so neither engine always runs on a warmer or cooler machine. Reported:
# the mean over rounds (and stddev), the ratio PocketLLM / llama.cpp, the
# decode bandwidth (bytes read per token x tok/s; for a MoE model the expert
# tensors count expert_used_count / expert_count) against the streaming-read
# ceiling of this machine measured in the same run (bench/stream_read.c, best
# of 4 KiB and 2 MiB pages, before every model and at the end), and PocketLLM's
# peak RSS against file size + KV cache + 10%.
#
# Environment: THREADS ("1 2"), P (512), N (128), D (0: the tests' depth, llama-bench's
# -d: "tg32 @ d2048" runs after 2048 context tokens), ROUNDS (3), POCKETLLM
# (build-perf/bin/pocketllm, else build/bin/pocketllm), OUT (a JSON file for
# the raw results), MARKDOWN=1 (print the table as Markdown).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
: "${LLAMA_CPP_DIR:?set LLAMA_CPP_DIR to a built llama.cpp}"
llama_bench=""
for c in "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench" "$LLAMA_CPP_DIR/llama-bench"; do
  if [ -x "$c" ]; then llama_bench="$c"; break; fi
done
[ -n "$llama_bench" ] || { echo "no llama-bench under $LLAMA_CPP_DIR (build llama.cpp first)" >&2; exit 1; }
# shellcheck source=bench/find-pocketllm.sh
. "$root/bench/find-pocketllm.sh"
[ $# -ge 1 ] || { echo "usage: LLAMA_CPP_DIR=... $0 MODEL.gguf [MODEL.gguf ...]" >&2; exit 1; }

THREADS="${THREADS:-1 2}"
P="${P:-512}"
N="${N:-128}"
D="${D:-0}"
depth=(); [ "$D" -gt 0 ] && depth=(-d "$D")
ROUNDS="${ROUNDS:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The streaming-read ceiling (compiled here: one file, no dependencies).
cc -O2 -mavx2 -pthread "$here/stream_read.c" -o "$work/stream_read" 2>/dev/null ||
  cc -O2 -pthread "$here/stream_read.c" -o "$work/stream_read"
stream() {   # threads at -> appends JSON lines to $work/stream.jsonl (at: index of the model measured next)
  "$work/stream_read" "$1" 1024 8 --json | sed "s/^{/{\"at\": $2, \"pages\": \"4k\", /" >> "$work/stream.jsonl"
  STREAM_HUGE=1 "$work/stream_read" "$1" 1024 8 --json | sed "s/^{/{\"at\": $2, \"pages\": \"2m\", /" >> "$work/stream.jsonl"
}

run_llama() {   # model threads round
  "$llama_bench" -m "$1" -t "$2" -p "$P" -n "$N" "${depth[@]}" -r 1 -o json 2>/dev/null > "$work/llama.$3.$2.json" || true
  python3 - "$work/llama.$3.$2.json" "$1" "$2" >> "$work/results.jsonl" <<'EOF'
import json, sys
path, model, th = sys.argv[1:4]
try:
    rows = json.load(open(path))
except Exception:
    rows = []
for r in rows:
    test = ("pp%d" % r["n_prompt"]) if r["n_prompt"] else ("tg%d" % r["n_gen"])
    if r.get("n_depth"):
        test += " @ d%d" % r["n_depth"]
    print(json.dumps({"engine": "llama.cpp", "model": model, "threads": int(th), "test": test, "tok_s": r["avg_ts"],
                      "model_size": r["model_size"]}))
EOF
}

run_ours() {   # model threads round
  /usr/bin/time -f "%M" -o "$work/rss.$3.$2" "$pocketllm" bench --model "$1" --threads "$2" -p "$P" -n "$N" "${depth[@]}" -r 1 --json \
    > "$work/ours.$3.$2.json" 2>/dev/null || true
  python3 - "$work/ours.$3.$2.json" "$1" "$2" "$work/rss.$3.$2" >> "$work/results.jsonl" <<'EOF'
import json, sys
path, model, th, rss = sys.argv[1:5]
try:
    rows = json.load(open(path))
except Exception:
    rows = []
try:
    rss_kb = int(open(rss).read().split()[-1])
except Exception:
    rss_kb = 0
for r in rows:
    print(json.dumps({"engine": "pocketllm", "model": model, "threads": int(th), "test": r["test"], "tok_s": r["tok_s"],
                      "model_bytes": r["model_bytes"], "rss_kb": rss_kb}))
EOF
}

: > "$work/results.jsonl"
: > "$work/stream.jsonl"
at=0
for model in "$@"; do
  for t in $THREADS; do stream "$t" "$at"; done   # the ceiling: measured before every model and at the end
  at=$((at + 1))
  for t in $THREADS; do
    for ((r = 0; r < ROUNDS; r++)); do
      echo "# $(basename "$model") threads=$t round $((r + 1))/$ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      if (( r % 2 == 0 )); then run_llama "$model" "$t" "$r"; run_ours "$model" "$t" "$r"
      else run_ours "$model" "$t" "$r"; run_llama "$model" "$t" "$r"; fi
    done
  done
done
for t in $THREADS; do stream "$t" "$at"; done

python3 - "$work/results.jsonl" "$work/stream.jsonl" "$root/python" "${MARKDOWN:-0}" "${OUT:-}" "$P" "$N" "$D" "$@" <<'EOF'
import json, os, statistics, sys
res_path, stream_path, pydir, md, out, P, N, D = sys.argv[1:9]
models = sys.argv[9:]
P, N, D = int(P), int(N), int(D)
at_d = " @ d%d" % D if D else ""
sys.path.insert(0, pydir)
rows = [json.loads(l) for l in open(res_path) if l.strip()]
streams = [json.loads(l) for l in open(stream_path) if l.strip()]
ceiling = {}
for s in streams:
    ceiling[s["threads"]] = max(ceiling.get(s["threads"], 0), s["best_gb_s"])

def kv_bytes(model, n_ctx):
    """f16 K and V for n_ctx positions (llama.cpp's and our default cache)."""
    try:
        from pocketllm import gguf
        f = gguf.open(model)
        arch = f.metadata["general.architecture"]
        g = lambda k, d=None: f.metadata.get(arch + "." + k, d)
        n_layer, n_head = g("block_count"), g("attention.head_count")
        n_kv = g("attention.head_count_kv", n_head)
        hd = g("attention.key_length", g("embedding_length") // n_head)
        return n_layer * n_kv * hd * 2 * 2 * n_ctx
    except Exception:
        return 0

def expert_bytes(model):
    """(bytes of the expert tensors, fraction a token reads): a MoE token reads
    expert_used_count of expert_count experts of each *_exps tensor."""
    try:
        from pocketllm import gguf
        f = gguf.open(model)
        arch = f.metadata["general.architecture"]
        n_x, n_used = f.metadata.get(arch + ".expert_count", 0), f.metadata.get(arch + ".expert_used_count", 0)
        if not n_x or not n_used:
            return 0, 1.0
        return sum(t.nbytes for t in f.tensors if "_exps" in t.name), n_used / n_x
    except Exception:
        return 0, 1.0

def stat(v):
    return (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0) if v else (float("nan"), 0.0)

table = []
# The memory bandwidth of this (shared, virtual) machine drifts: the ceiling of
# a model is the best pass measured just before and just after it ("local");
# the best of the whole run is reported beside it.
def local_ceiling(i, th):
    v = [s["best_gb_s"] for s in streams if s["threads"] == th and s.get("at") in (i, i + 1)]
    return max(v) if v else ceiling.get(th, float("nan"))

for mi, model in enumerate(models):
    size = os.path.getsize(model)
    kv_pos = kv_bytes(model, 1)
    x_bytes, x_frac = expert_bytes(model)
    for th in sorted({r["threads"] for r in rows if r["model"] == model}):
        for test in ("pp%d" % P + at_d, "tg%d" % N + at_d):
            sel = lambda e: [r for r in rows if r["model"] == model and r["threads"] == th and r["test"] == test and r["engine"] == e]
            ours, llama = sel("pocketllm"), sel("llama.cpp")
            if not ours and not llama:
                continue
            o, os_ = stat([r["tok_s"] for r in ours])
            l, ls = stat([r["tok_s"] for r in llama])
            row = {"model": os.path.basename(model), "threads": th, "test": test, "pocketllm": o, "pocketllm_std": os_,
                   "llama": l, "llama_std": ls, "ratio": o / l if l else float("nan")}
            if test.startswith("tg"):
                wbytes = ours[0]["model_bytes"] if ours else (llama[0]["model_size"] if llama else 0)
                wbytes -= x_bytes * (1 - x_frac)            # MoE: only the routed experts are read
                per_tok = wbytes + kv_pos * (D + N / 2)   # the cache grows from D to D + N rows
                row.update({"bytes_per_token": per_tok, "pocketllm_gb_s": o * per_tok / 1e9,
                            "llama_gb_s": l * per_tok / 1e9, "ceiling_gb_s": local_ceiling(mi, th),
                            "ceiling_run_max_gb_s": ceiling.get(th, float("nan"))})
                row["pocketllm_of_ceiling"] = row["pocketllm_gb_s"] / row["ceiling_gb_s"]
                row["pocketllm_of_run_max"] = row["pocketllm_gb_s"] / row["ceiling_run_max_gb_s"]
            rss = max([r.get("rss_kb", 0) for r in ours] or [0]) * 1024
            limit = (size + kv_bytes(model, D + P + N)) * 1.10
            row.update({"peak_rss": rss, "rss_limit": limit})
            table.append(row)

if out:
    json.dump({"results": table, "stream": streams, "raw": rows}, open(out, "w"), indent=1)
sep = " | " if md == "1" else "  "
hdr = ["model", "thr", "test", "llama.cpp t/s", "PocketLLM t/s", "ratio", "GB/s (ours / llama)",
       "of local ceiling (of run max)", "peak RSS / limit"]
lines = [hdr]
for r in table:
    gb = of = ""
    if "bytes_per_token" in r:
        gb = "%.1f / %.1f" % (r["pocketllm_gb_s"], r["llama_gb_s"])
        of = "%.0f%% of %.1f (%.0f%%)" % (100 * r["pocketllm_of_ceiling"], r["ceiling_gb_s"],
                                         100 * r["pocketllm_of_run_max"])
    lines.append([r["model"], str(r["threads"]), r["test"], "%.2f ± %.2f" % (r["llama"], r["llama_std"]),
                  "%.2f ± %.2f" % (r["pocketllm"], r["pocketllm_std"]), "%.2fx" % r["ratio"], gb, of,
                  "%.0f / %.0f MiB" % (r["peak_rss"] / 2**20, r["rss_limit"] / 2**20)])
if md == "1":
    print("| " + " | ".join(lines[0]) + " |")
    print("|" + "|".join(["---"] * len(lines[0])) + "|")
    for l in lines[1:]:
        print("| " + " | ".join(l) + " |")
else:
    w = [max(len(l[i]) for l in lines) for i in range(len(hdr))]
    for l in lines:
        print(sep.join(x.ljust(w[i]) for i, x in enumerate(l)))
print("\nstreaming-read ceiling (best pass; 4 KiB and 2 MiB pages; measured before every model and at the end): run max " +
      ", ".join("%d thread(s) %.1f GB/s" % (t, c) for t, c in sorted(ceiling.items())) + "; per model (before/after): " +
      "; ".join(os.path.basename(m) + " " + ", ".join("%dt %.1f" % (t, local_ceiling(i, t)) for t in sorted(ceiling))
                for i, m in enumerate(models)))
EOF
