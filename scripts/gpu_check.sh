#!/usr/bin/env bash
# The whole project's checks on a GPU machine, in stages that each fit one device call:
#   gpu_check.sh tests   build, every test (CUDA ones included), compute-sanitizer memcheck on the
#                        CUDA test programs
#   gpu_check.sh bench   a story on the GPU, one-sequence decode/prefill against transformers
#   gpu_check.sh batch   batched decode of 1-64 sequences (7B/8B shapes, bf16) with the batched
#                        roofline
#   gpu_check.sh hfbatch transformers' batched generate against kuiper's engine, 32 sequences
#   gpu_check.sh int8batch  the same for int8 weights (7B shape)
#   gpu_check.sh quant   one-sequence decode of bf16, int8 and int4 weights (7B/8B shapes) in one
#                        run, the int8/int4 CUDA tests, stories260K's int8 perplexity on the CPU and
#                        on CUDA, and the GEMV kernel benchmark
#   gpu_check.sh trace   where a one-sequence decode step goes: kernel traces (serial launches,
#                        each kernel's own time) of 7B-shape bf16 and int4 decode
#   gpu_check.sh batchtrace  where a batched decode step goes: kernel traces of 7B- and 8B-shape
#                        bf16 steps of 8 and 32 sequences
#   gpu_check.sh serve   kuiper_server on a random-weight 7B-shape model, 64 concurrent streams
#                        through the openai SDK (carry it as wheels, see shared/DEVICE.md)
#   gpu_check.sh cuda    only the CUDA test programs (all GPUs), memcheck on the kernel and model tests
#   gpu_check.sh tp      several GPUs: split models against one GPU (8B shape included), 8B-shape
#                        decode on 1, 2 and 4 GPUs
#   gpu_check.sh tp70    LLaMA-2-70B shape: bf16 over 4 GPUs, int8 over 2
# MEMCHECK (cuda: the programs memcheck runs), QUANT_SHAPES and QUANT_INT4 (quant: the shapes, the
# int4 schemes) trim a stage.
# Run from the project root on the device machine, carrying .device-deps (and .whl for tests and serve).
# Logs go to $OUT (or ./gpu-check); short results are printed. Later stages reuse build-gpu when
# the machine is warm. The packages the GPU image lacks, bundled here beforehand:
#   ../shared/device/bundle-deps.sh .device-deps libicu-dev libicu72 libcpp-httplib-dev \
#       libcpp-httplib0.11 libbrotli-dev libssl-dev zlib1g-dev
# and, as cp312 wheels in .whl (device README), the Python packages the GPU image lacks: the openai
# SDK with its dependencies (serve, and the server's test) and gguf (the GGUF reference tests).
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
source .device-deps/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# NVLink multicast (NVLS) stays off on these shared machines: it can take the host's GPUs down.
export NCCL_NVLS_ENABLE=0
# NCCL: the CUDA toolkit's, else the one PyTorch brings as a Python package.
if [[ ! -e /usr/local/cuda/include/nccl.h && -z ${NCCL_ROOT:-} ]]; then
  NCCL_ROOT=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null) && export NCCL_ROOT
fi
echo "NCCL: ${NCCL_ROOT:-/usr/local/cuda}"

