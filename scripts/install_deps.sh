#!/usr/bin/env bash
# Installs what kuiper needs on Debian 12 / Ubuntu: build tools and libraries from the
# distribution (clang, its libFuzzer/sanitizer runtimes and libomp for the fuzz harnesses), and
# the Python reference tokenizers the tests compare against. Idempotent: packages already
# present are skipped.
set -euo pipefail

debs=(cmake ninja-build g++ pkg-config ccache python3 python3-pip
      libgoogle-glog-dev libgflags-dev libarmadillo-dev libopenblas-dev libsentencepiece-dev
      libgtest-dev libpcre2-dev libicu-dev nlohmann-json3-dev libcli11-dev libreadline-dev
      libcpp-httplib-dev clang libclang-rt-14-dev libomp-dev)
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
# The references the tests compare against (PyPI): sentencepiece, tiktoken and tokenizers for the
# tokenizers; jinja2 renders the models' own chat templates as transformers does; the openai
# client drives kuiper_server in its tests; gguf (llama.cpp's own Python package, with numpy)
# writes and reads the GGUF files the GGUF tests compare against; safetensors reads the HF
# fixtures for the float64 forward pass (scripts/reference_forward.py).
pips=(sentencepiece tiktoken tokenizers 'jinja2>=3.1' openai gguf numpy safetensors)
if ! python3 -c 'import sentencepiece, tiktoken, tokenizers, jinja2, openai, gguf, numpy, safetensors' 2>/dev/null; then
  python3 -m pip install -q "${pips[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${pips[@]}"
fi
