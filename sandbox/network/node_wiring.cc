// SPDX-License-Identifier: Apache-2.0
// NodeNetwork's wiring of sandboxes' host ends and veths, and what it makes
// ahead of creates (egress policies, wired namespaces): node_network.h.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/netns.h"
#include "base/status.h"
#include "sandbox/network/netlink.h"
#include "sandbox/network/node_network.h"

namespace dsec::network {
namespace {

constexpr char kSandboxInterface[] = "eth0";

}  // namespace

absl::Status NodeNetwork::ConfigureHostEnd(const std::string& host_if, uint32_t address) {
  DSEC_ASSIGN_OR_RETURN(NlSocket host, NlSocket::Open());
  DSEC_RETURN_IF_ERROR(host.AddAddress(host_if, absl::StrCat(Ipv4Text(gateway_), "/32")));
  DSEC_RETURN_IF_ERROR(EnableForwarding(host_if));
  DSEC_RETURN_IF_ERROR(host.SetUp(host_if));
  return host.AddRoute(absl::StrCat(Ipv4Text(address), "/32"), host_if, "");
}

absl::Status NodeNetwork::WireVeth(uint32_t address, int netns_fd) {
  const std::string host_if = HostInterface(address);
  DSEC_ASSIGN_OR_RETURN(NlSocket host, NlSocket::Open());
  absl::Status s = host.AddVeth(host_if, kSandboxInterface, netns_fd);
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    // A predecessor's (a daemon killed with its sandboxes still dying):
    // the name encodes an address of our subnet, so it is ours to replace.
    (void)host.DeleteLink(host_if);
    s = host.AddVeth(host_if, kSandboxInterface, netns_fd);
  }
  DSEC_RETURN_IF_ERROR(s);
  s = ConfigureHostEnd(host_if, address);
  if (s.ok()) {
    absl::StatusOr<NlSocket> inside = NlSocket::OpenIn(netns_fd);
    s = inside.status();
    if (s.ok()) s = inside->AddAddress(kSandboxInterface, absl::StrCat(Ipv4Text(address), "/", prefix_len_));
    if (s.ok()) s = inside->SetUp(kSandboxInterface);
    if (s.ok()) s = inside->AddRoute("0.0.0.0/0", kSandboxInterface, Ipv4Text(gateway_));
  }
  if (!s.ok()) (void)host.DeleteLink(host_if);
  return s;
}

absl::StatusOr<WiredNetns> NodeNetwork::MakeWired() {
  DSEC_ASSIGN_OR_RETURN(ScopedFd netns, MakeNetns());
  DSEC_ASSIGN_OR_RETURN(uint32_t address, Lease());
  if (absl::Status s = WireVeth(address, netns.get()); !s.ok()) {
    Release(address);
    return s;
  }
  return WiredNetns{std::move(netns), address};
}

void NodeNetwork::DropWired(WiredNetns& w) {
  if (w.address == 0) return;
  absl::StatusOr<NlSocket> host = NlSocket::Open();
  absl::Status s = host.ok() ? host->DeleteLink(HostInterface(w.address)) : host.status();
  if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
    DSEC_LOG(warn, "interface={} delete_failed={}", HostInterface(w.address), s.ToString());
  }
  w.netns.Reset();
  Release(w.address);
  w.address = 0;
}

absl::StatusOr<WiredNetns> NodeNetwork::TakeWired() {
  {
    std::lock_guard<std::mutex> lock(policy_mu_);
    if (!wired_.empty()) {
      WiredNetns w = std::move(wired_.front());
      wired_.pop_front();
      ++wired_taken_ahead_;
      policy_cv_.notify_all();  // refill
      return w;
    }
    ++wired_inline_;
  }
  policy_cv_.notify_all();
  return MakeWired();
}

uint64_t NodeNetwork::wired_taken_ahead() const {
  std::lock_guard<std::mutex> lock(policy_mu_);
  return wired_taken_ahead_;
}

uint64_t NodeNetwork::wired_made_inline() const {
  std::lock_guard<std::mutex> lock(policy_mu_);
  return wired_inline_;
}

bool NodeNetwork::WaitWiredReady(size_t n, int64_t deadline_ns) {
  std::unique_lock<std::mutex> lock(policy_mu_);
  while (wired_.size() < n) {
    const int64_t left = deadline_ns - MonotonicNowNs();
    if (left <= 0) return false;
    policy_cv_.wait_for(lock, std::chrono::nanoseconds(left));
  }
  return true;
}

size_t NodeNetwork::sandboxes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sandboxes_.size();
}

void NodeNetwork::AheadLoop() {
  std::unique_lock<std::mutex> lock(policy_mu_);
  int64_t wiring_retry_ns = 0;  // after a failed wiring: when to try again
  bool wiring_warned = false;
  while (!policy_stop_) {
    // Policies first: every networked create takes one.
    const bool policy = !policies_failed_ && ready_.size() < policies_ahead_;
    const bool wired_short = wired_.size() < netns_ahead_;
    const int64_t now = MonotonicNowNs();
    const bool wired = wired_short && now >= wiring_retry_ns;
    if (!policy && !wired) {
      if (wired_short) {
        policy_cv_.wait_for(lock, std::chrono::nanoseconds(wiring_retry_ns - now));
      } else {
        policy_cv_.wait(lock);
      }
      continue;
    }
    lock.unlock();
    if (policy) {
      absl::StatusOr<std::unique_ptr<bpf::EgressPolicy>> p = bpf::EgressPolicy::Load();
      lock.lock();
      if (p.ok()) {
        ready_.push_back(std::move(*p));
      } else {
        // The kernel refuses it: creates load their own and report why.
        DSEC_LOG(warn, "network: no egress policies made ahead: {}", p.status().ToString());
        policies_failed_ = true;
      }
    } else {
      absl::StatusOr<WiredNetns> w = MakeWired();
      lock.lock();
      if (w.ok()) {
        wired_.push_back(std::move(*w));
        wiring_warned = false;
      } else {
        // Creates wire their own meanwhile (and say why if they cannot
        // either); a full subnet may clear, so try again in a second.
        if (!wiring_warned) DSEC_LOG(warn, "network: no namespaces wired ahead: {}", w.status().ToString());
        wiring_warned = true;
        wiring_retry_ns = MonotonicNowNs() + 1'000'000'000;
      }
    }
    policy_cv_.notify_all();  // WaitPoliciesReady, WaitWiredReady
  }
}

}  // namespace dsec::network
