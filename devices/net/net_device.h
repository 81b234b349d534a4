// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/net/mac_address.h"
#include "devices/net/net_backend.h"
#include "devices/net/net_rate_limiter.h"
#include "devices/net/net_request.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "base/clock.h"

namespace dsec::devices {

struct NetDeviceConfig {
  // Shown in log lines as net=<id> (e.g. the tap name).
  std::string id = "net0";
  MacAddress mac = DeriveMac(0);
  // Offered with VIRTIO_NET_F_MTU; 68 (IPv4's minimum) .. 65535.
  uint16_t mtu = 1500;
  // Queue size offered for both queues: a power of two, 2..32768.
  uint16_t queue_size = 256;
  NetRateLimit rx_limit;  // host -> guest
  NetRateLimit tx_limit;  // guest -> host
  // For the rate limiters; must outlive the device.
  const Clock* clock = &MonotonicClock::Get();
};

// Counters, readable from any thread (the API exports them).
struct NetMetrics {
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;      // frame bytes, headers excluded
  uint64_t rx_dropped = 0;    // frames the backend delivered but the guest never saw
  uint64_t rx_throttled = 0;  // times receive was deferred by the rate limiter
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_dropped = 0;  // malformed requests and frames the backend refused
  uint64_t tx_throttled = 0;
};

// virtio-net (virtio 1.2 section 5.1): one receive queue (0) and one
// transmit queue (1), no control queue, no mergeable receive buffers. The
// host side is a NetBackend (a tap in production), used zero-copy: frames go
// between guest buffers and the backend with readv/writev, only the 12-byte
// header is copied (and validated) by the device.
//
// Receive: while the receive queue has buffers, the device watches the
// backend for readability; when the queue runs dry it stops watching until
// the driver kicks the queue again, so frames wait in the backend's own
// bounded queue (the tap's txqueuelen) and are dropped there, not buffered
// here. Each receive buffer must hold a whole frame (section 5.1.6.3.1);
// a frame that does not fit is dropped and the buffer reused.
//
// Transmit: on a kick, every available chain is validated (net_request.h)
// and written to the backend. A backend that would block keeps the chain
// and the device waits for it to become writable.
//
// Rate limits (bytes and packets per direction) defer, never drop: the
// device stops and re-arms a one-shot timer for when tokens are available.
// Work per event is bounded (one queue's worth of frames, virtio::QueueWorker),
// then the device yields to the loop and continues from a posted
// continuation.
//
// Threads: per the VirtioDevice contract. Feature and config reads on vCPU
// threads touch only constants; everything else (Activate, QueueNotify,
// Reset, backend and timer events) runs on the event-loop thread. metrics()
// may be called from any thread. The device must outlive its activation:
// Reset() (called by the transport before destruction) removes every fd and
// timer it added to the loop.
class NetDevice : public virtio::VirtioDevice {
 public:
  static constexpr uint16_t kRxQueue = 0;
  static constexpr uint16_t kTxQueue = 1;

  static absl::StatusOr<std::unique_ptr<NetDevice>> Create(NetDeviceConfig config,
                                                           std::unique_ptr<NetBackend> backend);
  ~NetDevice() override;

  virtio::DeviceType device_type() const override { return virtio::DeviceType::kNet; }
  uint64_t device_features() const override { return features_; }
  uint16_t num_queues() const override { return 2; }
  uint16_t queue_max_size(uint16_t) const override { return config_.queue_size; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  void WriteConfig(uint64_t offset, std::span<const uint8_t> data) override;
  absl::Status Activate(const virtio::ActivateContext& context) override;
  void QueueNotify(uint16_t queue_index) override;
  void Reset() override;

  // Snapshots: the MAC address the guest's driver read at probe and the
  // MTU it was offered. The restored device may be given another backend
  // and MAC (a fork's child has a tap of its own): it keeps answering the
  // saved MAC, which the guest's driver already uses; a different MTU is
  // refused (the guest sized its buffers by it). Frames in the old
  // backend's queue are not carried. The guest's address is the guest's
  // business (the microvm tier re-addresses eth0 through its agent).
  absl::StatusOr<nlohmann::json> SaveState() const override;
  absl::Status RestoreState(const nlohmann::json& state) override;

  NetMetrics metrics() const;
  const NetDeviceConfig& config() const { return config_; }

 private:
  // virtio_net_config up to mtu (virtio 1.2 section 5.1.4); later fields
  // (speed, duplex, RSS) belong to features not offered and read as zero.
  struct __attribute__((packed)) ConfigSpace {
    uint8_t mac[6];
    uint16_t status;
    uint16_t max_virtqueue_pairs;
    uint16_t mtu;
  };
  static_assert(sizeof(ConfigSpace) == 12);

  struct AtomicMetrics {
    std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, rx_dropped{0}, rx_throttled{0};
    std::atomic<uint64_t> tx_packets{0}, tx_bytes{0}, tx_dropped{0}, tx_throttled{0};
  };

  NetDevice(NetDeviceConfig config, std::unique_ptr<NetBackend> backend, uint64_t features);

  void ProcessRx();
  void ProcessTx();
  // Whether the rate limiter lets another frame through now; otherwise arms
  // the direction's timer (and returns false).
  bool AdmitRx();
  bool AdmitTx();
  // One receive attempt into a popped chain: used (with a frame or empty),
  // requeued after dropping a frame (the buffer serves the next one), put
  // back when the backend has nothing.
  virtio::ChainResult ReceiveInto(const virtio::DescriptorChain& chain);
  virtio::ChainResult Transmit(const virtio::DescriptorChain& chain);
  void OnBackendEvent(uint32_t events);
  // Makes the backend's loop registration match rx_watch_ / tx_wait_writable_.
  void UpdateBackendWatch();
  void ArmTimer(std::optional<int>& slot, int64_t delay_ns, void (NetDevice::*process)());
  void CancelTimers();
  // The Activation's on-broken hook: stop timers and backend events.
  void OnBroken(const absl::Status& reason);
  // Host iovecs for guest ranges (split at region boundaries). False if a
  // range is outside guest memory or there are too many pieces.
  bool AppendHostRanges(std::span<const virtio::GuestBuffer> ranges, std::vector<iovec>& iov) const;

  const NetDeviceConfig config_;
  const std::unique_ptr<NetBackend> backend_;
  const uint64_t features_;
  ConfigSpace config_space_;
  AtomicMetrics metrics_;

  // Loop-thread state, valid from Activate() to Reset().
  virtio::Activation activation_{[this](const absl::Status& reason) { OnBroken(reason); }};
  virtio::QueueWorker rx_worker_;
  virtio::QueueWorker tx_worker_;
  TxPolicy tx_policy_;
  NetOffloads rx_offloads_;
  NetRateLimiter rx_limiter_;
  NetRateLimiter tx_limiter_;
  bool rx_watch_ = false;          // want EPOLLIN on the backend
  bool tx_wait_writable_ = false;  // a chain waits for the backend (EPOLLOUT)
  uint32_t registered_events_ = 0;  // what the loop watches now (0: not added)
  std::optional<int> rx_timer_;
  std::optional<int> tx_timer_;
  std::vector<iovec> iov_scratch_;
};

}  // namespace dsec::devices
