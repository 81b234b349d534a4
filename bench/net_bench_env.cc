// SPDX-License-Identifier: Apache-2.0
#include "bench/net_bench_env.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/status.h"
#include "sandbox/network/netlink.h"

namespace dsec::bench::net {
namespace {

constexpr char kPrefix[] = "dsec-bench-net-";

// The cgroup v2 directory this process is in: the v2 mount point
// (/sys/fs/cgroup/unified on a hybrid host) joined with /proc/self/cgroup's
// "0::" path. Unavailable without a v2 hierarchy.
absl::StatusOr<std::string> OwnCgroup2Dir() {
  DSEC_ASSIGN_OR_RETURN(std::string mounts, ReadFile("/proc/self/mounts"));
  std::string root;
  for (absl::string_view line : absl::StrSplit(mounts, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() > 2 && f[2] == "cgroup2") {
      root = std::string(f[1]);
      break;
    }
  }
  if (root.empty()) return absl::UnavailableError("no cgroup v2 hierarchy is mounted (BPF cgroup programs need one)");
  DSEC_ASSIGN_OR_RETURN(std::string self, ReadFile("/proc/self/cgroup"));
  for (absl::string_view line : absl::StrSplit(self, '\n')) {
    if (absl::StartsWith(line, "0::")) {
      std::string path(line.substr(3));
      return path == "/" ? root : root + path;
    }
  }
  return root;
}

// A killed run's directories (dsec-bench-net-<pid> of a dead pid): their
// processes are gone, so they are empty but for the sandboxes' directories.
void RemoveStale(const std::string& parent) {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(parent);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    int pid = 0;
    if (!absl::StartsWith(name, kPrefix) ||
        !absl::SimpleAtoi(absl::string_view(name).substr(sizeof(kPrefix) - 1), &pid) || pid <= 0 ||
        ::kill(pid, 0) == 0 || errno != ESRCH) {
      continue;
    }
    const std::string dir = absl::StrCat(parent, "/", name);
    if (absl::StatusOr<std::vector<std::string>> subs = ListDirectory(dir); subs.ok()) {
      for (const std::string& s : *subs) ::rmdir(absl::StrCat(dir, "/", s).c_str());
    }
    ::rmdir(dir.c_str());
  }
}

}  // namespace

absl::StatusOr<ScopedFd> NewNetns() {
  ScopedFd out;
  absl::Status status;
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      status = ErrnoStatus("unshare(CLONE_NEWNET)");
      return;
    }
    out.Reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!out.valid()) status = ErrnoStatus("open /proc/thread-self/ns/net");
  }).join();
  DSEC_RETURN_IF_ERROR(status);
  DSEC_ASSIGN_OR_RETURN(network::NlSocket in, network::NlSocket::OpenIn(out.get()));
  DSEC_RETURN_IF_ERROR(in.SetUp("lo"));
  return out;
}

absl::StatusOr<std::unique_ptr<BenchCgroup>> BenchCgroup::Create(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", path));
  return std::unique_ptr<BenchCgroup>(new BenchCgroup(path));
}

BenchCgroup::~BenchCgroup() { ::rmdir(path_.c_str()); }

absl::StatusOr<std::unique_ptr<NetBenchEnv>> NetBenchEnv::Create(const NetBenchEnvOptions& options) {
  if (::geteuid() != 0) {
    return absl::PermissionDeniedError("needs root (network namespaces, netlink, nftables, BPF, cgroups)");
  }
  DSEC_ASSIGN_OR_RETURN(auto outside, network::ParseIpv4Subnet(options.outside_subnet));
  if (outside.second > 30) {
    return absl::InvalidArgumentError(absl::StrCat("outside subnet ", options.outside_subnet, " is smaller than /30"));
  }
  DSEC_ASSIGN_OR_RETURN(auto sandboxes, network::ParseIpv4Subnet(options.subnet));
  const auto overlap = [](std::pair<uint32_t, int> a, std::pair<uint32_t, int> b) {
    const int len = std::min(a.second, b.second);
    const uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
    return (a.first & mask) == (b.first & mask);
  };
  if (overlap(outside, sandboxes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("outside subnet ", options.outside_subnet, " overlaps ", options.subnet));
  }
  std::unique_ptr<NetBenchEnv> env(new NetBenchEnv());
  DSEC_ASSIGN_OR_RETURN(std::string parent, OwnCgroup2Dir());
  RemoveStale(parent);
  DSEC_ASSIGN_OR_RETURN(env->root_, BenchCgroup::Create(absl::StrCat(parent, "/", kPrefix, ::getpid())));

  // The outside world: a namespace behind a veth; its host end is the
  // node's uplink, its own end answers on outside .2.
  DSEC_ASSIGN_OR_RETURN(env->outside_ns_, NewNetns());
  env->uplink_ = absl::StrCat("dbnu", ::getpid());
  const std::string host_address = network::Ipv4Text(outside.first + 1);
  env->outside_address_ = network::Ipv4Text(outside.first + 2);
  const std::string len = absl::StrCat("/", outside.second);
  {
    DSEC_ASSIGN_OR_RETURN(network::NlSocket host, network::NlSocket::Open());
    (void)host.DeleteLink(env->uplink_);  // a dead run's (same pid)
    DSEC_RETURN_IF_ERROR(host.AddVeth(env->uplink_, "eth0", env->outside_ns_.get()));
    env->uplink_made_ = true;
    DSEC_RETURN_IF_ERROR(host.AddAddress(env->uplink_, host_address + len));
    DSEC_RETURN_IF_ERROR(host.SetUp(env->uplink_));
    DSEC_ASSIGN_OR_RETURN(network::NlSocket out, network::NlSocket::OpenIn(env->outside_ns_.get()));
    DSEC_RETURN_IF_ERROR(out.AddAddress("eth0", env->outside_address_ + len));
    DSEC_RETURN_IF_ERROR(out.SetUp("eth0"));
  }
  network::NodeNetworkOptions node;
  node.subnet = options.subnet;
  node.uplinks = {env->uplink_};
  // No upstream is ever asked (CIDR rules only); loopback keeps a
  // misdirected query on the machine.
  node.dns_upstream = "127.0.0.1:9";
  DSEC_ASSIGN_OR_RETURN(env->node_, network::NodeNetwork::Create(node));
  return env;
}

NetBenchEnv::~NetBenchEnv() {
  node_.reset();  // its NAT table and the uplink's forwarding switch
  if (uplink_made_) {
    absl::StatusOr<network::NlSocket> host = network::NlSocket::Open();
    if (host.ok()) (void)host->DeleteLink(uplink_);
  }
}

absl::StatusOr<std::unique_ptr<FakeSandbox>> NetBenchEnv::NewSandbox(const std::string& name) {
  auto sb = std::make_unique<FakeSandbox>();
  DSEC_ASSIGN_OR_RETURN(sb->netns, NewNetns());
  DSEC_ASSIGN_OR_RETURN(sb->cgroup, NewCgroup(name));
  return sb;
}

absl::StatusOr<std::unique_ptr<BenchCgroup>> NetBenchEnv::NewCgroup(const std::string& name) {
  return BenchCgroup::Create(absl::StrCat(root_->path(), "/", name));
}

}  // namespace dsec::bench::net
