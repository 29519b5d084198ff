// Two CPU models of different shapes and contexts in one process, decoding in turn, give
// exactly the logits each gives alone (two_models.h).
#include "test/two_models.h"

#include <gtest/gtest.h>

namespace kuiper {
namespace {

TEST(TwoModels, InterleavedDecodingEqualsEachAlone) {
  const test::TwoModelsResult r = test::run_two_models_interleaved({}, 24);
  EXPECT_EQ(r.worst_difference, 0.0) << "after " << r.steps << " steps";
}

}  // namespace
}  // namespace kuiper
