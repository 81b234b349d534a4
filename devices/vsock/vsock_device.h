// SPDX-License-Identifier: Apache-2.0
// The virtio-vsock device (virtio 1.2 section 5.10): three queues (rx, tx,
// event), config space { le64 guest_cid }, no feature bits of its own
// (stream sockets only; VIRTIO_VSOCK_F_SEQPACKET is not offered). It moves
// packets between the queues and a VsockBackend, which owns the connections.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "devices/vsock/vsock_backend.h"

namespace dsec::devices {

struct VsockDeviceMetrics {
  uint64_t tx_packets = 0;
  uint64_t tx_invalid = 0;     // dropped: failed ValidateTxHeader or short chain
  uint64_t rx_packets = 0;
  uint64_t rx_bad_buffers = 0;  // rx chains too small for a header
  uint64_t transport_resets = 0;
};

// Threads: device_type() .. ReadConfig/WriteConfig on vCPU threads (they
// touch only constants); everything else on the event-loop thread, as
// virtio_device.h describes. `backend` must outlive the device.
class VsockDevice : public virtio::VirtioDevice {
 public:
  static constexpr uint16_t kRxQueue = 0;
  static constexpr uint16_t kTxQueue = 1;
  static constexpr uint16_t kEventQueue = 2;
  static constexpr uint16_t kQueueSize = 256;

  // guest_cid: 3 .. 0xfffffffe (virtio 1.2 section 5.10.4; the Linux driver
  // uses the low 32 bits and reserves 0xffffffff as VMADDR_CID_ANY).
  static absl::StatusOr<std::unique_ptr<VsockDevice>> Create(uint64_t guest_cid,
                                                             VsockBackend* backend);

  virtio::DeviceType device_type() const override { return virtio::DeviceType::kVsock; }
  uint64_t device_features() const override;
  uint16_t num_queues() const override { return 3; }
  uint16_t queue_max_size(uint16_t) const override { return kQueueSize; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  void WriteConfig(uint64_t offset, std::span<const uint8_t> data) override;
  absl::Status Activate(const virtio::ActivateContext& context) override;
  void QueueNotify(uint16_t queue_index) override;
  void Reset() override;

  // virtio 1.2 section 5.10.6.6: drops every connection and puts a
  // VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the event queue (now, or when the
  // driver next provides an event buffer), e.g. after a snapshot restore.
  void SendTransportReset();

  // Snapshots: the guest CID (a restored device must have the same one).
  // Connections are not carried: their host ends belong to the process
  // that was snapshotted. A restored device sends TRANSPORT_RESET once
  // activated, so the guest drops what it had and connects again.
  absl::StatusOr<nlohmann::json> SaveState() const override {
    return nlohmann::json{{"guest_cid", guest_cid_}};
  }
  absl::Status RestoreState(const nlohmann::json& state) override;

  uint64_t guest_cid() const { return guest_cid_; }
  const VsockDeviceMetrics& metrics() const { return metrics_; }

 private:
  // Chains handled per run of the rx or tx queue before yielding to other
  // fds (a guest that keeps its tx ring full cannot monopolise the loop).
  static constexpr uint32_t kBudget = 2 * kQueueSize;

  VsockDevice(uint64_t guest_cid, VsockBackend* backend)
      : guest_cid_(guest_cid), backend_(backend) {}

  void ProcessTx();
  void ProcessRx();
  void ProcessEvents();
  virtio::ChainResult HandleTx(const virtio::DescriptorChain& chain);
  virtio::ChainResult FillRx(const virtio::DescriptorChain& chain);
  virtio::ChainResult FillEvent(const virtio::DescriptorChain& chain);

  const uint64_t guest_cid_;
  VsockBackend* const backend_;
  bool pending_reset_event_ = false;
  bool reset_after_restore_ = false;  // RestoreState: reset at activation
  VsockDeviceMetrics metrics_;
  // Loop thread, valid between Activate() and Reset().
  virtio::Activation activation_;
  virtio::QueueWorker rx_worker_{activation_, kRxQueue, kBudget, [this] { ProcessRx(); }};
  virtio::QueueWorker tx_worker_{activation_, kTxQueue, kBudget, [this] { ProcessTx(); }};
  virtio::QueueWorker event_worker_{activation_, kEventQueue, kQueueSize,
                                    [this] { ProcessEvents(); }};
};

}  // namespace dsec::devices
