#include "kuiper/op/kernels/cpu/cpu_threads.h"

extern "C" void openblas_set_num_threads(int threads);  // from OpenBLAS (cblas.h)

namespace kuiper::op::cpu {

void use_single_threaded_blas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace kuiper::op::cpu
