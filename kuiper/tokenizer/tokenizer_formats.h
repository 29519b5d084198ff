// One loader per file format; load_tokenizer() chooses among them. Each takes the whole file
// content and the path (for messages only).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kuiper/base/mapped_file.h"
#include "kuiper/base/status.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace kuiper {

StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(std::string_view content,
                                                                  const std::string& path);
StatusOr<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(std::string_view content,
                                                           const std::string& path);
StatusOr<std::unique_ptr<Tokenizer>> load_tiktoken_tokenizer(std::string_view content,
                                                            const std::string& path);
// The tokenizer a GGUF model file carries in its metadata (gguf_tokenizer.cpp).
StatusOr<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(std::shared_ptr<MappedFile> file);
StatusOr<std::unique_ptr<Tokenizer>> load_hf_bpe_tokenizer(std::string_view content,
                                                          const std::string& path);

}  // namespace kuiper
