// kuiper_tokenize: text to token ids and back, with any tokenizer kuiper reads.
//   echo -n "Hello world" | kuiper_tokenize -t models/tokenizers/llama3/tokenizer.model --bos
//   echo "128000 9906 1917" | kuiper_tokenize -t models/tokenizers/llama3 --decode
// --batch treats every input line as one case written in hex (so that any bytes, newlines and
// empty strings survive) and answers one line per case: ids when encoding, hex text when
// decoding. scripts/tokenizer_reference.py drives it this way.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include <CLI/CLI.hpp>

#include "guarded_main.h"
#include "kuiper/base/regular_file.h"
#include "kuiper/tokenizer/tokenizer.h"

namespace {

using kuiper::StatusOr;

int fail(const std::string& message) {
  std::fprintf(stderr, "kuiper_tokenize: %s\n", message.c_str());
  return 1;
}

StatusOr<std::string> read_input(const std::string& file) {
  if (file.empty()) {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  return kuiper::read_regular_file(file);
}

StatusOr<std::vector<int32_t>> parse_ids(const std::string& text, int32_t vocab_size) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value < 0 || value >= vocab_size) {
      return kuiper::invalid_argument("\"" + word + "\" is not a token id in [0, " +
                                      std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

std::string to_hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  for (const char c : bytes) {
    hex += kDigits[static_cast<uint8_t>(c) >> 4];
    hex += kDigits[static_cast<uint8_t>(c) & 15];
  }
  return hex;
}

StatusOr<std::string> from_hex(std::string_view hex) {
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    const int high = digit(hex[i]);
    const int low = digit(hex[i + 1]);
    if (high < 0 || low < 0) break;
    bytes += static_cast<char>(high * 16 + low);
  }
  if (bytes.size() * 2 != hex.size()) {
    return kuiper::invalid_argument("batch line is not hex: \"" + std::string(hex.substr(0, 40)) + "\"");
  }
  return bytes;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  return line;
}

// One case: encode text to an id line, or decode an id line to text.
StatusOr<std::string> run_case(const kuiper::Tokenizer& tokenizer, const std::string& input,
                               bool decode, const kuiper::EncodeOptions& options) {
  if (decode) {
    auto ids = parse_ids(input, tokenizer.vocab_size());
    if (!ids.ok()) return ids.status();
    return tokenizer.decode(*ids);
  }
  auto ids = tokenizer.encode(input, options);
  if (!ids.ok()) return ids.status();
  return join_ids(*ids);
}

}  // namespace

static int program_main(int argc, char** argv) {
  CLI::App app{"Encode text to token ids, or decode ids to text.", "kuiper_tokenize"};
  std::string tokenizer_path, input_file;
  bool add_bos = false, allow_special = false, decode = false, batch = false;
  app.add_option("-t,--tokenizer", tokenizer_path, "tokenizer file or model directory")->required();
  app.add_flag("--bos", add_bos, "start the encoding with the beginning-of-sequence token");
  app.add_flag("--allow-special", allow_special, "turn special-token text (<|eot_id|>) into ids");
  app.add_flag("--decode", decode, "read whitespace-separated ids and write the text they stand for");
  app.add_option("--input", input_file, "read from this file instead of stdin");
  app.add_flag("--batch", batch, "one hex-encoded case per line in, one result per line out");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  auto tokenizer = kuiper::load_tokenizer(tokenizer_path);
  if (!tokenizer.ok()) return fail(tokenizer.status().to_string());
  auto input = read_input(input_file);
  if (!input.ok()) return fail(input.status().to_string());
  const kuiper::EncodeOptions options{.add_bos = add_bos, .allow_special = allow_special};

  if (!batch) {
    auto result = run_case(**tokenizer, *input, decode, options);
    if (!result.ok()) return fail(result.status().to_string());
    std::fwrite(result->data(), 1, result->size(), stdout);
    if (!decode) std::fputc('\n', stdout);
    return 0;
  }
  std::istringstream lines(*input);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.ends_with('\r')) line.pop_back();
    auto case_input = decode ? StatusOr<std::string>(line) : from_hex(line);
    if (!case_input.ok()) return fail("line " + std::to_string(number) + ": " + case_input.status().to_string());
    auto result = run_case(**tokenizer, *case_input, decode, options);
    if (!result.ok()) return fail("line " + std::to_string(number) + ": " + result.status().to_string());
    const std::string out = decode ? to_hex(*result) : *result;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  return kuiper::cli::guarded_main("kuiper_tokenize", [&] { return program_main(argc, argv); });
}
