#!/usr/bin/env bash
# Set up, build everything, and run the whole test suite (what CI runs). CUDA code is compiled
# when nvcc is found; CUDA tests skip when no GPU is present. The chat context-policy tests run
# a second time under AddressSanitizer, so that a write past the KV cache cannot go unseen. Last,
# every fuzz harness runs for a bounded time (test/fuzz; about 5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/install_deps.sh
python3 scripts/check_include_loops.py
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKUIPER_ASAN=ON -DKUIPER_CUDA=OFF
cmake --build build-asan -j"$jobs" --target test_chat_context llama_chat
ctest --test-dir build-asan -R 'ChatContext\.|chat_cli_script' --output-on-failure

scripts/fuzz.sh 18
