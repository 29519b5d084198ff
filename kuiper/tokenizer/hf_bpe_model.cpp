#include "kuiper/tokenizer/hf_bpe_model.h"

#include <utility>

#include "kuiper/tokenizer/utf8.h"

namespace kuiper::hf {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string byte_token_name(uint8_t byte) {
  constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
}

}  // namespace

StatusOr<BpeModel> BpeModel::parse(const json& model, const std::string& path) {
  const std::string where = path + ": model";
  if (!model.is_object()) return invalid_format(where + " is missing");
  const std::string type = type_of(model);
  if (!type.empty() && type != "BPE") {
    return unsupported(path + ": model type \"" + type + "\" is not supported (only BPE)");
  }
  BpeModel bpe;
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return unsupported(where + ": BPE dropout (random merges) is not supported");
  }
  KUIPER_ASSIGN_OR_RETURN(bpe.byte_fallback_, bool_field(model, "byte_fallback", where, false));
  KUIPER_ASSIGN_OR_RETURN(bpe.fuse_unk_, bool_field(model, "fuse_unk", where, false));
  KUIPER_ASSIGN_OR_RETURN(bpe.ignore_merges_, bool_field(model, "ignore_merges", where, false));
  KUIPER_ASSIGN_OR_RETURN(bpe.continuing_subword_prefix_, string_field(model, "continuing_subword_prefix", where));
  KUIPER_ASSIGN_OR_RETURN(bpe.end_of_word_suffix_, string_field(model, "end_of_word_suffix", where));
  if (!model.contains("vocab") || !model["vocab"].is_object()) return invalid_format(where + " has no vocab object");
  if (!model.contains("merges") || !model["merges"].is_array()) return invalid_format(where + " has no merges list");
  KUIPER_RETURN_IF_ERROR(bpe.parse_vocab(model["vocab"], path));
  KUIPER_RETURN_IF_ERROR(bpe.parse_merges(model["merges"], path));
  KUIPER_ASSIGN_OR_RETURN(const std::string unk, string_field(model, "unk_token", where));
  if (!unk.empty()) {
    bpe.unk_id_ = bpe.find(unk);
    if (!bpe.unk_id_) return invalid_format(where + ": unk_token \"" + unk + "\" is not in the vocab");
  }
  for (int byte = 0; byte < 256; ++byte) {
    bpe.byte_ids_[byte] = bpe.find(byte_token_name(static_cast<uint8_t>(byte))).value_or(-1);
  }
  return bpe;
}

Status BpeModel::parse_vocab(const json& vocab, const std::string& path) {
  for (const auto& [text, value] : vocab.items()) {
    KUIPER_ASSIGN_OR_RETURN(const int32_t id, token_id(value, path + ": vocab entry \"" + text + "\""));
    if (!utf8::is_valid(text)) return invalid_format(path + ": vocab entry is not valid UTF-8");
    if (!tokens_.try_emplace(id, text).second) {
      return invalid_format(path + ": vocab entries \"" + tokens_[id] + "\" and \"" + text + "\" share id " +
                            std::to_string(id));
    }
    ids_.emplace(text, id);
    max_id_ = std::max(max_id_, id);
  }
  return ok_status();
}

// Merges come as "left right" strings or as ["left", "right"] pairs (newer files). Where a pair
// is listed twice, the later listing counts, as in tokenizers' merge map.
Status BpeModel::parse_merges(const json& merges, const std::string& path) {
  int32_t rank = 0;
  for (const json& merge : merges) {
    const std::string where = path + ": merge " + std::to_string(rank);
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      // Exactly one space, as tokenizers requires of this spelling.
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return invalid_format(where + " \"" + text + "\" is not \"left right\"");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return invalid_format(where + " is neither a string nor a pair of strings");
    }
    const size_t prefix = continuing_subword_prefix_.size();
    const std::string merged = left + (right.size() >= prefix ? right.substr(prefix) : right);
    const auto left_id = find(left);
    const auto right_id = find(right);
    const auto merged_id = find(merged);
    if (!left_id || !right_id || !merged_id || right.size() < prefix) {
      return invalid_format(where + " (" + left + " " + right + ") uses or makes a token not in the vocab");
    }
    merges_[pair_key(*left_id, *right_id)] = PairMerge{double(rank), *merged_id};
    ++rank;
  }
  return ok_status();
}

std::optional<int32_t> BpeModel::find(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token(int32_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

std::optional<PairMerge> BpeModel::merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (const auto id = find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<int32_t> ids;
  std::optional<int32_t> pending_unk;  // an unk not yet written, so that fuse_unk can extend it
  for (size_t at = 0; at < piece.size();) {
    const size_t length = std::max<size_t>(1, utf8::valid_char_length(piece.substr(at)));
    std::string symbol(piece.substr(at, length));
    if (at > 0) symbol.insert(0, continuing_subword_prefix_);
    if (at + length == piece.size()) symbol += end_of_word_suffix_;
    at += length;
    if (const auto id = find(symbol)) {
      if (pending_unk) ids.push_back(*std::exchange(pending_unk, std::nullopt));
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (const char byte : symbol) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(byte)] >= 0;
      if (all_bytes) {
        // tokenizers writes the byte tokens before an unk still pending.
        for (const char byte : symbol) ids.push_back(byte_ids_[static_cast<uint8_t>(byte)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) ids.push_back(*pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk) ids.push_back(*pending_unk);
  merge_pairs(ids, [this](int32_t left, int32_t right) { return merge(left, right); });
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace kuiper::hf
