// SPDX-License-Identifier: Apache-2.0
// The container tier: a sandbox whose root is an overlay of read-only EROFS
// layers and a private size-limited upper, with its own mount, pid, uts,
// ipc, net and cgroup namespaces, cgroup limits, dropped capabilities,
// no_new_privs and the default seccomp profile.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/exec.h"
#include "sandbox/container/init_protocol.h"
#include "sandbox/container/layer_mounts.h"
#include "sandbox/container/mount.h"
#include "sandbox/container/mount_holder.h"
#include "sandbox/container/seccomp_policy.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/container/userns.h"
#include "base/scoped_fd.h"

namespace dsec::sched {
class SandboxIsolation;
}

namespace dsec::container {

class InitPool;
struct InitSlot;

struct SandboxConfig {
  std::string id;                   // [A-Za-z0-9_.-]{1,64}, unique under state_root
  std::vector<std::string> layers;  // EROFS image files, lowest first
  ResourceLimits limits;
  uint64_t upper_size_bytes = 1ull << 30;  // tmpfs size of the writable layer
  std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "HOME=/root", "TERM=dumb"};
  std::string hostname = "sandbox";
  std::string state_root = kDefaultStateRoot;
  uint64_t nofile = 1024;  // RLIMIT_NOFILE of exec'd processes (core is always 0)
  // Optional QoS placement from sched/ (cpuset + cpu weight cgroup). When
  // set, it owns the cpu controller and the sandbox does not make its own.
  std::shared_ptr<const sched::SandboxIsolation> isolation;
  // Where the layer images are mounted (layer_mounts.h); nullptr: the
  // process-wide LayerMountCache::Default(). Must outlive the sandbox.
  LayerMountCache* layer_cache = nullptr;
  // The sandbox init binary (init_launch.h); "" = FindSandboxInit's default.
  std::string init_binary;
  // Optional (init_pool.h): take a made-ahead init from here when this
  // sandbox can use one (same state_root, no isolation, no user namespace).
  // Must outlive the sandbox (its destroy tells the pool).
  InitPool* init_pool = nullptr;
  // Optional user namespace (userns.h): root inside is `host_uid` outside,
  // files keep the ids the sandbox sees on disk (idmapped layers). Its
  // processes then hold their capabilities only over what the namespace
  // owns. Always a fresh network namespace (the pool's belong to the host).
  std::optional<UserNamespaceMap> user_namespace;
  // Optional: a network namespace for the sandbox's init to join instead
  // of a fresh one (a networked sandbox's, made and wired before it:
  // sandbox/network's SandboxNetwork::CreateAhead). The sandbox keeps a
  // copy for its inits (Reset) until it is destroyed. Not with
  // user_namespace.
  int netns_fd = -1;
};

// One container sandbox. Network: its own empty net namespace (lo only).
// The sandbox's PID 1 is a clone of the runtime that starts the exec
// processes and reaps every process (init_process.h).
// Threads: Execs may run on several threads at once (each blocks its
// thread for its command); every other method one at a time, never
// alongside an Exec.
class Sandbox {
 public:
  // Errors: InvalidArgument (bad id, no layers), NotFound (a layer file),
  // AlreadyExists (id in use under state_root), Unavailable (no cgroup
  // controllers, no sandbox init binary), Internal (syscalls, with the step
  // that failed).
  static absl::StatusOr<std::unique_ptr<Sandbox>> Create(SandboxConfig config);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Several may run at once (from different threads), up to
  // kMaxConcurrentExecs; not while Reset or Destroy runs.
  absl::StatusOr<ExecResult> Exec(const ExecOptions& options);
  // The commands' clock (their timeouts and durations): the tier pauses it
  // with the sandbox's freeze, so that a paused sandbox's commands do not
  // time out meanwhile.
  PausableClock& exec_clock() { return exec_clock_; }
  // Kills every process, drops the upper layer and starts again from the
  // layers alone (same id, cgroups and layer mounts).
  absl::Status Reset();
  // Kills every process, unmounts everything, removes the cgroups and the
  // state dir. Idempotent; the destructor calls it.
  absl::Status Destroy();

