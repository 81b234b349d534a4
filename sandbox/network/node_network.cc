// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/node_network.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/network/netlink.h"
#include "sandbox/network/sandbox_network.h"

namespace dsec::network {

std::string Ipv4Text(uint32_t address) {
  return absl::StrFormat("%u.%u.%u.%u", address >> 24, (address >> 16) & 0xff, (address >> 8) & 0xff,
                         address & 0xff);
}

absl::StatusOr<std::pair<uint32_t, int>> ParseIpv4Subnet(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, '/');
  in_addr a{};
  int len = -1;
  if (parts.size() != 2 || inet_pton(AF_INET, parts[0].c_str(), &a) != 1 ||
      !absl::SimpleAtoi(parts[1], &len) || len < 0 || len > 32) {
    return absl::InvalidArgumentError(absl::StrCat("subnet '", text, "' is not a.b.c.d/len"));
  }
  const uint32_t addr = ntohl(a.s_addr);
  const uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  if ((addr & ~mask) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("subnet '", text, "' has bits set past its prefix"));
  }
  return std::pair{addr, len};
}

std::string DefaultRouteInterface() {
  absl::StatusOr<std::string> route = ReadFile("/proc/net/route");
  if (!route.ok()) return "";
  for (absl::string_view line : absl::StrSplit(*route, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t', absl::SkipWhitespace());
    // Iface Destination Gateway Flags ... Mask: the default route has
    // destination and mask 0.
    if (f.size() >= 8 && f[1] == "00000000" && f[7] == "00000000") return std::string(f[0]);
  }
  return "";
}

namespace {

// The table's name is derived from the subnet, so that daemons with
// subnets of their own keep tables of their own, and a restarted daemon
// replaces its predecessor's.
std::string TableName(uint32_t network, int len) {
  return absl::StrFormat("dsec_vmm_%08x_%d", network, len);
}

constexpr char kRunDir[] = "/run/dsec-vmm";

std::string LockPath(const std::string& table) { return absl::StrCat(kRunDir, "/", table, ".lock"); }
// Written while a node network lives: the uplinks whose forwarding it
// switched on (one per line, possibly none). A successor finding it knows
// its predecessor died without cleaning up.
std::string StatePath(const std::string& table) { return absl::StrCat(kRunDir, "/", table, ".state"); }

// Undoes what a dead owner of `table` left: its forwarding switches and
// its nftables table. The caller holds the subnet's lock. Returns whether
// there was anything.
bool UndoPredecessor(const std::string& table, uint32_t network, int prefix_len) {
  absl::StatusOr<std::string> state = ReadSmallFile(StatePath(table));
  if (!state.ok()) return false;
  // Its sandboxes' host ends ("ds<address>"): a veth goes with its
  // namespace, but only once the kernel has torn the namespace down
  // (asynchronously, after the last of the sandbox's processes died), and
  // a microVM's tap with its monitor's descriptors; delete them now.
  const uint32_t mask = ~uint32_t{0} << (32 - prefix_len);
  if (DIR* d = ::opendir("/sys/class/net")) {
    std::vector<std::string> ours;
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      uint32_t addr = 0;
      if (name.size() == 10 && name.rfind("ds", 0) == 0 &&
          absl::SimpleHexAtoi(absl::string_view(name).substr(2), &addr) && (addr & mask) == network) {
        ours.push_back(name);
      }
    }
    ::closedir(d);
    if (!ours.empty()) {
      absl::StatusOr<NlSocket> sk = NlSocket::Open();
      for (const std::string& name : ours) {
        if (sk.ok()) (void)sk->DeleteLink(name);
      }
    }
  }
  for (absl::string_view up : absl::StrSplit(*state, '\n', absl::SkipEmpty())) {
    (void)WriteSmallFile(absl::StrCat("/proc/sys/net/ipv4/conf/", up, "/forwarding"), "0");
  }
  (void)RunNft(absl::StrCat("add table ip ", table, "\ndelete table ip ", table, "\n"));
  ::unlink(StatePath(table).c_str());
  DSEC_LOG(info, "network: removed what a dead owner of {} left (forwarding on: {})", table,
           absl::StrJoin(absl::StrSplit(*state, '\n', absl::SkipEmpty()), ","));
  return true;
}

}  // namespace

