// SPDX-License-Identifier: Apache-2.0
#include "sched/thread_placement.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "sched/cpu_list.h"
#include "base/status.h"

namespace dsec::sched {

namespace {

// A dynamically sized cpu_set_t: CPU_SETSIZE (1024) is smaller than the
// largest machines.
struct CpuSetDeleter {
  void operator()(cpu_set_t* set) const { CPU_FREE(set); }
};
using CpuSetPtr = std::unique_ptr<cpu_set_t, CpuSetDeleter>;
constexpr int kCpuSetBits = kMaxCpuNumber + 1;

}  // namespace

pid_t CurrentThreadId() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

absl::StatusOr<std::vector<int>> CurrentThreadAffinity() {
  CpuSetPtr set(CPU_ALLOC(kCpuSetBits));
  const size_t size = CPU_ALLOC_SIZE(kCpuSetBits);
  CPU_ZERO_S(size, set.get());
  if (::sched_getaffinity(0, size, set.get()) != 0) return ErrnoStatus("sched_getaffinity");
  std::vector<int> cpus;
  for (int cpu = 0; cpu < kCpuSetBits; ++cpu) {
    if (CPU_ISSET_S(cpu, size, set.get())) cpus.push_back(cpu);
  }
  return cpus;
}

absl::Status SetCurrentThreadAffinity(const std::vector<int>& cpus) {
  CpuSetPtr set(CPU_ALLOC(kCpuSetBits));
  const size_t size = CPU_ALLOC_SIZE(kCpuSetBits);
  CPU_ZERO_S(size, set.get());
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= kCpuSetBits) {
      return absl::InvalidArgumentError(absl::StrCat("cpu", cpu, " out of range"));
    }
    CPU_SET_S(cpu, size, set.get());
  }
  if (::sched_setaffinity(0, size, set.get()) != 0) {
    return ErrnoToStatus(absl::StrCat("sched_setaffinity(", FormatCpuList(cpus), ")"));
  }
  return absl::OkStatus();
}

absl::Status ApplyToCurrentThread(const ThreadPlacement& placement) {
  if (placement.cgroup != nullptr) {
    DSEC_RETURN_IF_ERROR(placement.cgroup->AddThread(CurrentThreadId()));
  }
  if (!placement.cpus.empty()) DSEC_RETURN_IF_ERROR(SetCurrentThreadAffinity(placement.cpus));
  if (placement.cookie != nullptr) DSEC_RETURN_IF_ERROR(placement.cookie->JoinCurrentThread());
  return absl::OkStatus();
}

}  // namespace dsec::sched
