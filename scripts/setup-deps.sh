#!/usr/bin/env bash
# Installs what building and testing PocketLLM needs on a fresh Debian/Ubuntu
# machine (as root, or with sudo available). Safe to run repeatedly.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-dev libjansson-dev libmicrohttpd-dev python3)
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
echo "setup-deps: all build and test dependencies present"
