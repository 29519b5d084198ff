#!/usr/bin/env bash
# Set up, build, and generate a story with the bundled stories260K model.
# Extra arguments go to llama_infer, e.g. scripts/story.sh -p "One day" --temp 0
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target llama_infer
exec ./build/demo/llama_infer "$@"