absl::StatusOr<bool> CleanupStaleNodeNetwork(const std::string& subnet_text) {
  DSEC_ASSIGN_OR_RETURN(auto subnet, ParseIpv4Subnet(subnet_text));
  const std::string table = TableName(subnet.first, subnet.second);
  if (::access(StatePath(table).c_str(), F_OK) != 0) return false;
  ScopedFd lock(::open(LockPath(table).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return ErrnoToStatus(absl::StrCat("open ", LockPath(table)));
  // A live owner holds the lock: nothing is stale.
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return false;
  return UndoPredecessor(table, subnet.first, subnet.second);
}

absl::StatusOr<std::unique_ptr<NodeNetwork>> NodeNetwork::Create(const NodeNetworkOptions& options) {
  DSEC_ASSIGN_OR_RETURN(auto subnet, ParseIpv4Subnet(options.subnet));
  if (subnet.second < 8 || subnet.second > 28) {
    return absl::InvalidArgumentError(
        absl::StrCat("subnet ", options.subnet, ": prefix must be /8 to /28"));
  }
  std::unique_ptr<NodeNetwork> n(new NodeNetwork());
  // One owner per subnet on a host: a second daemon (or `sandbox run`) on
  // the same subnet would hand out the same addresses and replace our
  // nftables table.
  ::mkdir(kRunDir, 0755);
  const std::string table_name = TableName(subnet.first, subnet.second);
  const std::string lock_path = LockPath(table_name);
  n->lock_.Reset(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!n->lock_.valid()) return ErrnoToStatus(absl::StrCat("open ", lock_path));
  if (::flock(n->lock_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("sandbox subnet ", options.subnet,
                                                 " is in use by another dsec-vmm process (", lock_path,
                                                 "); give this one a subnet of its own"));
    }
    return ErrnoToStatus(absl::StrCat("flock ", lock_path));
  }
  UndoPredecessor(table_name, subnet.first, subnet.second);
  n->state_path_ = StatePath(table_name);
  n->subnet_text_ = options.subnet;
  n->network_ = subnet.first;
  n->prefix_len_ = subnet.second;
  n->gateway_ = subnet.first + 1;
  n->next_ = n->gateway_ + 1;
  // The uplinks first: a typo fails before anything is made.
  std::vector<std::string> to_enable;
  for (const std::string& up : options.uplinks) {
    if (up.empty() || up.find('/') != std::string::npos || up[0] == '.') {
      return absl::InvalidArgumentError(absl::StrCat("uplink '", up, "' is not an interface name"));
    }
    absl::StatusOr<std::string> old = ReadSmallFile(absl::StrCat("/proc/sys/net/ipv4/conf/", up, "/forwarding"));
    if (!old.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("uplink ", up, ": no such interface (", old.status().message(), ")"));
    }
    if (absl::StripAsciiWhitespace(*old) != "1") to_enable.push_back(up);
  }
  // Recorded before anything is made or switched on, so that a successor
  // can undo it (CleanupStaleNodeNetwork).
  DSEC_RETURN_IF_ERROR(WriteFile(n->state_path_, absl::StrCat(absl::StrJoin(to_enable, "\n"), "\n"), 0600));
  const std::string net = options.subnet;
  // postrouting: what leaves for elsewhere takes the node's address;
  // forward: sandboxes never reach each other through the node (each also
  // has its own egress policy; this holds whatever the policies say).
  absl::StatusOr<NftTable> table = NftTable::Create(
      "ip", TableName(n->network_, n->prefix_len_),
      absl::StrCat("  chain postrouting {\n"
                   "    type nat hook postrouting priority srcnat; policy accept;\n"
                   "    ip saddr ", net, " ip daddr != ", net, " masquerade\n"
                   "  }\n"
                   "  chain forward {\n"
                   "    type filter hook forward priority filter; policy accept;\n"
                   "    ip saddr ", net, " ip daddr ", net, " drop\n"
                   "  }"));
  if (!table.ok()) return Annotate(table.status(), "sandbox network NAT");
  n->table_.emplace(std::move(*table));
  for (const std::string& up : to_enable) {
    DSEC_RETURN_IF_ERROR(Annotate(EnableForwarding(up), absl::StrCat("uplink ", up)));
    n->forwarding_enabled_.push_back(up);
  }
  n->policies_ahead_ = options.policies_ahead;
  n->netns_ahead_ = options.netns_ahead;
  if (n->policies_ahead_ > 0 || n->netns_ahead_ > 0) {
    n->policy_thread_ = std::thread([raw = n.get()] { raw->AheadLoop(); });
  }
  // The resolver listens on the gateway address, port 53. Without it the
  // node still offers CIDR rules; a sandbox with domain rules is refused.
  dns::Resolver::Options ro;
  const uint32_t gw = n->gateway_;
  ro.listen = {{static_cast<uint8_t>(gw >> 24), static_cast<uint8_t>(gw >> 16), static_cast<uint8_t>(gw >> 8),
                static_cast<uint8_t>(gw)},
               53};
  if (!options.dns_upstream.empty()) {
    const std::string up = options.dns_upstream.find(':') == std::string::npos
                               ? absl::StrCat(options.dns_upstream, ":53")
                               : options.dns_upstream;
    absl::StatusOr<dns::Ipv4Endpoint> e = dns::ParseIpv4Endpoint(up);
    if (!e.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DNS upstream '", options.dns_upstream, "': ", e.status().message()));
    }
    ro.upstream = *e;
  }
  NodeNetwork* raw = n.get();
  ro.policy = [raw](const dns::Ipv4Address& client) { return raw->PolicyOf(client); };
  ro.on_resolved = [raw](const dns::Ipv4Address& client, const dns::DomainRule& rule,
                         std::vector<bpf::EgressRule> addresses,
                         uint32_t ttl_s) { raw->Resolved(client, rule, std::move(addresses), ttl_s); };
  absl::StatusOr<std::unique_ptr<dns::Resolver>> resolver = dns::Resolver::Create(std::move(ro));
  if (resolver.ok()) {
    n->resolver_ = std::move(*resolver);
    n->expiry_ = std::thread([raw] { raw->ExpiryLoop(); });
  } else {
    n->resolver_status_ = absl::UnavailableError(
        absl::StrCat("the node resolver could not start, so domain rules cannot be enforced: ",
                     resolver.status().message()));
    DSEC_LOG(warn, "network: {}", n->resolver_status_.ToString());
  }
  return n;
}

