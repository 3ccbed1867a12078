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
#     one line; one `pocketllm run` on the portable kernels (PL_CPU_FEATURES=none,
#     as on a CPU without AVX2).
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

# ---- the [cuda] extra, when its wheel was built (scripts/build-wheel.sh --cuda) --------
cuda_wheels=("$dist"/pocketllm_cuda-*-manylinux_*_x86_64.whl)
if ((${#cuda_wheels[@]} == 0)); then
  echo "skip [cuda] extra: no pocketllm_cuda wheel in $dist (scripts/build-wheel.sh --cuda builds it; needs nvcc)"
else
  cwhl="${cuda_wheels[0]}"
  echo "check-wheel: $(basename "$cwhl") ($(du -k "$cwhl" | cut -f1) KiB)"
  if [ -x "$aw" ] && "$aw" show "$cwhl" 2>&1 | tr '\n' ' ' | grep -q 'platform tag: *"manylinux_'; then
    ok "auditwheel show: the cuda wheel has a manylinux tag"
  else
    bad "the cuda wheel has no manylinux tag"
  fi
  # The extra resolves to the local file (numpy is already installed).
  if (cd "$tmp" && run_hidden "$tmp/venv/bin/pip" install -q --no-index --find-links "$dist" "pocketllm[cuda]"); then
    ok "pip install \"pocketllm[cuda]\" from $dist"
    for elf in "$site"/pocketllm_cuda/*.so; do
      foreign="$(ldd "$elf" | awk '{print $1}' | grep -Ev "$base" | grep -v '^/' | tr '\n' ' ')"
      [ -z "$foreign" ] && ok "$(basename "$elf") needs only manylinux base libraries (CUDA runtime static)" ||
        bad "$(basename "$elf") needs $foreign"
    done
    # pocketllm points PL_CUDA_MODULE at the extra's module and loads it only
    # for a cuda model: a cpu model leaves it unmapped.
    out="$(cd "$tmp" && run_hidden "$tmp/venv/bin/python" - "$fix/models/tiny-qwen3-q4_k_m.gguf" 2>&1 <<'EOF'
import os, sys, pocketllm, pocketllm_cuda
with pocketllm.Model(sys.argv[1], ctx=64) as m:
    m.generate("Hi", max_tokens=2)
    mapped = "libpocketllm-cuda" in open("/proc/self/maps").read()
want = str(pocketllm_cuda.module_path())
print("env ok" if os.environ.get("PL_CUDA_MODULE") == want else f"env {os.environ.get('PL_CUDA_MODULE')!r} != {want!r}")
print("mapped" if mapped else "not mapped")
EOF
)"
    grep -qx "env ok" <<<"$out" && grep -qx "not mapped" <<<"$out" &&
      ok "PL_CUDA_MODULE points at the extra's module; a cpu model does not load it" ||
      bad "the extra's module: $out"
    if [ ! -e /dev/nvidia0 ]; then
      r="$(cd "$tmp" && run_hidden "$tmp/venv/bin/pocketllm" run --model "$fix/models/tiny-qwen3-q4_k_m.gguf" \
             --prompt hi --max-tokens 2 --device cuda 2>&1 >/dev/null)"
      [ "$(wc -l <<<"$r")" -eq 1 ] && grep -q cuda <<<"$r" &&
        ok "with the extra, --device cuda without a GPU fails in one line: $r" || bad "--device cuda with the extra: $r"
    fi
  else
    bad "pip install \"pocketllm[cuda]\" from $dist failed"
  fi
fi

if ((fail)); then echo "check-wheel: FAILED"; exit 1; fi
echo "check-wheel: passed"
