#include "kuiper/tokenizer/sentencepiece_proto.h"

#include <cstring>

namespace kuiper {
namespace {

// Protobuf wire format: each field is a varint key (number << 3 | wire type) and its value.
class ProtoWriter {
 public:
  void varint_field(int number, uint64_t value) {
    key(number, 0);
    varint(value);
  }
  // int32 fields hold negative values as 64-bit two's complement varints.
  void int32_field(int number, int32_t value) { varint_field(number, static_cast<uint64_t>(static_cast<int64_t>(value))); }
  void float_field(int number, float value) {
    key(number, 5);
    char bytes[4];
    std::memcpy(bytes, &value, 4);
    out_.append(bytes, 4);
  }
  void bytes_field(int number, std::string_view bytes) {
    key(number, 2);
    varint(bytes.size());
    out_.append(bytes);
  }
  const std::string& bytes() const { return out_; }

 private:
  void key(int number, int wire_type) { varint(static_cast<uint64_t>(number) << 3 | wire_type); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

// Field numbers of sentencepiece_model.proto.
enum ModelField { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3 };
enum PieceField { kPiece = 1, kScore = 2, kType = 3 };
enum TrainerField {
  kModelType = 3, kVocabSize = 4, kByteFallback = 35, kUnkId = 40, kBosId = 41, kEosId = 42, kPadId = 43,
  kUnkPiece = 45, kBosPiece = 46, kEosPiece = 47, kPadPiece = 48,
};
enum NormalizerField { kName = 1, kAddDummyPrefix = 3, kRemoveExtraWhitespaces = 4, kEscapeWhitespaces = 5 };
constexpr int kModelTypeBpe = 2;

}  // namespace

std::string serialize_sentencepiece_bpe(const SentencePieceBpeSpec& spec) {
  ProtoWriter model;
  for (const SentencePiece& p : spec.pieces) {
    ProtoWriter piece;
    piece.bytes_field(kPiece, p.piece);
    piece.float_field(kScore, p.score);
    piece.varint_field(kType, static_cast<uint64_t>(p.type));
    model.bytes_field(kPieces, piece.bytes());
  }
  const auto piece_of = [&](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < spec.pieces.size() ? spec.pieces[id].piece : std::string_view();
  };
  ProtoWriter trainer;
  trainer.varint_field(kModelType, kModelTypeBpe);
  trainer.int32_field(kVocabSize, static_cast<int32_t>(spec.pieces.size()));
  trainer.varint_field(kByteFallback, spec.byte_fallback);
  // The library finds its special tokens by these pieces, so they name the pieces at the ids.
  const std::pair<int, int32_t> ids[] = {{kUnkId, spec.unk_id}, {kBosId, spec.bos_id}, {kEosId, spec.eos_id},
                                         {kPadId, spec.pad_id}};
  for (const auto& [field, id] : ids) trainer.int32_field(field, id);
  const std::pair<int, int32_t> pieces[] = {{kUnkPiece, spec.unk_id}, {kBosPiece, spec.bos_id},
                                            {kEosPiece, spec.eos_id}, {kPadPiece, spec.pad_id}};
  for (const auto& [field, id] : pieces) {
    if (!piece_of(id).empty()) trainer.bytes_field(field, piece_of(id));
  }
  model.bytes_field(kTrainerSpec, trainer.bytes());
  ProtoWriter normalizer;
  normalizer.bytes_field(kName, "identity");
  normalizer.varint_field(kAddDummyPrefix, spec.add_dummy_prefix);
  normalizer.varint_field(kRemoveExtraWhitespaces, spec.remove_extra_whitespaces);
  normalizer.varint_field(kEscapeWhitespaces, 1);
  model.bytes_field(kNormalizerSpec, normalizer.bytes());
  return model.bytes();
}

}  // namespace kuiper
