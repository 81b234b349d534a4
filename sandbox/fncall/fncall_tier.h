// SPDX-License-Identifier: Apache-2.0
// The fncall tier behind the daemon's Tier interface (sandbox/tier): one
// Pool per configuration (layers, language, memory, pids), shared by every
// sandbox of that configuration and kept warm after the last of them. An
// exec is a call; files, pause/resume and pack_diff are FailedPrecondition
// (a call keeps no state between calls). Its option: lang (python | bash).
// FncallTierSetup is how the daemon registers it (its flags:
// --fncall-state-dir, --fncall-max-workers, --fncall-warm-pools).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "sandbox/tier/setup.h"
#include "sandbox/tier/tier.h"

namespace dsec::fncall {

class Pool;

struct FncallTierOptions {
  std::string state_root;  // PoolConfig::state_root
  int max_workers_per_pool = 8;
  int min_idle = 1;
  // Pools no sandbox uses any more stay warm (their workers ready) so that
  // the next sandbox of that configuration skips the pool start (~75 ms:
  // mounts and a zygote); beyond this many, the one unused longest goes.
  int max_unused_pools = 4;
};

// What the fncall tier accepts and defaults.
const tier::TierTraits& FncallTierTraits();

class FncallTier : public tier::Tier {
 public:
  explicit FncallTier(FncallTierOptions options) : options_(std::move(options)) {}
  ~FncallTier() override;
  const tier::TierTraits& traits() const override { return FncallTierTraits(); }
  absl::StatusOr<std::unique_ptr<tier::TierSandbox>> Create(const tier::CreateSpec& spec) override;
  absl::StatusOr<int> CleanupOrphans() override;
  // dsec_fncall_pools{state="in_use|warm"}.
  std::string MetricsText() const override;
  int pools() const;

  // A pool and the sandboxes using it.
  struct Shared {
    std::string key;
    std::unique_ptr<Pool> pool;
    int users = 0;
    uint64_t released = 0;  // when users last dropped to 0 (tier sequence)
    bool own = false;       // one placed sandbox's pool: destroyed with it
  };
  void Release(const std::string& key);

 private:
  FncallTierOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Shared>> pools_ ABSL_GUARDED_BY(mu_);
  uint64_t release_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

// The daemon's registration of the tier: its flags fill the options; Make
// makes the state root.
class FncallTierSetup : public tier::TierSetup {
 public:
  FncallTierSetup();
  const tier::TierTraits& traits() const override { return FncallTierTraits(); }
  void AddFlags(CLI::App& app) override;
  absl::StatusOr<std::unique_ptr<tier::Tier>> Make() override;

 private:
  FncallTierOptions options_;
};

}  // namespace dsec::fncall
