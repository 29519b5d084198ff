#include "kuiper/model/llama2c_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kuiper/model/weight_convert.h"

namespace kuiper {
namespace {

class FileWriter {
 public:
  explicit FileWriter(std::string path) : path_(std::move(path)) {}
  ~FileWriter() {
    if (file_ != nullptr) std::fclose(file_);
  }

  Status open() {
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr) return io_error(path_ + ": cannot create: " + std::strerror(errno));
    return ok_status();
  }
  Status write(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, file_) != bytes) return io_error(path_ + ": write failed: " + std::strerror(errno));
    return ok_status();
  }
  Status write_fp32(const Tensor& t) {
    KUIPER_ASSIGN_OR_RETURN(Tensor host, place_fp32(t, cpu_allocator()));
    return write(host.raw_data(), host.nbytes());
  }
  Status close() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return io_error(path_ + ": close failed: " + std::strerror(errno));
    return ok_status();
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

Status write_body(FileWriter& out, const Checkpoint& ckpt) {
  const LlamaConfig& c = ckpt.config;
  const LlamaWeights& w = ckpt.weights;
  for (const auto& member : {&LlamaLayerWeights::wq, &LlamaLayerWeights::wk, &LlamaLayerWeights::wv,
                             &LlamaLayerWeights::wo, &LlamaLayerWeights::w1, &LlamaLayerWeights::w2,
                             &LlamaLayerWeights::w3}) {
    for (const LlamaLayerWeights& l : w.layers) {
      if ((l.*member).is_quantized()) return unsupported("llama2.c v1 files hold float weights, not int8");
    }
  }
  std::vector<uint8_t> header(256, 0);
  const uint32_t magic = 0x616b3432;
  const int32_t fields[] = {1, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.max_seq_len};
  std::memcpy(header.data(), &magic, 4);
  std::memcpy(header.data() + 4, fields, sizeof(fields));
  header[4 + sizeof(fields)] = c.shared_classifier ? 1 : 0;
  KUIPER_RETURN_IF_ERROR(out.write(header.data(), header.size()));

  for (const LlamaLayerWeights& l : w.layers) KUIPER_RETURN_IF_ERROR(out.write_fp32(l.attention_norm));
  for (const LlamaLayerWeights& l : w.layers) KUIPER_RETURN_IF_ERROR(out.write_fp32(l.ffn_norm));
  KUIPER_RETURN_IF_ERROR(out.write_fp32(w.final_norm));
  KUIPER_RETURN_IF_ERROR(out.write_fp32(w.token_embedding.values));
  for (const auto& member : {&LlamaLayerWeights::wq, &LlamaLayerWeights::wk, &LlamaLayerWeights::wv,
                             &LlamaLayerWeights::wo, &LlamaLayerWeights::w1, &LlamaLayerWeights::w2,
                             &LlamaLayerWeights::w3}) {
    for (const LlamaLayerWeights& l : w.layers) KUIPER_RETURN_IF_ERROR(out.write_fp32((l.*member).values));
  }
  if (!c.shared_classifier) KUIPER_RETURN_IF_ERROR(out.write_fp32(w.classifier.values));
  return ok_status();
}

}  // namespace

Status save_llama2c_v1(const Checkpoint& checkpoint, const std::string& path) {
  KUIPER_RETURN_IF_ERROR(checkpoint.config.validate());
  if (checkpoint.config.rope_scaling.enabled || checkpoint.config.rope_theta != 10000.f) {
    return unsupported("llama2.c v1 files cannot record rope theta or scaling; this model needs them");
  }
  const std::string temp = path + ".partial";
  FileWriter out(temp);
  KUIPER_RETURN_IF_ERROR(out.open());
  Status status = write_body(out, checkpoint);
  if (status.ok()) status = out.close();
  std::error_code ec;
  if (status.ok()) {
    std::filesystem::rename(temp, path, ec);
    if (ec) status = io_error(path + ": cannot rename from " + temp + ": " + ec.message());
  }
  if (!status.ok()) std::filesystem::remove(temp, ec);
  return status;
}

}  // namespace kuiper
