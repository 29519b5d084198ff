#include "kuiper/tokenizer/gguf_pre_tokenizers.h"

#include <algorithm>
#include <vector>

namespace kuiper {
namespace {

using json = nlohmann::json;

// The regexes of the HF tokenizer.json files of LLaMA 3 and Qwen2/2.5/3.
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json regex_then_bytes(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false)}}};
}

struct PreTokenizer {
  std::vector<std::string> names;  // the first is the one written
  json normalizer, pre_tokenizer;
  bool ignore_merges;
};

const std::vector<PreTokenizer>& table() {
  static const std::vector<PreTokenizer> t = {
      {{"llama-bpe", "llama3", "llama-v3"}, nullptr, regex_then_bytes(kLlama3Pattern), true},
      {{"qwen2"}, {{"type", "NFC"}}, regex_then_bytes(kQwen2Pattern), false},
      {{"smollm"}, nullptr,
       {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}},
       false},
      {{"gpt-2", "gpt2"}, nullptr, byte_level(true), false},
  };
  return t;
}

// What decides how a pre-tokenizer splits: each step's type and its regex or switches, and the
// normalizer's type (other fields, such as trim_offsets, only affect offsets); with the BPE
// model's ignore_merges, which llama.cpp ties to the pre-tokenizer name.
json signature(const json& normalizer, const json& pre_tokenizer, bool ignore_merges) {
  json steps = json::array();
  const json list = pre_tokenizer.is_object() && pre_tokenizer.value("type", "") == "Sequence"
                        ? pre_tokenizer.value("pretokenizers", json::array())
                        : json::array({pre_tokenizer});
  for (const json& step : list) {
    if (!step.is_object()) return nullptr;
    steps.push_back({step.value("type", ""), step.value("pattern", json()), step.value("behavior", json()),
                     step.value("invert", false), step.value("individual_digits", json()),
                     step.value("use_regex", true), step.value("add_prefix_space", false)});
  }
  const std::string normalizer_type = normalizer.is_object() ? normalizer.value("type", "") : "";
  return {normalizer_type, steps, ignore_merges};
}

}  // namespace

bool apply_gguf_pre_tokenizer(const std::string& name, json& doc) {
  for (const PreTokenizer& p : table()) {
    if (std::find(p.names.begin(), p.names.end(), name) == p.names.end()) continue;
    doc["normalizer"] = p.normalizer;
    doc["pre_tokenizer"] = p.pre_tokenizer;
    doc["model"]["ignore_merges"] = p.ignore_merges;
    return true;
  }
  return false;
}

std::optional<std::string> gguf_pre_tokenizer_name(const json& doc) {
  const json model = doc.value("model", json::object());
  const json wanted = signature(doc.value("normalizer", json()), doc.value("pre_tokenizer", json()),
                                model.is_object() && model.value("ignore_merges", false));
  for (const PreTokenizer& p : table()) {
    if (signature(p.normalizer, p.pre_tokenizer, p.ignore_merges) == wanted) return p.names.front();
  }
  return std::nullopt;
}

std::string known_gguf_pre_tokenizers() {
  std::string names;
  for (const PreTokenizer& p : table()) names += (names.empty() ? "" : ", ") + p.names.front();
  return names;
}

}  // namespace kuiper