NodeNetwork::~NodeNetwork() {
  {
    std::lock_guard<std::mutex> lock(policy_mu_);
    policy_stop_ = true;
  }
  policy_cv_.notify_all();
  if (policy_thread_.joinable()) policy_thread_.join();
  for (WiredNetns& w : wired_) DropWired(w);
  wired_.clear();
  resolver_.reset();  // its thread calls into this object
  {
    std::lock_guard<std::mutex> lock(expiry_mu_);
    stopping_ = true;
  }
  expiry_cv_.notify_all();
  if (expiry_.joinable()) expiry_.join();
  for (const std::string& up : forwarding_enabled_) {
    if (absl::Status s = WriteSmallFile(absl::StrCat("/proc/sys/net/ipv4/conf/", up, "/forwarding"), "0");
        !s.ok()) {
      DSEC_LOG(warn, "uplink={} restore_forwarding_failed={}", up, s.ToString());
    }
  }
  table_.reset();
  if (!state_path_.empty()) ::unlink(state_path_.c_str());
}

absl::StatusOr<uint32_t> NodeNetwork::Lease() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t first = gateway_ + 1;
  const uint32_t last = network_ + (prefix_len_ == 32 ? 0 : (uint32_t{1} << (32 - prefix_len_))) - 2;
  const uint32_t count = last >= first ? last - first + 1 : 0;
  if (leases_.size() >= count) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sandbox subnet ", subnet_text_, " has no free address (", leases_.size(), " leased)"));
  }
  // The next free one after the last handed out: an address just released
  // is reused last, so a late packet meant for its old owner finds nobody.
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t a = next_;
    next_ = next_ >= last ? first : next_ + 1;
    if (a < first || a > last) continue;
    if (leases_.insert(a).second) return a;
  }
  return absl::ResourceExhaustedError(absl::StrCat("sandbox subnet ", subnet_text_, " has no free address"));
}

void NodeNetwork::Release(uint32_t address) {
  std::lock_guard<std::mutex> lock(mu_);
  leases_.erase(address);
}

size_t NodeNetwork::leased() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.size();
}

std::string NodeNetwork::HostInterface(uint32_t address) { return absl::StrFormat("ds%08x", address); }

void NodeNetwork::Register(uint32_t address, SandboxNetwork* sandbox) {
  std::lock_guard<std::mutex> lock(mu_);
  sandboxes_[address] = sandbox;
}

void NodeNetwork::Unregister(uint32_t address) {
  std::lock_guard<std::mutex> lock(mu_);
  sandboxes_.erase(address);
}