  const std::string& id() const { return config_.id; }
  // The sandbox's PID 1 (host view); it also starts every exec process
  // (init_process.h).
  pid_t init_pid() const { return init_pid_; }
  // Why the init is gone while the sandbox was not destroyed (it died:
  // killed by the memory cgroup's OOM killer, or otherwise), or nullopt
  // while it lives. The init stays unreaped (StopInit reaps it). Threads:
  // any, beside an Exec; not beside Destroy.
  std::optional<std::string> InitEnded() const;
  const std::string& state_dir() const { return state_.path(); }
  // The writable layer's directory as this process reaches it (what
  // pack_diff captures): a directory of the process's shared store
  // (upper_store.h, where the memory limit bounds it), else in the mount
  // holder (mount_holder.h), else /proc/self/fd/N/upper of the detached
  // tmpfs, or <state>/upper/upper (a user namespace, or a kernel that
  // wants the upper attached).
  std::string upper_dir() const { return upper_dir_; }
  // Whether the writable layer is a directory of the shared store
  // (upper_store.h) rather than a tmpfs of its own.
  bool upper_in_store() const { return !store_dir_.empty(); }
  // The merged root as the host can reach it: /proc/<init>/root (the
  // overlay lives only in the sandbox's mount namespace).
  std::string rootfs_dir() const;
  const std::optional<UserNamespaceMap>& user_namespace() const { return config_.user_namespace; }
  const ContainerCgroups& cgroups() const { return cgroups_; }
  bool used_loop_devices() const;

 private:
  Sandbox(SandboxConfig config, StateDir state) : config_(std::move(config)), state_(std::move(state)) {}
  absl::Status MountUpperAndOverlay();
  absl::Status ReleaseHeldUpper();
  // Whether the writable layer goes in the shared store (upper_store.h):
  // the memory limit bounds it at least as tightly as its size would.
  bool UpperFitsStore() const;
  static ScopedFd BindForDev(const std::string& dir);
  // Records the QoS cgroups (config_.isolation) for orphan cleanup and puts
  // the CPU quota there.
  absl::Status JoinIsolationCgroups();
  absl::Status StartInit();
  // StartInit with a made-ahead init (init_pool.h); false if the slot's
  // init did not take its configuration (the caller starts a new one).
  absl::StatusOr<bool> StartSlotInit(InitSlot& slot);
  absl::Status StopInit();
  // Where the init attaches its root, and the configuration every init gets.
  InitConfig BaseInitConfig() const;

  SandboxConfig config_;
  const SeccompProgram* seccomp_ = nullptr;
  std::string init_binary_;
  StateDir state_;
  std::vector<std::shared_ptr<const LayerMount>> layers_;
  // The writable layer's tmpfs: detached (upper_tmpfs_) unless there is a
  // user namespace, whose init mounts the overlay over an idmapped view of
  // <state>/upper (upper_).
  DetachedMount upper_tmpfs_;
  std::string held_upper_;  // its name in the mount holder, once handed there
  // Or its directory's name in UpperStore::Default() (no tmpfs of its own).
  std::string store_dir_;
  Mount upper_;
  // The root: a detached overlay the init attaches in its own mount
  // namespace (none on the host); held until the init has it. With a user
  // namespace the init mounts it itself (overlay_data_).
  DetachedMount root_mount_;
  // A bind of the writable tmpfs's dev/ for the init's /dev (BindForDev),
  // held until the init has it; invalid: the init mounts a tmpfs.
  ScopedFd dev_mount_;
  ScopedFd userns_;     // the sandbox's user namespace, when configured
  // Its own copy of SandboxConfig::netns_fd (config_.netns_fd names it),
  // so that Reset's new init joins the same namespace, network and all.
  ScopedFd netns_;
  std::vector<Mount> idmapped_layers_;  // <state>/ns/lower/N: the layers as the namespace sees them
  Mount idmapped_upper_;                // <state>/ns/upper: the writable layer, likewise
  std::string overlay_data_;            // what the init mounts, with a user namespace
  std::string upper_dir_;
  ContainerCgroups cgroups_{ContainerCgroups::Empty()};
  pid_t init_pid_ = 0;  // our child, unreaped until StopInit (no pidfd kept)
  ScopedFd init_control_;  // our end of the init's control socket (init_protocol.h)
  ExecShared exec_shared_;  // what concurrent Execs share (exec.h)
  PausableClock exec_clock_;
  bool destroyed_ = false;
};

}  // namespace dsec::container
