// SPDX-License-Identifier: Apache-2.0
// The kernel's CPU-list syntax ("0-3,5,8-9"), as found in sysfs
// (cpu/online, thread_siblings_list, node*/cpulist) and in cpuset.cpus.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::sched {

// CPU and node numbers above this are refused as malformed: no x86-64 kernel
// is configured for more (NR_CPUS tops out at 8192), and a bound keeps a
// hostile or corrupt "0-4294967295" from allocating gigabytes.
inline constexpr int kMaxCpuNumber = 8191;

// Parses a CPU list into sorted, de-duplicated CPU numbers. Surrounding
// whitespace (sysfs ends every file with '\n') is ignored; an empty list is
// valid and means no CPUs. Anything else malformed -> InvalidArgument.
absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text);

// The inverse: sorted, compressed into ranges ("0-3,5"); "" for no CPUs.
// Duplicates and order in `cpus` do not matter.
std::string FormatCpuList(std::vector<int> cpus);

}  // namespace dsec::sched
