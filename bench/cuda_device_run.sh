#!/bin/bash
# One GPU-machine session for the CUDA backend: build, kernel tests, compute-sanitizer, and the
# kernel benchmark. Run from the project root on the device machine (carry .device-deps):
#   bash bench/cuda_device_run.sh
# Logs go to $OUT (or ./cuda-run when OUT is unset); the benchmark table is printed last.
set -uo pipefail
out=${OUT:-cuda-run}
mkdir -p "$out"
source .device-deps/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv

# CMake before 3.26 does not know nvcc's C++20 flag; naming it is harmless for newer ones.
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUIPER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 > "$out/cmake.txt" 2>&1 || { tail -30 "$out/cmake.txt"; exit 1; }
cmake --build build-gpu -j16 --target kuiper test_cuda_kernels > "$out/build.txt" 2>&1 || { grep -B5 -A20 error "$out/build.txt" | head -80; exit 1; }

echo "== tests"
./build-gpu/test/test_cuda_kernels 2>&1 | tee "$out/tests.txt" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|Expected|Which is|relative|^\[==" | head -60

echo "== benchmark build"
nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -I. -DKUIPER_WITH_CUDA=1 \
  bench/cuda_kernels_bench.cu build-gpu/kuiper/libkuiper.a -o build-gpu/cuda_kernels_bench \
  -lcublas -lcublasLt -lglog -lgflags -lopenblas -Xcompiler -fopenmp 2>&1 | grep -v warning | head -20

echo "== compute-sanitizer memcheck"
timeout 180 compute-sanitizer --tool memcheck --leak-check no ./build-gpu/test/test_cuda_kernels \
  --gtest_brief=1 > "$out/memcheck.txt" 2>&1; echo "memcheck exit $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.txt" | head
echo "== compute-sanitizer racecheck (attention, reductions)"
timeout 90 compute-sanitizer --tool racecheck ./build-gpu/test/test_cuda_kernels --gtest_brief=1 \
  --gtest_filter='*OddHeadDim*:*Prefill*:*Argmax*:*RmsNorm*' > "$out/racecheck.txt" 2>&1; echo "racecheck exit $?"
grep -E "ERROR SUMMARY|RACE|PASSED|FAILED" "$out/racecheck.txt" | head

echo "== benchmark"
./build-gpu/cuda_kernels_bench 2>&1 | tee "$out/bench.txt"
