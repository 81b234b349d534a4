// SPDX-License-Identifier: Apache-2.0
// The few rtnetlink operations sandbox networking needs (a veth pair with
// one end in a sandbox's namespace, links up, IPv4 addresses and routes,
// link removal), through Debian's libnl-route-3. A socket belongs to the
// network namespace it was opened in: OpenIn() opens one inside a
// sandbox's namespace, on a short-lived thread of its own, so that the
// caller's thread never changes namespace.
//
// Threads: one socket per thread at a time.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

struct nl_sock;

namespace dsec::network {

class NlSocket {
 public:
  // A NETLINK_ROUTE socket in the calling thread's network namespace.
  static absl::StatusOr<NlSocket> Open();
  // One in the namespace `netns_fd` refers to.
  static absl::StatusOr<NlSocket> OpenIn(int netns_fd);
  NlSocket(NlSocket&& other) noexcept : sk_(other.sk_) { other.sk_ = nullptr; }
  NlSocket& operator=(NlSocket&& other) noexcept;
  NlSocket(const NlSocket&) = delete;
  NlSocket& operator=(const NlSocket&) = delete;
  ~NlSocket();

  // A veth pair: `host_name` here, `peer_name` created directly in the
  // namespace `peer_netns_fd` (never visible in this one). AlreadyExists
  // when `host_name` is taken.
  absl::Status AddVeth(const std::string& host_name, const std::string& peer_name, int peer_netns_fd);
  // NotFound when there is no such link.
  absl::StatusOr<int> LinkIndex(const std::string& name);
  absl::Status SetUp(const std::string& name);
  // "10.201.0.5/16" on `name`.
  absl::Status AddAddress(const std::string& name, const std::string& cidr);
  // A route to `dst_cidr` ("0.0.0.0/0", "10.201.3.7/32") out of `name`,
  // through `gateway` ("" = the destination is on the link).
  absl::Status AddRoute(const std::string& dst_cidr, const std::string& name,
                        const std::string& gateway);
  // Deletes the link (a veth takes its peer with it). NotFound if absent.
  absl::Status DeleteLink(const std::string& name);

 private:
  explicit NlSocket(struct nl_sock* sk) : sk_(sk) {}
  struct nl_sock* sk_;
};

// IPv4 forwarding for packets arriving on one interface
// (/proc/sys/net/ipv4/conf/<name>/forwarding): a router on those
// interfaces only, not the node-wide net.ipv4.ip_forward.
absl::Status EnableForwarding(const std::string& name);

// A tap named `name` in the calling thread's network namespace, as a
// microVM monitor takes it over (devices/net's TapBackend::Adopt): single
// queue, IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, owned by root (no TUNSETOWNER:
// attaching takes CAP_NET_ADMIN), not persistent, so it goes when its last
// descriptor closes (the daemon's and the monitor's). AlreadyExists when
// the name is taken.
absl::StatusOr<ScopedFd> MakeTap(const std::string& name);

// Bytes the interface received and sent (its statistics in sysfs).
struct LinkBytes {
  uint64_t rx = 0;
  uint64_t tx = 0;
};
absl::StatusOr<LinkBytes> ReadLinkBytes(const std::string& name);

}  // namespace dsec::network
