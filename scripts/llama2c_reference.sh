#!/usr/bin/env bash
# Regenerates the greedy continuations of "Once upon a time" by llama2.c's own run.c (an
# independent implementation) on the bundled stories260K model:
#   test/data/llama2c_stories260K_greedy.txt            256 steps
#   test/data/llama2c_stories260K_greedy_context64.txt  64 steps, what kuiper gives with a
#                                                       context of 64 run to its end
# Needs a checkout of https://github.com/karpathy/llama2.c (not part of kuiper); pass its path.
set -euo pipefail
llama2c=${1:?usage: scripts/llama2c_reference.sh PATH/TO/llama2.c}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
gcc -O3 -o "$work/run" "$llama2c/run.c" -lm
# -n counts the prompt's tokens too; run.c ends its text with a newline, dropped here.
for steps in 256 64; do
  out=$root/test/data/llama2c_stories260K_greedy.txt
  [[ $steps == 256 ]] || out=$root/test/data/llama2c_stories260K_greedy_context$steps.txt
  "$work/run" "$root/models/stories260K/stories260K.bin" -z "$root/models/stories260K/tok512.bin" \
    -t 0 -n "$steps" -i "Once upon a time" 2>/dev/null | head -c -1 > "$out"
done
