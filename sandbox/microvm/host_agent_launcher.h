// SPDX-License-Identifier: Apache-2.0
// The tests' launcher: the real dsec-agent binary in host mode
// (`dsec-agent --listen-unix <state>/agent.sock --root <state>/root
// --upper <state>/upper/upper`) as the stand-in for a microVM. Like the
// guest's PID 1 it stacks the sandbox's EROFS layers (file-backed mounts)
// under an overlay with the same options (agent::OverlayOptions), in its
// own mount namespace, so every mount dies with it; it runs in its own
// cgroups. Its execs are not chrooted (host mode runs them on the host's
// filesystem with the overlay as cwd); file operations and pack_diff are
// confined to the overlay exactly as in the guest.
//
// Pause/Resume: SIGSTOP/SIGCONT of every process in its cgroup (the real
// launcher stops the vCPUs through the monitor's control socket).
#pragma once

#include <memory>
#include <string>

#include "sandbox/microvm/launcher.h"

namespace dsec::microvm {

struct HostAgentLauncherOptions {
  std::string agent_binary;  // dsec-agent
};

class HostAgentLauncher : public Launcher {
 public:
  explicit HostAgentLauncher(HostAgentLauncherOptions options) : options_(std::move(options)) {}
  absl::Status CheckHost() override;
  absl::StatusOr<std::unique_ptr<AgentHost>> Launch(const LaunchSpec& spec) override;

 private:
  HostAgentLauncherOptions options_;
};

}  // namespace dsec::microvm
