#!/usr/bin/env bash
# pocketllm serve and llama-server side by side under load (issue 17, item 2).
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp bench/serve-compare.sh MODEL.gguf
#
# Starts both servers on the same model with the same slots, context per
# slot and threads, then, one engine after the other with the order
# alternating per step:
#   1. bench/serve-load.py at K = CLIENTS concurrent clients replaying
#      multi-turn chats (greedy, streamed): aggregate tok/s, TTFT p50/p95,
#      ITL p50/p95, and our / llama-server ratios;
#   2. one 8-turn conversation (max 64 new tokens per turn), TTFT per turn:
#      ours with the prompt cache, ours without it (cache_prompt: false) and
#      llama-server with cache_prompt on (its default).
# Both servers stay loaded for the whole run (memory: two copies of the model);
# an idle server uses no CPU.
#
# Environment: PARALLEL (8: slots of both), CTX (2048: context per slot),
# THREADS (all cores), CLIENTS (1,2,4,8), TURNS (4), MAX_TOKENS (32), CONVS (2),
# POCKETLLM, PORT0 (18480: ours; llama-server gets PORT0 + 1),
# LONG_PROMPT (0: off; N: during step 1 one more client keeps sending prompts
# of ~N words, the long-prompt-arrival scenario; the table then adds ITL max
# and the long prompts' TTFT; LONG_DELAY, default 1.0, is the seconds before
# the first), OURS_ARGS (extra flags for pocketllm serve,
# e.g. "--max-num-batched-tokens 64" or "--cache-ram 2048"),
# LLAMA_ARGS (extra flags for llama-server, e.g. "-b 512"),
# OURS_ENV (VAR=value words set for pocketllm serve only, e.g.
# "PL_SERVE_STEP_COST=roofline"),
# OURS2_ARGS / OURS2_ENV (either set: a second pocketllm serve, "pocketllm2",
# on PORT0 + 2 with these flags / variables instead of OURS_ARGS / OURS_ENV,
# measured in the same interleaved run and reported in its own table and
# rows, with its ratio to the first; e.g. old against new behaviour:
# OURS2_ENV=PL_SERVE_STEP_COST=roofline).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
: "${LLAMA_CPP_DIR:?set LLAMA_CPP_DIR to a built llama.cpp}"
[ $# -eq 1 ] || { echo "usage: LLAMA_CPP_DIR=... $0 MODEL.gguf" >&2; exit 1; }
model="$1"
server=""
for c in "$LLAMA_CPP_DIR/build/bin/llama-server" "$LLAMA_CPP_DIR/bin/llama-server" "$LLAMA_CPP_DIR/llama-server"; do
  if [ -x "$c" ]; then server="$c"; break; fi
done
[ -n "$server" ] || { echo "no llama-server under $LLAMA_CPP_DIR" >&2; exit 1; }
# shellcheck source=bench/find-pocketllm.sh
. "$root/bench/find-pocketllm.sh"

PARALLEL="${PARALLEL:-8}"
CTX="${CTX:-2048}"
THREADS="${THREADS:-$(nproc)}"
CLIENTS="${CLIENTS:-1,2,4,8}"
TURNS="${TURNS:-4}"
MAX_TOKENS="${MAX_TOKENS:-32}"
CONVS="${CONVS:-2}"
PORT0="${PORT0:-18480}"
LONG_PROMPT="${LONG_PROMPT:-0}"
LONG_DELAY="${LONG_DELAY:-1.0}"
read -r -a ours_args <<< "${OURS_ARGS:-}"
read -r -a llama_args <<< "${LLAMA_ARGS:-}"
read -r -a ours_env <<< "${OURS_ENV:-}"
read -r -a ours2_args <<< "${OURS2_ARGS:-}"
read -r -a ours2_env <<< "${OURS2_ENV:-}"
ours2=0
[ -n "${OURS2_ARGS:-}${OURS2_ENV:-}" ] && ours2=1
ours_url="http://127.0.0.1:$PORT0"
llama_url="http://127.0.0.1:$((PORT0 + 1))"
ours2_url="http://127.0.0.1:$((PORT0 + 2))"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

env "${ours_env[@]}" "$pocketllm" serve --model "$model" --port "$PORT0" --parallel "$PARALLEL" --ctx "$CTX" \
  --threads "$THREADS" --max-conns-per-ip 0 "${ours_args[@]}" > "$work/ours.log" 2>&1 &
pids+=($!)
if (( ours2 )); then
  env "${ours2_env[@]}" "$pocketllm" serve --model "$model" --port "$((PORT0 + 2))" --parallel "$PARALLEL" \
    --ctx "$CTX" --threads "$THREADS" --max-conns-per-ip 0 "${ours2_args[@]}" > "$work/ours2.log" 2>&1 &
  pids+=($!)
fi
# -c is the whole cache, split over -np slots; --jinja renders the file's
# template as we do. -fa off: d32676d's server with flash attention on (its
# default, auto) answers Qwen2.5-Coder-1.5B Q4_K_M with garbage ("What is
# 2+3?" -> "Impartial-onster..." and a 500), with it off it answers "5".
"$server" -m "$model" --port "$((PORT0 + 1))" -np "$PARALLEL" -c "$((CTX * PARALLEL))" -t "$THREADS" --jinja -fa off \
  "${llama_args[@]}" > "$work/llama.log" 2>&1 &
pids+=($!)

wait_ready() {   # url name log
  for _ in $(seq 600); do
    if curl -fs "$1/health" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "$2 did not become ready; its log:" >&2
  tail -20 "$3" >&2
  exit 1
}
wait_ready "$ours_url" pocketllm "$work/ours.log"
wait_ready "$llama_url" llama-server "$work/llama.log"
urls=("$ours_url" "$llama_url")
if (( ours2 )); then
  wait_ready "$ours2_url" pocketllm2 "$work/ours2.log"
  urls+=("$ours2_url")
fi

# The anchors must answer sanely before their speed means anything.
for u in "${urls[@]}"; do
  curl -fs "$u/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"What is 2+3? Answer with the number."}],"max_tokens":16,"temperature":0}' |
    python3 -c 'import json,sys; print("# sanity", sys.argv[1], repr(json.load(sys.stdin)["choices"][0]["message"]["content"]))' "$u" >&2 ||
    { echo "$u does not answer sanely; not measuring it" >&2; exit 1; }
done

load() {   # url clients turns max_tokens convs extra-json [long-prompt] -> one JSON line per K
  python3 "$here/serve-load.py" --url "$1" --clients "$2" --turns "$3" --max-tokens "$4" --convs "$5" --extra "$6" \
    --long-prompt "${7:-0}" --long-delay "$LONG_DELAY" --json
}

# The engines of one K run one after the other, the order rotating per K.
engines=(llama-server pocketllm)
(( ours2 )) && engines+=(pocketllm2)
url_of() { case "$1" in llama-server) echo "$llama_url" ;; pocketllm) echo "$ours_url" ;; *) echo "$ours2_url" ;; esac; }
i=0
for k in ${CLIENTS//,/ }; do
  echo "# K=$k (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  n=${#engines[@]}
  for j in $(seq 0 $((n - 1))); do
    e="${engines[$(( (i + j) % n ))]}"
    load "$(url_of "$e")" "$k" "$TURNS" "$MAX_TOKENS" "$CONVS" '{}' "$LONG_PROMPT" | sed "s/^{/{\"engine\": \"$e\", /" >> "$work/k.jsonl"
  done
  i=$((i + 1))
done

echo "# multi-turn: 8 turns, 64 tokens" >&2
load "$ours_url" 1 8 64 1 '{}' | sed 's/^{/{"engine": "pocketllm, cache", /' >> "$work/turns.jsonl"
load "$ours_url" 1 8 64 1 '{"cache_prompt": false}' | sed 's/^{/{"engine": "pocketllm, no cache", /' >> "$work/turns.jsonl"
if (( ours2 )); then
  load "$ours2_url" 1 8 64 1 '{}' | sed 's/^{/{"engine": "pocketllm2, cache", /' >> "$work/turns.jsonl"
fi
load "$llama_url" 1 8 64 1 '{}' | sed 's/^{/{"engine": "llama-server, cache_prompt", /' >> "$work/turns.jsonl"

(( ours2 )) && echo "pocketllm: ${OURS_ENV:-} ${OURS_ARGS:-}; pocketllm2: ${OURS2_ENV:-} ${OURS2_ARGS:-}"
python3 - "$work/k.jsonl" "$work/turns.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
turns = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ks = sorted({r["clients"] for r in rows})
get = lambda k, e: next(r for r in rows if r["clients"] == k and r["engine"] == e)
ours = [e for e in ("pocketllm", "pocketllm2") if any(r["engine"] == e for r in rows)]
for n, us in enumerate(ours):
    if n: print()
    if len(ours) > 1: print("%s against llama-server:" % us); print()
    print("| K | tok/s llama-server / ours (ratio) | TTFT p50 ms | TTFT p95 ms | ITL p50 ms | ITL p95 ms |")
    print("|---|---|---|---|---|---|")
    for k in ks:
        l, o = get(k, "llama-server"), get(k, us)
        f = lambda key, d=1: "%.*f / %.*f" % (d, l[key], d, o[key])
        print("| %d | %s (%.2fx) | %s | %s | %s | %s |" % (k, f("tok_s"), o["tok_s"] / l["tok_s"], f("ttft_p50_ms"),
              f("ttft_p95_ms"), f("itl_p50_ms", 2), f("itl_p95_ms", 2)))
if len(ours) > 1:
    print()
    print("pocketllm2 / pocketllm (below 1: pocketllm2 lower; tok/s: higher is better, the rest lower):")
    print()
    print("| K | tok/s | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 |")
    print("|---|---|---|---|---|---|")
    for k in ks:
        a, b = get(k, "pocketllm"), get(k, "pocketllm2")
        r = lambda key: "%.2f" % (b[key] / a[key]) if a[key] else "-"
        print("| %d | %s | %s | %s | %s | %s |" % (k, r("tok_s"), r("ttft_p50_ms"), r("ttft_p95_ms"), r("itl_p50_ms"),
              r("itl_p95_ms")))
if any("long_n" in r for r in rows):
    for us in ours:
        print()
        print("With long prompts arriving (LONG_PROMPT): llama-server / %s" % us)
        print()
        print("| K | ITL max ms | long prompts sent | long-prompt TTFT p50 ms |")
        print("|---|---|---|---|")
        for k in ks:
            l, o = get(k, "llama-server"), get(k, us)
            print("| %d | %.1f / %.1f | %d / %d | %.1f / %.1f |" % (k, l["itl_max_ms"], o["itl_max_ms"], l["long_n"],
                  o["long_n"], l["long_ttft_p50_ms"], o["long_ttft_p50_ms"]))
print()
print("TTFT (ms) per turn of one 8-turn conversation:")
print()
# a turn whose reply streamed no content chunk has no TTFT: "-"
n = max(int(k) for t in turns for k in t["ttft_p50_ms_by_turn"]) + 1
print("| engine | " + " | ".join("turn %d" % (i + 1) for i in range(n)) + " |")
print("|---|" + "---|" * n)
for t in turns:
    v = t["ttft_p50_ms_by_turn"]
    print("| %s | " % t["engine"] + " | ".join("%.1f" % v[str(i)] if str(i) in v else "-" for i in range(n)) + " |")
EOF
