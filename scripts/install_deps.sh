#!/usr/bin/env bash
# Installs what kuiper needs on Debian 12 / Ubuntu: build tools and libraries from the
# distribution, and the Python reference tokenizers the tests compare against. Idempotent:
# packages already present are skipped.
set -euo pipefail

debs=(cmake ninja-build g++ pkg-config ccache python3 python3-pip
      libgoogle-glog-dev libgflags-dev libarmadillo-dev libopenblas-dev libsentencepiece-dev
      libgtest-dev libpcre2-dev nlohmann-json3-dev libcli11-dev libreadline-dev libcpp-httplib-dev)
missing=()
for pkg in "${debs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Reference implementations for the tokenizer tests, and the OpenAI client the server tests
# drive kuiper_server with (PyPI).
if ! python3 -c 'import sentencepiece, tiktoken, openai' 2>/dev/null; then
  python3 -m pip install -q sentencepiece tiktoken openai 2>/dev/null ||
    python3 -m pip install -q --break-system-packages sentencepiece tiktoken openai
fi
