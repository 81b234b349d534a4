// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/sandbox_network.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::CreateShared(NodeNetwork* node,
                                                                             const NetworkSpec& spec) {
  // The policy first: a node that cannot enforce it offers no network.
  if ((!spec.egress.allow_domains.empty() || !spec.egress.deny_domains.empty()) &&
      !node->resolver_status().ok()) {
    return node->resolver_status();
  }
  absl::StatusOr<std::unique_ptr<bpf::EgressPolicy>> policy = node->TakePolicy();
  if (!policy.ok()) return Annotate(policy.status(), "egress policy");
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(node, std::move(*policy)));
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
  DSEC_ASSIGN_OR_RETURN(uint32_t address, node_->Lease());
  Link& link = links_[address];
  link.host_if = NodeNetwork::HostInterface(address);
  absl::Status s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<std::unique_ptr<bpf::CgroupLinks>> programs = policy_->Attach(cgroup_dir);
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
  Link& link = links_.at(address);
  DSEC_ASSIGN_OR_RETURN(NlSocket host, NlSocket::Open());
  absl::Status s = host.AddVeth(link.host_if, kSandboxInterface, netns_fd);
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    // A predecessor's (a daemon killed with its sandboxes still dying):
    // the name encodes an address of our subnet, so it is ours to replace.
    (void)host.DeleteLink(link.host_if);
    s = host.AddVeth(link.host_if, kSandboxInterface, netns_fd);
  }
  DSEC_RETURN_IF_ERROR(s);
  link.plumbed = true;
  const std::string gw = Ipv4Text(node_->gateway());
  const std::string me = Ipv4Text(address);
  DSEC_RETURN_IF_ERROR(host.AddAddress(link.host_if, absl::StrCat(gw, "/32")));
  DSEC_RETURN_IF_ERROR(EnableForwarding(link.host_if));
  DSEC_RETURN_IF_ERROR(host.SetUp(link.host_if));
  DSEC_RETURN_IF_ERROR(host.AddRoute(absl::StrCat(me, "/32"), link.host_if, ""));
  DSEC_ASSIGN_OR_RETURN(NlSocket inside, NlSocket::OpenIn(netns_fd));
  DSEC_RETURN_IF_ERROR(inside.AddAddress(kSandboxInterface, absl::StrCat(me, "/", node_->prefix_len())));
  DSEC_RETURN_IF_ERROR(inside.SetUp(kSandboxInterface));
  DSEC_RETURN_IF_ERROR(inside.AddRoute("0.0.0.0/0", kSandboxInterface, gw));
  return absl::OkStatus();
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
    absl::StatusOr<NlSocket> host = NlSocket::Open();
    absl::Status s = host.ok() ? host->DeleteLink(link.host_if) : host.status();
    // NotFound: it went with the namespace already.
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
  std::lock_guard<std::mutex> lock(mu_);
  policy_.reset();  // the programs and maps
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
  for (const char* implicit : {"127.0.0.0/8", "::1/128"}) {
    bpf::EgressRule r = Rule(implicit);
    allow.emplace(bpf::FormatEgressRule(r), r);
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
    DSEC_ASSIGN_OR_RETURN(bpf::EgressCounters c, policy_->Counters());
    out.connects_allowed = c.allowed;
    out.connects_denied = c.denied;
    out.packets_dropped = c.packets_dropped;
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
