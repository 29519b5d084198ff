#!/usr/bin/env bash
# One GPU-machine session for the whole project: build, every test (CUDA ones included),
# compute-sanitizer on the CUDA model test, a story on the GPU, and the benchmark against
# transformers. Run from the project root on the device machine, carrying .device-deps (see
# shared/DEVICE.md). Logs go to $OUT (or ./gpu-check); short results are printed.
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
source .device-deps/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUIPER_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/cmake.txt" 2>&1 &&
       cmake --build build-gpu -j16 > "$out/build.txt" 2>&1; }; then
  grep -m3 -B2 -A8 -E "error|Error" "$out/build.txt" "$out/cmake.txt"
  exit 1
fi
ctest --test-dir build-gpu -j8 --output-on-failure > "$out/ctest.txt" 2>&1
grep -E "tests passed|FAILED|Failed|\(Failed\)" "$out/ctest.txt" | head -20
for t in test_cuda_model test_cuda_kernels test_cuda_int8; do
  [[ -x build-gpu/test/$t ]] && build-gpu/test/$t 2>&1 | grep -E "worst|engine|PASSED|FAILED|SKIPPED" | head -12
done
compute-sanitizer --tool memcheck build-gpu/test/test_cuda_model > "$out/memcheck.txt" 2>&1
echo "memcheck test_cuda_model: $(grep 'ERROR SUMMARY' "$out/memcheck.txt")"
build-gpu/demo/llama_infer --device cuda --temp 0 -n 60 2>&1 | tail -3
python3 scripts/compare_transformers.py --bench build-gpu/demo/llama_bench "$@" 2>&1 | tee "$out/bench.txt" | tail -40
# The engine: several sequences decoding together (aggregate tokens/s and batched roofline).
build-gpu/demo/llama_bench --shape llama2-7b --device cuda --batch 1,4,8,16,32 --contexts 128,1024 \
  2>&1 | tee "$out/batch_bench.txt" | grep -v RESULT | tail -14
