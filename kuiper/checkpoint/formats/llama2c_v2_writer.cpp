#include "kuiper/checkpoint/formats/llama2c_v2_writer.h"

#include <vector>

#include "kuiper/checkpoint/checkpoint_tensors.h"
#include "kuiper/checkpoint/formats/llama2c_header.h"
#include "kuiper/base/partial_file.h"
#include "kuiper/op/int8_weight.h"

namespace kuiper {
namespace {

// The group size every matrix shares, or why the checkpoint cannot be a v2 file.
StatusOr<int> common_group_size(Checkpoint& ckpt) {
  int group_size = 0;
  for (const NamedMatrix& m : named_matrices(ckpt.weights, ckpt.config.shared_classifier)) {
    const op::Weight& w = *m.weight;
    if (!w.is_quantized()) {
      return invalid_argument("llama2.c v2 files hold int8 matrices, but " + m.name + " is " +
                              std::string(dtype_name(w.dtype())) + " (export with --quant int8)");
    }
    KUIPER_RETURN_IF_ERROR(op::check_int8_weight(w));
    if (group_size != 0 && w.group_size != group_size) {
      return invalid_argument("llama2.c v2 files have one group size, but " + m.name + " uses " +
                              std::to_string(w.group_size) + " and others " + std::to_string(group_size));
    }
    group_size = w.group_size;
  }
  KUIPER_RETURN_IF_ERROR(check_llama2c_v2_group_size(ckpt.config, group_size));
  return group_size;
}

Status write_tensor(PartialFile& out, const Tensor& t) {
  KUIPER_ASSIGN_OR_RETURN(Tensor host, t.device() == DeviceType::kCPU ? StatusOr<Tensor>(t) : t.to(cpu_allocator()));
  return out.write(host.raw_data(), host.nbytes());
}

}  // namespace

Status check_llama2c_v2_group_size(const LlamaConfig& c, int group_size) {
  if (group_size <= 0 || c.dim % group_size != 0 || c.hidden_dim % group_size != 0) {
    return invalid_argument("llama2.c's runq.c needs a group size dividing dim (" + std::to_string(c.dim) +
                            ") and hidden_dim (" + std::to_string(c.hidden_dim) + "); " +
                            std::to_string(group_size) + " does not (choose --group-size accordingly)");
  }
  return ok_status();
}

Status save_llama2c_v2(const Checkpoint& checkpoint, const std::string& path) {
  KUIPER_RETURN_IF_ERROR(checkpoint.config.validate());
  KUIPER_RETURN_IF_ERROR(check_llama2c_can_store(checkpoint.config, "v2"));
  Checkpoint ckpt = checkpoint;  // views only; named_matrices needs a mutable one
  KUIPER_ASSIGN_OR_RETURN(int group_size, common_group_size(ckpt));
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<PartialFile> out, PartialFile::create(path));
  const std::vector<uint8_t> header = make_llama2c_header(ckpt.config, 2, group_size);
  KUIPER_RETURN_IF_ERROR(out->write(header.data(), header.size()));
  // named_norms lists each layer's two norms together; v2 wants all attention norms first.
  for (const LlamaLayerWeights& l : ckpt.weights.layers) KUIPER_RETURN_IF_ERROR(write_tensor(*out, l.attention_norm));
  for (const LlamaLayerWeights& l : ckpt.weights.layers) KUIPER_RETURN_IF_ERROR(write_tensor(*out, l.ffn_norm));
  KUIPER_RETURN_IF_ERROR(write_tensor(*out, ckpt.weights.final_norm));
  KUIPER_RETURN_IF_ERROR(write_tensor(*out, ckpt.weights.token_embedding.values));
  KUIPER_RETURN_IF_ERROR(write_tensor(*out, ckpt.weights.token_embedding.scales));
  for (const auto& [name, member] : kLayerMatrices) {
    for (const LlamaLayerWeights& l : ckpt.weights.layers) {
      KUIPER_RETURN_IF_ERROR(write_tensor(*out, (l.*member).values));
      KUIPER_RETURN_IF_ERROR(write_tensor(*out, (l.*member).scales));
    }
  }
  if (!ckpt.config.shared_classifier) {
    KUIPER_RETURN_IF_ERROR(write_tensor(*out, ckpt.weights.classifier.values));
    KUIPER_RETURN_IF_ERROR(write_tensor(*out, ckpt.weights.classifier.scales));
  }
  return out->commit();
}

}  // namespace kuiper
