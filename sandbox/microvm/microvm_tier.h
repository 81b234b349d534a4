// SPDX-License-Identifier: Apache-2.0
// The microvm tier behind the daemon's Tier interface (sandbox/tier): one
// MicrovmSandbox per sandbox (a jailed dsec-vmm booting the guest
// kernel, dsec-agent as PID 1, reached over vsock), with a network when
// asked (sandbox/network: a tap with the tap filter, made here and handed
// to the monitor; closed once the monitor is gone). Exec, files and
// pack_diff go through the agent; pause/resume stop the vCPUs through the
// monitor's control socket. On a host where the guest kernel cannot run
// (CPL0 emulated, HOST.md; no kernel or root image) every create fails at
// once with Unavailable (HTTP 503) naming the reason, which Availability()
// also reports for GET /v1/health. MicrovmTierSetup is how the daemon
// registers it (its flags: --microvm-state-dir, --microvm-kernel,
// --microvm-rootfs).
#pragma once

#include <memory>
#include <string>

#include "sandbox/microvm/launcher.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"
#include "sandbox/tier/setup.h"
#include "sandbox/tier/tier.h"

namespace dsec::microvm {

struct MicrovmTierOptions {
  std::string state_root = kDefaultStateRoot;
  MicrovmSandboxOptions sandbox;  // its state_root is set from state_root
  VmLauncherOptions vm;           // for the default (real) launcher
  // Tests: another launcher (HostAgentLauncher). Null: a VmLauncher with
  // `vm`.
  std::shared_ptr<Launcher> launcher;
};

// Orphan cleanup's tap removal (CleanupOrphans' remove_tap): deletes the
// interface; OK if it is gone already.
absl::Status RemoveOrphanTap(const std::string& tap);

// What the microvm tier accepts and defaults.
const tier::TierTraits& MicrovmTierTraits();

class MicrovmTier : public tier::Tier {
 public:
  explicit MicrovmTier(MicrovmTierOptions options);
  const tier::TierTraits& traits() const override { return MicrovmTierTraits(); }
  absl::StatusOr<std::unique_ptr<tier::TierSandbox>> Create(const tier::CreateSpec& spec) override;
  absl::StatusOr<int> CleanupOrphans() override;
  // OK when creates can succeed on this host, else the Unavailable status
  // every create gets (runs the CPL0 probe once, then cached).
  absl::Status Availability() const override;

 private:
  MicrovmTierOptions options_;
  std::shared_ptr<Launcher> launcher_;
};

// The daemon's registration of the tier: its flags fill the options.
class MicrovmTierSetup : public tier::TierSetup {
 public:
  const tier::TierTraits& traits() const override { return MicrovmTierTraits(); }
  void AddFlags(CLI::App& app) override;
  absl::StatusOr<std::unique_ptr<tier::Tier>> Make() override;

 private:
  std::string state_root_;  // "" = kDefaultStateRoot
  std::string kernel_;
  std::string rootfs_;
};

}  // namespace dsec::microvm
