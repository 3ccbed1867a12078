#!/usr/bin/env bash
# What each CPU optimization buys: PocketLLM's bench with each one switched
# off in turn (environment switches read by the cpu backend, all on by
# default), interleaved by round so drift hits every configuration alike.
#
#   bench/ablation.sh MODEL.gguf [MODEL.gguf ...]
#
# Configurations:
#   all        everything on
#   no-repack  PL_CPU_REPACK=0: weights used as stored in the file (the q8_K
#              dot-product kernels of cpu_matmul*.c) instead of the 8-row
#              interleaved layouts and their VNNI kernels (cpu_repack.c)
#   no-fuse    PL_CPU_FUSE=0: q/k/v and gate/up+SwiGLU as separate matmuls
#              (one activation conversion and one barrier each)
#   no-flash   PL_CPU_FLASH=0: two-pass prefill attention instead of the
#              tiled (flash) one
#   no-fa      PL_CPU_FA=0: decode attention in f32 two-pass form instead of
#              the online, K/V-shared-across-the-group form
#   no-guided  PL_CPU_GUIDED=0: decode matmuls in 4 fixed chunks per thread
#              and matrix instead of guided self-scheduling (only matters
#              with more than one thread)
# Environment: THREADS ("1 2"), P (512), N (128), ROUNDS (2), POCKETLLM.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/find-pocketllm.sh
. "$root/bench/find-pocketllm.sh"
[ $# -ge 1 ] || { echo "usage: $0 MODEL.gguf [MODEL.gguf ...]" >&2; exit 1; }
THREADS="${THREADS:-1 2}"
P="${P:-512}"
N="${N:-128}"
ROUNDS="${ROUNDS:-2}"
configs=(all no-repack no-fuse no-flash no-fa no-guided)
env_of() {
  case "$1" in
    all) echo "" ;;
    no-repack) echo "PL_CPU_REPACK=0" ;;
    no-fuse) echo "PL_CPU_FUSE=0" ;;
    no-flash) echo "PL_CPU_FLASH=0" ;;
    no-fa) echo "PL_CPU_FA=0" ;;
    no-guided) echo "PL_CPU_GUIDED=0" ;;
  esac
}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for model in "$@"; do
  for t in $THREADS; do
    for ((r = 0; r < ROUNDS; r++)); do
      for cfg in "${configs[@]}"; do
        echo "# $(basename "$model") threads=$t $cfg round $((r + 1))/$ROUNDS" >&2
        # shellcheck disable=SC2046
        env $(env_of "$cfg") "$pocketllm" bench --model "$model" -p "$P" -n "$N" -r 1 --threads "$t" --json |
          python3 -c '
import json, sys
for o in json.load(sys.stdin):
    print(json.dumps({"model": sys.argv[1], "threads": int(sys.argv[2]), "config": sys.argv[3],
                      "test": o["test"], "tok_s": o["tok_s"]}))' "$(basename "$model")" "$t" "$cfg" >> "$work/res.jsonl"
      done
    done
  done
done
python3 - "$work/res.jsonl" "${configs[@]}" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
configs = sys.argv[2:]
keys = []
for r in rows:
    k = (r["model"], r["threads"], r["test"])
    if k not in keys: keys.append(k)
print("| model | thr | test | " + " | ".join(configs) + " |")
print("|---|---|---|" + "---|" * len(configs))
for k in keys:
    mean = {c: statistics.mean(r["tok_s"] for r in rows if (r["model"], r["threads"], r["test"]) == k and r["config"] == c)
            for c in configs}
    cells = ["%.2f" % mean["all"]] + ["%.2f (%.2fx)" % (mean[c], mean["all"] / mean[c]) for c in configs[1:]]
    print("| %s | %d | %s | " % k + " | ".join(cells) + " |")
print("\n(x) = all-on / switched-off: what that optimization buys")
PY
