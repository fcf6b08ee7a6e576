#include "kvstore/status.h"

#include <memory>

#include "testutil.h"

namespace kvstore {
namespace {

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  Status ok = Status::OK();
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status s = Status::Corruption("header: bad length");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "header: bad length");
  EXPECT_EQ(s.ToString(), "Corruption: header: bad length");
  Status copy = s;
  EXPECT_EQ(copy.code(), StatusCode::kCorruption);
  EXPECT_EQ(copy.message(), s.message());
}

TEST(StatusTest, EveryCodeHasAName) {
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotSupported), "NotSupported");
  EXPECT_TRUE(Status::ResourceExhausted("x").ToString().starts_with("ResourceExhausted"));
  EXPECT_TRUE(Status::FailedPrecondition("x").ToString().starts_with("FailedPrecondition"));
  EXPECT_EQ(Status::PermissionDenied("x").ToString(), "PermissionDenied: x");
  EXPECT_TRUE(Status::PermissionDenied("x").IsPermissionDenied());
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KV_ASSIGN_OR_RETURN(int h, Half(x));
  KV_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckQuarter(int x) {
  KV_RETURN_IF_ERROR(Quarter(x).status());
  return Status::OK();
}

TEST(ResultTest, ValueOrErrorPropagates) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_TRUE(Quarter(6).status().IsInvalidArgument());
  EXPECT_EQ(Quarter(6).value_or(-1), -1);
  EXPECT_TRUE(CheckQuarter(4).ok());
  EXPECT_EQ(CheckQuarter(2).message(), "odd");
}

TEST(ResultTest, HoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

}  // namespace
}  // namespace kvstore
