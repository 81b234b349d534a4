// SPDX-License-Identifier: Apache-2.0
// One microVM sandbox: a state directory, an agent host from a Launcher
// (a jailed microVM, or the host-mode stand-in of the tests) and one agent
// client connection. Create waits for the agent's HELLO until a boot
// deadline, waiting on the host process's pidfd between attempts, so a VM
// that dies fails the create at once with its log and console.
//
// With a network: a tap the caller made (the tier, with sandbox/network)
// in the host's namespace and keeps until the sandbox is destroyed, which
// the monitor inherits as its NIC's backend; the guest configures eth0
// from the kernel command line (dsec.net).
//
// State directory <root>/<id>/ (container::StateDir): "owner" (the daemon),
// "init" (the VM process, "<pid> <starttime>"), "cgroups", "tap" (the host
// interface of its network, written before a monitor holds it), the monitor's
// files (vm_process.h) and "diff-<n>" (the last pack_diff). CleanupOrphans
// removes sandboxes whose owner is dead, and their taps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/dir_watch.h"
#include "base/exec_control.h"
#include "guest-kernel/agent/client.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/microvm/launcher.h"

namespace dsec::microvm {

inline constexpr char kDefaultStateRoot[] = "/run/dsec-vmm/microvm";

struct MicrovmSandboxOptions {
  std::string state_root = kDefaultStateRoot;
  // From launch to the agent's HELLO.
  int64_t boot_timeout_ms = 30'000;
  uint32_t agent_port = 1024;
  // io_timeout_ms also bounds Destroy's agent shutdown.
  agent::ClientOptions client = {10'000, 30'000, 24ll * 3600 * 1000};
};

struct MicrovmSpec {
  std::string id;
  std::vector<std::string> layers;  // EROFS images, lowest first (uncompressed)
  uint64_t memory_mib = 512;
  double cpus = 0;
  uint64_t pids = 512;
  std::string qos;
  // The daemon's QoS placement (LaunchSpec::join) and the cgroups it owns,
  // recorded in the state dir so that orphan cleanup removes them too.
  std::function<absl::Status(pid_t)> join;
  std::vector<std::string> placement_cgroups;
  // Its network: the caller's tap, kept open by the caller until Destroy
  // returned.
  std::optional<LaunchNetwork> network;
  // Machine snapshots (LaunchSpec): where SaveMachine may write ("" =
  // nowhere: it is refused), and a saved machine to continue from instead
  // of booting (with the saved sandbox's layers). With both a network and
  // a machine, the restored guest's eth0 is re-addressed to this network
  // through the agent (it held the saved sandbox's address) before Create
  // returns.
  std::string machine_staging;
  std::string machine;
};

// InvalidArgument for a layer the guest cannot map with DAX (compressed
// EROFS), naming the layer and how to rebuild it.
absl::Status CheckDaxLayers(const std::vector<std::string>& layers);

// Threads: one caller at a time (the daemon serialises calls per
// sandbox), except Exec, which may run on several threads at once (each on
// a connection of its own), beside each other and beside Pause, Resume,
// SaveMachine, PackDiffDir and the file calls (which use the sandbox's
// own connection), and KillExecs, from any thread. Destroy comes alone.
class MicrovmSandbox {
 public:
  static absl::StatusOr<std::unique_ptr<MicrovmSandbox>> Create(Launcher& launcher,
                                                                const MicrovmSpec& spec,
                                                                const MicrovmSandboxOptions& options);
  ~MicrovmSandbox();
  MicrovmSandbox(const MicrovmSandbox&) = delete;
  MicrovmSandbox& operator=(const MicrovmSandbox&) = delete;

  const std::string& id() const { return id_; }
  const std::string& state_dir() const { return state_.path(); }
  AgentHost& host() { return *host_; }
  // Launch to the agent's HELLO.
  double boot_ms() const { return boot_ms_; }
  bool paused() const { return paused_; }

