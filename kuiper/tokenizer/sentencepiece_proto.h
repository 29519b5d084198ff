// SentencePiece ModelProto <-> a vocabulary given piece by piece: serialized so that vocabularies
// stored elsewhere (GGUF's tokenizer.ggml.* arrays) run on libsentencepiece itself, and parsed
// so that a tokenizer.model can be stored as GGUF metadata. The installed headers do not expose
// the protobuf classes, so the few fields needed are read and written in protobuf's wire format
// here (field numbers from sentencepiece_model.proto).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

// Piece types, numbered as in sentencepiece_model.proto (GGUF's token_type uses the same).
enum class PieceType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct SentencePiece {
  std::string_view piece;
  float score = 0;
  PieceType type = PieceType::kNormal;
};

struct SentencePieceBpeSpec {
  std::vector<SentencePiece> pieces;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  // -1: none
  bool byte_fallback = true;
  bool add_dummy_prefix = true;           // "▁" before the text
  bool remove_extra_whitespaces = false;  // LLaMA keeps runs of spaces
};

// The serialized ModelProto of a BPE model (as LLaMA's tokenizer.model is) with `spec`'s pieces,
// special ids and normalizer flags, and the identity normalizer.
std::string serialize_sentencepiece_bpe(const SentencePieceBpeSpec& spec);

// The pieces, special ids and normalizer flags of a serialized BPE ModelProto (pieces point into
// `bytes`). Refuses other model types and normalizers other than "identity", which a GGUF
// "llama" vocabulary cannot express; `path` names the file in messages.
StatusOr<SentencePieceBpeSpec> parse_sentencepiece_bpe(std::string_view bytes, const std::string& path);

}  // namespace kuiper
