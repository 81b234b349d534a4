// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/connect.h"

#include <gtest/gtest.h>

namespace dsec::e2b {
namespace {

TEST(ConnectEnvelope, RoundTripsAMessage) {
  const std::string body = EncodeEnvelope(0, R"({"a":1})");
  ASSERT_EQ(body.size(), 5u + 7u);
  EXPECT_EQ(body[4], 7);
  auto env = ParseSingleEnvelope(body, 1024);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->flags, 0);
  EXPECT_EQ(env->payload, R"({"a":1})");
}

TEST(ConnectEnvelope, RefusesShortHeader) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSingleEnvelope(std::string("\0\0\0", 3), 1024).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSingleEnvelope("", 1024).status()));
}

TEST(ConnectEnvelope, RefusesLengthThatDisagreesWithTheBody) {
  std::string body = EncodeEnvelope(0, "{}");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSingleEnvelope(body + "x", 1024).status()));   // trailing
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSingleEnvelope(body.substr(0, 6), 1024).status()));  // cut
}

TEST(ConnectEnvelope, RefusesHugeDeclaredLengthBeforeReadingIt) {
  const std::string body = std::string("\x00\xff\xff\xff\xff", 5) + "{}";
  EXPECT_TRUE(absl::IsResourceExhausted(ParseSingleEnvelope(body, 1 << 20).status()));
}

TEST(ConnectEnvelope, RefusesCompressedAndUnknownFlags) {
  EXPECT_TRUE(absl::IsUnimplemented(ParseSingleEnvelope(EncodeEnvelope(kFlagCompressed, "{}"), 64).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSingleEnvelope(EncodeEnvelope(0x80, "{}"), 64).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSingleEnvelope(EncodeEnvelope(kFlagEndStream, "{}"), 64).status()));
}

TEST(ConnectEnvelope, EndStreamCarriesTheError) {
  const std::string ok = EndStreamEnvelope(absl::OkStatus());
  EXPECT_EQ(static_cast<uint8_t>(ok[0]), kFlagEndStream);
  EXPECT_EQ(ok.substr(5), "{}");
  const std::string err = EndStreamEnvelope(absl::NotFoundError("gone"));
  auto j = nlohmann::json::parse(err.substr(5));
  EXPECT_EQ(j["error"]["code"], "not_found");
  EXPECT_EQ(j["error"]["message"], "gone");
}

TEST(ConnectCodes, MapToTheProtocolsHttpStatuses) {
  EXPECT_EQ(ConnectHttpStatus(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(ConnectHttpStatus(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(ConnectHttpStatus(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(ConnectCode(absl::StatusCode::kCancelled), "canceled");
}

TEST(ConnectTimeout, ParsesDigitsOnly) {
  EXPECT_EQ(*ParseTimeoutMs(""), -1);
  EXPECT_EQ(*ParseTimeoutMs("60000"), 60000);
  EXPECT_FALSE(ParseTimeoutMs("-5").ok());
  EXPECT_FALSE(ParseTimeoutMs("12345678901").ok());
}

TEST(ConnectMethod, SplitsServiceAndMethod) {
  auto m = ParseMethodPath("/process.Process/Start");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->service, "process.Process");
  EXPECT_EQ(m->name, "Start");
  EXPECT_FALSE(ParseMethodPath("/process.Process/").ok());
  EXPECT_FALSE(ParseMethodPath("/a/b/c").ok());
}

}  // namespace
}  // namespace dsec::e2b
