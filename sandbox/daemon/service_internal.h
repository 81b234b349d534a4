// SPDX-License-Identifier: Apache-2.0
// Internals shared by service.cc and service_exec.cc.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "sandbox/daemon/service.h"
#include "sandbox/network/policy.h"
#include "sandbox/network/sandbox_network.h"

namespace dsec::daemon {

struct Service::Entry {
  explicit Entry(tier::TierId t) : tier(t) {}
  std::string id;
  const tier::TierId tier;
  tier::TierOptions options;        // the tier's own create options
  std::vector<std::string> layers;  // references as requested (or the tier default's names)
  std::vector<std::string> refs;    // as requested (empty = tier default)
  std::vector<std::string> images;  // resolved image files
  double cpus = 0;
  uint64_t memory_mib = 512;
  uint64_t pids = 512;
  std::string qos;
  // The sandbox's placement (released on destroy), or why it has none.
  mutable std::mutex qos_mu;
  std::shared_ptr<QosLease> qos_lease;  // guarded by qos_mu
  std::string qos_reason;               // guarded by qos_mu
  std::optional<std::string> task_id;
  int64_t created_ms = 0;
  // TTL end (unix ms), 0 for none; SetTtl moves it while the sandbox
  // works, so it is read without the entry's lock.
  std::atomic<int64_t> expires_ms{0};
  std::atomic<uint64_t> execs{0};
  std::atomic<bool> paused{false};
  // The network asked for on create (PATCH replaces it; a re-created
  // sandbox gets the latest), and the live one (thread-safe, closed by
  // the tier's destroy), both null without one. Guarded by net_mu.
  std::shared_ptr<const network::NetworkSpec> network_spec;
  // The live network, read without `mu` (GET, metrics, PATCH must not wait
  // for an exec): replaced when the tier sandbox is (a resumed task's).
  std::shared_ptr<network::SandboxNetwork> Net() const {
    std::lock_guard<std::mutex> lock(net_mu);
    return net;
  }
  void SetNet(std::shared_ptr<network::SandboxNetwork> n) {
    std::lock_guard<std::mutex> lock(net_mu);
    net = std::move(n);
  }
  mutable std::mutex net_mu;
  std::shared_ptr<network::SandboxNetwork> net;  // guarded by net_mu
  std::shared_ptr<const network::NetworkSpec> NetworkSpec() const {
    std::lock_guard<std::mutex> lock(net_mu);
    return network_spec;
  }

  // Serialises every operation on the tier sandbox; the execs of a tier
  // with TierTraits::concurrent_execs (not a task's) hold it shared.
  std::shared_mutex mu;
  // Guarded by mu, and replaced or reset only while holding kill_mu too,
  // so that KillExecs and the files of a tier whose files live beside its
  // execs (TierTraits::files_beside_exec) can reach it under kill_mu alone
  // while an exec holds mu. A pack_diff holds kill_mu too while it copies
  // the writable layer. Order: mu before kill_mu.
  std::unique_ptr<tier::TierSandbox> sandbox;
  mutable std::mutex kill_mu;
  // Why the tier sandbox can run nothing more (tier.h Ended), or nullopt.
  // Without `wait`, nullopt also while kill_mu is held (a delete, a
  // pack_diff's copy): what a GET or list says then, rather than wait
  // (a list holds the service's lock, which every call needs).
  std::optional<std::string> Ended(bool wait = true) const {
    std::unique_lock<std::mutex> lock(kill_mu, std::defer_lock);
    if (wait) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return std::nullopt;
    }
    return sandbox != nullptr ? sandbox->Ended() : std::nullopt;
  }
  // Serialises pause, resume, pack_diff, fork and snapshot where they hold
  // `mu` shared beside running execs (Service::OpsLock: a tier with
  // TierTraits::concurrent_execs, not a task's sandbox). Order: mu, then
  // ops_mu, then kill_mu.
  std::mutex ops_mu;
  // A delete is under way: a later exec is refused (the one running is
  // killed by the delete).
  std::atomic<bool> deleting{false};
  // The tier sandbox's processes killed from any thread (tier.h KillExecs).
  // False where the tier cannot (tier.h).
  bool KillExecs() {
    std::lock_guard<std::mutex> lock(kill_mu);
    // Execs past their start whose process the tier has not made yet: the
    // tier kills them as soon as they are (ExecSpawned).
    if (execs_unspawned > 0) kill_pending = true;
    return sandbox != nullptr && sandbox->KillExecs();
  }
  // An exec under way (Service::Exec, holding mu): begins before its
  // on_start, ends with its answer; `spawned` says whether ExecSpawned
  // came for it.
  void ExecBegins() {
    std::lock_guard<std::mutex> lock(kill_mu);
    ++execs_unspawned;
  }
  void ExecEnds(bool spawned) {
    std::lock_guard<std::mutex> lock(kill_mu);
    if (!spawned && --execs_unspawned == 0) kill_pending = false;
  }
  // The tier made an exec's process (tier::ExecSpec::on_spawned): a kill
  // that came before it reaches it now.
  void ExecSpawned() {
    std::lock_guard<std::mutex> lock(kill_mu);
    --execs_unspawned;
    if (kill_pending && sandbox != nullptr) {
      if (execs_unspawned == 0) kill_pending = false;
      (void)sandbox->KillExecs();
    }
  }
  int execs_unspawned = 0;    // guarded by kill_mu
  bool kill_pending = false;  // guarded by kill_mu
  void ReplaceSandbox(std::unique_ptr<tier::TierSandbox> next) {
    std::lock_guard<std::mutex> lock(kill_mu);
    sandbox = std::move(next);
    CloseWatchesLocked();  // they watch the old one's files
  }
  // Directory watches made on it (Service::WatchDir), closed when the
  // tier sandbox goes; guarded by kill_mu. Expired ones are dropped as
  // new ones come.
  std::vector<std::weak_ptr<tier::DirWatch>> watches;
  void CloseWatchesLocked() {
    for (const std::weak_ptr<tier::DirWatch>& w : watches) {
      if (std::shared_ptr<tier::DirWatch> live = w.lock()) live->Close();
    }
    watches.clear();
  }
  bool destroyed = false;                // guarded by mu
  // What it holds of the node (options_.capacity), released on destroy;
  // guarded by mu.
  CapacityLease capacity;
  // Replay mode (a resumed task) until the first live exec; guarded by mu.
  std::unique_ptr<trajectory::Replayer> replayer;
};

// The error of a host-side operation (`what`) on sandbox `id`: logged whole
// (rate-limited: a client can trigger it), answered without the host paths
// in it (errors.h WithoutHostPaths).
absl::Status HostFailure(const char* what, const std::string& id, const absl::Status& status);

}  // namespace dsec::daemon
