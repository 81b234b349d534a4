// SPDX-License-Identifier: Apache-2.0
#include "devices/net/tap_backend.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec::devices {

namespace {

constexpr char kTunDevice[] = "/dev/net/tun";

unsigned ToTunOffloads(const NetOffloads& o) {
  unsigned flags = 0;
  if (o.csum) flags |= TUN_F_CSUM;
  if (o.tso4) flags |= TUN_F_TSO4;
  if (o.tso6) flags |= TUN_F_TSO6;
  return flags;
}

bool TrySetOffload(int fd, const NetOffloads& o) {
  return ::ioctl(fd, TUNSETOFFLOAD, static_cast<unsigned long>(ToTunOffloads(o))) == 0;
}

// The kernel accepts checksum and TSO frames written to a vnet-header tap
// whatever TUNSETOFFLOAD says; TUNSETOFFLOAD succeeding tells us it can
// also hand such frames to us, so probe the largest set first.
NetOffloads ProbeOffloads(int fd) {
  const NetOffloads all{.csum = true, .tso4 = true, .tso6 = true};
  const NetOffloads csum_only{.csum = true};
  if (TrySetOffload(fd, all)) return all;
  if (TrySetOffload(fd, csum_only)) return csum_only;
  return NetOffloads{};
}

absl::Status SetIffStatus(absl::string_view name, int err) {
  std::string what = absl::StrCat("TUNSETIFF(", name, ")");
  switch (err) {
    case EINVAL:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": interface exists but is not a single-queue tap"));
    case EBUSY:
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": tap is already attached to another process"));
    default:
      return ErrnoToStatus(what, err);
  }
}

size_t TotalLen(std::span<const iovec> iov) {
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  return total;
}

}  // namespace

absl::Status ValidateTapName(absl::string_view name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(
        absl::StrCat("tap name must be 1..", IFNAMSIZ - 1, " bytes: '", name, "'"));
  }
  for (char c : name) {
    if (c == '/' || c == '%' || c == ':' || c <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat("invalid character in tap name '", name, "'"));
    }
  }
  if (name == "." || name == "..") return absl::InvalidArgumentError("invalid tap name");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TapBackend>> TapBackend::Open(absl::string_view name, TapMode mode) {
  DSEC_RETURN_IF_ERROR(ValidateTapName(name));
  std::string name_str(name);
  // TUNSETIFF creates the interface when the name is free, so the check for
  // existence comes first. The window between the two calls is harmless: a
  // tap created in it is transient and disappears with this process.
  const bool exists = ::if_nametoindex(name_str.c_str()) != 0;
  if (mode == TapMode::kAttachExisting && !exists) {
    return absl::NotFoundError(
        absl::StrCat("no network interface '", name, "' in this network namespace"));
  }
  if (mode == TapMode::kCreateTransient && exists) {
    return absl::AlreadyExistsError(absl::StrCat("network interface '", name, "' exists"));
  }

  ScopedFd fd(::open(kTunDevice, O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open(", kTunDevice, ")"));

  unsigned features = 0;
  if (::ioctl(fd.get(), TUNGETFEATURES, &features) != 0) return ErrnoToStatus("TUNGETFEATURES");
  if (!(features & IFF_VNET_HDR)) {
    return absl::UnavailableError("tun driver lacks IFF_VNET_HDR");
  }

  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name_str.data(), name_str.size());
  // Single queue: IFF_MULTI_QUEUE stays off (one RX/TX queue pair).
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) return SetIffStatus(name, errno);

  return Configure(std::move(fd), std::move(name_str));
}

