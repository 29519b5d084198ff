// Stop strings over streamed text, against outputs worked out by hand.
#include "kuiper/engine/stop_strings.h"

#include <gtest/gtest.h>

namespace kuiper {
namespace {

TEST(StopStrings, TextEndsBeforeTheFirstMatchSpanningPieces) {
  StopStrings stops({"END", "\n\n"});
  EXPECT_EQ(stops.push("Hello E"), "Hello ");  // "E" may start "END": held back
  EXPECT_EQ(stops.push("x"), "Ex");            // it did not
  EXPECT_EQ(stops.push(" wor"), " wor");
  EXPECT_EQ(stops.push("ld\n"), "ld");         // "\n" may start "\n\n"
  EXPECT_EQ(stops.push("E"), "\n");            // now only "E" is held back
  EXPECT_EQ(stops.push("ND and more"), "");
  EXPECT_TRUE(stops.stopped());
  EXPECT_EQ(stops.push("later"), "");
  EXPECT_EQ(stops.flush(), "");
}

TEST(StopStrings, EarliestOfSeveralMatchesWinsAndHeldTextFlushes) {
  StopStrings stops({"bc", "abcd"});
  EXPECT_EQ(stops.push("xxabcd"), "xx");  // "abcd" starts first (at 2, "bc" at 3): text stops there
  EXPECT_TRUE(stops.stopped());

  StopStrings tail({"stop here"});
  EXPECT_EQ(tail.push("the end, sto"), "the end, ");
  EXPECT_FALSE(tail.stopped());
  EXPECT_EQ(tail.flush(), "sto");  // generation ended otherwise: the held text is released

  StopStrings none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

TEST(StopStrings, MultiByteCharactersAreNeverSplit) {
  StopStrings stops({"é!"});
  EXPECT_EQ(stops.push("caf\xc3\xa9"), "caf");  // é may start "é!"
  EXPECT_EQ(stops.push("?"), "\xc3\xa9?");
}

}  // namespace
}  // namespace kuiper
