#include "kuiper/tokenizer/byte_level_bpe.h"

#include "kuiper/tokenizer/utf8.h"

namespace kuiper {

bool ByteVocabulary::add(int32_t id, std::string bytes) {
  if (id < 0) return false;
  if (static_cast<size_t>(id) >= bytes_.size()) bytes_.resize(id + 1);
  if (!bytes_[id].empty() || bytes.empty()) return false;
  if (!ids_.try_emplace(bytes, id).second) return false;
  if (bytes.size() == 1) {
    const auto byte = static_cast<uint8_t>(bytes[0]);
    byte_ids_[byte] = id;
    byte_ids_filled_[byte] = true;
  }
  bytes_[id] = std::move(bytes);
  return true;
}

Status ByteVocabulary::check_complete(const std::string& path) const {
  for (int byte = 0; byte < 256; ++byte) {
    if (!byte_ids_filled_[byte]) {
      return invalid_format(path + ": vocabulary has no token for byte " + std::to_string(byte) +
                            ", so not every text can be encoded");
    }
  }
  return ok_status();
}

std::optional<int32_t> ByteVocabulary::find(std::string_view bytes) const {
  const auto it = ids_.find(bytes);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& ByteVocabulary::bytes(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return kNone;
  return bytes_[id];
}

Status ByteLevelBpe::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (!utf8::is_valid(text)) return invalid_argument("text to encode is not valid UTF-8");
  KUIPER_ASSIGN_OR_RETURN(const std::vector<std::string_view> pieces, splitter.split(text));
  std::vector<int32_t> ids;
  for (const std::string_view piece : pieces) {
    if (whole_piece_first) {
      if (const auto id = vocabulary.find(piece)) {
        out.push_back(*id);
        continue;
      }
    }
    ids.clear();
    for (const char byte : piece) ids.push_back(vocabulary.byte_id(static_cast<uint8_t>(byte)));
    merge_pairs(ids, merge_rule);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return ok_status();
}

}  // namespace kuiper
