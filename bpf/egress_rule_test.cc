// SPDX-License-Identifier: Apache-2.0
#include "bpf/egress_rule.h"

#include <arpa/inet.h>

#include <cstring>

#include "gtest/gtest.h"

namespace dsec::bpf {
namespace {

TEST(EgressRuleTest, ParsesIpv4WithPrefixAndPort) {
  auto r = ParseEgressRule("10.1.0.0/16:443");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ipv6);
  EXPECT_EQ(r->prefix_len, 16);
  EXPECT_EQ(r->port, 443);
  EXPECT_EQ(r->addr[0], 10);
  EXPECT_EQ(r->addr[1], 1);
  EXPECT_EQ(FormatEgressRule(*r), "10.1.0.0/16:443");
}

TEST(EgressRuleTest, BareAddressIsAHostRuleForEveryPort) {
  auto r = ParseEgressRule("192.0.2.7");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prefix_len, 32);
  EXPECT_EQ(r->port, 0);
  EXPECT_EQ(FormatEgressRule(*r), "192.0.2.7/32");
}

TEST(EgressRuleTest, ParsesIpv6WithAndWithoutBrackets) {
  auto a = ParseEgressRule("2001:db8::/32");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->ipv6);
  EXPECT_EQ(a->prefix_len, 32);
  EXPECT_EQ(a->port, 0);
  auto b = ParseEgressRule("[2001:db8::1]:8443");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->prefix_len, 128);
  EXPECT_EQ(b->port, 8443);
  EXPECT_EQ(FormatEgressRule(*b), "[2001:db8::1/128]:8443");
  auto c = ParseEgressRule("[::/0]:53");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefix_len, 0);
  EXPECT_EQ(c->port, 53);
  auto d = ParseEgressRule("::ffff:127.0.0.1");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->ipv6);
}

TEST(EgressRuleTest, BadRulesAreRefusedNamingTheRule) {
  for (const char* bad : {"", "10.0.0.0/33", "10.0.0.1/8", "10.0.0.0/8:0", "10.0.0.0/8:65536",
                          "10.0.0.0/8:http", "300.1.1.1", "[::1", "[::1]x", "[::1]:", "2001:db8::1/129",
                          "example.org", "10.0.0.0/", "/8", "1.2.3.4:80:90", "10.0.0.0/-1"}) {
    auto r = ParseEgressRule(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(r.status().message()).find("egress rule"), std::string::npos) << bad;
    }
  }
}

TEST(EgressRuleTest, KeyIsPrefixPortAddressAsTheProgramReadsIt) {
  auto r = ParseEgressRule("10.1.0.0/16:443");
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> key = EgressRuleKey(*r);
  ASSERT_EQ(key.size(), 10u);
  uint32_t prefix = 0;
  std::memcpy(&prefix, key.data(), 4);
  EXPECT_EQ(prefix, 16u + 16u);
  uint16_t port_be = 0;
  std::memcpy(&port_be, key.data() + 4, 2);
  EXPECT_EQ(ntohs(port_be), 443);
  EXPECT_EQ(key[6], 10);
  EXPECT_EQ(key[7], 1);
  auto v6 = ParseEgressRule("::1");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(EgressRuleKey(*v6).size(), 22u);
}

}  // namespace
}  // namespace dsec::bpf
