// SPDX-License-Identifier: Apache-2.0
// One jailed dsec-monitor per microVM sandbox: the plan (its config file),
// the jail (own cgroups, mount/ipc/uts/net/pid namespaces, a minimal
// pivot_root'ed filesystem view, no capabilities, no_new_privs, a parent-
// death signal, a clean environment, output to a log file), and the
// control socket (stats, pause, resume). README.md says what the jail does
// and does not narrow.
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
#include "nlohmann/json.hpp"
#include "sandbox/container/cgroups.h"
#include "sandbox/microvm/jail.h"
#include "vmm/monitor/monitor_options.h"

namespace dsec::microvm {

// What the monitor boots. Paths are host paths.
struct VmPlan {
  std::string monitor_binary;  // dsec-monitor (static, or the jail binds /usr for its libraries)
  std::string kernel;
  std::string cmdline;
  // virtio-pmem images, all read-only, in device order (/dev/pmem0 first).
  std::vector<std::string> pmems;
  uint32_t vsock_cid = 3;
  bool vsock = true;
  bool balloon = true;
  uint64_t mem_mib = 256;
  uint32_t vcpus = 1;
  std::string qos;  // "", "ls" or "be"
  uint64_t console_cap_bytes = 1u << 20;
  std::string log_level = "warn";
  uint64_t timeout_ms = 0;  // the monitor stops the VM after this long (0: never)
  // The uid and gid (the same number) the monitor drops to once the VM is
  // built (vmm/jail); none: it stays uid 0 without capabilities. Not with
  // qos (cgroup placement is root's work).
  std::optional<uint32_t> uid;
  // A virtio-net device on this tap descriptor of the caller's, which the
  // monitor inherits at the same number (devices/net tap_fd); -1: none.
  int tap_fd = -1;
  std::string mac;  // the guest's; "" = derived from the tap's name
  // Machine snapshots (vmm/snapshot). snapshot_dir: an empty host
  // directory the monitor writes a snapshot into on the control socket's
  // "snapshot" (bound read-write into the jail, handed to the monitor's
  // uid); "" = snapshots off. restore_dir: a snapshot (VmProcess::
  // SaveMachine's dest_dir) the VM continues from instead of booting
  // `kernel` (bound read-only; the pmems and devices must be the saved
  // VM's); "" = boot.
  std::string snapshot_dir;
  std::string restore_dir;
  // The test guest's messages ("testguest: ...") into the log (tests).
  bool guest_messages = false;
};

// What VmProcess::SaveMachine wrote.
struct MachineSave {
  uint64_t memory_bytes = 0;          // guest RAM
  uint64_t memory_bytes_written = 0;  // data in the sparse memory file
  double pause_ms = 0;                // the VM stood still this long
};

// The kernel command line of a Linux guest with the dsec-agent as PID 1:
// "console=ttyS0 root=/dev/pmem0 rootfstype=erofs ro dsec.layers=/dev/pmem1,...
//  dsec.upper=tmpfs:<MiB> dsec.port=<port> <extra>" (pmem0 is the root image,
// pmem1.. the layers, lowest first; no dsec.layers without layers).
std::string LinuxCmdline(size_t layer_count, uint64_t upper_mib, uint32_t agent_port,
                         const std::string& extra = "");

// Files of one monitor inside its state directory.
struct VmFiles {
  std::string dir;            // <state>/vm: bound read-write into the jail (same path)
  std::string vsock_socket;   // <state>/vm/vsock.sock
  std::string control_socket; // <state>/vm/control.sock
  std::string console;        // <state>/vm/console.log
  std::string stats_json;     // <state>/vm/stats.json (written at exit)
  std::string config;         // <state>/vm/config.json (the monitor's --config)
  std::string log;            // <state>/vmm.log (stdout+stderr, outside the jail)
  std::string jail_root;      // <state>/jail (a tmpfs there, in the child's namespace only)
};
VmFiles VmFilesIn(const std::string& state_dir);

// The monitor's configuration for a plan (written to files.config), and
// its argv: `dsec-monitor --config <state>/vm/config.json`.
monitor::MonitorOptions VmMonitorOptions(const VmPlan& plan, const VmFiles& files);
std::vector<std::string> VmArgv(const VmPlan& plan, const VmFiles& files);

struct VmJailOptions {
  std::string id;          // names the cgroups (dsec-ctr-mvm-<id>)
  std::string state_dir;   // an existing directory the process's files go to
  // Memory limit = guest RAM + this allowance for the monitor itself (its
  // text, heap, device buffers, page tables, the layers' page cache it
  // touches).
  uint64_t overhead_mib = 96;
  double cpus = 0;         // CPU quota in CPUs (0: none)
  uint64_t pids = 64;      // the monitor's threads: API, event loop, vCPUs, control
  // pivot_root into a minimal root (off: the host's filesystem view, for
  // debugging; the namespaces, cgroups and privileges stay).
  bool pivot_root = true;
  // Called with each cgroup directory before it is made (state records).
  std::function<absl::Status(const std::string&)> record_cgroup;
  // Called with the monitor's pid before it runs (the daemon's QoS
  // placement); with it, the cpu controller is left to the placement.
  std::function<absl::Status(pid_t)> join;
};

// The jail's mount steps for `plan` (exposed for tests and the README).
std::vector<MountStep> VmJailSteps(const VmPlan& plan, const VmFiles& files, bool dynamic_binary);
// Whether an ELF file asks for an interpreter (a dynamically linked binary).
absl::StatusOr<bool> IsDynamicElf(const std::string& path);

// One running monitor. Destruction kills and reaps it and removes its
// cgroups (the files stay, for the caller to read or remove).
// Threads: one owner thread; Control() may be called from any thread.
class VmProcess {
 public:
  static absl::StatusOr<std::unique_ptr<VmProcess>> Start(const VmPlan& plan,
                                                          const VmJailOptions& jail);
  ~VmProcess();

