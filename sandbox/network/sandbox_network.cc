// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/sandbox_network.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/network/netlink.h"

namespace dsec::network {
namespace {

bpf::EgressRule Rule(const std::string& text) {
  absl::StatusOr<bpf::EgressRule> r = bpf::ParseEgressRule(text);
  DSEC_CHECK(r.ok());
  return *r;
}

}  // namespace

// The rule API both BPF loaders offer, and what each counts.
class RuleTarget {
 public:
  virtual ~RuleTarget() = default;
  virtual absl::Status Allow(const bpf::EgressRule& rule) = 0;
  virtual absl::Status Deny(const bpf::EgressRule& rule) = 0;
  virtual absl::Status RemoveAllow(const bpf::EgressRule& rule) = 0;
  virtual absl::Status RemoveDeny(const bpf::EgressRule& rule) = 0;
  // The connects and packets of NetworkCounters.
  virtual absl::StatusOr<NetworkCounters> Counters() const = 0;
  // Implicit rules besides the node resolver: the sandbox's loopback,
  // where its own sockets' traffic to it passes the policy.
  virtual bool needs_loopback() const = 0;
  // The programs on one more namespace's cgroup v2 directory (Join).
  virtual absl::StatusOr<std::unique_ptr<bpf::CgroupLinks>> AttachToCgroup(const std::string& cgroup_dir) = 0;
};

namespace {

template <typename Loader>
class LoaderRules : public RuleTarget {
 public:
  explicit LoaderRules(std::unique_ptr<Loader> loader) : loader_(std::move(loader)) {}
  absl::Status Allow(const bpf::EgressRule& rule) override { return loader_->Allow(rule); }
  absl::Status Deny(const bpf::EgressRule& rule) override { return loader_->Deny(rule); }
  absl::Status RemoveAllow(const bpf::EgressRule& rule) override { return loader_->RemoveAllow(rule); }
  absl::Status RemoveDeny(const bpf::EgressRule& rule) override { return loader_->RemoveDeny(rule); }
  Loader* loader() const { return loader_.get(); }

 private:
  std::unique_ptr<Loader> loader_;
};

// A container's cgroup programs: connect()/sendmsg() calls, and the
// cgroup_skb wall's drops.
class CgroupRules : public LoaderRules<bpf::EgressPolicy> {
 public:
  using LoaderRules::LoaderRules;
  absl::StatusOr<NetworkCounters> Counters() const override {
    DSEC_ASSIGN_OR_RETURN(bpf::EgressCounters c, loader()->Counters());
    NetworkCounters out;
    out.connects_allowed = c.allowed;
    out.connects_denied = c.denied;
    out.packets_dropped = c.packets_dropped;
    return out;
  }
  bool needs_loopback() const override { return true; }
  absl::StatusOr<std::unique_ptr<bpf::CgroupLinks>> AttachToCgroup(const std::string& cgroup_dir) override {
    return loader()->Attach(cgroup_dir);
  }
};

// A microVM tap's filter: the packets that start connections, and every
// frame it dropped.
class TapRules : public LoaderRules<bpf::TapFilter> {
 public:
  using LoaderRules::LoaderRules;
  absl::StatusOr<NetworkCounters> Counters() const override {
    DSEC_ASSIGN_OR_RETURN(bpf::TapCounters c, loader()->Counters());
    NetworkCounters out;
    out.connects_allowed = c.attempts_allowed;
    out.connects_denied = c.attempts_refused;
    out.packets_dropped = c.packets_dropped;
    return out;
  }
  bool needs_loopback() const override { return false; }
  absl::StatusOr<std::unique_ptr<bpf::CgroupLinks>> AttachToCgroup(const std::string&) override {
    return absl::FailedPreconditionError("a microVM's network has no namespaces to join");
  }
};

}  // namespace

SandboxNetwork::SandboxNetwork(NodeNetwork* node, std::unique_ptr<RuleTarget> rules)
    : node_(node), policy_(std::move(rules)) {}

absl::Status SandboxNetwork::CheckResolver(NodeNetwork* node, const NetworkSpec& spec) {
  // A node that cannot enforce domain rules offers no network with them.
  if ((!spec.egress.allow_domains.empty() || !spec.egress.deny_domains.empty()) &&
      !node->resolver_status().ok()) {
    return node->resolver_status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::CreateShared(NodeNetwork* node,
                                                                             const NetworkSpec& spec) {
  // The policy first: a node that cannot enforce it offers no network.
  DSEC_RETURN_IF_ERROR(CheckResolver(node, spec));
  absl::StatusOr<std::unique_ptr<bpf::EgressPolicy>> policy = node->TakePolicy();
  if (!policy.ok()) return Annotate(policy.status(), "egress policy");
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(node, std::make_unique<CgroupRules>(std::move(*policy))));
  std::lock_guard<std::mutex> lock(n->mu_);
  DSEC_RETURN_IF_ERROR(n->Sync(spec));
  n->spec_ = spec;
  return n;
}

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::Create(NodeNetwork* node, int netns_fd,
                                                                       const std::string& cgroup_dir,
                                                                       const NetworkSpec& spec) {
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<SandboxNetwork> n, CreateShared(node, spec));
  DSEC_ASSIGN_OR_RETURN(n->own_member_, n->Join(netns_fd, cgroup_dir));
  return n;
}

absl::StatusOr<std::unique_ptr<NetworkMember>> SandboxNetwork::Join(int netns_fd, const std::string& cgroup_dir) {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  if (closed_) return absl::FailedPreconditionError("the sandbox's network is gone");
  if (tap_.valid()) return absl::FailedPreconditionError("a microVM's network has no namespaces to join");
  DSEC_ASSIGN_OR_RETURN(uint32_t address, node_->Lease());
  Link& link = links_[address];
  link.host_if = NodeNetwork::HostInterface(address);
  absl::Status s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<std::unique_ptr<bpf::CgroupLinks>> programs = policy_->AttachToCgroup(cgroup_dir);
    if (programs.ok()) {
      link.programs = std::move(*programs);
    } else {
      s = Annotate(programs.status(), "egress policy");
    }
  }
  if (s.ok()) {
    node_->Register(address, this);
    s = Plumb(address, netns_fd);
  }
  if (!s.ok()) {
    LeaveLocked(address);
    return s;
  }
  return std::make_unique<NetworkMember>(this, address);
}

