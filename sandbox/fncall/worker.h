// SPDX-License-Identifier: Apache-2.0
// One fncall worker: a zygote inside its own mount, pid, uts, ipc, net and
// cgroup namespaces and its own cgroups, with a masked read-only root, a
// scratch tmpfs for /tmp and /dev/shm, and a control socket. It runs one
// call at a time; each call is a fresh child of the zygote, and after it the
// zygote kills and reaps everything else in its pid namespace and the
// runtime empties the scratch tmpfs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/mount.h"
#include "sandbox/container/seccomp_policy.h"
#include "sandbox/fncall/call.h"
#include "sandbox/fncall/protocol.h"
#include "sandbox/fncall/zygote.h"
#include "sandbox/network/sandbox_network.h"
#include "base/scoped_fd.h"

namespace dsec::sched {
class SandboxIsolation;
}

namespace dsec::fncall {

struct WorkerOptions {
  std::string id;         // unique; cgroups are dsec-ctr-<id>
  std::string dir;        // the worker's directory (scratch mount inside)
  std::string root;       // the pool's read-only root (overlay)
  Language language = Language::kPython;
  std::string interpreter;
  std::vector<std::string> preload;  // Python modules the zygote imports
  const container::SeccompProgram* seccomp = nullptr;
  CallLimits limits;                 // initial cgroup limits
  uint64_t scratch_bytes = 64ull << 20;
  std::string hostname = "fncall";
  int64_t setup_timeout_ms = 30000;
  uint64_t sequence = 0;  // exported to the zygote as DSEC_FNCALL_WORKER_SEQ
  // Called with each cgroup directory before it is made (orphan records).
  std::function<absl::Status(const std::string&)> record_cgroup;
  // Optional QoS cgroup (owned by the pool's config) the zygote joins; it
  // then owns the cpu controller, so the worker makes no cpu cgroup.
  const sched::SandboxIsolation* isolation = nullptr;
  // Optional network the worker joins (owned by the pool's config): its
  // processes go into a cgroup v2 directory for the policy's programs
  // (made for it on a hybrid host, announced to record_cgroup first), its
  // namespace gets an address and a veth; both go with the worker.
  network::SandboxNetwork* network = nullptr;
};

// Threads: one thread at a time (the pool hands a worker to one caller).
class Worker {
 public:
  // Starts the zygote and waits for it to report ready. Errors: Internal
  // with the setup step that failed, DeadlineExceeded if it never got ready.
  static absl::StatusOr<std::unique_ptr<Worker>> Start(const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs one call with `limits`. `delivered` tells whether the zygote may
  // have seen the request (false: safe to retry elsewhere). After an error
  // the worker is broken and must be destroyed.
  absl::StatusOr<CallResult> Call(const CallRequest& request, const std::vector<std::string>& env,
                                  const CallLimits& limits, bool* delivered);
  // Empties the scratch tmpfs (/tmp, /dev/shm) after a call.
  absl::Status WipeScratch();
  // Kills the zygote (its pid namespace dies with it), removes cgroups and
  // mounts. Idempotent; the destructor calls it.
  absl::Status Destroy();

  bool broken() const { return broken_; }
  pid_t pid() const { return pid_; }
  uint64_t sequence() const { return options_.sequence; }
  // Memory the zygote held when it became ready.
  uint64_t baseline_bytes() const { return baseline_bytes_; }
  const container::ContainerCgroups& cgroups() const { return cgroups_; }
  int64_t idle_since_ns = 0;  // maintained by the pool

 private:
  explicit Worker(WorkerOptions options) : options_(std::move(options)) {}
  absl::Status Launch();
  absl::Status ApplyLimits(const CallLimits& limits);
  // Options' network: the cgroup v2 directory and the namespace's share.
  absl::Status JoinNetwork(const std::function<absl::Status(const std::string&)>& record);
  absl::StatusOr<std::vector<std::string>> ReadFrame(int64_t deadline_ns);
  // Waits for the zygote's "forked" and returns a pidfd of the child that
  // will run the next call.
  absl::StatusOr<ScopedFd> CallChild(int64_t deadline_ns);

  WorkerOptions options_;
  container::Mount scratch_;
  std::string scratch_dir_;
  container::ContainerCgroups cgroups_{container::ContainerCgroups::Empty()};
  std::string made_v2_;  // the cgroup v2 directory made for the network (hybrid hosts)
  std::unique_ptr<network::NetworkMember> network_;
  ScopedFd control_;
  FrameReader reader_;
  pid_t pid_ = 0;
  ScopedFd pidfd_;
  uint64_t baseline_bytes_ = 0;
  uint64_t memory_limit_ = 0;
  uint64_t pids_limit_ = 0;
  uint64_t oom_kills_ = 0;  // memory cgroup OOM kills seen at the last call's end
  uint64_t pids_hits_ = 0;  // pids.events "max" at the last call's end
  bool broken_ = false;
  bool destroyed_ = false;
};

}  // namespace dsec::fncall
