// gptq_probe: kuiper's int4 GPTQ on raw matrices, for the NumPy reference (test/gptq_reference.py).
//   gptq_probe --weights W.f32 --cols C --inputs X.f32 --group-size G --scheme min|symmetric --out OUT.f32
// W.f32 holds R × C and X.f32 N × C little-endian fp32 values, row-major; OUT.f32 receives the
// dequantized GPTQ weights, R × C.
#include <cstring>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "kuiper/base/regular_file.h"
#include "kuiper/model/dequantize.h"
#include "kuiper/model/int4_gptq.h"

namespace {

using namespace kuiper;

StatusOr<Tensor> read_matrix(const std::string& path, int64_t cols) {
  KUIPER_ASSIGN_OR_RETURN(std::string bytes, read_regular_file(path));
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(float));
  if (bytes.empty() || static_cast<int64_t>(bytes.size()) % row_bytes != 0) {
    return invalid_argument(path + ": " + std::to_string(bytes.size()) + " bytes are not whole rows of " +
                            std::to_string(cols) + " fp32 values");
  }
  KUIPER_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DataType::kFP32, {static_cast<int64_t>(bytes.size()) / row_bytes, cols},
                                                  cpu_allocator()));
  std::memcpy(t.data<float>(), bytes.data(), bytes.size());
  return t;
}

Status run(const std::string& weights_path, const std::string& inputs_path, int64_t cols, int group_size,
           const std::string& scheme, const std::string& out_path) {
  KUIPER_ASSIGN_OR_RETURN(Tensor w, read_matrix(weights_path, cols));
  KUIPER_ASSIGN_OR_RETURN(Tensor x, read_matrix(inputs_path, cols));
  InputGram inputs(static_cast<int>(cols));
  KUIPER_RETURN_IF_ERROR(inputs.add(x));
  KUIPER_ASSIGN_OR_RETURN(op::Weight q, quantize_int4_gptq(w, inputs, group_size,
                                                           scheme == "min" ? Int4Scheme::kWithMin : Int4Scheme::kSymmetric));
  KUIPER_ASSIGN_OR_RETURN(Tensor back, dequantize_weight(q));
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(back.data<float>()), static_cast<std::streamsize>(back.nbytes()));
  return out ? ok_status() : invalid_argument("cannot write " + out_path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kuiper's int4 GPTQ on raw fp32 matrices", "gptq_probe"};
  std::string weights, inputs, scheme = "min", out;
  int64_t cols = 0;
  int group_size = 32;
  app.add_option("--weights", weights, "R × C fp32 weights")->required();
  app.add_option("--cols", cols, "C")->required();
  app.add_option("--inputs", inputs, "N × C fp32 calibration inputs")->required();
  app.add_option("--group-size", group_size, "weights per group");
  app.add_option("--scheme", scheme, "min or symmetric")->check(CLI::IsMember({"min", "symmetric"}));
  app.add_option("--out", out, "dequantized result, R × C fp32")->required();
  CLI11_PARSE(app, argc, argv);
  const Status status = run(weights, inputs, cols, group_size, scheme, out);
  if (!status.ok()) {
    std::cerr << "gptq_probe: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
