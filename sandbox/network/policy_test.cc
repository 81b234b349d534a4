// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/policy.h"

#include "base/json_fields.h"
#include "gtest/gtest.h"

namespace dsec::network {
namespace {

using nlohmann::json;

TEST(NetworkSpecTest, ReadsCidrAndDomainRulesApart) {
  auto s = ParseNetworkSpec(json::parse(
      R"({"egress": {"allow": ["10.1.0.0/16:443", "pypi.org:443", "*.debian.org", "[2001:db8::1]:80",
                                "1e100.net"],
                     "deny": ["10.1.2.0/24", "evil.example.com"]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->egress.allow.size(), 2u);
  EXPECT_EQ(bpf::FormatEgressRule(s->egress.allow[0]), "10.1.0.0/16:443");
  EXPECT_TRUE(s->egress.allow[1].ipv6);
  ASSERT_EQ(s->egress.allow_domains.size(), 3u);
  EXPECT_EQ(s->egress.allow_domains[0].pattern, "pypi.org");
  EXPECT_EQ(s->egress.allow_domains[0].port, 443);
  EXPECT_TRUE(s->egress.allow_domains[1].wildcard);
  EXPECT_EQ(s->egress.allow_domains[2].pattern, "1e100.net");
  ASSERT_EQ(s->egress.deny.size(), 1u);
  ASSERT_EQ(s->egress.deny_domains.size(), 1u);
  EXPECT_EQ(NetworkSpecJson(*s)["egress"]["allow"].size(), 5u);
  EXPECT_EQ(NetworkSpecJson(*s)["egress"]["deny"][1], "evil.example.com");
}

TEST(NetworkSpecTest, EmptyMeansNothingAllowed) {
  auto s = ParseNetworkSpec(json::object());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->egress.allow.empty());
  EXPECT_TRUE(s->egress.allow_domains.empty());
  EXPECT_EQ(NetworkSpecJson(*s), json::parse(R"({"egress": {"allow": [], "deny": []}})"));
}

TEST(NetworkSpecTest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* field;
  } cases[] = {
      {R"({"egress": {"allow": ["10.1.0.0/33"]}})", "network.egress.allow[0]"},
      {R"({"egress": {"allow": ["ok.example.com", "bad..name"]}})", "network.egress.allow[1]"},
      {R"({"egress": {"deny": ["[::1"]}})", "network.egress.deny[0]"},
      {R"({"egress": {"allow": ["10.0.0.1/8"]}})", "network.egress.allow[0]"},  // host bits
      {R"({"egress": {"allow": ["*"]}})", "network.egress.allow[0]"},
      {R"({"egress": {"allow": "10.0.0.0/8"}})", "network.egress.allow"},
      {R"({"egress": {"allow": [], "other": 1}})", "network.egress.other"},
      {R"({"ingress": {}})", "network.ingress"},
      {R"({"egress": []})", "network.egress"},
      {R"([])", "network"},
  };
  for (const Case& c : cases) {
    auto s = ParseNetworkSpec(json::parse(c.body));
    ASSERT_FALSE(s.ok()) << c.body;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(FieldOf(s.status()).value_or(""), c.field) << c.body << ": " << s.status();
  }
}

TEST(NetworkSpecTest, ListsAreBounded) {
  json many = json::array();
  for (size_t i = 0; i <= kMaxRulesPerList; ++i) many.push_back("10.0.0.0/8");
  auto s = ParseNetworkSpec(json{{"egress", {{"allow", many}}}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(FieldOf(s.status()).value_or(""), "network.egress.allow");
}

}  // namespace
}  // namespace dsec::network