  // With `control`: stdin streamed after the start (request.stdin must be
  // set when control->stdin_open()) and signals to the command, taken from
  // the control between the agent's frames (every 25 ms at the latest).
  // `on_started`, if set, runs once the exec's connection is listed (a
  // KillExecs from then on reaches it).
  absl::StatusOr<agent::ExecDone> Exec(const agent::ExecRequest& request,
                                       const agent::OutputCallback& on_chunk,
                                       std::string_view stdin_data = {},
                                       ExecControl* control = nullptr,
                                       const std::function<void()>& on_started = nullptr);
  // Any thread: ends every running exec (their connections are cut; the
  // agent kills each one's command tree). True.
  bool KillExecs();
  absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes,
                                       agent::FileReadDone* info = nullptr);
  absl::Status WriteFile(const std::string& path, std::string_view data, uint32_t mode);
  absl::StatusOr<std::vector<agent::DirEntry>> ListDir(const std::string& path);
  // A watch on the guest's directory `path` (the agent's WATCH, inotify in
  // the guest) on an agent connection of its own, which the watch holds:
  // it lasts beside everything else (a pause merely stills it) until
  // closed, the directory goes or the guest does. Errors as ListDir's, and
  // ResourceExhausted beyond max_dirs directories.
  absl::StatusOr<std::unique_ptr<DirWatch>> WatchDir(const std::string& path, bool recursive, size_t max_dirs);
  absl::Status Pause();
  absl::Status Resume();
  // Streams the guest's upper directory (PACK_DIFF) into a fresh directory
  // under the state dir (the previous one is removed) and returns it: an
  // overlay upper directory (whiteouts, opaque dirs) for layers::PackDiff.
  // A paused sandbox is resumed for the copy and paused again.
  absl::StatusOr<std::string> PackDiffDir();
  // The whole machine (AgentHost::SaveMachine) into `dest_dir`: the guest
  // stands still meanwhile, then runs on. FailedPrecondition for one
  // created without a staging directory. A network's device is saved
  // (virtio-net: its MAC and MTU), its connections are not: a machine
  // restored elsewhere gets that sandbox's tap and address.
  absl::StatusOr<MachineSaveInfo> SaveMachine(const std::string& dest_dir);
  // Agent shutdown (bounded by the client's io timeout), then the host is
  // killed, its cgroups and the state directory removed. Idempotent.
  absl::Status Destroy();

  // Tests: forgets the sandbox without cleaning anything up, as a killed
  // daemon would (its process, cgroups and state stay for CleanupOrphans).
  static void AbandonForTesting(std::unique_ptr<MicrovmSandbox> sandbox);

 private:
  MicrovmSandbox(std::string id, container::StateDir state, MicrovmSandboxOptions options)
      : id_(std::move(id)), state_(std::move(state)), options_(WithExecClock(std::move(options), &exec_clock_)) {}
  static MicrovmSandboxOptions WithExecClock(MicrovmSandboxOptions o, const Clock* clock) {
    o.client.exec_clock = clock;
    return o;
  }
  absl::Status ConnectUntilBooted();
  // CLOCK: the guest's wall clock to the host's, through the sandbox's own
  // connection; false (and nothing sent) for an agent without "clock".
  absl::StatusOr<bool> SetGuestWallClock();

  // A new agent connection (Unavailable at once when the VM has stopped).
  absl::StatusOr<std::unique_ptr<agent::Client>> ConnectClient();
  // The client, reconnected once if the last call broke it.
  absl::StatusOr<agent::Client*> Agent();
  absl::Status Usable() const;
  // A connection of its own for one exec (an idle one, else a new one),
  // listed as running until handed back; the agent serves each connection
  // on a thread of its own, so execs overlap.
  absl::StatusOr<std::unique_ptr<agent::Client>> TakeExecClient();
  void GiveBackExecClient(std::unique_ptr<agent::Client> c);
  absl::StatusOr<agent::ExecDone> RunExec(agent::Client* c, const agent::ExecRequest& request,
                                          const agent::OutputCallback& on_chunk, std::string_view stdin_data,
                                          ExecControl* control);

  const std::string id_;
  container::StateDir state_;
  // Stands still while the sandbox is paused, as the guest's clock does
  // (Vm::Pause): the host's bound on each exec (ClientOptions::exec_clock).
  PausableClock exec_clock_;
  const MicrovmSandboxOptions options_;
  std::unique_ptr<AgentHost> host_;
  // The sandbox's own connection: create, the file calls, pack_diff's
  // stream, destroy; those that may come beside each other hold agent_mu_.
  std::unique_ptr<agent::Client> client_;
  std::mutex agent_mu_;
  // Exec connections: idle ones kept for the next exec, and those of the
  // execs running now (KillExecs interrupts them).
  std::mutex exec_mu_;
  std::vector<std::unique_ptr<agent::Client>> idle_exec_ ABSL_GUARDED_BY(exec_mu_);
  std::set<agent::Client*> running_exec_ ABSL_GUARDED_BY(exec_mu_);
  std::set<agent::Client*> interrupted_ ABSL_GUARDED_BY(exec_mu_);  // by KillExecs
  std::string diff_dir_;
  int diff_seq_ = 0;
  double boot_ms_ = 0;
  // Read by execs on other threads (Exec runs beside Pause and Resume).
  std::atomic<bool> paused_{false};
  std::atomic<bool> destroyed_{false};
  std::string staging_;  // MicrovmSpec::machine_staging, removed with the sandbox
};

// Removes every sandbox under `state_root` whose owner process is gone:
// container::CleanupOrphans, killing the recorded VM process only if that
// pid is still that process and its command line names the state dir, and
// removing its cgroups with any below them; then `remove_tap` with the
// name of the tap it recorded, if any (its monitor is dead, so normally
// the tap went with its last descriptor). Returns how many were removed.
absl::StatusOr<int> CleanupOrphans(
    const std::string& state_root = kDefaultStateRoot,
    const std::function<absl::Status(const std::string& tap)>& remove_tap = {});

}  // namespace dsec::microvm
