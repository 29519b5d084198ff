// The layer count a checkpoint's config states against the layers its tensors are named for
// ("blk.<i>." in GGUF, "model.layers.<i>." in Hugging Face files): a count one short would run
// the model without its last layer, silently, and one too many would fail on a missing tensor
// without saying which number is wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

// Refuses `names` that hold tensors of layers at or beyond `n_layers`, or of fewer layers than
// that, naming `key` (the config's layer count) and `source` (the file).
Status check_layer_tensors(const std::vector<std::string>& names, std::string_view prefix, int n_layers,
                           const std::string& key, const std::string& source);

}  // namespace kuiper
