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

constexpr char kSandboxInterface[] = "eth0";

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
};

}  // namespace

SandboxNetwork::SandboxNetwork(NodeNetwork* node, uint32_t address, std::unique_ptr<RuleTarget> rules)
    : node_(node), address_(address), host_if_(NodeNetwork::HostInterface(address)), policy_(std::move(rules)) {}

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::Create(NodeNetwork* node, int netns_fd,
                                                                       const std::string& cgroup_dir,
                                                                       const NetworkSpec& spec) {
  // The policy first: a node that cannot enforce it offers no network.
  if ((!spec.egress.allow_domains.empty() || !spec.egress.deny_domains.empty()) &&
      !node->resolver_status().ok()) {
    return node->resolver_status();
  }
  absl::StatusOr<std::unique_ptr<bpf::EgressPolicy>> policy = bpf::EgressPolicy::Load();
  if (!policy.ok()) return Annotate(policy.status(), "egress policy");
  DSEC_ASSIGN_OR_RETURN(uint32_t address, node->Lease());
  bpf::EgressPolicy* programs = policy->get();
  std::unique_ptr<SandboxNetwork> n(
      new SandboxNetwork(node, address, std::make_unique<CgroupRules>(std::move(*policy))));
  {
    std::lock_guard<std::mutex> lock(n->mu_);
    DSEC_RETURN_IF_ERROR(n->Sync(spec));
    n->spec_ = spec;
    DSEC_RETURN_IF_ERROR(Annotate(programs->AttachToCgroup(cgroup_dir), "egress policy"));
  }
  node->Register(address, n.get());
  DSEC_RETURN_IF_ERROR(n->Plumb(netns_fd));
  return n;
}

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::CreateTap(NodeNetwork* node,
                                                                          const NetworkSpec& spec) {
  if ((!spec.egress.allow_domains.empty() || !spec.egress.deny_domains.empty()) &&
      !node->resolver_status().ok()) {
    return node->resolver_status();
  }
  absl::StatusOr<std::unique_ptr<bpf::TapFilter>> filter = bpf::TapFilter::Load();
  if (!filter.ok()) return Annotate(filter.status(), "tap filter");
  DSEC_ASSIGN_OR_RETURN(uint32_t address, node->Lease());
  bpf::TapFilter* raw = filter->get();
  raw->RequireSource(address);
  std::unique_ptr<SandboxNetwork> n(
      new SandboxNetwork(node, address, std::make_unique<TapRules>(std::move(*filter))));
  {
    std::lock_guard<std::mutex> lock(n->mu_);
    DSEC_RETURN_IF_ERROR(n->Sync(spec));
    n->spec_ = spec;
  }
  // Registered before the guest can send (it gets the tap only later).
  node->Register(address, n.get());
  DSEC_RETURN_IF_ERROR(n->PlumbTap(raw));
  return n;
}

absl::Status SandboxNetwork::PlumbTap(bpf::TapFilter* filter) {
  DSEC_ASSIGN_OR_RETURN(NlSocket host, NlSocket::Open());
  absl::StatusOr<ScopedFd> tap = MakeTap(host_if_);
  if (tap.status().code() == absl::StatusCode::kAlreadyExists) {
    // A predecessor's (a daemon killed while its monitor still held the
    // tap): the name encodes an address of our subnet, so it is ours.
    (void)host.DeleteLink(host_if_);
    tap = MakeTap(host_if_);
  }
  if (!tap.ok()) return Annotate(tap.status(), "the sandbox's tap");
  tap_ = std::move(*tap);
  plumbed_ = true;
  DSEC_ASSIGN_OR_RETURN(int ifindex, host.LinkIndex(host_if_));
  {
    // Before the tap is up: no frame passes unfiltered.
    std::lock_guard<std::mutex> lock(mu_);
    DSEC_RETURN_IF_ERROR(Annotate(filter->AttachToInterface(ifindex), "tap filter"));
  }
  return ConfigureHostEnd(host);
}

absl::Status SandboxNetwork::ConfigureHostEnd(NlSocket& host) {
  DSEC_RETURN_IF_ERROR(host.AddAddress(host_if_, absl::StrCat(Ipv4Text(node_->gateway()), "/32")));
  DSEC_RETURN_IF_ERROR(EnableForwarding(host_if_));
  DSEC_RETURN_IF_ERROR(host.SetUp(host_if_));
  return host.AddRoute(absl::StrCat(Ipv4Text(address_), "/32"), host_if_, "");
}

std::string SandboxNetwork::address_cidr() const {
  return absl::StrCat(Ipv4Text(address_), "/", node_->prefix_len());
}

std::string SandboxNetwork::GuestMac() const {
  return absl::StrFormat("02:00:%02x:%02x:%02x:%02x", (address_ >> 24) & 0xff, (address_ >> 16) & 0xff,
                         (address_ >> 8) & 0xff, address_ & 0xff);
}

absl::Status SandboxNetwork::Plumb(int netns_fd) {
  DSEC_ASSIGN_OR_RETURN(NlSocket host, NlSocket::Open());
  absl::Status s = host.AddVeth(host_if_, kSandboxInterface, netns_fd);
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    // A predecessor's (a daemon killed with its sandboxes still dying):
    // the name encodes an address of our subnet, so it is ours to replace.
    (void)host.DeleteLink(host_if_);
    s = host.AddVeth(host_if_, kSandboxInterface, netns_fd);
  }
  DSEC_RETURN_IF_ERROR(s);
  plumbed_ = true;
  const std::string gw = Ipv4Text(node_->gateway());
  const std::string me = Ipv4Text(address_);
  DSEC_RETURN_IF_ERROR(ConfigureHostEnd(host));
  DSEC_ASSIGN_OR_RETURN(NlSocket inside, NlSocket::OpenIn(netns_fd));
  DSEC_RETURN_IF_ERROR(inside.AddAddress(kSandboxInterface, absl::StrCat(me, "/", node_->prefix_len())));
  DSEC_RETURN_IF_ERROR(inside.SetUp(kSandboxInterface));
  DSEC_RETURN_IF_ERROR(inside.AddRoute("0.0.0.0/0", kSandboxInterface, gw));
  return absl::OkStatus();
}

SandboxNetwork::~SandboxNetwork() { Close(); }

void SandboxNetwork::Close() {
  if (closed_.exchange(true)) return;
  // Out of the registry first, without our lock: the resolver's thread
  // holds the registry's lock while it calls into us.
  node_->Unregister(address_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy_.reset();  // detaches the programs
  }
  if (plumbed_) {
    // A tap goes with its last descriptor; deleted all the same, in case a
    // monitor still holds one.
    tap_.Reset();
    absl::StatusOr<NlSocket> host = NlSocket::Open();
    absl::Status s = host.ok() ? host->DeleteLink(host_if_) : host.status();
    // NotFound: it went with the sandbox's namespace (veth) or with its
    // last descriptor (tap) already.
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      DSEC_LOG(warn, "interface={} delete_failed={}", host_if_, s.ToString());
    }
  }
  node_->Release(address_);
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
  if ((!spec.egress.allow_domains.empty() || !spec.egress.deny_domains.empty()) &&
      !node_->resolver_status().ok()) {
    return node_->resolver_status();
  }
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
  // The host end receives what the sandbox sends.
  absl::StatusOr<LinkBytes> bytes = ReadLinkBytes(host_if_);
  if (bytes.ok()) {
    out.bytes_out = bytes->rx;
    out.bytes_in = bytes->tx;
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
    DSEC_LOG(warn, "interface={} expire_failed={}", host_if_, s.ToString());
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
