// SPDX-License-Identifier: Apache-2.0
// A sandbox's state directory (<root>/<id>/): mount points, and the records
// that let a later runtime process find and remove what a killed one left.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace dsec::container {

inline constexpr char kDefaultStateRoot[] = "/run/dsec-vmm/containers";

// Files in <root>/<id>/:
//   owner      "<pid> <starttime>" of the runtime process holding the sandbox
//   init       "<pid> <starttime>" of the sandbox's PID 1 (host view)
//   cgroups    one cgroup directory per line, written before each mkdir
// Owns the directory: destruction removes the tree (never crossing a mount
// point that is still there). Move-only. Threads: one owner thread.
class StateDir {
 public:
  // AlreadyExists if <root>/<id> exists.
  static absl::StatusOr<StateDir> Create(const std::string& root, const std::string& id);
  StateDir() = default;  // owns nothing
  StateDir(StateDir&& other) noexcept;
  StateDir& operator=(StateDir&& other) noexcept;
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;
  ~StateDir();

  // Renames the directory to <root>/<id> in the same root (a directory made
  // ahead, init_pool.h, becoming a sandbox's). AlreadyExists if taken.
  absl::Status RenameTo(const std::string& id);
  absl::Status RecordCgroup(const std::string& cgroup_dir) const;
  absl::Status RecordInit(pid_t pid) const;
  // Removes the tree now.
  absl::Status Remove();
  // Gives the directory up without removing it, records and all: what a
  // destroy could not remove (a cgroup still busy) is left for the next
  // CleanupOrphans to find. Returns the path.
  std::string Abandon() { return std::exchange(path_, std::string()); }

  const std::string& path() const { return path_; }

 private:
  explicit StateDir(std::string path) : path_(std::move(path)) {}
  std::string path_;  // "" once removed or moved from
};

// "<pid> <starttime>" for a live process, or nullopt.
std::optional<std::string> ProcessIdentity(pid_t pid);

// What differs between the tiers that keep StateDirs (container, fncall,
// microvm) when CleanupOrphans removes a dead runtime's sandboxes.
struct OrphanCleanupOptions {
  // Names the tier in log lines.
  std::string tier = "container";
  // Kill the recorded init only if its /proc/<pid>/cmdline also names the
  // sandbox's directory ("<root>/<id>/"): a microVM monitor is started with
  // paths inside it, so a process that merely has the recorded pid and
  // start time (another boot's, restored state) is never killed.
  bool init_cmdline_names_dir = false;
  // Removes one recorded cgroup, killing what is in it. Unset:
  // KillAndRemoveCgroup; a tier whose processes make cgroups below their
  // own passes one that removes the whole tree.
  std::function<absl::Status(const std::string& cgroup_dir)> remove_cgroup;
  // Runs for each orphan (its id) before anything of it is killed: the
  // container tier thaws the sandbox's freezer cgroup, since frozen
  // processes cannot die.
  std::function<void(const std::string& id)> before_kill;
  // Runs for each orphan once its processes are dead and its cgroups gone,
  // before its directory is removed (`dir`: the sandbox's directory): the
  // microvm tier removes a tap the dead monitor may have left. An error is
  // reported like the others; the directory is removed all the same.
  std::function<absl::Status(const std::string& id, const std::string& dir)> after_kill;
};

// Removes every sandbox under `root` whose owner process is gone: kills its
// init (when that pid is still the recorded process) and every process in
// its cgroups, removes the cgroups, detaches its mounts (loop devices
// autoclear with them) and deletes its directory. Sandboxes of live
// runtimes, and entries that are not directories, are left alone. Returns
// how many sandboxes were removed (made-ahead slots and tombstones of
// destroyed sandboxes, init_pool.h, are removed likewise but not counted);
// the first error otherwise, after trying every sandbox.
absl::StatusOr<int> CleanupOrphans(const std::string& root = kDefaultStateRoot,
                                   const OrphanCleanupOptions& options = {});

// rm -rf that stays on one file system; fails if a mount point remains.
absl::Status RemoveTree(const std::string& path);

// The size of the tmpfs MountStateRootTmpfs makes: a sandbox's records take
// three pages (owner, cgroups, init: 12 KiB), so that 1 GiB holds about
// 87,000 sandboxes (64 MiB, as before, held 5,400); a tmpfs takes memory
// only for what it holds.
inline constexpr uint64_t kStateRootTmpfsBytes = 1ull << 30;

// Mounts a tmpfs (kStateRootTmpfsBytes, mode 0700) on `root` unless it already is on
// tmpfs or ramfs, or holds entries already (never hiding recorded
// sandboxes). Sandbox state is bookkeeping (records, mount points) that
// dies with the host's mounts and cgroups, so it belongs on /run-like
// memory: on a disk file system every mkdir/rmdir of a sandbox's life goes
// through the journal, which stalls for milliseconds while the node builds
// code. Hosts without systemd may have /run on disk. The mount stays (like
// /run) for every later runtime; one mounted at `root` smaller than
// kStateRootTmpfsBytes (an earlier runtime's) is grown to it, its other
// flags kept. Returns whether it mounted.
absl::StatusOr<bool> MountStateRootTmpfs(const std::string& root = kDefaultStateRoot);

}  // namespace dsec::container