absl::StatusOr<std::unique_ptr<TapBackend>> TapBackend::Adopt(ScopedFd fd) {
  if (!fd.valid()) return absl::InvalidArgumentError("tap descriptor: not an open descriptor");
  const int n = fd.get();
  ifreq ifr{};
  if (::ioctl(n, TUNGETIFF, &ifr) != 0) {
    // ENOTTY / EINVAL: not /dev/net/tun; EBADFD: tun, but no interface attached.
    return absl::InvalidArgumentError(
        absl::StrCat("tap descriptor ", n, " is not an attached tun/tap device: ", std::strerror(errno)));
  }
  const unsigned flags = static_cast<unsigned short>(ifr.ifr_flags);
  if ((flags & (IFF_TUN | IFF_TAP)) != IFF_TAP || !(flags & IFF_NO_PI) || !(flags & IFF_VNET_HDR) ||
      (flags & IFF_MULTI_QUEUE)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tap descriptor ", n, " (", ifr.ifr_name,
        ") must be a single-queue tap with IFF_NO_PI and IFF_VNET_HDR (flags 0x", absl::Hex(flags), ")"));
  }
  // The descriptor may have come without O_NONBLOCK (the status flags
  // belong to the open file, which only this process uses for I/O).
  const int fl = ::fcntl(n, F_GETFL);
  if (fl < 0 || ::fcntl(n, F_SETFL, fl | O_NONBLOCK) != 0) return ErrnoToStatus("fcntl(O_NONBLOCK) on the tap");
  std::string name(ifr.ifr_name, ::strnlen(ifr.ifr_name, IFNAMSIZ));
  return Configure(std::move(fd), std::move(name));
}

absl::StatusOr<std::unique_ptr<TapBackend>> TapBackend::Configure(ScopedFd fd, std::string name) {
  int hdr_size = static_cast<int>(kVirtioNetHdrSize);
  if (::ioctl(fd.get(), TUNSETVNETHDRSZ, &hdr_size) != 0) return ErrnoToStatus("TUNSETVNETHDRSZ");

  NetOffloads supported = ProbeOffloads(fd.get());
  // Until a driver negotiates offloads the tap hands over plain frames.
  if (!TrySetOffload(fd.get(), NetOffloads{})) return ErrnoToStatus("TUNSETOFFLOAD(0)");

  return std::unique_ptr<TapBackend>(new TapBackend(std::move(fd), std::move(name), supported));
}

absl::Status TapBackend::SetRxOffloads(const NetOffloads& offloads) {
  if ((offloads.tso4 || offloads.tso6) && !offloads.csum) {
    return absl::InvalidArgumentError("TSO needs checksum offload");
  }
  if ((offloads.csum && !supported_.csum) || (offloads.tso4 && !supported_.tso4) ||
      (offloads.tso6 && !supported_.tso6)) {
    return absl::InvalidArgumentError("offload not supported by this tap");
  }
  if (!TrySetOffload(fd_.get(), offloads)) {
    return ErrnoToStatus(absl::StrCat("TUNSETOFFLOAD(", name_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<NetIo> TapBackend::Send(std::span<const iovec> iov) {
  if (iov.size() > IOV_MAX) return absl::InvalidArgumentError("too many iovecs for writev");
  while (true) {
    ssize_t n = ::writev(fd_.get(), iov.data(), static_cast<int>(iov.size()));
    if (n >= 0) return NetIo{.would_block = false, .bytes = static_cast<size_t>(n)};
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return NetIo{.would_block = true};
    return ErrnoStatus(absl::StrCat("writev(tap ", name_, ", ", TotalLen(iov), " bytes)"));
  }
}

absl::StatusOr<NetIo> TapBackend::Receive(std::span<const iovec> iov) {
  if (iov.size() > IOV_MAX) return absl::InvalidArgumentError("too many iovecs for readv");
  while (true) {
    // tun silently truncates a frame longer than the iovecs and returns the
    // bytes copied (see NetIo::bytes).
    ssize_t n = ::readv(fd_.get(), iov.data(), static_cast<int>(iov.size()));
    if (n >= 0) return NetIo{.would_block = false, .bytes = static_cast<size_t>(n)};
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return NetIo{.would_block = true};
    return ErrnoStatus(absl::StrCat("readv(tap ", name_, ")"));
  }
}

}  // namespace dsec::devices
