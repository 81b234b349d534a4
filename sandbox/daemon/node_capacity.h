// SPDX-License-Identifier: Apache-2.0
// The node's capacity: what a create takes of the host's countable
// resources (memory, tasks, descriptors, mounts, memory cgroups, network
// namespaces, inotify instances), checked before a sandbox is made so that
// a full node answers 429 with the resource named instead of failing half
// way; GET /v1/health reports the headroom of each.
//
// What is in use comes from the host (sampled at most every
// `sample_interval_ms`, a few small /proc reads: nothing here walks the
// sandboxes), plus what creates in flight have reserved; network
// namespaces and inotify instances, which the host does not count for us,
// from what this daemon's live sandboxes hold (their leases). What one
// sandbox takes is its tier's tier::Footprint.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sandbox/tier/tier.h"

namespace dsec::daemon {

enum class Resource { kMemory, kPids, kFds, kMounts, kCgroups, kNetns, kInotify };
inline constexpr int kResourceCount = 7;
// "memory", "pids", "fds", "mounts", "cgroups", "netns", "inotify".
const char* ResourceName(Resource r);
std::optional<Resource> ResourceByName(const std::string& name);

// One look at the host. Absent: the host does not say (the resource is then
// not checked, and health says why).
struct HostReadings {
  struct Reading {
    std::optional<int64_t> used;   // absent: counted from the leases
    std::optional<int64_t> limit;  // absent: unknown, not checked
    std::string source;            // where the figures come from
  };
  std::array<Reading, kResourceCount> r;
  Reading& operator[](Resource x) { return r[static_cast<int>(x)]; }
  const Reading& operator[](Resource x) const { return r[static_cast<int>(x)]; }
};

// memory: MemTotal - MemAvailable of MemTotal (bytes); pids: the host's
// tasks (/proc/loadavg) of min(kernel.threads-max, kernel.pid_max); fds:
// this process's open descriptors (the size /proc/self/fd reports) of
// RLIMIT_NOFILE; mounts: this mount namespace's table of fs.mount-max (every
// new sandbox namespace copies it); cgroups: the memory controller's
// cgroups (/proc/cgroups) of 65535, the kernel's memory cgroup ids; netns:
// user.max_net_namespaces; inotify: fs.inotify.max_user_instances.
HostReadings ReadHost();

struct CapacityOptions {
  // Lower limits than the host's, by name (memory in bytes): a node made
  // small on purpose (--capacity-limit NAME=N).
  std::map<Resource, int64_t> limits;
  // Kept free for the node and the daemon itself (its API connections,
  // execs, layer builds): a create needs its footprint above these.
  std::array<int64_t, kResourceCount> reserve = {
      512ll << 20,  // memory
      1024,         // pids: execs and the node's own work
      512,          // fds: API connections, exec pipes, pools
      64,           // mounts: a new sandbox's namespace adds its own few
      64,           // cgroups: exec and pool cgroups
      64,           // netns: the namespaces made ahead
      8,            // inotify
  };
  int64_t sample_interval_ms = 500;
  // The host's figures; null: ReadHost.
  std::function<HostReadings()> read;
  // Milliseconds for sampling; null: the monotonic clock.
  std::function<int64_t()> now_ms;
};

class NodeCapacity;

// What one sandbox holds of the node: reserved while its create runs,
// committed when it is up, released on destruction (or Release()).
class CapacityLease {
 public:
  CapacityLease() = default;
  CapacityLease(CapacityLease&& o) noexcept;
  CapacityLease& operator=(CapacityLease&& o) noexcept;
  CapacityLease(const CapacityLease&) = delete;
  CapacityLease& operator=(const CapacityLease&) = delete;
  ~CapacityLease() { Release(); }

  // The sandbox is up: the host's counts show it from now on, so the
  // reservation ends; what the host does not count stays held.
  void Commit();
  void Release();

 private:
  friend class NodeCapacity;
  CapacityLease(NodeCapacity* owner, tier::Footprint need) : owner_(owner), need_(need) {}
  NodeCapacity* owner_ = nullptr;
  tier::Footprint need_;
  bool committed_ = false;
};

class NodeCapacity {
 public:
  explicit NodeCapacity(CapacityOptions options);

  // Reserves `need` (a sandbox of `tier`), or ResourceExhausted naming the
  // first resource without room, its use, limit and reserve, e.g. "node
  // full: fds: 19630 in use + 4 for this container sandbox > limit 20000 -
  // 512 kept free".
  absl::StatusOr<CapacityLease> Reserve(const tier::Footprint& need, const std::string& tier);

  // {resource: {limit, used, reserve, free, source}} with a fresh sample,
  // and per tier (given their footprints) how many more sandboxes fit and
  // what would stop them.
  nlohmann::json Headroom(const std::map<std::string, tier::Footprint>& tiers);

  // Refusals so far, by resource (for /metrics).
  std::array<uint64_t, kResourceCount> refused() const;

 private:
  friend class CapacityLease;
  struct View {
    std::optional<int64_t> used, limit;
    int64_t reserve = 0;
    std::string source;
  };
  void Sample();  // mu_ held
  View ViewOf(Resource r) const;  // mu_ held
  void Unreserve(const tier::Footprint& need, bool committed, bool release_committed);

  const CapacityOptions options_;
  mutable std::mutex mu_;
  HostReadings sample_;
  int64_t sampled_ms_ = -1;
  std::array<int64_t, kResourceCount> in_flight_{};  // reserved by creates running
  std::array<int64_t, kResourceCount> held_{};       // committed leases
  std::array<uint64_t, kResourceCount> refused_{};
};

// Raises this process's RLIMIT_NOFILE: the soft limit to the hard one, and
// with CAP_SYS_RESOURCE both to fs.nr_open. Returns what it did, for the
// log ("open-file limit 1024 -> 1048576").
std::string RaiseOpenFileLimit();

}  // namespace dsec::daemon
