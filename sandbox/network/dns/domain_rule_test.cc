// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/dns/domain_rule.h"

#include <string>

#include "gtest/gtest.h"

namespace dsec::network::dns {
namespace {

TEST(DomainRuleTest, ParsesPlainNameWithPort) {
  auto r = ParseDomainRule("pypi.org:443");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pattern, "pypi.org");
  EXPECT_FALSE(r->wildcard);
  EXPECT_EQ(r->port, 443);
  EXPECT_EQ(FormatDomainRule(*r), "pypi.org:443");
}

TEST(DomainRuleTest, ParsesWildcardWithAndWithoutPort) {
  auto a = ParseDomainRule("*.debian.org");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->pattern, "debian.org");
  EXPECT_TRUE(a->wildcard);
  EXPECT_EQ(a->port, 0);
  EXPECT_EQ(FormatDomainRule(*a), "*.debian.org");
  auto b = ParseDomainRule("*.debian.org:80");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->wildcard);
  EXPECT_EQ(b->port, 80);
  EXPECT_EQ(FormatDomainRule(*b), "*.debian.org:80");
}

TEST(DomainRuleTest, NormalisesCaseAndOneTrailingDot) {
  auto r = ParseDomainRule("PyPI.Org.:8080");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pattern, "pypi.org");
  EXPECT_EQ(r->port, 8080);
}

TEST(DomainRuleTest, AcceptsLongestLabelAndName) {
  const std::string label63(63, 'a');
  EXPECT_TRUE(ParseDomainRule(label63 + ".org").ok());
  // Three labels of 63, one of 61 and three dots: 253 characters.
  std::string name = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  ASSERT_EQ(name.size(), 253u);
  EXPECT_TRUE(ParseDomainRule(name).ok());
  EXPECT_FALSE(ParseDomainRule(name + "b").ok());
  // A wildcard needs room for at least "x." in front of its pattern.
  EXPECT_FALSE(ParseDomainRule("*." + name).ok());
  const std::string room = name.substr(2);
  auto wildcard = ParseDomainRule("*." + room);
  ASSERT_TRUE(wildcard.ok()) << wildcard.status();
  EXPECT_TRUE(Matches(*wildcard, "x." + room));
}

TEST(DomainRuleTest, RejectsBadSyntaxNamingTheRule) {
  for (const char* bad : {"",
                          "*",
                          "*.",
                          "*.org",
                          "org",
                          "pypi..org",
                          ".pypi.org",
                          "pypi.org..",
                          "-pypi.org",
                          "pypi-.org",
                          "py_pi.org",
                          "py pi.org",
                          "a.*.org",
                          "*a.org",
                          "**.a.org",
                          "*.*.a.org",
                          "pypi.org:",
                          "pypi.org:0",
                          "pypi.org:65536",
                          "pypi.org:+443",
                          "pypi.org:44a",
                          "pypi.org:123456",
                          "192.0.2.7",
                          "192.0.2.7:443",
                          "[2001:db8::1]:443",
                          "pypi.org:443:443",
                          "p\xc3\xa9.org"}) {
    auto r = ParseDomainRule(bad);
    EXPECT_FALSE(r.ok()) << "accepted: " << bad;
    if (r.ok()) continue;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("domain rule"), absl::string_view::npos) << r.status();
  }
  auto long_label = ParseDomainRule(std::string(64, 'a') + ".org");
  EXPECT_FALSE(long_label.ok());
}

TEST(DomainRuleTest, ErrorQuotesTheRule) {
  auto r = ParseDomainRule("exa_mple.org:443");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exa_mple.org:443"), absl::string_view::npos) << r.status();
}

TEST(DomainRuleTest, PlainRuleMatchesOnlyItsName) {
  auto r = ParseDomainRule("pypi.org:443");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(Matches(*r, "pypi.org"));
  EXPECT_TRUE(Matches(*r, "pypi.org."));
  EXPECT_TRUE(Matches(*r, "PYPI.ORG."));
  EXPECT_FALSE(Matches(*r, "files.pypi.org"));
  EXPECT_FALSE(Matches(*r, "xpypi.org"));
  EXPECT_FALSE(Matches(*r, "pypi.org.evil.com"));
  EXPECT_FALSE(Matches(*r, "pypi.or"));
  EXPECT_FALSE(Matches(*r, ""));
}

TEST(DomainRuleTest, WildcardMatchesNamesStrictlyBelowAtAnyDepth) {
  auto r = ParseDomainRule("*.debian.org");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(Matches(*r, "deb.debian.org"));
  EXPECT_TRUE(Matches(*r, "a.b.c.debian.org."));
  EXPECT_TRUE(Matches(*r, "Security.Debian.Org"));
  EXPECT_FALSE(Matches(*r, "debian.org"));
  EXPECT_FALSE(Matches(*r, "debian.org."));
  EXPECT_FALSE(Matches(*r, "notdebian.org"));
  EXPECT_FALSE(Matches(*r, ".debian.org"));
  EXPECT_FALSE(Matches(*r, "debian.org.evil.com"));
}

TEST(DomainRuleTest, NamesOutsideHostNameSyntaxMatchNothing) {
  auto r = ParseDomainRule("*.debian.org");
  ASSERT_TRUE(r.ok());
  // How ldns prints a label holding a dot or a zero byte.
  EXPECT_FALSE(Matches(*r, "a\\.b.debian.org"));
  EXPECT_FALSE(Matches(*r, "a\\000.debian.org"));
  EXPECT_FALSE(Matches(*r, "_srv.debian.org"));
  EXPECT_FALSE(Matches(*r, "a..debian.org"));
  EXPECT_FALSE(Matches(*r, std::string("a\0.debian.org", 13)));
}

}  // namespace
}  // namespace dsec::network::dns
