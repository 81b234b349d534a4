// SPDX-License-Identifier: Apache-2.0
// cgroup plumbing for the cpuset fallback: where the cpuset and cpu
// controllers are mounted (v1 or v2), and RAII cgroup directories.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dsec::sched {

enum class CgroupVersion { kV1, kV2 };
std::string_view CgroupVersionName(CgroupVersion version);  // "v1" / "v2"

// One controller's hierarchy as this process sees it.
struct ControllerMount {
  CgroupVersion version = CgroupVersion::kV1;
  std::string mount_point;  // e.g. /sys/fs/cgroup/cpuset
  std::string mount_root;   // the hierarchy path mounted there (mountinfo field 4)
};

struct CgroupLayout {
  std::optional<ControllerMount> cpuset;
  std::optional<ControllerMount> cpu;
};

// Finds the cpuset and cpu controllers from /proc/self/mountinfo text. A v1
// mount names its controllers in its super options ("rw,cpu,cpuacct"); a v2
// mount offers those listed in its cgroup.controllers, which is read via
// `read_file` (so tests can fake it). A controller bound to v1 is never also
// usable in v2, so v1 wins when both are mounted.
absl::StatusOr<CgroupLayout> ParseCgroupLayout(
    std::string_view mountinfo,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& read_file);
// The same for this process (reads /proc/self/mountinfo).
absl::StatusOr<CgroupLayout> DetectCgroupLayout();

// The directory of this process's own cgroup in `mount`'s hierarchy, from
// /proc/self/cgroup text: new sandbox cgroups go below it so that a
// delegated or nested dsec-vmm stays inside what it was given.
absl::StatusOr<std::string> OwnCgroupDir(const ControllerMount& mount,
                                         std::string_view proc_self_cgroup,
                                         std::string_view controller);

// A cgroup directory this process created, removed on destruction: tasks
// still in it are first moved to the parent (a non-empty cgroup cannot be
// removed). Move-only.
// Threads: any one thread at a time; writes go straight to cgroupfs.
class CgroupDir {
 public:
  // mkdir <parent>/<name>; AlreadyExists if it exists (never adopts).
  static absl::StatusOr<CgroupDir> Create(const std::string& parent, const std::string& name,
                                          CgroupVersion version);
  CgroupDir(CgroupDir&& other) noexcept;
  CgroupDir& operator=(CgroupDir&& other) noexcept;
  CgroupDir(const CgroupDir&) = delete;
  CgroupDir& operator=(const CgroupDir&) = delete;
  ~CgroupDir();

  absl::Status Write(std::string_view file, std::string_view value) const;
  absl::StatusOr<std::string> Read(std::string_view file) const;
  // v1: moves one thread (tasks). v2: moves the thread's whole process
  // (cgroup.procs; v2 domain cgroups hold processes, not threads).
  absl::Status AddThread(pid_t tid) const;
  // Moves a whole process (cgroup.procs).
  absl::Status AddProcess(pid_t pid) const;
  // Moves remaining tasks to the parent and removes the directory now,
  // reporting failure (the destructor does the same and logs).
  absl::Status Remove();

  const std::string& path() const { return path_; }
  CgroupVersion version() const { return version_; }

 private:
  CgroupDir(std::string parent, std::string path, CgroupVersion version)
      : parent_(std::move(parent)), path_(std::move(path)), version_(version) {}

  std::string parent_;
  std::string path_;  // "" once removed or moved from
  CgroupVersion version_;
};

// "dsec-" + 16 random hex digits: unique on a shared machine without
// leaking sandbox ids into cgroupfs.
std::string RandomCgroupName();

}  // namespace dsec::sched
