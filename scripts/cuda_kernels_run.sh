#!/bin/bash
# One run on a GPU machine for the CUDA backend: build, CUDA tests, compute-sanitizer, and the
# kernel benchmark. Run from the project root on the device machine (carry .device-deps):
#   bash scripts/cuda_kernels_run.sh
# SANITIZE_FILTER (a gtest filter) narrows the sanitizer runs to some tests; by default every test
# but the decode GEMV at decode heights (CudaDecodeGemvTall: the same kernels as the smaller
# CudaDecodeGemv cases, on matrices that take the sanitizer far past its time limit).
# Logs go to $OUT (or ./cuda-run when OUT is unset). The benchmark runs before the sanitizers
# (which are slow); its main rows are printed again last.
set -uo pipefail
out=${OUT:-cuda-run}
mkdir -p "$out"
source .device-deps/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv

echo "== build"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUIPER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/cmake.txt" 2>&1 &&
  cmake --build build-gpu -j16 --target test_cuda_kernels test_cuda_int8 test_cuda_model \
    cuda_kernels_bench > "$out/build.txt" 2>&1 ||
  { grep -m3 -B2 -A8 "error" "$out/cmake.txt" "$out/build.txt"; exit 1; }

echo "== tests"
for t in test_cuda_kernels test_cuda_int8 test_cuda_model; do
  ./build-gpu/test/$t 2>&1 | tee "$out/$t.txt" |
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|relative|agree on" | head -30
done

echo "== benchmark"
./build-gpu/tools/cuda_kernels_bench 2>&1 | tee "$out/bench.txt"

echo "== compute-sanitizer memcheck"
filter=${SANITIZE_FILTER:-*-CudaDecodeGemvTall.*}
for t in test_cuda_kernels test_cuda_int8; do
  timeout 180 compute-sanitizer --tool memcheck --leak-check no ./build-gpu/test/$t \
    --gtest_brief=1 --gtest_filter="$filter" > "$out/memcheck_$t.txt" 2>&1
  echo "memcheck $t exit $?"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck_$t.txt" | head
done
echo "== compute-sanitizer racecheck (kernels with shared memory)"
timeout 90 compute-sanitizer --tool racecheck ./build-gpu/test/test_cuda_kernels --gtest_brief=1 \
  --gtest_filter="*OddHeadDim*:*Prefill*:*Argmax*:*RmsNorm*" > "$out/racecheck.txt" 2>&1
echo "racecheck exit $?"
grep -E "ERROR SUMMARY|RACE|PASSED|FAILED" "$out/racecheck.txt" | head

echo "== summary (from $out/bench.txt)"
grep -E "^(d2d copy|gemv int8 [0-9x]+ |gemv bf16 [0-9x]+ |attn prefill|gemm)" "$out/bench.txt"
