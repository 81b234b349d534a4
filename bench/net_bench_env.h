// SPDX-License-Identifier: Apache-2.0
// What `bench net` builds before it measures, all of its own and all gone
// when it ends (also on failure): a cgroup v2 directory below the bench's
// own cgroup (each fake sandbox's directory and the policy-free client
// cgroup below it; a dead run's leftovers are removed at start), an
// "outside" network namespace behind a veth whose host end is the node's
// only uplink (so no traffic leaves the machine), and a NodeNetwork on the
// bench's subnet. A fake sandbox is what a tier hands SandboxNetwork: a
// fresh network namespace (lo up) and a cgroup v2 directory, without any
// container around them, so that the figures are the network's alone.
//
// Threads: the bench's thread. Fake sandboxes must go before the
// environment (their cgroups are below its directory, their networks use
// its node network).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/sandbox_network.h"

namespace dsec::bench::net {

// A cgroup v2 directory made by the bench, removed (rmdir) with the object
// once its processes have gone.
class BenchCgroup {
 public:
  static absl::StatusOr<std::unique_ptr<BenchCgroup>> Create(const std::string& path);
  ~BenchCgroup();
  BenchCgroup(const BenchCgroup&) = delete;
  BenchCgroup& operator=(const BenchCgroup&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit BenchCgroup(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

struct FakeSandbox {
  ScopedFd netns;
  std::unique_ptr<BenchCgroup> cgroup;
  std::unique_ptr<network::SandboxNetwork> network;  // declared last: goes first
};

struct NetBenchEnvOptions {
  std::string subnet = "10.254.0.0/16";          // the sandboxes' (NodeNetwork)
  std::string outside_subnet = "198.19.254.0/24";  // uplink .1, outside .2 (RFC 2544 range)
};

class NetBenchEnv {
 public:
  // PermissionDenied without root; Unavailable (with the reason) where the
  // host lacks cgroup v2, nftables or BPF.
  static absl::StatusOr<std::unique_ptr<NetBenchEnv>> Create(const NetBenchEnvOptions& options);
  ~NetBenchEnv();
  NetBenchEnv(const NetBenchEnv&) = delete;
  NetBenchEnv& operator=(const NetBenchEnv&) = delete;

  network::NodeNetwork* node() const { return node_.get(); }
  int outside_netns() const { return outside_ns_.get(); }
  const std::string& outside_address() const { return outside_address_; }
  const std::string& uplink() const { return uplink_; }

  // A fake sandbox without network yet; `name` is unique within the run.
  absl::StatusOr<std::unique_ptr<FakeSandbox>> NewSandbox(const std::string& name);
  // A cgroup v2 directory with no programs of ours (the clients that
  // should meet no policy).
  absl::StatusOr<std::unique_ptr<BenchCgroup>> NewCgroup(const std::string& name);

 private:
  NetBenchEnv() = default;

  std::unique_ptr<BenchCgroup> root_;  // declared first: removed last
  ScopedFd outside_ns_;
  std::string uplink_;
  bool uplink_made_ = false;
  std::string outside_address_;
  std::unique_ptr<network::NodeNetwork> node_;
};

// A new network namespace (made on a short-lived thread) with lo up.
absl::StatusOr<ScopedFd> NewNetns();

}  // namespace dsec::bench::net
