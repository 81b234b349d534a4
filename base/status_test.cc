// SPDX-License-Identifier: Apache-2.0
#include "base/status.h"

#include <cerrno>

#include "absl/strings/cord.h"
#include "gtest/gtest.h"

namespace dsec {
namespace {

absl::StatusOr<int> Half(int v) {
  if (v % 2 != 0) return absl::InvalidArgumentError("odd");
  return v / 2;
}

absl::StatusOr<int> Quarter(int v) {
  DSEC_ASSIGN_OR_RETURN(int h, Half(v));
  DSEC_ASSIGN_OR_RETURN(auto q, Half(h));
  return q;
}

absl::Status CheckEven(int v) {
  DSEC_RETURN_IF_ERROR(Half(v).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

TEST(ErrnoStatus, NamesTheCallAndErrno) {
  absl::Status s = ErrnoStatus("open(/x)", ENOENT);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("open(/x)"), std::string_view::npos);
  EXPECT_NE(s.message().find("errno 2"), std::string_view::npos);
}

TEST(ErrnoToStatus, MapsErrnoToMatchingCode) {
  EXPECT_EQ(ErrnoToStatus("x", ENOENT).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus("x", EPERM).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus("x", ENOMEM).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus("x", EINVAL).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus("x", ENOSYS).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus("x", EEXIST).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToStatus("x", EIO).code(), absl::StatusCode::kInternal);
}

TEST(Annotate, KeepsCodeAndPrefixesContext) {
  absl::Status s = Annotate(absl::NotFoundError("no file"), "loading kernel");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading kernel: no file");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
  absl::Status with_payload = absl::InvalidArgumentError("bad");
  with_payload.SetPayload("dsec.dev/field", absl::Cord("devices[0].path"));
  EXPECT_EQ(Annotate(with_payload, "--config f").GetPayload("dsec.dev/field"),
            absl::Cord("devices[0].path"));
}

TEST(CheckDeathTest, AbortsWithLocation) {
  EXPECT_DEATH(DSEC_CHECK(1 + 1 == 3), "DSEC_CHECK failed at .*status_test.cc");
}

}  // namespace
}  // namespace dsec
