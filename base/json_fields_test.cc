// SPDX-License-Identifier: Apache-2.0
#include "base/json_fields.h"

#include <gtest/gtest.h>

namespace dsec {
namespace {

using nlohmann::json;

TEST(JsonFieldsTest, ReadsTypedFieldsAndRejectsUnknownOnes) {
  json j = {{"name", "a"}, {"n", 5}, {"flag", true}, {"x", 1.5}, {"list", {"p", "q"}}, {"extra", 1}};
  auto f = JsonFields::Of(j, "dev");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->String("name"), "a");
  EXPECT_EQ(**f->OptInt("n", 0, 10), 5);
  EXPECT_EQ(**f->OptUint("n", 0, 10), 5u);
  EXPECT_TRUE(**f->OptBool("flag"));
  EXPECT_DOUBLE_EQ(**f->OptNumber("x", 0, 2), 1.5);
  EXPECT_EQ(f->OptStringList("list", 4)->value(), (std::vector<std::string>{"p", "q"}));
  EXPECT_FALSE(f->OptString("absent")->has_value());
  absl::Status s = f->RejectUnknown();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(s), "dev.extra");
  EXPECT_NE(s.message().find("unknown field dev.extra"), absl::string_view::npos);
  (void)f->Raw("extra");
  EXPECT_TRUE(f->RejectUnknown().ok());
}

TEST(JsonFieldsTest, EveryErrorNamesItsField) {
  json j = {{"n", -1}, {"u", -1}, {"s", 3}, {"b", "yes"}, {"big", 1e300}, {"l", {"ok", 2}},
            {"e", "x"}, {"huge", 18446744073709551615ull}};
  auto f = JsonFields::Of(j);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(FieldOf(f->OptInt("n", 0, 9).status()), "n");
  EXPECT_EQ(FieldOf(f->OptUint("u", 0, 9).status()), "u");
  EXPECT_EQ(FieldOf(f->OptString("s").status()), "s");
  EXPECT_EQ(FieldOf(f->OptBool("b").status()), "b");
  EXPECT_EQ(FieldOf(f->OptNumber("big", 0, 10).status()), "big");
  EXPECT_EQ(FieldOf(f->OptStringList("l", 4).status()), "l[1]");
  EXPECT_EQ(FieldOf(f->OptEnum("e", {"a", "b"}).status()), "e");
  EXPECT_NE(f->OptEnum("e", {"a", "b"}).status().message().find("one of a, b"), absl::string_view::npos);
  EXPECT_EQ(FieldOf(f->OptInt("huge", 0, 1 << 30).status()), "huge");
  EXPECT_EQ(FieldOf(f->String("missing").status()), "missing");
}

TEST(JsonFieldsTest, NullIsAbsentAndNonObjectsAreRefused) {
  json j = {{"n", nullptr}};
  auto f = JsonFields::Of(j);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->OptInt("n", 0, 1)->has_value());
  EXPECT_TRUE(f->RejectUnknown().ok());
  EXPECT_EQ(FieldOf(JsonFields::Of(json::array(), "devices[0]").status()), "devices[0]");
  EXPECT_EQ(JsonFields::ItemPath("devices", 3), "devices[3]");
}

TEST(JsonFieldsTest, LongStringsAndListsAreRefused) {
  json j = {{"s", std::string(10, 'x')}, {"l", json::array({"a", "b", "c"})}};
  auto f = JsonFields::Of(j);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->OptString("s", 9).ok());
  EXPECT_FALSE(f->OptStringList("l", 2).ok());
}

}  // namespace
}  // namespace dsec
