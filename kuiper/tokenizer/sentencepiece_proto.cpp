#include "kuiper/tokenizer/sentencepiece_proto.h"

#include <cstring>
#include <optional>

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

namespace kuiper {
namespace {

// Protobuf wire format reading: the fields of one message, in order.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view bytes) : rest_(bytes) {}

  struct Field {
    int number = 0;
    int wire_type = 0;
    uint64_t varint = 0;     // wire type 0
    uint32_t fixed32 = 0;    // wire type 5
    std::string_view bytes;  // wire type 2
  };

  // The next field, nullopt at the end; `ok` turns false on malformed input.
  std::optional<Field> next() {
    if (rest_.empty() || !ok) return std::nullopt;
    Field f;
    uint64_t key = 0;
    if (!varint(key)) return fail();
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    switch (f.wire_type) {
      case 0: if (!varint(f.varint)) return fail(); break;
      case 1: if (rest_.size() < 8) return fail(); rest_.remove_prefix(8); break;
      case 2: {
        uint64_t length = 0;
        if (!varint(length) || length > rest_.size()) return fail();
        f.bytes = rest_.substr(0, length);
        rest_.remove_prefix(length);
        break;
      }
      case 5: if (rest_.size() < 4) return fail(); std::memcpy(&f.fixed32, rest_.data(), 4); rest_.remove_prefix(4); break;
      default: return fail();
    }
    return f;
  }
  bool ok = true;

 private:
  std::optional<Field> fail() {
    ok = false;
    return std::nullopt;
  }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && !rest_.empty(); shift += 7) {
      const auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      v |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;
  }
  std::string_view rest_;
};

}  // namespace

StatusOr<SentencePieceBpeSpec> parse_sentencepiece_bpe(std::string_view bytes, const std::string& path) {
  SentencePieceBpeSpec spec;
  spec.remove_extra_whitespaces = true;  // the proto's defaults
  int model_type = 1;                    // unigram unless the trainer spec says otherwise
  std::string_view normalizer_name = "nmt_nfkc";
  ProtoReader model(bytes);
  while (const auto field = model.next()) {
    ProtoReader inner(field->bytes);
    if (field->number == kPieces && field->wire_type == 2) {
      SentencePiece piece;
      while (const auto f = inner.next()) {
        if (f->number == kPiece) piece.piece = f->bytes;
        if (f->number == kScore) std::memcpy(&piece.score, &f->fixed32, 4);
        if (f->number == kType) piece.type = static_cast<PieceType>(f->varint);
      }
      spec.pieces.push_back(piece);
    } else if (field->number == kTrainerSpec && field->wire_type == 2) {
      while (const auto f = inner.next()) {
        const auto as_int32 = static_cast<int32_t>(static_cast<int64_t>(f->varint));
        if (f->number == kModelType) model_type = as_int32;
        if (f->number == kByteFallback) spec.byte_fallback = f->varint != 0;
        if (f->number == kUnkId) spec.unk_id = as_int32;
        if (f->number == kBosId) spec.bos_id = as_int32;
        if (f->number == kEosId) spec.eos_id = as_int32;
        if (f->number == kPadId) spec.pad_id = as_int32;
      }
    } else if (field->number == kNormalizerSpec && field->wire_type == 2) {
      while (const auto f = inner.next()) {
        if (f->number == kName) normalizer_name = f->bytes;
        if (f->number == kAddDummyPrefix) spec.add_dummy_prefix = f->varint != 0;
        if (f->number == kRemoveExtraWhitespaces) spec.remove_extra_whitespaces = f->varint != 0;
      }
    }
    if (!inner.ok) break;
  }
  if (!model.ok || spec.pieces.empty()) return invalid_format(path + ": not a valid SentencePiece model");
  if (model_type != kModelTypeBpe) {
    return unsupported(path + ": SentencePiece model type " + std::to_string(model_type) + " is not BPE");
  }
  if (normalizer_name != "identity") {
    return unsupported(path + ": SentencePiece normalizer '" + std::string(normalizer_name) +
                       "' (only the identity normalizer can be stored as GGUF metadata)");
  }
  return spec;
}

}  // namespace kuiper
