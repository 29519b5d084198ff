#include "kuiper/checkpoint/formats/llama2c_writer.h"

#include <vector>

#include "kuiper/base/partial_file.h"
#include "kuiper/checkpoint/formats/llama2c_header.h"
#include "kuiper/model/float_convert.h"
#include "kuiper/model/weight_convert.h"

namespace kuiper {
namespace {

// Writes an fp32 copy of `t` (any float dtype, any device).
Status write_fp32(PartialFile& out, const Tensor& t) {
  KUIPER_ASSIGN_OR_RETURN(Tensor host, place_fp32(t, cpu_allocator()));
  return out.write(host.raw_data(), host.nbytes());
}

Status write_body(PartialFile& out, const Checkpoint& ckpt) {
  const LlamaConfig& c = ckpt.config;
  const LlamaWeights& w = ckpt.weights;
  for (const auto& [name, member] : kLayerMatrices) {
    for (const LlamaLayerWeights& l : w.layers) {
      if ((l.*member).is_quantized()) return unsupported("llama2.c v1 files hold float weights, not int8");
    }
  }
  const std::vector<uint8_t> header = make_llama2c_header(c, 1);
  KUIPER_RETURN_IF_ERROR(out.write(header.data(), header.size()));

  for (const LlamaLayerWeights& l : w.layers) KUIPER_RETURN_IF_ERROR(write_fp32(out, l.attention_norm));
  for (const LlamaLayerWeights& l : w.layers) KUIPER_RETURN_IF_ERROR(write_fp32(out, l.ffn_norm));
  KUIPER_RETURN_IF_ERROR(write_fp32(out, w.final_norm));
  KUIPER_RETURN_IF_ERROR(write_fp32(out, w.token_embedding.values));
  for (const auto& [name, member] : kLayerMatrices) {
    for (const LlamaLayerWeights& l : w.layers) KUIPER_RETURN_IF_ERROR(write_fp32(out, (l.*member).values));
  }
  if (!c.shared_classifier) KUIPER_RETURN_IF_ERROR(write_fp32(out, w.classifier.values));
  return ok_status();
}

}  // namespace

Status save_llama2c_v1(const Checkpoint& checkpoint, const std::string& path) {
  KUIPER_RETURN_IF_ERROR(checkpoint.config.validate());
  KUIPER_RETURN_IF_ERROR(check_llama2c_can_store(checkpoint.config, "v1"));
  KUIPER_ASSIGN_OR_RETURN(std::unique_ptr<PartialFile> out, PartialFile::create(path));
  KUIPER_RETURN_IF_ERROR(write_body(*out, checkpoint));
  return out->commit();
}

}  // namespace kuiper
