// The tokenizer test corpus (test/data/tokenizer_corpus.txt: one JSON string per line) for the
// tokenizer GoogleTests.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace kuiper::test {

inline std::vector<std::string> tokenizer_corpus() {
  std::ifstream in(source_path("test/data/tokenizer_corpus.txt"));
  std::vector<std::string> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    cases.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  return cases;
}

}  // namespace kuiper::test
