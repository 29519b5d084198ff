// checkpoint_probe: what kuiper reads from a checkpoint, as JSON on stdout, for the Python
// reference tests (test/gguf_reference.py) to compare with independent readers:
//   {"format": "...", "config": {...}, "logits": [[...] one row per token],
//    "tensors": {"layers.0.wq": [...fp32, dequantized, row-major...]},
//    "quantized": {"layers.0.wq": {"dtype": "int4", "group_size": 32, "mins": true}}}
//   checkpoint_probe MODEL [--tokens 1,5,9] [--decode] [--tensor layers.0.wq ...] [--format NAME]
// The logits come from one prefill pass over the tokens, or with --decode from one forward pass
// per token (the decode kernels).
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/checkpoint/load_checkpoint.h"
#include "kuiper/model/float_convert.h"
#include "kuiper/model/dequantize.h"
#include "kuiper/model/llama_model.h"

namespace {

using json = nlohmann::json;
using namespace kuiper;

int fail(const Status& status) {
  std::cerr << "checkpoint_probe: error: " << status.message() << "\n";
  return 1;
}

StatusOr<std::vector<float>> as_fp32(const Tensor& t) {
  KUIPER_ASSIGN_OR_RETURN(Tensor f, convert_float_on_host(t, DataType::kFP32));
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

StatusOr<std::vector<float>> dequantized(const op::Weight& w) {
  if (!w.is_quantized()) return as_fp32(w.values);
  KUIPER_ASSIGN_OR_RETURN(Tensor f, dequantize_weight(w));
  return as_fp32(f);
}

json config_json(const LlamaConfig& c) {
  return {{"dim", c.dim}, {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len},
          {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps}, {"head_dim", c.head_dim()},
          {"shared_classifier", c.shared_classifier}, {"qkv_bias", c.qkv_bias}, {"qk_norm", c.qk_norm},
          {"rope_scaling", c.rope_scaling.enabled}, {"bos_id", c.bos_id}, {"eos_ids", c.eos_ids}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, format = "auto";
  std::vector<int32_t> tokens;
  std::vector<std::string> tensor_names;
  bool decode = false;
  CLI::App app{"prints what kuiper reads from a checkpoint as JSON"};
  app.add_option("MODEL", model_path)->required();
  app.add_option("--format", format);
  app.add_option("--tokens", tokens)->delimiter(',');
  app.add_option("--tensor", tensor_names);
  app.add_flag("--decode", decode, "logits from one token at a time");
  CLI11_PARSE(app, argc, argv);

  LoadOptions options;
  options.format = format;
  StatusOr<Checkpoint> loaded = load_checkpoint(model_path, options);
  if (!loaded.ok()) return fail(loaded.status());
  Checkpoint& ckpt = *loaded;
  json out = {{"format", ckpt.format}, {"config", config_json(ckpt.config)}, {"ignored", ckpt.ignored_tensors}};

  json tensors = json::object(), quantized = json::object();
  const std::vector<NamedMatrix> matrices = named_matrices(ckpt.weights, ckpt.config.shared_classifier);
  const std::vector<NamedVector> vectors = named_norms(ckpt.weights, ckpt.config);
  for (const std::string& name : tensor_names) {
    StatusOr<std::vector<float>> values = not_found("no tensor " + name + " in " + model_path);
    for (const NamedMatrix& m : matrices) {
      if (m.name != name) continue;
      values = dequantized(*m.weight);
      if (m.weight->is_quantized()) {
        quantized[name] = {{"dtype", std::string(dtype_name(m.weight->dtype()))},
                           {"group_size", m.weight->group_size},
                           {"mins", !m.weight->mins.is_empty()}};
      }
    }
    for (const NamedVector& v : vectors) {
      if (v.name == name) values = as_fp32(*v.tensor);
    }
    if (!values.ok()) return fail(values.status());
    tensors[name] = *values;
  }
  out["tensors"] = tensors;
  out["quantized"] = quantized;

  if (!tokens.empty()) {
    auto model = LlamaModel::create(ckpt.config, ckpt.weights, {});
    if (!model.ok()) return fail(model.status());
    json rows = json::array();
    if (decode) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        auto logits = (*model)->forward(std::span<const int32_t>(&tokens[i], 1), static_cast<int>(i));
        if (!logits.ok()) return fail(logits.status());
        auto values = as_fp32(*logits);
        if (!values.ok()) return fail(values.status());
        rows.push_back(*values);
      }
    } else {
      auto logits = (*model)->forward_all(tokens, 0);
      if (!logits.ok()) return fail(logits.status());
      const int64_t vocab = logits->dim(1);
      for (int64_t i = 0; i < logits->dim(0); ++i) {
        const float* row = logits->data<float>() + i * vocab;
        rows.push_back(std::vector<float>(row, row + vocab));
      }
    }
    out["logits"] = rows;
  }
  std::cout << out.dump() << "\n";
  return 0;
}
