// SPDX-License-Identifier: Apache-2.0
// The host side of a virtio-net device: something that takes Ethernet
// frames with a virtio_net_hdr in front (tap with IFF_VNET_HDR, a test fake)
// and hands frames back the same way.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <span>

#include "absl/status/statusor.h"
#include "devices/net/net_request.h"

namespace dsec::devices {

// Most iovecs one Send/Receive takes (IOV_MAX on Linux); a frame spread
// over more guest pieces is dropped.
inline constexpr size_t kMaxNetIov = 1024;

// Outcome of one non-blocking frame transfer.
struct NetIo {
  // The backend cannot take (Send) or has no (Receive) frame right now; wait
  // for PollFd() to become writable / readable.
  bool would_block = false;
  // Bytes transferred, header included. Receive truncates a frame that does
  // not fit the iovecs (tap does, without saying so); a caller that must
  // know appends a spare byte of its own and checks whether it was used.
  size_t bytes = 0;
};

// Threads: one owner thread (the event loop running the device). The
// backend outlives the device that uses it.
class NetBackend {
 public:
  virtual ~NetBackend() = default;

  // Offloads the backend can accept for frames it delivers to the guest
  // (what the guest may negotiate as GUEST_CSUM / GUEST_TSO4 / GUEST_TSO6).
  // Frames sent to the backend with these offloads (HOST_*) are accepted
  // whenever the backend supports them in this direction too.
  virtual NetOffloads SupportedOffloads() const = 0;
  // Tells the backend which offloads the guest negotiated for received
  // frames; the backend completes checksums and segments the rest itself.
  virtual absl::Status SetRxOffloads(const NetOffloads& offloads) = 0;

  // Sends one frame: iov holds a 12-byte VirtioNetHdr, then the frame.
  virtual absl::StatusOr<NetIo> Send(std::span<const iovec> iov) = 0;
  // Receives one frame into iov: a 12-byte VirtioNetHdr, then the frame.
  virtual absl::StatusOr<NetIo> Receive(std::span<const iovec> iov) = 0;

  // A descriptor that polls readable when Receive may return a frame and
  // writable when Send may accept one (level-triggered semantics).
  virtual int PollFd() const = 0;
};

}  // namespace dsec::devices