absl::Status SandboxNetwork::Plumb(uint32_t address, int netns_fd) {
  DSEC_RETURN_IF_ERROR(node_->WireVeth(address, netns_fd));
  links_.at(address).plumbed = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::CreateAhead(NodeNetwork* node,
                                                                            const NetworkSpec& spec) {
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<SandboxNetwork> n, CreateShared(node, spec));
  DSEC_ASSIGN_OR_RETURN(WiredNetns wired, node->TakeWired());
  std::lock_guard<std::mutex> links_lock(n->links_mu_);
  Link& link = n->links_[wired.address];
  link.host_if = NodeNetwork::HostInterface(wired.address);
  link.plumbed = true;  // from here on the lease and the veth are ours
  node->Register(wired.address, n.get());
  n->ahead_netns_ = std::move(wired.netns);
  n->own_member_ = std::make_unique<NetworkMember>(n.get(), wired.address);
  return n;
}

absl::Status SandboxNetwork::AttachTo(const std::string& cgroup_dir) {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  if (closed_) return absl::FailedPreconditionError("the sandbox's network is gone");
  if (!own_member_ || !ahead_netns_.valid()) {
    return absl::FailedPreconditionError("only a network made by CreateAhead is attached later, once");
  }
  Link& link = links_.at(own_member_->address());
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<std::unique_ptr<bpf::CgroupLinks>> programs = policy_->AttachToCgroup(cgroup_dir);
    if (!programs.ok()) return Annotate(programs.status(), "egress policy");
    link.programs = std::move(*programs);
  }
  // The sandbox's init holds its namespace now.
  ahead_netns_.Reset();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::CreateTap(NodeNetwork* node,
                                                                          const NetworkSpec& spec) {
  DSEC_RETURN_IF_ERROR(CheckResolver(node, spec));
  absl::StatusOr<std::unique_ptr<bpf::TapFilter>> filter = bpf::TapFilter::Load();
  if (!filter.ok()) return Annotate(filter.status(), "tap filter");
  bpf::TapFilter* raw = filter->get();
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(node, std::make_unique<TapRules>(std::move(*filter))));
  {
    std::lock_guard<std::mutex> lock(n->mu_);
    DSEC_RETURN_IF_ERROR(n->Sync(spec));
    n->spec_ = spec;
  }
  std::lock_guard<std::mutex> links_lock(n->links_mu_);
  DSEC_ASSIGN_OR_RETURN(uint32_t address, node->Lease());
  raw->RequireSource(address);
  n->links_[address].host_if = NodeNetwork::HostInterface(address);
  // Registered before the guest can send (it gets the tap only later).
  node->Register(address, n.get());
  if (absl::Status s = n->PlumbTap(address, raw); !s.ok()) {
    n->LeaveLocked(address);
    return s;
  }
  return n;
}

