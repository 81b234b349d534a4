// SPDX-License-Identifier: Apache-2.0
// The container tier behind the daemon's Tier interface (sandbox/tier):
// container::Sandbox for create/exec/destroy, the cgroup freezer (v1 freezer
// hierarchy, v2 cgroup.freeze) for pause/resume, openat2-confined file
// access through the merged root, and the upper directory for pack_diff.
// Its option: user_namespace. ContainerTierSetup is how the daemon
// registers it (its flags: --container-state-dir, --container-init-pool,
// --upper-mib).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/tier/setup.h"
#include "sandbox/tier/tier.h"

namespace dsec::bpf {
class DevicePolicy;
}

namespace dsec::container {

class InitPool;
class Sandbox;

// The cgroup v2 directory holding every process of a container sandbox,
// where its BPF programs attach: its own where the host is pure v2;
// elsewhere one made for it ("dsec-ctr-<id>" in the hybrid v2 tree,
// recorded in the state dir first so that a killed daemon's successor
// removes it; its path also in *made_cgroup for the caller to remove after
// the sandbox). Unavailable without a v2 hierarchy.
absl::StatusOr<std::string> SandboxCgroup2Dir(Sandbox& sandbox, std::string* made_cgroup);

// Gives a container sandbox its network after the fact (sandbox/network):
// the egress programs on `cgroup2_dir`, the veth into its namespace, and
// the node resolver in its /etc/resolv.conf. Unavailable where the policy
// cannot be enforced. (The tier makes its sandboxes' networks before them
// instead, where it can: SandboxNetwork::CreateAhead.)
absl::StatusOr<std::shared_ptr<network::SandboxNetwork>> AddSandboxNetwork(Sandbox& sandbox,
                                                                           const std::string& cgroup2_dir,
                                                                           network::NodeNetwork* node,
                                                                           const network::NetworkSpec& spec);
// The node resolver in the sandbox's /etc/resolv.conf (written with the
// sandbox's own ids).
absl::Status WriteResolvConf(Sandbox& sandbox, const network::SandboxNetwork& network);

struct ContainerTierOptions {
  std::string state_root;           // SandboxConfig::state_root
  uint64_t upper_size_bytes = 1ull << 30;
  // Made-ahead sandbox inits kept ready (init_pool.h); 0: every create
  // starts from scratch.
  size_t init_pool = 0;
};

// What the container tier accepts and defaults.
const tier::TierTraits& ContainerTierTraits();

class ContainerTier : public tier::Tier {
 public:
  explicit ContainerTier(ContainerTierOptions options);
  ~ContainerTier() override;
  const tier::TierTraits& traits() const override { return ContainerTierTraits(); }
  absl::StatusOr<std::unique_ptr<tier::TierSandbox>> Create(const tier::CreateSpec& spec) override;
  // Thaws freezer cgroups of orphans (a frozen process cannot die), then
  // container::CleanupOrphans.
  absl::StatusOr<int> CleanupOrphans() override;
  // Forgets the image's shared mount (layer_mounts.h: the cache is the
  // process's, so fncall pools' mounts of it go too).
  void LayerRemoved(const std::string& image) override;
  // Asks the init pool for `n` more made-ahead inits (InitPool::Expect),
  // where such creates take them: no QoS placement, no user namespace.
  void ExpectCreates(size_t n, const tier::TierOptions& options, const std::string& qos) override;
  // dsec_container_user_namespace_ranges: id ranges in use.
  std::string MetricsText() const override;
  // Made-ahead inits (tests, benchmarks): waits until `n` are ready (false
  // without a pool, or after `timeout_ms`), and how many creates took one.
  bool WaitInitsReady(size_t n, int64_t timeout_ms) const;
  uint64_t inits_taken() const;

  // Host id ranges of user-namespace sandboxes: 65536 ids each, from
  // kFirstHostId, one per live sandbox, so that no two sandboxes share an
  // id on the host.
  static constexpr uint32_t kFirstHostId = 0x10000000u;
  static constexpr uint32_t kRangeIds = 65536;
  static constexpr uint32_t kMaxRanges = 4096;

 private:
  // A free range's first host id (ResourceExhausted when all are taken);
  // the returned holder gives it back.
  absl::StatusOr<std::shared_ptr<uint32_t>> TakeRange();

  ContainerTierOptions options_;
  // Every sandbox's device policy, loaded once; null (with why) where the
  // kernel refuses it. Shared with the sandboxes attached to it.
  std::shared_ptr<const bpf::DevicePolicy> devices_;
  absl::Status devices_status_;
  // Shared with its sandboxes, which tell it when they are destroyed.
  std::shared_ptr<InitPool> pool_;
  std::shared_ptr<std::mutex> ranges_mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::set<uint32_t>> ranges_ = std::make_shared<std::set<uint32_t>>();  // by ranges_mu_
};

// The daemon's registration of the tier: its flags fill the options; Make
// prepares the state root (a tmpfs where it is the default one).
class ContainerTierSetup : public tier::TierSetup {
 public:
  ContainerTierSetup();
  const tier::TierTraits& traits() const override { return ContainerTierTraits(); }
  void AddFlags(CLI::App& app) override;
  absl::StatusOr<std::unique_ptr<tier::Tier>> Make() override;

 private:
  ContainerTierOptions options_;
  uint64_t upper_mib_ = 1024;
};

// Freezer cgroup name of a sandbox (v1 hierarchy or hybrid v2).
std::string FreezerCgroupName(const std::string& sandbox_id);

}  // namespace dsec::container
