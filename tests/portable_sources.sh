#!/usr/bin/env bash
# The library as a non-x86 machine builds it: every src/*.c but the *_avx2.c
# files, with PL_CPU_HAVE_AVX2_BUILD=0, must compile without a warning (an
# x86 build never sees the #else branches; a constant defined only inside an
# x86 branch once broke them).  Usage: portable_sources.sh CC SOURCE_DIR
set -u
CC=$1 ROOT=$2
fail=0 n=0
jansson=$(pkg-config --cflags jansson 2>/dev/null)
while IFS= read -r f; do
  n=$((n + 1))
  out=$("$CC" -std=c11 -D_GNU_SOURCE -DPL_CPU_HAVE_AVX2_BUILD=0 -fsyntax-only -Wall -Wextra -Wno-unused-parameter \
        -Wno-sign-compare -fno-strict-aliasing -Werror -I"$ROOT/include" -I"$ROOT/src" \
        $jansson "$f" 2>&1) || { echo "FAIL: $f"; echo "$out" | head -20; fail=$((fail + 1)); }
done < <(find "$ROOT/src" -name '*.c' ! -name '*_avx2.c' | sort)
echo "portable_sources: $((n - fail)) of $n files compile as on a non-x86 machine"
[ "$n" -gt 0 ] && [ $fail -eq 0 ]
