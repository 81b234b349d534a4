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

// Tx chains handled per loop iteration before yielding to other fds (a
// guest that keeps its tx ring full cannot monopolise the loop thread).
constexpr int kTxBudget = 2 * VsockDevice::kQueueSize;

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

virtio::Queue* VsockDevice::ActiveQueue(uint16_t index) const {
  if (!context_ || broken_ || index >= context_->queues.size()) return nullptr;
  virtio::Queue& q = context_->queues[index];
  return q.active() ? &q : nullptr;
}

absl::Status VsockDevice::Activate(const virtio::ActivateContext& context) {
  if (context.memory == nullptr || context.notifier == nullptr || context.loop == nullptr ||
      context.queues.size() != num_queues()) {
    return absl::InvalidArgumentError("vsock: incomplete activation context");
  }
  context_ = context;
  broken_ = false;
  backend_->SetRxReadyCallback([this] { ProcessRx(); });
  return absl::OkStatus();
}

void VsockDevice::Reset() {
  backend_->SetRxReadyCallback(nullptr);
  // virtio 1.2 section 5.10.6.6: a device reset loses every connection.
  backend_->ResetConnections();
  context_.reset();
  broken_ = false;
  tx_continuation_posted_ = false;
  pending_reset_event_ = false;
  ++generation_;
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

void VsockDevice::Broken(const absl::Status& status) {
  broken_ = true;
  context_->notifier->ReportBroken(status);
}

void VsockDevice::ProcessTx() {
  virtio::Queue* tx = ActiveQueue(kTxQueue);
  if (tx == nullptr) return;
  bool used = false;
  int budget = kTxBudget;
  for (; budget > 0; --budget) {
    absl::StatusOr<std::optional<virtio::DescriptorChain>> chain = tx->Pop();
    if (!chain.ok()) {
      Broken(chain.status());
      return;
    }
    if (!chain->has_value()) break;
    const virtio::DescriptorChain& c = **chain;
    // virtio 1.2 section 5.10.6.2: parse, hand to the backend, return the
    // buffer (the device writes nothing into tx buffers).
    VsockTxParse parsed = ParseTxChain(*context_->memory, c, guest_cid_);
    if (parsed.status.ok()) {
      ++metrics_.tx_packets;
      backend_->HandleGuestPacket(parsed.packet);
    } else {
      ++metrics_.tx_invalid;
      DSEC_LOG_RATELIMITED(warn, 1, "vsock: dropping invalid tx packet cid={}: {}", guest_cid_,
                           parsed.status.ToString());
    }
    if (absl::Status s = tx->AddUsed(c.head, 0); !s.ok()) {
      Broken(s);
      return;
    }
    used = true;
    if (!context_) return;  // the backend callback cannot reset us, but be safe
  }
  if (used) context_->notifier->SignalUsed(kTxQueue);
  if (budget == 0 && !tx_continuation_posted_) {
    tx_continuation_posted_ = true;
    std::weak_ptr<bool> alive = alive_;
    const uint64_t generation = generation_;
    context_->loop->Post([this, alive, generation] {
      if (alive.expired() || generation != generation_) return;
      tx_continuation_posted_ = false;
      ProcessTx();
    });
  }
  // Replies (RESPONSE, RST, credit updates, data now allowed) go out now.
  ProcessRx();
}

void VsockDevice::ProcessRx() {
  virtio::Queue* rx = ActiveQueue(kRxQueue);
  if (rx == nullptr) return;
  bool used = false;
  while (backend_->HasRxPacket()) {
    absl::StatusOr<std::optional<virtio::DescriptorChain>> chain = rx->Pop();
    if (!chain.ok()) {
      Broken(chain.status());
      return;
    }
    if (!chain->has_value()) break;  // the driver's next rx kick resumes
    const virtio::DescriptorChain& c = **chain;
    // Guest-controlled: the buffer size; a chain that cannot hold a header
    // is returned empty.
    const uint64_t room = c.WritableBytes();
    if (room < kVsockHeaderSize) {
      ++metrics_.rx_bad_buffers;
      if (absl::Status s = rx->AddUsed(c.head, 0); !s.ok()) {
        Broken(s);
        return;
      }
      used = true;
      continue;
    }
    const uint32_t max_payload =
        static_cast<uint32_t>(std::min<uint64_t>(room - kVsockHeaderSize, kVsockMaxPayload));
    std::optional<VsockPacket> packet = backend_->PopRxPacket(max_payload);
    if (!packet) {
      rx->UndoPop();
      break;
    }
    absl::StatusOr<uint32_t> written =
        WriteRxChain(*context_->memory, c, packet->hdr, packet->payload);
    if (!written.ok()) {
      // The queue checked the buffers lie in guest memory, so this is a
      // device bug, not guest input.
      Broken(written.status());
      return;
    }
    if (absl::Status s = rx->AddUsed(c.head, *written); !s.ok()) {
      Broken(s);
      return;
    }
    ++metrics_.rx_packets;
    used = true;
  }
  if (used) context_->notifier->SignalUsed(kRxQueue);
}

void VsockDevice::SendTransportReset() {
  backend_->ResetConnections();
  pending_reset_event_ = true;
  ProcessEvents();
}

void VsockDevice::ProcessEvents() {
  if (!pending_reset_event_) return;
  virtio::Queue* events = ActiveQueue(kEventQueue);
  if (events == nullptr) return;
  absl::StatusOr<std::optional<virtio::DescriptorChain>> chain = events->Pop();
  if (!chain.ok()) {
    Broken(chain.status());
    return;
  }
  if (!chain->has_value()) return;  // delivered when the driver adds a buffer
  const virtio::DescriptorChain& c = **chain;
  virtio::ChainWriter writer(*context_->memory, c);
  uint32_t written = 0;
  if (writer.WriteObj(VsockEvent{VIRTIO_VSOCK_EVENT_TRANSPORT_RESET}).ok()) {
    written = sizeof(VsockEvent);
    pending_reset_event_ = false;
    ++metrics_.transport_resets;
  } else {
    // Guest-controlled: an event buffer smaller than the event; keep the
    // event for the next buffer.
    DSEC_LOG_RATELIMITED(warn, 1, "vsock: event buffer too small cid={}", guest_cid_);
  }
  if (absl::Status s = events->AddUsed(c.head, written); !s.ok()) {
    Broken(s);
    return;
  }
  context_->notifier->SignalUsed(kEventQueue);
}

}  // namespace dsec::devices
