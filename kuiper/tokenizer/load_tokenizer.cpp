// load_tokenizer(): recognises the format from the file's first bytes, so that a file named
// tokenizer.model can be either SentencePiece (LLaMA 2) or tiktoken (LLaMA 3), and a GGUF model
// file gives the tokenizer in its metadata.
#include <cctype>
#include <cstring>
#include <filesystem>

#include "kuiper/base/mapped_file.h"
#include "kuiper/checkpoint/formats/gguf_file.h"
#include "kuiper/tokenizer/tokenizer_formats.h"

namespace kuiper {
namespace {

// Inside a model directory, in order of preference. tokenizer.model first: where a directory
// holds both (LLaMA-2-*-hf, TinyLlama, Mistral), it is the SentencePiece or tiktoken file the
// model was trained with, read by the library that defines it; the tokenizer.json beside it
// gives the same ids (scripts/tokenizer_reference.py checks this on TinyLlama's layout).
constexpr const char* kTokenizerFileNames[] = {"tokenizer.model", "tokenizer.json", "tokenizer.bin"};

// tokenizer.bin starts with a small int32 (max_token_length, little-endian). A SentencePiece
// protobuf starts with field 1 (0x0A) and a nested message that again starts with 0x0A, so its
// first four bytes read as an int32 are far larger.
bool looks_like_llama2c(std::string_view content) {
  if (content.size() < 4) return false;
  int32_t max_token_length;
  std::memcpy(&max_token_length, content.data(), 4);
  return max_token_length > 0 && max_token_length <= 4096;
}

bool looks_like_sentencepiece(std::string_view content) {
  return content.size() >= 2 && content[0] == 0x0A;
}

// "<base64> <rank>" on the first line.
bool looks_like_tiktoken(std::string_view content) {
  std::string_view line = content.substr(0, content.find('\n'));
  if (line.ends_with('\r')) line.remove_suffix(1);
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 == line.size()) return false;
  for (size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    const bool ok = i < space ? std::isalnum(c) || c == '+' || c == '/' || c == '='
                              : i == space || std::isdigit(c);
    if (!ok) return false;
  }
  return true;
}

bool looks_like_json(std::string_view content) {
  const size_t first = content.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && content[first] == '{';
}

StatusOr<std::string> resolve_directory(const std::string& path) {
  for (const char* name : kTokenizerFileNames) {
    const std::filesystem::path candidate = std::filesystem::path(path) / name;
    std::error_code error;
    if (std::filesystem::is_regular_file(candidate, error)) return candidate.string();
  }
  return not_found(path + ": directory has no tokenizer.json, tokenizer.model or tokenizer.bin");
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& given_path) {
  std::string path = given_path;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    KUIPER_ASSIGN_OR_RETURN(path, resolve_directory(path));
  }
  KUIPER_ASSIGN_OR_RETURN(const std::shared_ptr<MappedFile> file, MappedFile::open(path));
  const std::string_view content(reinterpret_cast<const char*>(file->data()), file->size());
  if (GgufFile::has_magic(*file)) return load_gguf_tokenizer(file);
  // tokenizer.bin first: its header could happen to begin with '{' or 0x0A.
  if (looks_like_llama2c(content)) return load_llama2c_tokenizer(content, path);
  if (looks_like_json(content)) return load_hf_bpe_tokenizer(content, path);
  if (looks_like_sentencepiece(content)) return load_sentencepiece_tokenizer(content, path);
  if (looks_like_tiktoken(content)) return load_tiktoken_tokenizer(content, path);
  return invalid_format(path + ": unrecognised tokenizer format (expected a SentencePiece .model, "
                        "llama2.c tokenizer.bin, tiktoken ranks or HF tokenizer.json)");
}

}  // namespace kuiper
