// SPDX-License-Identifier: Apache-2.0
// Attaching a loaded object's cgroup programs to one cgroup v2 directory,
// all or none: shared by the loaders of cgroup programs (EgressPolicy,
// DevicePolicy). The links belong to the caller's skeleton, which destroys
// them (detaching the programs) with itself, or (AttachEachToCgroup, one
// policy on several cgroups) to a CgroupLinks object.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct bpf_program;
struct bpf_link;

namespace dsec::bpf {

struct CgroupProgram {
  struct bpf_program* prog;
  struct bpf_link** link;  // the skeleton's slot for its link
};

// NotFound when the directory cannot be opened; Unavailable, with the
// kernel's reason, when it refuses a program (the links made so far are
// destroyed and their slots cleared). `owner` names the caller in messages.
absl::Status AttachAllToCgroup(std::span<const CgroupProgram> progs, const std::string& cgroup_dir,
                               std::string_view owner);

// Links of programs attached to one cgroup, owned here: destruction
// detaches them. For a policy attached to several cgroups (one link per
// program and cgroup). Must not outlive the programs' object.
class CgroupLinks {
 public:
  explicit CgroupLinks(std::vector<struct bpf_link*> links) : links_(std::move(links)) {}
  ~CgroupLinks();
  CgroupLinks(const CgroupLinks&) = delete;
  CgroupLinks& operator=(const CgroupLinks&) = delete;
  // Hands the links over to the caller (in the programs' order).
  std::vector<struct bpf_link*> Release() { return std::exchange(links_, {}); }

 private:
  std::vector<struct bpf_link*> links_;
};

// Attaches every program of `progs` to `cgroup_dir`, all or none, as links
// of the returned object; errors as AttachAllToCgroup's.
absl::StatusOr<std::unique_ptr<CgroupLinks>> AttachEachToCgroup(std::span<struct bpf_program* const> progs,
                                                                const std::string& cgroup_dir,
                                                                std::string_view owner);

}  // namespace dsec::bpf
