#!/usr/bin/env bash
# The model's chat template reaches run --chat, serve and chat-template
# --model as the same bytes (issue 22): a template of 65,536 bytes or more was
# dropped by run --chat and serve ("the model has no chat template") while
# chat-template rendered it; a NUL byte inside a template cut it short in
# run --chat only. Now a long template works everywhere and a NUL byte is
# refused everywhere with one message.
set -euo pipefail
BIN=$1 FIX=$2
M="$FIX/models/tiny-qwen3-f32.gguf"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
srv_pid=
cleanup() { [[ -n "$srv_pid" ]] && kill "$srv_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
pass=0

# The fixture's own template, then the same with a comment that makes it
# 70,000 bytes (it renders the same text) and with a NUL byte in a comment.
python3 - "$M" "$tmp" <<'EOF'
import struct, sys
buf = open(sys.argv[1], "rb").read()
# find tokenizer.chat_template's value
key = b"tokenizer.chat_template"
i = buf.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
assert struct.unpack_from("<I", buf, i)[0] == 8
(n,) = struct.unpack_from("<Q", buf, i + 4)
t = buf[i + 12:i + 12 + n]
open(sys.argv[2] + "/orig.jinja", "wb").write(t)
pad = b"{#- " + b"p" * (70000 - len(t) - 8) + b" -#}"
open(sys.argv[2] + "/big.jinja", "wb").write(pad + t)
open(sys.argv[2] + "/nul.jinja", "wb").write(b"{# a\0b #}" + t)
EOF
[[ $(stat -c %s "$tmp/big.jinja") -ge 65536 ]] || fail "the long template is too short"
python3 "$here/gguf_set_str.py" "$M" "$tmp/big.gguf" tokenizer.chat_template "$tmp/big.jinja"
python3 "$here/gguf_set_str.py" "$M" "$tmp/nul.gguf" tokenizer.chat_template "$tmp/nul.jinja"

# chat-template --model: the long one renders like the original
echo '{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}' >"$tmp/in.json"
want=$("$BIN" chat-template --model "$M" --input "$tmp/in.json")
got=$("$BIN" chat-template --model "$tmp/big.gguf" --input "$tmp/in.json") || fail "chat-template --model big: $got"
[[ "$got" == "$want" ]] || fail "chat-template --model big renders differently"
pass=$((pass + 1))

# run --chat: the long template is used (the same prompt tokens as the
# original's; ChatML would differ: no empty think block)
ids() { "$BIN" run --model "$1" --max-tokens 1 --json --chat --prompt hi 2>"$tmp/err" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt_tokens"])'; }
want=$(ids "$M")
got=$(ids "$tmp/big.gguf")
[[ "$got" == "$want" ]] || fail "run --chat with the long template: prompt $got, want $want: $(cat "$tmp/err")"
grep -q "no chat template" "$tmp/err" && fail "run --chat: $(cat "$tmp/err")"
pass=$((pass + 1))

# A NUL byte: refused by all three, with the same message
msg="the template contains a NUL byte"
out=$("$BIN" chat-template --model "$tmp/nul.gguf" --input "$tmp/in.json" 2>&1) && fail "chat-template accepted a NUL"
grep -q "$msg" <<<"$out" || fail "chat-template --model nul: $out"
out=$("$BIN" chat-template --template "$tmp/nul.jinja" --input "$tmp/in.json" 2>&1) && fail "chat-template accepted a NUL"
grep -q "$msg" <<<"$out" || fail "chat-template --template nul: $out"
ids "$tmp/nul.gguf" >/dev/null || fail "run --chat nul: $(cat "$tmp/err")"
grep -q "$msg" "$tmp/err" || fail "run --chat nul does not say why: $(cat "$tmp/err")"
pass=$((pass + 1))

# pl_model_meta_str (the public accessor; it had a 64 KiB buffer): the whole
# long value, and for the NUL one no value and a message rather than a
# shortened one
lib=$(cd "$(dirname "$BIN")/../lib" 2>/dev/null && pwd)/libpocketllm.so
# (not `ldd | grep -q`: under pipefail the early grep exit fails the pipeline)
if [[ -f "$lib" ]] && ! grep -aq __asan_init "$lib"; then
    python3 - "$lib" "$tmp" <<'EOF' || fail "pl_model_meta_str"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.pl_model_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.pl_model_meta_str.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.pl_model_meta_str.restype = ctypes.c_char_p
lib.pl_last_error.restype = ctypes.c_char_p
lib.pl_model_free.argtypes = [ctypes.c_void_p]
for name, want in (("big", open(sys.argv[2] + "/big.jinja", "rb").read()), ("nul", None)):
    m = ctypes.c_void_p()
    assert lib.pl_model_load((sys.argv[2] + f"/{name}.gguf").encode(), None, ctypes.byref(m)) == 0, lib.pl_last_error()
    got = lib.pl_model_meta_str(m, b"tokenizer.chat_template")
    if want is None:
        assert got is None and b"NUL" in lib.pl_last_error(), (got, lib.pl_last_error())
    else:
        assert got == want, (name, len(got or b""), len(want))
        assert lib.pl_model_meta_str(m, b"general.architecture") == b"qwen3"
        assert lib.pl_model_meta_str(m, b"tokenizer.chat_template") == want
    lib.pl_model_free(m)
EOF
    pass=$((pass + 1))
else
    echo "note: no uninstrumented $lib; pl_model_meta_str not checked here"
fi

# serve: the long template is used for a chat request; the NUL one refused
serve_prompt_tokens() {
    "$BIN" serve --model "$1" --host 127.0.0.1 --port 0 --threads 1 >/dev/null 2>"$tmp/srv.log" &
    srv_pid=$!
    local port=
    for _ in $(seq 300); do
        port=$(sed -nE 's|.*listening on http://[^:]+:([0-9]+).*|\1|p' "$tmp/srv.log" | head -1)
        [[ -n "$port" ]] && break
        kill -0 "$srv_pid" 2>/dev/null || fail "serve exited: $(cat "$tmp/srv.log")"
        sleep 0.1
    done
    [[ -n "$port" ]] || fail "serve did not listen: $(cat "$tmp/srv.log")"
    python3 - "$port" <<'EOF'
import json, sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(300):
    try:
        if urllib.request.urlopen(url + "/health", timeout=5).status == 200:
            break
    except Exception:
        time.sleep(0.1)
body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=60))["usage"]["prompt_tokens"])
EOF
    kill "$srv_pid"
    wait "$srv_pid" 2>/dev/null || true
    srv_pid=
}
want=$(serve_prompt_tokens "$M")
got=$(serve_prompt_tokens "$tmp/big.gguf")
[[ "$got" == "$want" ]] || fail "serve with the long template: $got prompt tokens, want $want: $(cat "$tmp/srv.log")"
grep -q "no chat template" "$tmp/srv.log" && fail "serve: $(cat "$tmp/srv.log")"
serve_prompt_tokens "$tmp/nul.gguf" >/dev/null
grep -q "$msg" "$tmp/srv.log" || fail "serve with a NUL template does not say why: $(cat "$tmp/srv.log")"
pass=$((pass + 1))

echo "chat_template_meta: $pass passed, 0 failed"
