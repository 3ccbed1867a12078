#!/usr/bin/env bash
# The wall between the tools and the library: files under tools/ include only
# the public header (pocketllm.h) and tools' own headers, never a header from
# src/. cmd_synth.c writes test checkpoints with internal encoders and says so
# in its first comment. PENDING lists files still to be converted (issue 19,
# part 1): shrink it, never grow it. The check is run once on a copy with a
# planted internal include, which it must refuse.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ALLOWED_INTERNAL="cmd_synth.c"
PENDING=""

# check DIR: prints each offending include, returns 1 if any
check() {
  local dir=$1 bad=0 f base inc
  for f in "$dir"/*.c "$dir"/*.h; do
    [ -f "$f" ] || continue
    base=$(basename "$f")
    case " $ALLOWED_INTERNAL $PENDING " in *" $base "*) continue ;; esac
    while IFS= read -r inc; do
      [ "$inc" = "pocketllm.h" ] && continue
      [ -f "$dir/$inc" ] && continue
      echo "$base includes \"$inc\" (not the public header nor a tools header)"
      bad=1
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done
  return $bad
}

fail=0
check "$ROOT/tools/pocketllm" || fail=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cp "$ROOT"/tools/pocketllm/*.[ch] "$T"/
printf '#include "engine/fit.h"\n' >> "$T/cmd_fit.c"
if check "$T" >/dev/null; then echo "FAIL: a planted internal include was not caught"; fail=1; fi
grep -q 'internal headers' "$ROOT/tools/pocketllm/cmd_synth.c" || { echo "FAIL: cmd_synth.c does not say it includes internal headers"; fail=1; }
# python/ is pure Python: no C sources that could include src/
if find "$ROOT/python" -name '*.[ch]' | grep -q .; then echo "FAIL: C sources under python/"; fail=1; fi
[ $fail -eq 0 ] && echo "include_wall: ok"
exit $fail
