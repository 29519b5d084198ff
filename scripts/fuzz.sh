#!/usr/bin/env bash
# Builds the libFuzzer harnesses of test/fuzz (clang, ASan + UBSan, CUDA off) in build-fuzz and
# runs each for SECONDS, from its seed corpus (scripts/fuzz_seeds.py, plus kuiper-format files
# written by kuiper_export) and the crashes found before (test/fuzz/corpus/<harness>, run first).
# New crashes land in build-fuzz/crashes/; the exit status is non-zero when any harness crashed.
#   scripts/fuzz.sh 20                               # every harness, 20 s each (what CI runs)
#   scripts/fuzz.sh 600 fuzz_tokenizer_file_hf_bpe   # one harness, ten minutes
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 1)) || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh SECONDS [HARNESS...]" >&2
  exit 2
fi
seconds=$1
shift
build=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKUIPER_CUDA=OFF \
  -DKUIPER_FUZZ=ON -DKUIPER_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target kuiper_fuzzers kuiper_export

harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  mapfile -t harnesses < <(cd "$build/test/fuzz" && find . -maxdepth 1 -name 'fuzz_*' -type f -perm -u+x -printf '%f\n' | sort)
fi

# Seeds: written afresh each run; what the fuzzer adds to build-fuzz/corpus stays for the next.
python3 scripts/fuzz_seeds.py "$build/corpus"
seed_model="$build/corpus/fuzz_checkpoint_llama2c_v0/seed-0"
mkdir -p "$build/corpus/fuzz_checkpoint_kuiper"
"$build/tools/kuiper_export" "$seed_model" "$build/corpus/fuzz_checkpoint_kuiper/seed-int8" --group-size 8 >/dev/null
"$build/tools/kuiper_export" "$seed_model" "$build/corpus/fuzz_checkpoint_kuiper/seed-fp32" --quant none >/dev/null
mkdir -p "$build/corpus/fuzz_checkpoint_gguf" "$build/corpus/fuzz_gguf_tokenizer"
# (the tiny seed model has no tokenizer: kuiper_export's warning about it is expected)
"$build/tools/kuiper_export" "$seed_model" "$build/corpus/fuzz_checkpoint_gguf/seed-f32" --quant none \
  --out-format gguf >/dev/null 2>&1
"$build/tools/kuiper_export" models/stories260K/stories260K.bin "$build/corpus/fuzz_gguf_tokenizer/seed-tok512" \
  --quant none --out-format gguf >/dev/null

mkdir -p "$build/crashes" "$build/logs"
failed=()
printf '%-36s %10s %8s %s\n' harness executions seconds result
for harness in "${harnesses[@]}"; do
  corpus=("$build/corpus/$harness")
  mkdir -p "${corpus[0]}"
  [[ -d test/fuzz/corpus/$harness ]] && corpus+=("test/fuzz/corpus/$harness")
  log="$build/logs/$harness.log"
  start=$(date +%s)
  # -rss_limit_mb: a loader that allocates what a hostile header asks for is a finding too.
  status=0
  "$build/test/fuzz/$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$harness-" "${corpus[@]}" >"$log" 2>&1 || status=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  result=ok
  if ((status != 0)); then
    result="CRASH (see $log)"
    failed+=("$harness")
  fi
  printf '%-36s %10s %8s %s\n' "$harness" "$runs" "$(($(date +%s) - start))" "$result"
done
if ((${#failed[@]})); then
  echo "crashed: ${failed[*]}; inputs in $build/crashes/" >&2
  exit 1
fi
