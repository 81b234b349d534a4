// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_device.h"

#include <linux/virtio_vsock.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/event_loop.h"
#include "base/logging.h"

namespace dsec::devices {

namespace {

// virtio 1.2 section 5.10.6.6: struct virtio_vsock_event.
struct __attribute__((packed)) VsockEvent {
  uint32_t id;
};
static_assert(sizeof(VsockEvent) == 4);

}  // namespace

absl::StatusOr<std::unique_ptr<VsockDevice>> VsockDevice::Create(uint64_t guest_cid,
                                                                 VsockBackend* backend) {
  if (guest_cid < kVsockMinGuestCid || guest_cid >= 0xffffffffull) {
    return absl::InvalidArgumentError(
        absl::StrCat("vsock: guest cid must be 3..4294967294, got ", guest_cid));
  }
  if (backend == nullptr) return absl::InvalidArgumentError("vsock: no backend");
  return std::unique_ptr<VsockDevice>(new VsockDevice(guest_cid, backend));
}

uint64_t VsockDevice::device_features() const {
  // No device-specific bits: VIRTIO_VSOCK_F_SEQPACKET (bit 1) is not offered.
  return virtio::kFeatureRingEventIdx | virtio::kFeatureRingIndirectDesc;
}

void VsockDevice::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  // virtio 1.2 section 5.10.4: struct virtio_vsock_config { le64 guest_cid; }.
  // Guest-controlled: offset and size; bytes beyond the struct read as zero.
  const uint64_t cid = guest_cid_;
  uint8_t config[sizeof(cid)];
  std::memcpy(config, &cid, sizeof(cid));
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    data[i] = (offset <= sizeof(config) && at < sizeof(config)) ? config[at] : 0;
  }
}

void VsockDevice::WriteConfig(uint64_t, std::span<const uint8_t>) {
  // guest_cid is read-only for the driver.
}

absl::Status VsockDevice::Activate(const virtio::ActivateContext& context) {
  if (context.memory == nullptr || context.notifier == nullptr || context.loop == nullptr ||
      context.queues.size() != num_queues()) {
    return absl::InvalidArgumentError("vsock: incomplete activation context");
  }
  activation_.Begin(context);
  backend_->SetRxReadyCallback([this] { ProcessRx(); });
  if (reset_after_restore_) {
    reset_after_restore_ = false;
    SendTransportReset();
  }
  return absl::OkStatus();
}

absl::Status VsockDevice::RestoreState(const nlohmann::json& state) {
  if (!state.is_object() || state.size() != 1 || !state.contains("guest_cid") ||
      !state["guest_cid"].is_number_unsigned()) {
    return absl::InvalidArgumentError("vsock: its snapshot state is {\"guest_cid\": N}");
  }
  if (state["guest_cid"].get<uint64_t>() != guest_cid_) {
    return absl::FailedPreconditionError(
        absl::StrCat("vsock: the snapshot's guest CID is ", state["guest_cid"].get<uint64_t>(),
                     ", this device's ", guest_cid_, " (the guest would not know its new CID)"));
  }
  reset_after_restore_ = true;
  return absl::OkStatus();
}

void VsockDevice::Reset() {
  backend_->SetRxReadyCallback(nullptr);
  // virtio 1.2 section 5.10.6.6: a device reset loses every connection.
  backend_->ResetConnections();
  pending_reset_event_ = false;
  activation_.End();
}

void VsockDevice::QueueNotify(uint16_t queue_index) {
  switch (queue_index) {
    case kRxQueue:
      ProcessRx();
      return;
    case kTxQueue:
      ProcessTx();
      return;
    case kEventQueue:
      ProcessEvents();
      return;
    default:
      return;
  }
}

void VsockDevice::ProcessTx() {
  virtio::RunResult run =
      tx_worker_.Run([this](virtio::DescriptorChain& chain) { return HandleTx(chain); });
  // Replies (RESPONSE, RST, credit updates, data now allowed) go out now.
  if (run.stop != virtio::RunStop::kInactive && run.stop != virtio::RunStop::kBroken) ProcessRx();
}

virtio::ChainResult VsockDevice::HandleTx(const virtio::DescriptorChain& chain) {
  // virtio 1.2 section 5.10.6.2: parse, hand to the backend, return the
  // buffer (the device writes nothing into tx buffers).
  VsockTxParse parsed = ParseTxChain(activation_.memory(), chain, guest_cid_);
  if (parsed.status.ok()) {
    ++metrics_.tx_packets;
    backend_->HandleGuestPacket(parsed.packet);
  } else {
    ++metrics_.tx_invalid;
    DSEC_LOG_RATELIMITED(warn, 1, "vsock: dropping invalid tx packet cid={}: {}", guest_cid_,
                         parsed.status.ToString());
  }
  return virtio::ChainResult::Used(0);
}

void VsockDevice::ProcessRx() {
  // A chain is taken only while a packet waits; once the driver runs out of
  // buffers its next rx kick resumes.
  rx_worker_.Run([this] { return backend_->HasRxPacket(); },
                 [this](virtio::DescriptorChain& chain) { return FillRx(chain); });
}

virtio::ChainResult VsockDevice::FillRx(const virtio::DescriptorChain& chain) {
  // Guest-controlled: the buffer size; a chain that cannot hold a header
  // is returned empty.
  const uint64_t room = chain.WritableBytes();
  if (room < kVsockHeaderSize) {
    ++metrics_.rx_bad_buffers;
    return virtio::ChainResult::Used(0);
  }
  const uint32_t max_payload =
      static_cast<uint32_t>(std::min<uint64_t>(room - kVsockHeaderSize, kVsockMaxPayload));
  std::optional<VsockPacket> packet = backend_->PopRxPacket(max_payload);
  if (!packet) return virtio::ChainResult::PutBack();  // kept for a later packet
  absl::StatusOr<uint32_t> written =
      WriteRxChain(activation_.memory(), chain, packet->hdr, packet->payload);
  // The queue checked the buffers lie in guest memory, so a failure is a
  // device bug, not guest input.
  if (!written.ok()) return virtio::ChainResult::Broken(written.status());
  ++metrics_.rx_packets;
  return virtio::ChainResult::Used(*written);
}

void VsockDevice::SendTransportReset() {
  backend_->ResetConnections();
  pending_reset_event_ = true;
  ProcessEvents();
}

void VsockDevice::ProcessEvents() {
  // Delivered when the driver adds a buffer.
  event_worker_.Run([this] { return pending_reset_event_; },
                    [this](virtio::DescriptorChain& chain) { return FillEvent(chain); });
}

virtio::ChainResult VsockDevice::FillEvent(const virtio::DescriptorChain& chain) {
  virtio::ChainWriter writer(activation_.memory(), chain);
  if (!writer.WriteObj(VsockEvent{VIRTIO_VSOCK_EVENT_TRANSPORT_RESET}).ok()) {
    // Guest-controlled: an event buffer smaller than the event; keep the
    // event for the next buffer.
    DSEC_LOG_RATELIMITED(warn, 1, "vsock: event buffer too small cid={}", guest_cid_);
    return virtio::ChainResult::Used(0);
  }
  pending_reset_event_ = false;
  ++metrics_.transport_resets;
  return virtio::ChainResult::Used(sizeof(VsockEvent));
}

}  // namespace dsec::devices
