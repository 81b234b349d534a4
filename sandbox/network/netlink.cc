// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/netlink.h"

#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/addr.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::network {
namespace {

// libnl's negative NLE_* codes as a Status of the matching kind.
absl::Status NlError(const std::string& what, int err) {
  const std::string msg = absl::StrCat(what, ": ", nl_geterror(err));
  switch (-err) {
    case NLE_EXIST:
      return absl::AlreadyExistsError(msg);
    case NLE_OBJ_NOTFOUND:
    case NLE_NODEV:
      return absl::NotFoundError(msg);
    case NLE_PERM:
      return absl::PermissionDeniedError(msg);
    case NLE_INVAL:
    case NLE_RANGE:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

struct AddrDeleter {
  void operator()(struct nl_addr* a) const { nl_addr_put(a); }
};
using AddrPtr = std::unique_ptr<struct nl_addr, AddrDeleter>;
struct LinkDeleter {
  void operator()(struct rtnl_link* l) const { rtnl_link_put(l); }
};
using LinkPtr = std::unique_ptr<struct rtnl_link, LinkDeleter>;

absl::StatusOr<AddrPtr> ParseAddr(const std::string& text) {
  struct nl_addr* a = nullptr;
  if (int err = nl_addr_parse(text.c_str(), AF_INET, &a); err < 0) {
    return absl::InvalidArgumentError(absl::StrCat("address ", text, ": ", nl_geterror(err)));
  }
  return AddrPtr(a);
}

}  // namespace

absl::StatusOr<NlSocket> NlSocket::Open() {
  struct nl_sock* sk = nl_socket_alloc();
  if (sk == nullptr) return absl::ResourceExhaustedError("nl_socket_alloc");
  if (int err = nl_connect(sk, NETLINK_ROUTE); err < 0) {
    nl_socket_free(sk);
    return NlError("nl_connect(NETLINK_ROUTE)", err);
  }
  return NlSocket(sk);
}

absl::StatusOr<NlSocket> NlSocket::OpenIn(int netns_fd) {
  absl::StatusOr<NlSocket> out = absl::InternalError("no socket");
  // setns() changes the calling thread only: this thread enters the
  // namespace, opens the socket (which stays bound to it) and ends.
  std::thread t([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      out = ErrnoToStatus("setns(CLONE_NEWNET)");
      return;
    }
    out = Open();
  });
  t.join();
  return out;
}

NlSocket& NlSocket::operator=(NlSocket&& other) noexcept {
  if (this != &other) {
    if (sk_ != nullptr) nl_socket_free(sk_);
    sk_ = other.sk_;
    other.sk_ = nullptr;
  }
  return *this;
}

NlSocket::~NlSocket() {
  if (sk_ != nullptr) nl_socket_free(sk_);
}

absl::Status NlSocket::AddVeth(const std::string& host_name, const std::string& peer_name,
                               int peer_netns_fd) {
  struct rtnl_link* link = rtnl_link_veth_alloc();
  if (link == nullptr) return absl::ResourceExhaustedError("rtnl_link_veth_alloc");
  rtnl_link_set_name(link, host_name.c_str());
  struct rtnl_link* peer = rtnl_link_veth_get_peer(link);
  rtnl_link_set_name(peer, peer_name.c_str());
  rtnl_link_set_ns_fd(peer, peer_netns_fd);
  const int err = rtnl_link_add(sk_, link, NLM_F_CREATE | NLM_F_EXCL);
  rtnl_link_put(peer);
  rtnl_link_veth_release(link);
  if (err < 0) return NlError(absl::StrCat("add veth ", host_name, "/", peer_name), err);
  return absl::OkStatus();
}

absl::StatusOr<int> NlSocket::LinkIndex(const std::string& name) {
  struct rtnl_link* link = nullptr;
  if (int err = rtnl_link_get_kernel(sk_, 0, name.c_str(), &link); err < 0) {
    return NlError(absl::StrCat("link ", name), err);
  }
  LinkPtr owned(link);
  return rtnl_link_get_ifindex(link);
}

absl::Status NlSocket::SetUp(const std::string& name) {
  struct rtnl_link* link = nullptr;
  if (int err = rtnl_link_get_kernel(sk_, 0, name.c_str(), &link); err < 0) {
    return NlError(absl::StrCat("link ", name), err);
  }
  LinkPtr owned(link);
  LinkPtr change(rtnl_link_alloc());
  if (!change) return absl::ResourceExhaustedError("rtnl_link_alloc");
  rtnl_link_set_flags(change.get(), IFF_UP);
  if (int err = rtnl_link_change(sk_, link, change.get(), 0); err < 0) {
    return NlError(absl::StrCat("set ", name, " up"), err);
  }
  return absl::OkStatus();
}

absl::Status NlSocket::AddAddress(const std::string& name, const std::string& cidr) {
  DSEC_ASSIGN_OR_RETURN(int index, LinkIndex(name));
  DSEC_ASSIGN_OR_RETURN(AddrPtr local, ParseAddr(cidr));
  struct rtnl_addr* a = rtnl_addr_alloc();
  if (a == nullptr) return absl::ResourceExhaustedError("rtnl_addr_alloc");
  rtnl_addr_set_ifindex(a, index);
  int err = rtnl_addr_set_local(a, local.get());
  if (err >= 0) err = rtnl_addr_add(sk_, a, 0);
  rtnl_addr_put(a);
  if (err < 0) return NlError(absl::StrCat("add address ", cidr, " to ", name), err);
  return absl::OkStatus();
}

absl::Status NlSocket::AddRoute(const std::string& dst_cidr, const std::string& name,
                                const std::string& gateway) {
  DSEC_ASSIGN_OR_RETURN(int index, LinkIndex(name));
  DSEC_ASSIGN_OR_RETURN(AddrPtr dst, ParseAddr(dst_cidr));
  AddrPtr gw;
  if (!gateway.empty()) {
    DSEC_ASSIGN_OR_RETURN(gw, ParseAddr(gateway));
  }
  struct rtnl_route* r = rtnl_route_alloc();
  if (r == nullptr) return absl::ResourceExhaustedError("rtnl_route_alloc");
  rtnl_route_set_family(r, AF_INET);
  rtnl_route_set_table(r, RT_TABLE_MAIN);
  rtnl_route_set_protocol(r, RTPROT_STATIC);
  rtnl_route_set_scope(r, gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
  int err = rtnl_route_set_dst(r, dst.get());
  struct rtnl_nexthop* nh = rtnl_route_nh_alloc();
  if (nh == nullptr) {
    rtnl_route_put(r);
    return absl::ResourceExhaustedError("rtnl_route_nh_alloc");
  }
  rtnl_route_nh_set_ifindex(nh, index);
  if (gw) rtnl_route_nh_set_gateway(nh, gw.get());
  rtnl_route_add_nexthop(r, nh);  // the route owns it now
  if (err >= 0) err = rtnl_route_add(sk_, r, NLM_F_CREATE | NLM_F_EXCL);
  rtnl_route_put(r);
  if (err < 0) {
    return NlError(absl::StrCat("add route ", dst_cidr, " dev ", name,
                                gateway.empty() ? "" : absl::StrCat(" via ", gateway)),
                   err);
  }
  return absl::OkStatus();
}

absl::Status NlSocket::DeleteLink(const std::string& name) {
  LinkPtr link(rtnl_link_alloc());
  if (!link) return absl::ResourceExhaustedError("rtnl_link_alloc");
  rtnl_link_set_name(link.get(), name.c_str());
  if (int err = rtnl_link_delete(sk_, link.get()); err < 0) {
    return NlError(absl::StrCat("delete link ", name), err);
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedFd> MakeTap(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(absl::StrCat("tap name \"", name, "\" must be 1-", IFNAMSIZ - 1, " bytes"));
  }
  if (::if_nametoindex(name.c_str()) != 0) {
    // TUNSETIFF would attach to an existing tap rather than fail.
    return absl::AlreadyExistsError(absl::StrCat("network interface ", name, " exists"));
  }
  ScopedFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus("open /dev/net/tun");
  struct ifreq ifr = {};
  std::memcpy(ifr.ifr_name, name.data(), name.size());
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) {
    if (errno == EBUSY || errno == EINVAL) {
      return absl::AlreadyExistsError(absl::StrCat("TUNSETIFF ", name, ": ", std::strerror(errno)));
    }
    return ErrnoToStatus(absl::StrCat("TUNSETIFF ", name));
  }
  return fd;
}

absl::Status EnableForwarding(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("interface name '", name, "'"));
  }
  return WriteSmallFile(absl::StrCat("/proc/sys/net/ipv4/conf/", name, "/forwarding"), "1");
}

absl::StatusOr<LinkBytes> ReadLinkBytes(const std::string& name) {
  LinkBytes out;
  for (auto [file, field] : {std::pair{"rx_bytes", &out.rx}, std::pair{"tx_bytes", &out.tx}}) {
    DSEC_ASSIGN_OR_RETURN(std::string text,
                          ReadSmallFile(absl::StrCat("/sys/class/net/", name, "/statistics/", file)));
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), field)) {
      return absl::InternalError(absl::StrCat("statistics/", file, " of ", name, ": '", text, "'"));
    }
  }
  return out;
}

}  // namespace dsec::network