build() {  # [targets...]: everything by default
  local targets=()
  (($#)) && targets=(--target "$@")
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUIPER_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/cmake.txt 2>&1 &&
    cmake --build build-gpu -j"$(nproc)" "${targets[@]}" > /tmp/build.txt 2>&1 && return 0
  grep -m3 -B2 -A8 -E "error|Error" /tmp/build.txt /tmp/cmake.txt
  exit 1
}

carried_wheels() {  # the carried Python packages, for this shell and the programs it starts
  [[ -d .whl ]] || { echo "no .whl carried: openai and gguf are missing (the server, its test and the GGUF reference tests need them)"; return 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl && export PYTHONPATH=/tmp/site
}

tests() {
  carried_wheels
  ctest --test-dir build-gpu -j8 --output-on-failure > "$out/ctest.txt" 2>&1
  grep -E "tests passed|FAILED|Failed|\(Failed\)" "$out/ctest.txt" | head -20
  cuda
}

bench() {
  build-gpu/demo/llama_infer --device cuda --temp 0 -n 60 2>&1 | tail -3
  python3 scripts/compare_transformers.py --bench build-gpu/demo/llama_bench 2>&1 | tee "$out/bench.txt" | tail -6
}

batched() {  # dtype, then "shape context batches" runs
  local dtype=$1 log="$out/batch_bench_$1.txt"
  shift
  for run in "$@"; do
    set -- $run
    echo "== $1 $dtype context $2 batches $3" | tee -a "$log"
    build-gpu/demo/llama_bench --shape "$1" --device cuda --dtype "$dtype" --batch "$3" --contexts "$2" 2>&1 |
      tee -a "$log" | grep -E "^ +[0-9]+ +[0-9]+ |error|copy" | tail -6
  done
}

batch() {
  # A 7B-shape (MHA) sequence holds 0.5 MB of bf16 KV per token, so 32 and 64 sequences of 4096
  # tokens do not fit beside the weights on one GPU.
  batched bf16 "llama2-7b 512 1,8,32,64" "llama2-7b 4096 8,16" "llama3-8b 512 8,32,64" "llama3-8b 4096 8,32,64"
}

hfbatch() {
  python3 scripts/compare_transformers_batched.py --bench build-gpu/demo/llama_bench --shape llama2-7b \
    --batch 32 --prompt 512 2>&1 | tee "$out/hf_batched.txt" | tail -4
}

int8batch() { batched int8 "llama2-7b 512 1,8,32" "llama2-7b 4096 8"; }

quant() {
  # int4 with minimums (the default) takes minutes to quantize at load on the 8B shape (its code
  # search), the symmetric scheme about one: QUANT_INT4 picks which run ("min symmetric" by default).
  for shape in ${QUANT_SHAPES:-llama2-7b llama3-8b}; do
    for run in bf16 int8 ${QUANT_INT4:-min symmetric}; do
      local dtype=$run flags=()
      [[ $run == min || $run == symmetric ]] && dtype=int4 flags=(--int4-scheme "$run")
      echo "== $shape $dtype ${flags[*]}" | tee -a "$out/quant.txt"
      build-gpu/demo/llama_bench --shape "$shape" --device cuda --dtype "$dtype" "${flags[@]}" --contexts 128,4096 2>&1 |
        tee -a "$out/quant.txt" | grep -E "decode at|error"
    done
  done
  for t in test_cuda_int4 test_cuda_int8; do
    build-gpu/test/$t > "$out/$t.txt" 2>&1
    echo "$t: $(grep -E "PASSED|FAILED" "$out/$t.txt" | tr '\n' ' ')"
  done
  # The bound that rounding x to int8 is held to: stories260K's perplexity through the decode step
  # on CUDA (x rounded) within +0.5% of weight-only int8 on the CPU. PPL_TEXT: a longer text (the
  # shared tinystories_valid_head.txt, carried) than the bundled slice.
  local ppl=() device
  for device in cpu cuda; do
    ppl+=("$(build-gpu/demo/llama_perplexity --device $device --dtype int8 --decode \
      -f "${PPL_TEXT:-test/data/tinystories_valid_slice.txt}" --max-tokens 65536 2>&1 | tee -a "$out/quant.txt" |
      sed -n 's/.*perplexity \([0-9.]*\).*/\1/p')")
  done
  local change="not computed: a run printed no perplexity (see quant.txt)"
  [[ -n ${ppl[0]} && -n ${ppl[1]} ]] && change=$(python3 -c "print(f'{100 * (${ppl[1]} / ${ppl[0]} - 1):+.2f}%')")
  echo "stories260K int8 perplexity (--decode): CPU ${ppl[0]:-none}, CUDA ${ppl[1]:-none} ($change)"
  build-gpu/tools/cuda_kernels_bench > "$out/kernels.txt" 2>&1
  grep -E "copy|gemv int(4|8) [0-9x]+ " "$out/kernels.txt"
}

trace_library() {  # what CUDA_INJECTION64_PATH names for tools/cuda_kernel_trace
  echo "$PWD/$(find build-gpu -name libcuda_kernel_trace.so | head -1)"
}

trace() {
  local lib
  lib=$(trace_library)
  for run in bf16 int4; do
    echo "== llama2-7b $run, serial launches" | tee -a "$out/trace.txt"
    KUIPER_SERIAL_LAUNCH=1 CUDA_INJECTION64_PATH=$lib build-gpu/demo/llama_bench --shape llama2-7b --device cuda \
      --dtype $run --int4-scheme symmetric --contexts 128 --decode 256 --repeats 1 --prompt 16 2>&1 |
      tee -a "$out/trace.txt" | grep -E "cuda_kernel_trace|^ +[0-9.]+ +[0-9]+ |decode at|error" | head -14
  done
}

batchtrace() {
  local lib
  lib=$(trace_library)
  for run in "llama2-7b 8 512" "llama2-7b 32 512" "llama3-8b 8 512" "llama3-8b 32 4096"; do
    set -- $run
    echo "== $1 bf16, $2 sequences at $3" | tee -a "$out/batch_trace.txt"
    CUDA_INJECTION64_PATH=$lib build-gpu/demo/llama_bench --shape "$1" --device cuda --batch "$2" --contexts "$3" \
      --repeats 1 --decode 32 --prompt 16 2>&1 | tee -a "$out/batch_trace.txt" |
      grep -E "cuda_kernel_trace|^ +[0-9.]+ +[0-9]+ |sequences at context|error" | head -14
  done
}

serve() {
  local model=/tmp/llama2-7b-random.bin port=8093 log="$out/server.txt"
  carried_wheels || return 1
  [[ -x build-gpu/demo/kuiper_server ]] || { echo "kuiper_server was not built (see cmake.txt)"; return 1; }
  python3 scripts/make_random_llama2c.py --shape 4096,11008,32,32,32,32000 --seq-len 2048 "$model"
  build-gpu/demo/kuiper_server -m "$model" -t models/tokenizers/llama2/tokenizer.model --device cuda \
    --dtype bf16 --max-seqs 64 --max-waiting 256 --port "$port" --model-name llama2-7b-random > "$log" 2>&1 &
  local server=$!
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 1; done
  for clients in 1 64; do
    python3 scripts/load_server.py --client openai --url "http://127.0.0.1:$port" --model llama2-7b-random \
      --clients "$clients" --requests 2 --max-tokens 256 --ignore-eos 2>&1 | tee -a "$out/load.txt"
  done
  curl -s "http://127.0.0.1:$port/metrics" >> "$log"
  kill -TERM "$server"; wait "$server"; echo "server exit status: $?"
}

cuda() {
  for t in $(find build-gpu/test -maxdepth 1 -name 'test_cuda_*' -type f -executable | sort); do
    echo "== $t"
    KUIPER_LARGE_TESTS=1 "$t" > "$out/$(basename "$t").txt" 2>&1
    grep -E "worst|ranks:|engine|batch|PASSED|FAILED|SKIPPED \]" "$out/$(basename "$t").txt" | head -20
  done
  for t in ${MEMCHECK-test_cuda_kernels test_cuda_model}; do
    compute-sanitizer --tool memcheck build-gpu/test/$t > "$out/memcheck_$t.txt" 2>&1
    echo "memcheck $t: $(grep 'ERROR SUMMARY' "$out/memcheck_$t.txt")"
  done
}

tp_bench() {  # shape dtype ranks contexts
  echo "== $1 $2 over $3 GPUs"
  build-gpu/demo/llama_bench --shape "$1" --device cuda --dtype "$2" --tp "$3" --contexts "$4" 2>&1 |
    tee -a "$out/tp_bench.txt" | grep -E "tensor parallel|copy bandwidth|prefill|decode at|error"
}

tp() {
  nvidia-smi topo -m | head -8
  build-gpu/test/test_tensor_parallel 2>&1 | tail -1
  KUIPER_LARGE_TESTS=1 build-gpu/test/test_cuda_tensor_parallel 2>&1 | tee "$out/tp_test.txt" |
    grep -E "ranks:|OK \]|FAILED|PASSED|Failure" | head -20
  for ranks in 1 2 4; do tp_bench llama3-8b bf16 "$ranks" 128,4096; done
}

tp70() {
  tp_bench llama2-70b bf16 4 128,4096
  tp_bench llama2-70b int8 2 128,4096
}

# Several stages may follow each other in one call: gpu_check.sh quant int8batch serve
stages=("${@:-tests}")
targets=()
for stage in "${stages[@]}"; do
  case "$stage" in
    tp) targets+=(llama_bench test_tensor_parallel test_cuda_tensor_parallel) ;;
    tp70 | batch | int8batch | hfbatch) targets+=(llama_bench) ;;
    quant) targets+=(llama_bench llama_perplexity cuda_kernels_bench test_cuda_int4 test_cuda_int8) ;;
    trace | batchtrace) targets+=(llama_bench cuda_kernel_trace) ;;
    serve) targets+=(kuiper_server) ;;
    tests | bench | cuda) targets=(all) && break ;;
    *) echo "gpu_check.sh: unknown stage '$stage' (tests, bench, batch, hfbatch, int8batch, quant, trace, batchtrace, serve, cuda, tp or tp70)"
       exit 2 ;;
  esac
done
if [[ ${targets[0]} == all ]]; then build; else build "${targets[@]}"; fi
grep -E "kuiper: (CUDA|NCCL|no NCCL)" /tmp/cmake.txt
for stage in "${stages[@]}"; do
  echo "#### $stage"
  "$stage"
done
