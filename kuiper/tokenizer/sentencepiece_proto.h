// A SentencePiece ModelProto serialized from a vocabulary given piece by piece, so that
// vocabularies stored elsewhere (GGUF's tokenizer.ggml.* arrays) run on libsentencepiece
// itself. The installed headers do not expose the protobuf classes, so the few fields needed
// are written in protobuf's wire format here (field numbers from sentencepiece_model.proto).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace kuiper
