# Sourced by the CLI test scripts (after BIN is set): the pass/fail counters,
# ok / bad, expect_error, and a PYTHONPATH under which the scripts' Python
# checks read GGUF files with the repository's own reader
# (tests/cli/gguf_tensors.py over python/pocketllm/gguf.py).
# (Named .bash, not .sh: tests/CMakeLists.txt makes every tests/cli/*.sh a test.)
fail=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
# expect_error "<substring of stderr>" args...: the command fails, and its
# stderr is at most two lines that contain the substring
expect_error() {
  local want=$1; shift
  local err rc
  err=$("$BIN" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [[ "$err" == *"$want"* ]] && [ "$(printf '%s\n' "$err" | grep -c .)" -le 2 ]; then ok
  else bad "pocketllm $* -> rc=$rc stderr=[$err] (wanted '$want')"; fi
}
_cli_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONPATH="$_cli_dir:$_cli_dir/../../python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
