// SPDX-License-Identifier: Apache-2.0
// Waiting on a cgroup v2 directory's state (its last process gone, its
// freeze done) by the kernel's notification rather than by re-reading it on
// a timer: every change of cgroup.events is reported as a modification of
// that file (inotify IN_MODIFY; Documentation/admin-guide/cgroup-v2.rst,
// "cgroup.events"). cgroup v1 has no such file and no notification that
// reaches a descriptor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace dsec::container {

// True when `dir` is a cgroup v2 directory (it has cgroup.events).
bool HasCgroupEvents(const std::string& dir);

// Waits until `dir`/cgroup.events holds the line "<key> <value>" (e.g.
// "populated 0", "frozen 1"). DeadlineExceeded once MonotonicNowNs()
// passes deadline_ns; NotFound when the directory has no cgroup.events (v1)
// or is gone.
absl::Status WaitCgroupEvent(const std::string& dir, std::string_view key, std::string_view value,
                             int64_t deadline_ns);

}  // namespace dsec::container
