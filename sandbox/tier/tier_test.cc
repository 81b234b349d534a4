// SPDX-License-Identifier: Apache-2.0
// Tier options (declared by each tier, read by one parser), the registry
// that turns API names into TierIds, and the not-built tier.
#include <memory>

#include "base/json_fields.h"
#include "gtest/gtest.h"
#include "sandbox/tier/options.h"
#include "sandbox/tier/registry.h"
#include "sandbox/tier/setup.h"

namespace dsec::tier {
namespace {

using nlohmann::json;

std::string Field(const absl::Status& s) { return dsec::FieldOf(s).value_or("<none>"); }

OptionSpec Lang() {
  OptionSpec o;
  o.name = "lang";
  o.choices = {"python", "bash"};
  o.default_value = "python";
  return o;
}
OptionSpec UserNamespace() {
  OptionSpec o;
  o.name = "user_namespace";
  o.type = OptionSpec::Type::kBool;
  o.default_value = false;
  o.neutral = false;
  o.shown = true;
  return o;
}
OptionSpec Disk() {
  OptionSpec o;
  o.name = "disk_gib";
  o.type = OptionSpec::Type::kInt;
  o.min = 1;
  o.max = 64;
  return o;
}

TEST(TierOptionsTest, ReadsOwnOptionsAndFillsDefaults) {
  const std::vector<OptionSpec> own = {Lang(), Disk()};
  const std::vector<OptionSpec> known = {Lang(), Disk(), UserNamespace()};
  auto o = ParseTierOptions("t", own, known, json::object());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o, json({{"lang", "python"}})) << "no default: disk_gib stays unset";
  o = ParseTierOptions("t", own, known, {{"lang", "bash"}, {"disk_gib", 8}, {"user_namespace", false}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(OptionString(*o, "lang"), "bash");
  EXPECT_EQ(OptionInt(*o, "disk_gib"), 8);
  EXPECT_FALSE(o->contains("user_namespace")) << "another tier's option at its neutral value is ignored";
  // Null is absent, for every option.
  o = ParseTierOptions("t", own, known, {{"lang", nullptr}, {"user_namespace", nullptr}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(OptionString(*o, "lang"), "python");
}

TEST(TierOptionsTest, ErrorsNameTheField) {
  const std::vector<OptionSpec> own = {Lang(), Disk()};
  const std::vector<OptionSpec> known = {Lang(), Disk(), UserNamespace()};
  struct Case {
    json fields;
    std::string field;
    std::string message;
  } cases[] = {
      {{{"lang", "cobol"}}, "lang", "lang must be one of python, bash"},
      {{{"lang", 3}}, "lang", "lang must be a string"},
      {{{"disk_gib", 0}}, "disk_gib", "disk_gib must be between 1 and 64"},
      {{{"disk_gib", 1.5}}, "disk_gib", "disk_gib must be an integer"},
      {{{"user_namespace", true}}, "user_namespace", "the t tier takes no user_namespace"},
      {{{"user_namespace", "yes"}}, "user_namespace", "the t tier takes no user_namespace"},
      {{{"bogus", 1}}, "bogus", "unknown field bogus"},
  };
  for (const Case& c : cases) {
    auto o = ParseTierOptions("t", own, known, c.fields);
    ASSERT_FALSE(o.ok()) << c.fields.dump();
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Field(o.status()), c.field) << c.fields.dump();
    EXPECT_EQ(o.status().message(), c.message) << c.fields.dump();
  }
  // An option without a neutral value is refused by other tiers whatever
  // its value, even one the owning tier takes.
  auto o = ParseTierOptions("container", {UserNamespace()}, known, {{"lang", "python"}});
  EXPECT_EQ(Field(o.status()), "lang");
  EXPECT_EQ(o.status().message(), "the container tier takes no lang");
  EXPECT_TRUE(ParseTierOptions("container", {UserNamespace()}, known, {{"user_namespace", "x"}})
                  .status()
                  .message()
                  .find("user_namespace must be true or false") != std::string::npos);
}

TEST(TierOptionsTest, AccessorsFallBackOnUnsetOrMistyped) {
  const TierOptions o = {{"lang", "bash"}, {"flag", true}, {"n", 3}};
  EXPECT_EQ(OptionString(o, "lang"), "bash");
  EXPECT_EQ(OptionString(o, "flag", "d"), "d");
  EXPECT_TRUE(OptionBool(o, "flag"));
  EXPECT_TRUE(OptionBool(o, "missing", true));
  EXPECT_EQ(OptionInt(o, "n"), 3);
  EXPECT_EQ(OptionInt(o, "lang", 7), 7);
  EXPECT_EQ(OptionString(TierOptions(), "lang", "x"), "x");
}

class NamedTier : public Tier {
 public:
  NamedTier(std::string name, std::vector<OptionSpec> options) {
    traits_.name = std::move(name);
    traits_.options = std::move(options);
  }
  const TierTraits& traits() const override { return traits_; }
  absl::StatusOr<std::unique_ptr<TierSandbox>> Create(const CreateSpec&) override {
    return absl::UnimplementedError("not here");
  }
  absl::StatusOr<int> CleanupOrphans() override { return 0; }

 private:
  TierTraits traits_;
};

TierRegistry TwoTiers() {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<NamedTier>("container", std::vector<OptionSpec>{UserNamespace()}));
  tiers.push_back(std::make_unique<NamedTier>("fncall", std::vector<OptionSpec>{Lang()}));
  return TierRegistry(std::move(tiers), {{"fullvm", "not built yet"}});
}

TEST(TierRegistryTest, FindsRegisteredTiersByTheirApiName) {
  TierRegistry r = TwoTiers();
  auto c = r.Find("container");
  auto f = r.Find("fncall");
  ASSERT_TRUE(c.ok() && f.ok());
  EXPECT_NE(*c, *f);
  EXPECT_EQ(r.name(*f), "fncall");
  EXPECT_EQ(r.tier(*c).name(), "container");
  ASSERT_EQ(r.ids().size(), 2u);
  EXPECT_EQ(r.ids()[0], *c) << "registration order";
  auto unknown = r.Find("gpu");
  EXPECT_EQ(Field(unknown.status()), "tier");
  EXPECT_EQ(unknown.status().message(), "tier must be one of container, fncall");
  auto fullvm = r.Find("fullvm");
  EXPECT_EQ(fullvm.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fullvm.status().message(), "the fullvm tier is not available on this node: not built yet");
}

TEST(TierRegistryTest, ParsesEachTiersOptionsAgainstAllOfThem) {
  TierRegistry r = TwoTiers();
  ASSERT_EQ(r.known_options().size(), 2u);
  const TierId c = *r.Find("container");
  const TierId f = *r.Find("fncall");
  EXPECT_EQ(*r.ParseOptions(c, {{"user_namespace", true}}), json({{"user_namespace", true}}));
  EXPECT_EQ(Field(r.ParseOptions(c, {{"lang", "bash"}}).status()), "lang");
  EXPECT_EQ(*r.ParseOptions(f, {{"user_namespace", false}}), json({{"lang", "python"}}));
  EXPECT_EQ(Field(r.ParseOptions(f, {{"user_namespace", true}}).status()), "user_namespace");
}

TEST(ShellOutcomeTest, CommandsThatCannotStartExitAsInAShell) {
  auto missing = ShellOutcomeOf(absl::NotFoundError("no such program: frob"));
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->exit_code, 127);
  EXPECT_EQ(missing->stderr_data, "dsec: no such program: frob\n");
  auto denied = ShellOutcomeOf(absl::PermissionDeniedError("not executable"));
  ASSERT_TRUE(denied.has_value());
  EXPECT_EQ(denied->exit_code, 126);
  EXPECT_FALSE(ShellOutcomeOf(absl::InternalError("fork: EAGAIN")).has_value());
}

TEST(NotBuiltTierTest, MakeAnswersUnavailableWithTheReason) {
  auto setup = NotBuiltTier("fullvm", "the full-VM tier is not built yet");
  EXPECT_EQ(setup->traits().name, "fullvm");
  auto t = setup->Make();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(t.status().message(), "the full-VM tier is not built yet");
}

}  // namespace
}  // namespace dsec::tier