absl::Status SandboxNetwork::PlumbTap(uint32_t address, bpf::TapFilter* filter) {
  Link& link = links_.at(address);
  DSEC_ASSIGN_OR_RETURN(NlSocket host, NlSocket::Open());
  absl::StatusOr<ScopedFd> tap = MakeTap(link.host_if);
  if (tap.status().code() == absl::StatusCode::kAlreadyExists) {
    // A predecessor's (a daemon killed while its monitor still held the
    // tap): the name encodes an address of our subnet, so it is ours.
    (void)host.DeleteLink(link.host_if);
    tap = MakeTap(link.host_if);
  }
  if (!tap.ok()) return Annotate(tap.status(), "the sandbox's tap");
  tap_ = std::move(*tap);
  link.plumbed = true;
  DSEC_ASSIGN_OR_RETURN(int ifindex, host.LinkIndex(link.host_if));
  {
    // Before the tap is up: no frame passes unfiltered.
    std::lock_guard<std::mutex> lock(mu_);
    DSEC_RETURN_IF_ERROR(Annotate(filter->AttachToInterface(ifindex), "tap filter"));
  }
  return node_->ConfigureHostEnd(link.host_if, address);
}

std::string SandboxNetwork::address_cidr() const {
  const uint32_t a = address();
  return a == 0 ? "" : absl::StrCat(Ipv4Text(a), "/", node_->prefix_len());
}

std::string SandboxNetwork::GuestMac() const {
  const uint32_t a = address();
  return absl::StrFormat("02:00:%02x:%02x:%02x:%02x", (a >> 24) & 0xff, (a >> 16) & 0xff, (a >> 8) & 0xff,
                         a & 0xff);
}

NetworkMember::~NetworkMember() { network_->Leave(address_); }

void SandboxNetwork::Leave(uint32_t address) {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  LeaveLocked(address);
}

void SandboxNetwork::LeaveLocked(uint32_t address) {
  auto it = links_.find(address);
  if (it == links_.end()) return;  // Close took it already
  // Out of the registry first, without our lock: the resolver's thread
  // holds the registry's lock while it calls into us.
  node_->Unregister(address);
  Link& link = it->second;
  link.programs.reset();  // detaches the policy from its cgroup
  if (link.plumbed) {
    // Its bytes stay in the counters.
    if (absl::StatusOr<LinkBytes> bytes = ReadLinkBytes(link.host_if); bytes.ok()) {
      gone_bytes_out_ += bytes->rx;
      gone_bytes_in_ += bytes->tx;
    }
    // A tap goes with its last descriptor; deleted all the same, in case a
    // monitor still holds one.
    tap_.Reset();
    absl::StatusOr<NlSocket> host = NlSocket::Open();
    absl::Status s = host.ok() ? host->DeleteLink(link.host_if) : host.status();
    // NotFound: it went with the namespace (veth) or with its last
    // descriptor (tap) already.
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      DSEC_LOG(warn, "interface={} delete_failed={}", link.host_if, s.ToString());
    }
  }
  links_.erase(it);
  node_->Release(address);
}

SandboxNetwork::~SandboxNetwork() {
  Close();
  own_member_.reset();  // its namespace went with Close: nothing left to do
}

void SandboxNetwork::Close() {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  if (closed_.exchange(true)) return;
  while (!links_.empty()) LeaveLocked(links_.begin()->first);
  ahead_netns_.Reset();
  // The programs and maps. A tap's filter went with the tap just now
  // (interface indices are not reused at once, so its detach cannot reach
  // another interface): deleting the tap first leaves no moment in which
  // the guest's frames pass unfiltered.
  std::lock_guard<std::mutex> lock(mu_);
  policy_.reset();
}

std::vector<uint32_t> SandboxNetwork::addresses() const {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  std::vector<uint32_t> out;
  for (const auto& [address, link] : links_) out.push_back(address);
  return out;
}

uint32_t SandboxNetwork::address() const {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  return links_.empty() ? 0 : links_.begin()->first;
}

std::string SandboxNetwork::address_text() const {
  const uint32_t a = address();
  return a == 0 ? "" : Ipv4Text(a);
}

std::string SandboxNetwork::host_interface() const {
  std::lock_guard<std::mutex> links_lock(links_mu_);
  return links_.empty() ? "" : links_.begin()->second.host_if;
}

