#!/usr/bin/env bash
# Regenerates test/data/llama2c_stories260K_greedy.txt: the greedy continuation of
# "Once upon a time" by llama2.c's own run.c (an independent implementation) on the bundled
# stories260K model. Needs a checkout of https://github.com/karpathy/llama2.c (not part of
# kuiper); pass its path.
set -euo pipefail
llama2c=${1:?usage: scripts/llama2c_reference.sh PATH/TO/llama2.c}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
gcc -O3 -o "$work/run" "$llama2c/run.c" -lm
# -n 256 counts the prompt's tokens too; run.c ends its text with a newline, dropped here.
"$work/run" "$root/models/stories260K/stories260K.bin" -z "$root/models/stories260K/tok512.bin" \
  -t 0 -n 256 -i "Once upon a time" 2>/dev/null | head -c -1 \
  > "$root/test/data/llama2c_stories260K_greedy.txt"
