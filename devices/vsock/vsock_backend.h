// SPDX-License-Identifier: Apache-2.0
// The host side of a virtio-vsock device, behind an interface: the device
// moves packets between its virtqueues and a VsockBackend; the backend owns
// the connections and whatever host sockets they map to.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "devices/vsock/vsock_packet.h"

namespace dsec::devices {

// Threads: everything on the event-loop thread. The device and the backend
// live for the VM's lifetime; the backend outlives the device's use of it.
class VsockBackend {
 public:
  virtual ~VsockBackend() = default;

  // A packet from the guest's tx queue whose header passed ValidateTxHeader.
  virtual void HandleGuestPacket(const VsockPacket& packet) = 0;

  // Whether PopRxPacket(kVsockMaxPayload) would return a packet.
  virtual bool HasRxPacket() const = 0;
  // The next packet for the guest's rx queue with at most `max_payload`
  // payload bytes, or nothing. May do host I/O (reading ahead once the
  // guest's credit or our buffer allows).
  virtual std::optional<VsockPacket> PopRxPacket(uint32_t max_payload) = 0;

  // `callback` runs (on the loop thread) when packets for the guest became
  // pending because of host-side events (new data, a new host connection,
  // a timeout). It is never called from inside HandleGuestPacket or
  // PopRxPacket: after those the device checks HasRxPacket itself.
  virtual void SetRxReadyCallback(std::function<void()> callback) = 0;

  // The driver reset the device (or a transport reset was sent): every
  // connection is gone without RST (virtio 1.2 section 5.10.6.6), host
  // sockets are closed.
  virtual void ResetConnections() = 0;
};

}  // namespace dsec::devices
