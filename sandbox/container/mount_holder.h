// SPDX-License-Identifier: Apache-2.0
// Where the sandboxes' writable tmpfs mounts stay reachable without a
// descriptor each and without a mount in the host's table: a private mount
// namespace of this process, entered by one thread of its own, whose
// directory the rest of the process reaches as
// /proc/<pid>/task/<tid>/root/<dir>/<name> (the thread's root, walked in
// its namespace).
//
// Why: a descriptor per sandbox counts against the daemon's open-file
// limit (20000 here, not raisable without CAP_SYS_RESOURCE: a node of
// 10,000 sandboxes cannot spend two each), and a mount per sandbox in the
// host's table is copied by every new mount namespace (each create then
// costs more with every sandbox alive). The holder's table grows with the
// sandboxes, but nothing copies it. Its mounts go with the process: a
// killed daemon leaves none behind.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::container {

class MountHolder {
 public:
  // Starts the thread and its namespace (private propagation, a tmpfs for
  // the mount points); Unavailable with the reason when the kernel refuses.
  static absl::StatusOr<std::unique_ptr<MountHolder>> Start();
  // The process's one holder, started on first use; null (and the reason
  // logged once) when it cannot start.
  static MountHolder* Default();
  ~MountHolder();
  MountHolder(const MountHolder&) = delete;
  MountHolder& operator=(const MountHolder&) = delete;

  // Attaches the detached mount `mount_fd` (fsmount/open_tree) as `name`
  // (one path component) and returns the path this process reaches its
  // root by. The caller may close mount_fd afterwards. AlreadyExists for a
  // name held already.
  absl::StatusOr<std::string> Attach(int mount_fd, const std::string& name);
  // Detaches `name` (lazily: a walk in progress finishes); OK when absent.
  absl::Status Detach(const std::string& name);
  // How many mounts it holds.
  int held() const;

 private:
  MountHolder() = default;
  absl::Status Run(std::function<absl::Status()> op);
  void Loop();

  std::thread thread_;
  std::string root_;  // /proc/<pid>/task/<tid>/root/<dir>
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  bool stop_ = false;
  int held_ = 0;  // guarded by mu_
};

}  // namespace dsec::container
