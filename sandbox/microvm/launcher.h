// SPDX-License-Identifier: Apache-2.0
// The seam between the microvm sandbox's agent-facing logic and what hosts
// the agent. The real launcher (vm_launcher.h) boots a jailed microVM whose
// PID 1 is dsec-agent and reaches it through the monitor's vsock socket;
// the host-mode launcher of the tests (host_agent_launcher.h) runs the real
// dsec-agent binary as a host process on a unix socket. Everything above
// (MicrovmSandbox) is the same for both.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::microvm {

// A sandbox's network as the host process gets it: the host's tap (made
// and kept by the caller, sandbox/network), which the monitor inherits as
// its virtio-net backend, and what the guest's PID 1 configures on eth0
// (dsec.net).
struct LaunchNetwork {
  std::string tap_name;  // the host's interface ("ds<address>")
  int tap_fd = -1;
  std::string mac;           // the guest NIC's
  std::string address_cidr;  // "10.201.0.2/16"
  std::string gateway;       // "10.201.0.1": default route and resolver
};

struct LaunchSpec {
  std::string id;
  std::string state_dir;             // exists, owned by the sandbox
  std::vector<std::string> layers;   // EROFS images, lowest first
  uint64_t memory_mib = 512;
  double cpus = 0;
  uint64_t pids = 512;
  // Passed to the monitor (`--qos`, its own placement) unless `join` is set.
  std::string qos;
  uint32_t agent_port = 1024;
  // The daemon's QoS placement: called with the host process's pid before
  // it runs (sched::SandboxIsolation::AddProcess); null: none.
  std::function<absl::Status(pid_t)> join;
  // Records a cgroup directory in the state dir before it is made.
  std::function<absl::Status(const std::string&)> record_cgroup;
  std::optional<LaunchNetwork> network;
  // Machine snapshots (VmPlan): a directory the host may save the machine
  // into (AgentHost::SaveMachine), and a saved machine to continue from
  // instead of booting; "" = none. A launcher that cannot refuses
  // restore_dir with Unimplemented.
  std::string snapshot_dir;
  std::string restore_dir;
};

// What AgentHost::SaveMachine wrote.
struct MachineSaveInfo {
  uint64_t memory_bytes = 0;
  uint64_t memory_bytes_written = 0;
  double pause_ms = 0;
};

// One running agent host (a microVM or the stand-in). Destruction kills
// and reaps what is left and removes its cgroups.
// Threads: one owner thread.
class AgentHost {
 public:
  virtual ~AgentHost() = default;
  virtual pid_t pid() const = 0;
  // Readable once the host process has exited (a pidfd).
  virtual int exit_fd() const = 0;
  // One connection attempt to the agent: a stream socket positioned at the
  // protocol's start. Unavailable while the agent does not listen yet.
  virtual absl::StatusOr<ScopedFd> ConnectAgent(int64_t timeout_ms) = 0;
  // Why the host process stopped (wait status, log tail, console tail).
  virtual std::string ExitReport() = 0;
  // Stops / restarts every guest CPU (the stand-in: SIGSTOP / SIGCONT of
  // every process in its cgroup).
  virtual absl::Status Pause() = 0;
  virtual absl::Status Resume() = 0;
  // Saves the whole machine (memory, CPUs, devices) into `dest_dir`, an
  // empty directory on the file system of LaunchSpec::snapshot_dir, for
  // LaunchSpec::restore_dir. Default: Unimplemented (a host process has no
  // machine to save).
  virtual absl::StatusOr<MachineSaveInfo> SaveMachine(const std::string& dest_dir);
  // Waits up to grace_ms for the process to end on its own (after an agent
  // shutdown), then kills it; reaps; removes its cgroups. Idempotent.
  virtual absl::Status Stop(int64_t grace_ms) = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // OK when this host can run sandboxes, else Unavailable saying why and
  // what to do (implementations cache what is expensive to find out).
  virtual absl::Status CheckHost() = 0;
  virtual absl::StatusOr<std::unique_ptr<AgentHost>> Launch(const LaunchSpec& spec) = 0;
};

}  // namespace dsec::microvm
