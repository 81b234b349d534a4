// SPDX-License-Identifier: Apache-2.0
// Attaching a loaded object's cgroup programs to one cgroup v2 directory,
// all or none: shared by the loaders of cgroup programs (EgressPolicy,
// DevicePolicy). The links belong to the caller's skeleton, which destroys
// them (detaching the programs) with itself.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"

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

}  // namespace dsec::bpf
