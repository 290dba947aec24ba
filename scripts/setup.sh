#!/usr/bin/env bash
# Installs what shardlm needs on a fresh Debian machine (run as root or with sudo). Python
# jinja2 renders the reference prompts the chat-template tests compare with.
set -euo pipefail
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PACKAGES=(build-essential cmake ninja-build pkg-config clang-format
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev libxxhash-dev
  libzstd-dev libboost1.81-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3-jinja2)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js + npm run the end-to-end tests (the official `openai` client). A machine that
# already has them (Debian's or NodeSource's nodejs, which bundles npm) keeps its own.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
