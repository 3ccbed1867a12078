# Sourced by the bench scripts (which set $root, the repository): sets
# $pocketllm to $POCKETLLM, else to the first built binary of build-perf and
# build, and stops the script when there is none.
pocketllm="${POCKETLLM:-}"
if [ -z "$pocketllm" ]; then
  for c in "$root/build-perf/bin/pocketllm" "$root/build/bin/pocketllm"; do
    if [ -x "$c" ]; then pocketllm="$c"; break; fi
  done
fi
[ -x "$pocketllm" ] || { echo "no pocketllm binary (build it, or set POCKETLLM)" >&2; exit 1; }
