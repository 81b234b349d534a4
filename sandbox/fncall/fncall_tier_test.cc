// SPDX-License-Identifier: Apache-2.0
// FncallTier keeps pools warm between sandboxes of one configuration, and
// bounds how many unused pools it keeps (real pools: namespaces, mounts,
// zygotes; label integration).
#include "sandbox/fncall/fncall_tier.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sandbox/fncall/fncall_testing.h"

namespace dsec::fncall {
namespace {

class FncallTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto layers = testing::EnsureTestLayers();
    if (!layers.ok()) GTEST_SKIP() << "no fncall test layers: " << layers.status();
    image_ = layers->runtime;
    char tmpl[] = "/tmp/dsec-fncall-tier-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  std::unique_ptr<FncallTier> Tier(int max_unused) {
    FncallTierOptions o;
    o.state_root = root_;
    o.max_workers_per_pool = 1;
    o.max_unused_pools = max_unused;
    return std::make_unique<FncallTier>(o);
  }
  tier::CreateSpec Spec(uint64_t memory_mib) {
    tier::CreateSpec s;
    s.images = {image_};
    s.options = {{"lang", "bash"}};
    s.memory_mib = memory_mib;
    s.pids = 64;
    return s;
  }
  std::string Run(tier::TierSandbox& sb) {
    tier::ExecSpec e;
    e.code = "echo $((6*7))";
    auto out = sb.Exec(e);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->stdout_data : "";
  }

  std::string image_;
  std::string root_;
};

TEST_F(FncallTierTest, PoolOutlivesItsLastSandboxAndServesTheNext) {
  auto tier = Tier(4);
  auto a = tier->Create(Spec(128));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Run(**a), "42\n");
  ASSERT_TRUE((*a)->Destroy().ok());
  EXPECT_EQ(tier->pools(), 1) << "the unused pool is kept warm";
  auto b = tier->Create(Spec(128));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(tier->pools(), 1) << "same configuration, same pool";
  EXPECT_EQ(Run(**b), "42\n");
  ASSERT_TRUE((*b)->Destroy().ok());
}

TEST_F(FncallTierTest, UnusedPoolsBeyondTheLimitAreDestroyedOldestFirst) {
  auto tier = Tier(1);
  auto a = tier->Create(Spec(128));
  auto b = tier->Create(Spec(192));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(tier->pools(), 2);
  ASSERT_TRUE((*a)->Destroy().ok());
  EXPECT_EQ(tier->pools(), 2);  // one unused: within the limit
  ASSERT_TRUE((*b)->Destroy().ok());
  EXPECT_EQ(tier->pools(), 1);  // two unused: the older (128 MiB) went
  auto c = tier->Create(Spec(192));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(tier->pools(), 1) << "the 192 MiB pool was the one kept";
  ASSERT_TRUE((*c)->Destroy().ok());
  auto none = Tier(0);
  auto d = none->Create(Spec(128));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->Destroy().ok());
  EXPECT_EQ(none->pools(), 0) << "max_unused_pools 0 destroys at once";
}

}  // namespace
}  // namespace dsec::fncall
