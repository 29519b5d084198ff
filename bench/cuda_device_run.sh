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

# Builds only what the CUDA kernels and their tests need, without CMake: used when the full
# library does not build (other parts of the tree may be mid-edit).
minimal_build() {
  local dir=build-gpu-min flags="-O3 -std=c++20 -I. -DKUIPER_WITH_CUDA=1 -DARMA_DONT_USE_WRAPPER
    -DARMA_DONT_USE_ARPACK -DARMA_DONT_USE_SUPERLU -DARMA_NO_DEBUG -DKUIPER_SOURCE_DIR=\"$PWD\"
    -DKUIPER_BINARY_DIR=\"$PWD/build-gpu-min\""
  mkdir -p $dir/obj
  export flags dir
  # A file that does not compile is left out; the link then says whether it was needed.
  ls kuiper/base/*.cpp kuiper/tensor/*.cpp kuiper/op/*.cpp kuiper/op/kernels/cpu/*.cpp \
    test/test_util.cpp | grep -v '_none.cpp' | xargs -P16 -I{} bash -c \
    'g++ $flags -fopenmp -march=native -isystem /usr/local/cuda/include -c {} -o $dir/obj/$(echo {} | tr / _).o'
  ls kuiper/base/*.cu kuiper/op/kernels/cuda/*.cu | xargs -P16 -I{} bash -c \
    'nvcc $flags -arch=sm_90 --expt-relaxed-constexpr -lineinfo -c {} -o $dir/obj/$(echo {} | tr / _).o' || return 1
  rm -f $dir/libkuiper.a && ar rcs $dir/libkuiper.a $(ls $dir/obj/*.o | grep -v test_util) || return 1
  mkdir -p build-gpu/test build-gpu/kuiper && cp $dir/libkuiper.a build-gpu/kuiper/libkuiper.a
  g++ $flags -isystem /usr/local/cuda/include test/test_cuda_kernels.cpp $dir/obj/test_util.cpp.o \
    $dir/libkuiper.a -o build-gpu/test/test_cuda_kernels -L/usr/local/cuda/lib64 -lgtest_main -lgtest \
    -lcublas -lcublasLt -lcudart -lglog -lgflags -lopenblas -fopenmp
}

# CMake before 3.26 does not know nvcc's C++20 flag; naming it is harmless for newer ones.
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUIPER_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
         -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 > "$out/cmake.txt" 2>&1 &&
       cmake --build build-gpu -j16 --target kuiper test_cuda_kernels > "$out/build.txt" 2>&1; }; then
  echo "full build failed (first error below); building the kernels alone"
  grep -m1 -A3 "error" "$out/build.txt" "$out/cmake.txt"
  minimal_build > "$out/min_build.txt" 2>&1 || { grep -B2 -A12 error "$out/min_build.txt" | head -60; exit 1; }
fi

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
