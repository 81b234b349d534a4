// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devices/net/net_backend.h"
#include "base/scoped_fd.h"

namespace dsec::devices {

// How TapBackend::Open treats the interface name.
enum class TapMode {
  // The interface must already exist as a single-queue tap (the sandbox
  // runtime creates and configures taps). A missing name is NotFound: the
  // monitor never creates a device behind the runtime's back by accident.
  kAttachExisting,
  // The name must be free; a new tap is created that belongs to this
  // process and disappears when the backend is destroyed (not persistent).
  kCreateTransient,
};

// A Linux tap (/dev/net/tun with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, single
// queue) opened non-blocking, with a 12-byte vnet header so that frames
// carry the virtio 1.x virtio_net_hdr unchanged in both directions. The
// interface lives in the network namespace of the thread that calls Open.
//
// Offloads: frames written to the tap may use checksum offload and TSO
// (the kernel completes them); what the tap hands back is set with
// SetRxOffloads (TUNSETOFFLOAD) to what the guest negotiated. UFO and ECN
// stay off.
//
// Threads: one owner thread at a time (the event loop running the device).
class TapBackend : public NetBackend {
 public:
  static absl::StatusOr<std::unique_ptr<TapBackend>> Open(absl::string_view name,
                                                          TapMode mode = TapMode::kAttachExisting);
  // A tap the caller's runtime made and attached (a descriptor of
  // /dev/net/tun after TUNSETIFF with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
  // single queue), e.g. one the monitor inherited: the interface may live
  // in any network namespace, and goes when its last descriptor closes
  // unless it is persistent. InvalidArgument for a descriptor that is not
  // such a tap. The backend owns `fd`.
  static absl::StatusOr<std::unique_ptr<TapBackend>> Adopt(ScopedFd fd);

  const std::string& name() const { return name_; }

  NetOffloads SupportedOffloads() const override { return supported_; }
  absl::Status SetRxOffloads(const NetOffloads& offloads) override;
  absl::StatusOr<NetIo> Send(std::span<const iovec> iov) override;
  absl::StatusOr<NetIo> Receive(std::span<const iovec> iov) override;
  int PollFd() const override { return fd_.get(); }

 private:
  // The vnet header size and the offload probe, common to Open and Adopt.
  static absl::StatusOr<std::unique_ptr<TapBackend>> Configure(ScopedFd fd, std::string name);
  TapBackend(ScopedFd fd, std::string name, NetOffloads supported)
      : fd_(std::move(fd)), name_(std::move(name)), supported_(supported) {}

  ScopedFd fd_;
  std::string name_;
  NetOffloads supported_;
};

// Checks an interface name for use with a tap: 1..15 bytes, no '/', no
// whitespace, no '%' (TUNSETIFF would expand "%d" into a new name).
absl::Status ValidateTapName(absl::string_view name);

}  // namespace dsec::devices