absl::StatusOr<std::unique_ptr<bpf::EgressPolicy>> NodeNetwork::TakePolicy() {
  {
    std::lock_guard<std::mutex> lock(policy_mu_);
    if (!ready_.empty()) {
      std::unique_ptr<bpf::EgressPolicy> p = std::move(ready_.front());
      ready_.pop_front();
      ++taken_ahead_;
      policy_cv_.notify_all();  // refill
      return p;
    }
    ++loaded_inline_;
  }
  policy_cv_.notify_all();
  return bpf::EgressPolicy::Load();
}

uint64_t NodeNetwork::policies_taken_ahead() const {
  std::lock_guard<std::mutex> lock(policy_mu_);
  return taken_ahead_;
}

uint64_t NodeNetwork::policies_loaded_inline() const {
  std::lock_guard<std::mutex> lock(policy_mu_);
  return loaded_inline_;
}

bool NodeNetwork::WaitPoliciesReady(size_t n, int64_t deadline_ns) {
  std::unique_lock<std::mutex> lock(policy_mu_);
  while (ready_.size() < n) {
    const int64_t left = deadline_ns - MonotonicNowNs();
    if (left <= 0) return false;
    policy_cv_.wait_for(lock, std::chrono::nanoseconds(left));
  }
  return true;
}

dns::ResolverCounters NodeNetwork::resolver_counters() const {
  return resolver_ ? resolver_->counters() : dns::ResolverCounters{};
}

std::optional<dns::DomainPolicy> NodeNetwork::PolicyOf(const dns::Ipv4Address& client) {
  const uint32_t a = (uint32_t{client[0]} << 24) | (uint32_t{client[1]} << 16) | (uint32_t{client[2]} << 8) |
                     uint32_t{client[3]};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(a);
  if (it == sandboxes_.end()) return std::nullopt;
  return dns::DomainPolicy{it->second->AllowedDomains(), it->second->DeniedDomains()};
}

void NodeNetwork::Resolved(const dns::Ipv4Address& client, const dns::DomainRule& rule,
                           std::vector<bpf::EgressRule> addresses, uint32_t ttl_s) {
  const uint32_t a = (uint32_t{client[0]} << 24) | (uint32_t{client[1]} << 16) | (uint32_t{client[2]} << 8) |
                     uint32_t{client[3]};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(a);
  if (it == sandboxes_.end()) return;
  const int64_t expires = MonotonicNowNs() + static_cast<int64_t>(ttl_s) * 1'000'000'000;
  if (absl::Status s = it->second->AllowResolved(rule, addresses, expires); !s.ok()) {
    DSEC_LOG(warn, "network: sandbox={} resolved_allow_failed={}", Ipv4Text(a), s.ToString());
  }
}

void NodeNetwork::ExpiryLoop() {
  std::unique_lock<std::mutex> lock(expiry_mu_);
  while (!stopping_) {
    expiry_cv_.wait_for(lock, std::chrono::seconds(1));
    if (stopping_) break;
    lock.unlock();
    {
      const int64_t now = MonotonicNowNs();
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [addr, sb] : sandboxes_) sb->Expire(now);
    }
    lock.lock();
  }
}

absl::StatusOr<NodeNetwork*> NodeNetworkProvider::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  if (node_) return node_.get();
  absl::StatusOr<std::unique_ptr<NodeNetwork>> n = NodeNetwork::Create(options_);
  if (!n.ok()) {
    last_error_ = n.status().ToString();
    // Bad options are the operator's, but to a client they mean the same:
    // this node cannot give the sandbox a network now.
    if (absl::IsInvalidArgument(n.status())) {
      return absl::UnavailableError(absl::StrCat("sandbox networking: ", n.status().message()));
    }
    return n.status();
  }
  node_ = std::move(*n);
  last_error_.clear();
  return node_.get();
}

nlohmann::json NodeNetworkProvider::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json h = {{"subnet", options_.subnet}, {"uplinks", options_.uplinks}};
  h["available"] = last_error_.empty();
  if (!last_error_.empty()) h["reason"] = last_error_;
  h["active"] = node_ != nullptr;
  h["sandboxes"] = node_ ? node_->sandboxes() : 0;
  h["policies_made_ahead_taken"] = node_ ? node_->policies_taken_ahead() : 0;
  h["policies_loaded_on_create"] = node_ ? node_->policies_loaded_inline() : 0;
  h["netns_wired_ahead_taken"] = node_ ? node_->wired_taken_ahead() : 0;
  h["netns_wired_on_create"] = node_ ? node_->wired_made_inline() : 0;
  if (node_) {
    h["resolver"] = node_->resolver_status().ok() ? nlohmann::json("running")
                                                   : nlohmann::json(std::string(node_->resolver_status().message()));
  }
  return h;
}

}  // namespace dsec::network
