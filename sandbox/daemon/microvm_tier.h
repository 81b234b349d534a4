// SPDX-License-Identifier: Apache-2.0
// The microvm tier behind the daemon's Tier interface: one
// microvm::MicrovmSandbox per sandbox (a jailed dsec-vmm booting the guest
// kernel, dsec-agent as PID 1, reached over vsock). Exec, files and
// pack_diff go through the agent; pause/resume stop the vCPUs through the
// monitor's control socket. On a host where the guest kernel cannot run
// (CPL0 emulated, HOST.md; no kernel or root image) every create fails at
// once with Unavailable (HTTP 503) naming the reason, which Availability()
// also reports for GET /v1/health.
#pragma once

#include <memory>
#include <string>

#include "sandbox/daemon/tier.h"
#include "sandbox/microvm/launcher.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"

namespace dsec::daemon {

struct MicrovmTierOptions {
  std::string state_root = microvm::kDefaultStateRoot;
  microvm::MicrovmSandboxOptions sandbox;  // its state_root is set from state_root
  microvm::VmLauncherOptions vm;           // for the default (real) launcher
  // Tests: another launcher (microvm::HostAgentLauncher). Null: a
  // microvm::VmLauncher with `vm`.
  std::shared_ptr<microvm::Launcher> launcher;
};

class MicrovmTier : public Tier {
 public:
  explicit MicrovmTier(MicrovmTierOptions options);
  const TierTraits& traits() const override;
  absl::StatusOr<std::unique_ptr<TierSandbox>> Create(const CreateSpec& spec) override;
  absl::StatusOr<int> CleanupOrphans() override;
  // OK when creates can succeed on this host, else the Unavailable status
  // every create gets (runs the CPL0 probe once, then cached).
  absl::Status Availability() const override;

 private:
  MicrovmTierOptions options_;
  std::shared_ptr<microvm::Launcher> launcher_;
};

}  // namespace dsec::daemon
