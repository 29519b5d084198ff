// Stop strings over streamed text: text is released as soon as it can no longer turn into the
// start of a stop string; when one appears, the text ends just before it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kuiper {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);
  // Adds generated text; returns the text that became final. Once a stop string appears,
  // stopped() is true, the returned text ends before the match and later pushes return "".
  std::string push(std::string_view text);
  // At the end of generation: the text still held back.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kuiper
