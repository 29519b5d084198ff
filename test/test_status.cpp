// Status, StatusOr and the error-propagation macros.
#include "kuiper/base/status.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace kuiper {
namespace {

TEST(Status, DefaultIsOk) {
  const Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.to_string(), "ok");
  EXPECT_TRUE(ok_status().ok());
}

TEST(Status, HelpersSetCodeAndMessage) {
  const std::pair<Status, StatusCode> cases[] = {
      {invalid_argument("m"), StatusCode::kInvalidArgument},
      {not_found("m"), StatusCode::kNotFound},
      {io_error("m"), StatusCode::kIoError},
      {invalid_format("m"), StatusCode::kInvalidFormat},
      {out_of_range("m"), StatusCode::kOutOfRange},
      {unsupported("m"), StatusCode::kUnsupported},
      {resource_exhausted("m"), StatusCode::kResourceExhausted},
      {internal_error("m"), StatusCode::kInternal},
  };
  for (const auto& [status, code] : cases) {
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(status.code(), code);
    EXPECT_EQ(status.message(), "m");
    EXPECT_EQ(status.to_string(), std::string(status_code_name(code)) + ": m");
  }
}

TEST(Status, ToStringNamesTheCode) {
  EXPECT_EQ(invalid_format("model.bin: file is 12 bytes").to_string(),
            "invalid format: model.bin: file is 12 bytes");
  EXPECT_EQ(not_found("x").to_string(), "not found: x");
}

TEST(StatusOr, HoldsValueOrError) {
  StatusOr<std::string> good = std::string("hello");
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(*good, "hello");
  EXPECT_EQ(good->size(), 5u);
  good.value() += "!";
  EXPECT_EQ(good.value(), "hello!");

  const StatusOr<std::string> bad = out_of_range("too long");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(bad.status().message(), "too long");
}

TEST(StatusOr, MovesOutMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> holder = std::make_unique<int>(7);
  ASSERT_TRUE(holder.ok());
  std::unique_ptr<int> taken = std::move(holder).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 7);
}

TEST(StatusOrDeathTest, BuildingFromOkStatusIsABug) {
  EXPECT_DEATH({ StatusOr<int> s(ok_status()); (void)s; }, "OK status");
}

// Small functions exercising the macros: each records how far it got.
Status fail_if(bool fail) { return fail ? io_error("disk") : ok_status(); }
StatusOr<int> value_or_fail(bool fail) {
  if (fail) return not_found("nothing");
  return 41;
}

Status chain(bool fail, int& reached) {
  reached = 0;
  KUIPER_RETURN_IF_ERROR(fail_if(fail));
  reached = 1;
  return ok_status();
}

StatusOr<int> add_one(bool fail, int& reached) {
  reached = 0;
  KUIPER_ASSIGN_OR_RETURN(const int v, value_or_fail(fail));
  reached = 1;
  KUIPER_ASSIGN_OR_RETURN(int w, value_or_fail(false));  // a second use in the same scope
  return v + w - 40;
}

TEST(StatusMacros, ReturnIfErrorPropagatesAndContinues) {
  int reached = -1;
  const Status failed = chain(true, reached);
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  EXPECT_EQ(failed.message(), "disk");
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(chain(false, reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacros, AssignOrReturnBindsOrPropagates) {
  int reached = -1;
  const StatusOr<int> failed = add_one(true, reached);
  EXPECT_EQ(failed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reached, 0);
  const StatusOr<int> good = add_one(false, reached);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  EXPECT_EQ(reached, 1);
}

}  // namespace
}  // namespace kuiper