absl::Status SandboxNetwork::Sync(const NetworkSpec& spec) {
  std::map<std::string, bpf::EgressRule> allow, deny;
  if (policy_->needs_loopback()) {
    for (const char* implicit : {"127.0.0.0/8", "::1/128"}) {
      bpf::EgressRule r = Rule(implicit);
      allow.emplace(bpf::FormatEgressRule(r), r);
    }
  }
  bpf::EgressRule dns = Rule(absl::StrCat(Ipv4Text(node_->gateway()), ":53"));
  allow.emplace(bpf::FormatEgressRule(dns), dns);
  for (const bpf::EgressRule& r : spec.egress.allow) allow.emplace(bpf::FormatEgressRule(r), r);
  for (const auto& [k, r] : resolved_) allow.emplace(bpf::FormatEgressRule(r.rule), r.rule);
  for (const bpf::EgressRule& r : spec.egress.deny) deny.emplace(bpf::FormatEgressRule(r), r);
  // Denials first, then allowances: in between, the stricter of the two
  // policies holds.
  for (const auto& [k, r] : deny) {
    if (denied_.count(k) == 0) {
      DSEC_RETURN_IF_ERROR(policy_->Deny(r));
      denied_.emplace(k, r);
    }
  }
  for (auto it = allowed_.begin(); it != allowed_.end();) {
    if (allow.count(it->first) == 0) {
      DSEC_RETURN_IF_ERROR(policy_->RemoveAllow(it->second));
      it = allowed_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [k, r] : allow) {
    if (allowed_.count(k) == 0) {
      DSEC_RETURN_IF_ERROR(policy_->Allow(r));
      allowed_.emplace(k, r);
    }
  }
  for (auto it = denied_.begin(); it != denied_.end();) {
    if (deny.count(it->first) == 0) {
      DSEC_RETURN_IF_ERROR(policy_->RemoveDeny(it->second));
      it = denied_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

absl::Status SandboxNetwork::SetSpec(const NetworkSpec& spec) {
  DSEC_RETURN_IF_ERROR(CheckResolver(node_, spec));
  std::lock_guard<std::mutex> lock(mu_);
  if (!policy_) return absl::FailedPreconditionError("the sandbox's network is gone");
  // Addresses resolved for a domain rule the new policy drops go at once.
  for (auto it = resolved_.begin(); it != resolved_.end();) {
    const auto& d = spec.egress.allow_domains;
    if (std::find(d.begin(), d.end(), it->second.from) == d.end()) {
      it = resolved_.erase(it);
    } else {
      ++it;
    }
  }
  DSEC_RETURN_IF_ERROR(Sync(spec));
  spec_ = spec;
  return absl::OkStatus();
}

NetworkSpec SandboxNetwork::spec() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spec_;
}

absl::StatusOr<NetworkCounters> SandboxNetwork::Counters() const {
  NetworkCounters out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!policy_) return absl::FailedPreconditionError("the sandbox's network is gone");
    DSEC_ASSIGN_OR_RETURN(out, policy_->Counters());
  }
  // The host ends receive what the sandbox sends.
  std::lock_guard<std::mutex> links_lock(links_mu_);
  out.bytes_out = gone_bytes_out_;
  out.bytes_in = gone_bytes_in_;
  for (const auto& [address, link] : links_) {
    if (absl::StatusOr<LinkBytes> bytes = ReadLinkBytes(link.host_if); bytes.ok()) {
      out.bytes_out += bytes->rx;
      out.bytes_in += bytes->tx;
    }
  }
  return out;
}

std::vector<dns::DomainRule> SandboxNetwork::AllowedDomains() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spec_.egress.allow_domains;
}

std::vector<dns::DomainRule> SandboxNetwork::DeniedDomains() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spec_.egress.deny_domains;
}

absl::Status SandboxNetwork::AllowResolved(const dns::DomainRule& rule,
                                           const std::vector<bpf::EgressRule>& addresses,
                                           int64_t expires_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!policy_) return absl::FailedPreconditionError("the sandbox's network is gone");
  // An answer that raced a PATCH dropping its rule allows nothing.
  if (std::find(spec_.egress.allow_domains.begin(), spec_.egress.allow_domains.end(), rule) ==
      spec_.egress.allow_domains.end()) {
    return absl::OkStatus();
  }
  for (const bpf::EgressRule& r : addresses) {
    auto [it, fresh] = resolved_.try_emplace(
        absl::StrCat(bpf::FormatEgressRule(r), " ", dns::FormatDomainRule(rule)), Resolved{r, rule, expires_ns});
    if (!fresh) it->second.expires_ns = std::max(it->second.expires_ns, expires_ns);
  }
  return Sync(spec_);
}

void SandboxNetwork::Expire(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!policy_) return;
  bool changed = false;
  for (auto it = resolved_.begin(); it != resolved_.end();) {
    if (it->second.expires_ns <= now_ns) {
      it = resolved_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (!changed) return;
  if (absl::Status s = Sync(spec_); !s.ok()) {
    DSEC_LOG(warn, "network: expire_failed={}", s.ToString());
  }
}

size_t SandboxNetwork::resolved_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resolved_.size();
}

std::string SandboxNetwork::ResolvConf() const {
  return absl::StrCat("nameserver ", Ipv4Text(node_->gateway()), "\n");
}

}  // namespace dsec::network