  pid_t pid() const { return process_->pid(); }
  int exit_fd() const { return process_->exit_fd(); }
  bool Exited() const { return process_->Exited(); }
  const VmFiles& files() const { return files_; }
  const container::ContainerCgroups& cgroups() const { return *cgroups_; }
  JailedProcess& process() { return *process_; }

  // One request on the control socket (cmd/README.md): the answer object.
  // An answer with "ok": false is an error carrying its code and message.
  absl::StatusOr<nlohmann::json> Control(const nlohmann::json& request, int64_t timeout_ms = 5000) const;
  // Waits until the control socket answers `stats` (the VM runs), the
  // process exits (the error holds ExitReport()) or the deadline passes.
  absl::Status WaitRunning(int64_t timeout_ms);
  absl::Status Pause();
  absl::Status Resume();
  // The monitor writes a snapshot into the plan's snapshot_dir (the VM
  // paused meanwhile, then as it was), which is then moved into
  // `dest_dir` (an existing empty directory on the same file system),
  // owned by root and read-only, for VmPlan::restore_dir of other
  // monitors. FailedPrecondition without a snapshot_dir; a failure leaves
  // snapshot_dir empty.
  absl::StatusOr<MachineSave> SaveMachine(const std::string& dest_dir, int64_t timeout_ms);

  // Why the monitor is gone: its wait status, the tail of its log, its
  // stats JSON. Reaps it first if it has exited.
  std::string ExitReport();
  // SIGTERM (a clean stop writes the stats JSON and removes the sockets),
  // up to grace_ms, then SIGKILL; reaps; removes the cgroups. Idempotent.
  absl::Status Stop(int64_t grace_ms);

 private:
  VmProcess(VmFiles files, std::string snapshot_dir, std::unique_ptr<container::ContainerCgroups> cgroups,
            std::unique_ptr<JailedProcess> process)
      : files_(std::move(files)),
        snapshot_dir_(std::move(snapshot_dir)),
        cgroups_(std::move(cgroups)),
        process_(std::move(process)) {}

  VmFiles files_;
  const std::string snapshot_dir_;
  std::unique_ptr<container::ContainerCgroups> cgroups_;
  std::unique_ptr<JailedProcess> process_;
  bool stopped_ = false;
};

}  // namespace dsec::microvm
