// SPDX-License-Identifier: Apache-2.0
// The node's tier registrations: every tier of the API, each with its own
// flags; MakeTiers turns a setup that cannot offer its tier into an
// unavailable one (503) and any other failure into a start-up error.
#include "sandbox/daemon/node_tiers.h"

#include <map>
#include <string>

#include "CLI/CLI.hpp"
#include "gtest/gtest.h"
#include "sandbox/daemon/daemon.h"

namespace dsec::daemon {
namespace {

TEST(NodeTiersTest, RegistersEveryTierOfTheApiWithItsFlags) {
  std::vector<std::unique_ptr<tier::TierSetup>> tiers = NodeTiers();
  std::vector<std::string> names;
  for (const auto& t : tiers) names.push_back(t->traits().name);
  EXPECT_EQ(names, (std::vector<std::string>{"container", "fncall", "microvm", "fullvm"}));
  CLI::App app;
  for (const auto& t : tiers) t->AddFlags(app);
  for (const char* flag : {"--container-state-dir", "--container-init-pool", "--upper-mib", "--fncall-state-dir",
                           "--fncall-max-workers", "--fncall-warm-pools", "--microvm-state-dir",
                           "--microvm-kernel", "--microvm-rootfs"}) {
    EXPECT_NE(app.get_option_no_throw(flag), nullptr) << flag;
  }
  // fullvm is known, not built: its registration says so.
  auto fullvm = tiers.back()->Make();
  EXPECT_EQ(fullvm.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fullvm.status().message(), "the full-VM tier (libvirt/QEMU) is not built yet");
}

class FailingSetup : public tier::TierSetup {
 public:
  FailingSetup() { traits_.name = "broken"; }
  const tier::TierTraits& traits() const override { return traits_; }
  void AddFlags(CLI::App&) override {}
  absl::StatusOr<std::unique_ptr<tier::Tier>> Make() override { return absl::InternalError("mkdir: EIO"); }

 private:
  tier::TierTraits traits_;
};

TEST(NodeTiersTest, MakeTiersListsUnavailableTiersAndStopsOnOtherErrors) {
  std::vector<std::unique_ptr<tier::TierSetup>> setups;
  setups.push_back(tier::NotBuiltTier("fullvm", "not built yet"));
  std::map<std::string, std::string> unavailable;
  auto tiers = MakeTiers(setups, &unavailable);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_TRUE(tiers->empty());
  EXPECT_EQ(unavailable, (std::map<std::string, std::string>{{"fullvm", "not built yet"}}));

  setups.push_back(std::make_unique<FailingSetup>());
  auto failed = MakeTiers(setups, &unavailable);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(failed.status().message(), "the broken tier: mkdir: EIO");
}

}  // namespace
}  // namespace dsec::daemon
