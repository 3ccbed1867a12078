#!/usr/bin/env bash
# Checks the wheel scripts/build-wheel.sh made, as a user without a build
# toolchain gets it:
#   - `auditwheel show` gives it a manylinux tag, and pip refuses it for a
#     platform one glibc older (pip's platform message, not an import error);
#   - in a fresh venv whose PATH holds no compiler, cmake or pkg-config,
#     `pip install --only-binary :all: <wheel>` works;
#   - every shared library the installed binaries load is in the wheel or in
#     the manylinux base set (libc, libm, ...), not a system -dev library;
#   - check_installed.py: `pocketllm devices`, `pocketllm run` and
#     Model.generate on the tiny fixture give the golden tokens, `pocketllm
#     serve` answers a chat request, `--device cuda` without a GPU fails in
#     one line.
#
#   tests/wheel/check-wheel.sh [DIST_DIR]     (default dist/)
#
# Needs network access to PyPI for numpy (the one runtime dependency).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dist="${1:-$root/dist}"
fix="$root/tests/fixtures"
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

shopt -s nullglob
wheels=("$dist"/pocketllm-*-manylinux_*_x86_64.whl)
if ((${#wheels[@]} != 1)); then
  echo "check-wheel: FAIL: want exactly one manylinux pocketllm wheel in $dist, found ${#wheels[@]}" \
       "(build it with scripts/build-wheel.sh)"
  exit 1
fi
whl="${wheels[0]}"
echo "check-wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"
tmp="$(mktemp -d /tmp/pocketllm-wheel-check.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

# ---- the manylinux tag --------------------------------------------------------
aw="$root/build-wheel/tools/bin/auditwheel"
if [ -x "$aw" ]; then
  tag="$("$aw" show "$whl" 2>&1 | tr '\n' ' ' | grep -o 'following platform tag: *"manylinux_[0-9_]*x86_64"' | grep -o 'manylinux_[0-9_]*x86_64')"
  [ -n "$tag" ] && ok "auditwheel show: $tag" || bad "auditwheel show reports no manylinux tag: $("$aw" show "$whl" 2>&1)"
else
  bad "no auditwheel at $aw (scripts/build-wheel.sh installs it)"
fi

# ---- a fresh venv, no build tools on PATH -------------------------------------------
python3 -m venv "$tmp/venv" || { echo "check-wheel: FAIL: python3 -m venv (Debian: apt-get install python3-venv)"; exit 1; }
hidden="$tmp/venv/bin"   # the venv's python, pip and (once installed) pocketllm: nothing else
for tool in cc gcc clang cmake pkg-config make nvcc; do
  if PATH="$hidden" command -v "$tool" >/dev/null; then bad "$tool is on the check's PATH"; fi
done
run_hidden() { env -u POCKETLLM_LIB -u POCKETLLM_BIN -u PL_CUDA_MODULE -u LD_LIBRARY_PATH -u PYTHONPATH \
                   PATH="$hidden" PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"; }

# pip's platform check: the wheel's own tag installs, one glibc older is refused.
plat="$(basename "$whl" .whl)"; plat="${plat##*-}"             # manylinux_2_34_x86_64
minor="$(echo "$plat" | cut -d_ -f3)"
older="manylinux_2_$((minor - 1))_x86_64"
out="$(cd "$tmp" && run_hidden "$tmp/venv/bin/pip" install --dry-run --no-deps --only-binary=:all: \
        --platform "$older" --target "$tmp/t" "$whl" 2>&1)"
if [ $? -ne 0 ] && grep -q "is not a supported wheel on this platform" <<<"$out"; then
  ok "pip refuses it on $older: $(grep -m1 'not a supported wheel' <<<"$out")"
else
  bad "pip on $older did not refuse it with the platform message: $out"
fi
(cd "$tmp" && run_hidden "$tmp/venv/bin/pip" install -q --dry-run --no-deps --only-binary=:all: \
   --platform "$plat" --target "$tmp/t" "$whl") >/dev/null 2>&1 && ok "pip accepts it on $plat" ||
  bad "pip refuses it on its own platform $plat"

t0=$(date +%s%N)
if (cd "$tmp" && run_hidden "$tmp/venv/bin/pip" install -q --only-binary=:all: "$whl"); then
  ok "pip install --only-binary=:all: $(basename "$whl") without compiler/cmake on PATH ($(( ($(date +%s%N) - t0) / 1000000 )) ms, numpy included)"
else
  bad "pip install of the wheel failed"
  exit 1
fi

# ---- what the installed binaries load ----------------------------------------------
site="$("$tmp/venv/bin/python" -c 'import pocketllm, os; print(os.path.dirname(os.path.dirname(pocketllm.__file__)))')"
base='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so'
for elf in "$site"/pocketllm/libpocketllm.so "$site"/pocketllm/bin/pocketllm "$site"/pocketllm.libs/*.so*; do
  foreign="$(ldd "$elf" | awk '{print $1, $3}' | while read -r name path; do
    [[ "$path" == "$site"/* ]] && continue
    [[ "$name" =~ $base || "$name" == /* ]] && continue
    echo -n "$name=>${path:-not-found} "
  done)"
  [ -z "$foreign" ] && ok "$(basename "$elf") loads only bundled or manylinux base libraries" ||
    bad "$(basename "$elf") loads $foreign"
done

# ---- the package at work -----------------------------------------------------------
(cd "$tmp" && run_hidden "$tmp/venv/bin/python" "$root/tests/wheel/check_installed.py" "$fix") || fail=1

if ((fail)); then echo "check-wheel: FAILED"; exit 1; fi
echo "check-wheel: passed"
