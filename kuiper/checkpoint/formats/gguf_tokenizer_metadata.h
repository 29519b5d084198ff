// The tokenizer.* metadata of a GGUF file being written, as llama.cpp's converter lays it out,
// from the model's tokenizer file: a GGUF file's tokenizer keys copied as they are; a
// SentencePiece BPE tokenizer.model as model "llama" (tokens, scores, token types); a byte-level
// BPE tokenizer.json as model "gpt2" (tokens, token types, merges, the pre-tokenizer's name).
#pragma once

#include <string>

#include "kuiper/checkpoint/formats/gguf_writer.h"
#include "kuiper/model/llama_config.h"

namespace kuiper {

// Adds the tokenizer of `tokenizer_path` to `writer`. `config` gives the bos and eos ids where
// the file has none (tokenizer.json). Tokenizers GGUF cannot express are refused by name.
Status add_gguf_tokenizer(GgufWriter& writer, const std::string& tokenizer_path, const LlamaConfig& config);

}  // namespace kuiper
