#!/usr/bin/env bash
# Set up, build everything, and run the whole test suite (what CI runs). CUDA code is compiled
# when nvcc is found; CUDA tests skip when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
