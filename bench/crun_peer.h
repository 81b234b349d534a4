// SPDX-License-Identifier: Apache-2.0
// The peer of `dsec-vmm bench container`: crun (Debian package `crun`)
// running `true` in an OCI bundle whose rootfs is an overlay of the same
// EROFS image the container tier uses.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "base/scoped_fd.h"

namespace dsec::bench {

// config.json for the bundle: `crun spec`'s default (mounts, masked and
// read-only paths, no_new_privs, RLIMIT_NOFILE 1024) with the container
// tier's namespaces (mount pid uts ipc net cgroup), capability set and
// memory/pids limits, a writable root at `rootfs`, no terminal and `argv`.
// No seccomp profile: the container tier loads one, crun here does not.
nlohmann::json CrunBundleConfig(const std::string& rootfs, const std::vector<std::string>& argv,
                                uint64_t memory_bytes, uint64_t pids_max);

// Holds a private mount namespace in which the bundle's rootfs is mounted
// (EROFS image -> lower, tmpfs upper, overlay at <dir>/bundle/rootfs) and,
// on a hybrid cgroup host, /sys/fs/cgroup/unified is covered by an empty
// tmpfs: crun refuses hybrid mode when the v2 hierarchy has controllers
// (here: hugetlb), so it runs on the v1 hierarchies like the container tier
// (it still makes a directory and writes cgroup.procs in the "unified"
// one it finds in /proc/self/cgroup: a few KiB of that tmpfs per run).
// Every mount lives only in that namespace and goes with it when the
// object is destroyed. Threads: one owner thread; Run() forks, so call it
// while the process is single-threaded or accept fork's usual caveats.
class CrunPeer {
 public:
  static absl::StatusOr<std::unique_ptr<CrunPeer>> Create(const std::string& crun,
                                                          const std::string& image,
                                                          const std::string& dir,
                                                          const std::string& state_dir,
                                                          uint64_t memory_bytes, uint64_t pids_max);
  // `crun --root <state_dir> --cgroup-manager=cgroupfs run --bundle B id`
  // with stdin/stdout on /dev/null, in the namespace above. Returns the wall
  // time in ms from just before fork to the reap (process start included:
  // that is how crun is used). Error with crun's stderr if it fails.
  absl::StatusOr<double> Run(const std::string& id) const;

 private:
  CrunPeer(std::string crun, std::string dir, std::string state_dir, ScopedFd mntns)
      : crun_(std::move(crun)),
        dir_(std::move(dir)),
        state_dir_(std::move(state_dir)),
        mntns_(std::move(mntns)) {}
  std::string crun_;
  std::string dir_;
  std::string state_dir_;
  ScopedFd mntns_;
};

// Runs argv as a child (stdin/stdout on /dev/null, stderr to `err_path`),
// after setns into `mntns_fd` if >= 0. Returns spawn-to-reap ms; an error
// with the child's stderr if it does not exit 0.
absl::StatusOr<double> TimedRun(const std::vector<std::string>& argv, int mntns_fd,
                                const std::string& err_path);

}  // namespace dsec::bench
