#!/usr/bin/env bash
# Installs what building and testing PocketLLM needs on a fresh Debian/Ubuntu
# machine (as root, or with sudo available). Safe to run repeatedly.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-dev libjansson-dev libmicrohttpd-dev python3 nginx)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Python packages for the server tests (tests/server/requirements.txt).
if ! python3 -c 'import openai, pytest, requests, prometheus_client, jsonschema, pydantic' 2>/dev/null; then
  req="$(cd "$(dirname "$0")/.." && pwd)/tests/server/requirements.txt"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  python3 -m pip --version >/dev/null 2>&1 || $SUDO apt-get install -y -qq python3-pip >/dev/null || true
  # A Debian system Python refuses plain pip installs (PEP 668): retry with the override.
  python3 -m pip install -q -r "$req" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages -r "$req" ||
    echo "setup-deps: warning: could not install $req; the server tests will be skipped"
fi
# Python packages for the Python package's tests (python/, tests/cli/python.sh).
python3 -c 'import numpy, pytest, jinja2' 2>/dev/null || python3 -m pip install -q numpy pytest jinja2 2>/dev/null ||
  python3 -m pip install -q --break-system-packages numpy pytest jinja2 ||
  echo "setup-deps: warning: could not install numpy, pytest, jinja2; the Python package tests will be skipped"
# jsonschema validates the outputs of JSON-schema constrained decoding (tests/test_grammar_schema.c).
python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install -q jsonschema 2>/dev/null ||
  python3 -m pip install -q --break-system-packages jsonschema ||
  echo "setup-deps: warning: could not install jsonschema; test_grammar_schema will fail"
echo "setup-deps: all build and test dependencies present"
