#!/usr/bin/env bash
# devices / backends / architectures / ops: work without a GPU or model file,
# agree with the dispatch tables, and `devices` opens no runtime library.
set -u
BIN=$1 FIX=$2
fail=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

for c in devices backends architectures ops; do
  if "$BIN" $c >/dev/null && "$BIN" $c --json | python3 -c 'import json,sys; json.load(sys.stdin)'; then ok; else bad "$c"; fi
done

# The listings must match the tables the dispatcher uses: every (backend, op,
# dtype) that `ops --json` lists is dispatchable (test_registry checks the C
# side); here: ops and backends agree with each other and with devices.
python3 - "$BIN" <<'PY' && ok || bad "ops/backends/devices disagree"
import json, subprocess, sys
b = sys.argv[1]
ops = json.loads(subprocess.check_output([b, "ops", "--json"]))
backs = json.loads(subprocess.check_output([b, "backends", "--json"]))
devs = json.loads(subprocess.check_output([b, "devices", "--json"]))
from_ops = {(be, o["name"], d) for o in ops for be, ds in o["implemented"].items() for d in ds}
from_backends = {(x["name"], op, d) for x in backs for op, ds in x["ops"].items() for d in ds}
assert from_ops == from_backends, (from_ops ^ from_backends)
names = [x["name"] for x in backs]
for want in ["ref", "cpu", "cuda", "ascend", "horizon", "qnn", "mps"]:
    assert want in names, want
for x in backs:
    if x["status"] == "declared":
        assert x.get("awaits"), x["name"]
        assert not x["ops"], x["name"]
assert [d["name"] for d in devs] == names
for d in devs:
    assert d["implemented"] == (d["name"] in ("ref", "cpu") or bool(next(x for x in backs if x["name"] == d["name"])["ops"]))
    assert d["detail"]
for o in ops:
    for be, ds in o["implemented"].items():
        allowed = {t for i in o["inputs"] for t in i["dtypes"]} | set(o["output_dtypes"])
        assert set(ds) <= allowed | {"any"}, (o["name"], be, ds)
arches = json.loads(subprocess.check_output([b, "architectures", "--json"]))
assert {"qwen3", "toy"} <= {a["name"] for a in arches}
print("introspection listings consistent:", len(from_ops), "kernels")
PY

# --op/--device filters and errors.
if "$BIN" ops --op matmul --device cuda --json | python3 -c 'import json,sys; o=json.load(sys.stdin); assert len(o)==1 and list(o[0]["implemented"])==["cuda"]'; then ok; else bad "ops --op matmul --device cuda"; fi
if ! "$BIN" ops --op nosuch 2>/dev/null; then ok; else bad "unknown op accepted"; fi

# devices never loads a runtime library: no CUDA/CANN/QNN library is opened.
if command -v strace >/dev/null; then
  # (LeakSanitizer cannot run under ptrace: switch it off for this run.)
  if ASAN_OPTIONS=detect_leaks=0 strace -f -e trace=openat,open -o /tmp/pl_devices_strace.$$ "$BIN" devices >/dev/null 2>&1; then
    if grep -Eq 'libcuda|libcudart|libnvidia|libascend|libQnn|libhbrt|libdnn' /tmp/pl_devices_strace.$$; then
      bad "devices opened a runtime library"; grep -E 'libcuda|libcudart|libnvidia|libascend|libQnn' /tmp/pl_devices_strace.$$ | head -3
    else ok; fi
  else bad "devices under strace"; fi
  rm -f /tmp/pl_devices_strace.$$
fi
# ... and works with the CUDA libraries hidden.
if env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=/nonexistent "$BIN" devices >/dev/null; then ok; else bad "devices with no library path"; fi
if LD_DEBUG=libs "$BIN" devices 2>&1 >/dev/null | grep -Eq 'calling init: .*(libcuda|libcudart)'; then bad "LD_DEBUG shows a CUDA library"; else ok; fi

echo "introspect: $pass passed, $fail failed"
[ $fail -eq 0 ]
