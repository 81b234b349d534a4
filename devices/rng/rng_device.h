// SPDX-License-Identifier: Apache-2.0
// virtio-rng, the entropy device (virtio 1.2 section 5.4): one request queue;
// each chain of device-writable buffers is filled from an EntropySource,
// at most `rate_bytes_per_sec` on average (TokenBucket) so that one guest
// cannot drain the host's CSPRNG throughput or spin the event loop.
//
// Threads: the VirtioDevice contract (virtio_device.h). Configuration
// queries from vCPU threads return constants (the device has no config
// space); Activate/QueueNotify/Reset and the retry timer run on the event
// loop. metrics() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/rng/rng_backend.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "base/clock.h"
#include "base/token_bucket.h"

namespace dsec::devices {

struct RngOptions {
  // Average bytes per second handed to the guest; 0 = unlimited.
  uint64_t rate_bytes_per_sec = 0;
  // Bucket size; 0 = one second's worth (TokenBucket semantics).
  uint64_t burst_bytes = 0;
  // Largest fill of one request (the device may use less than the buffer).
  uint32_t max_bytes_per_request = 64 * 1024;
  uint16_t queue_size = 256;  // power of two
  // Delay before asking an EntropySource that said Unavailable again.
  int64_t retry_ns = 10'000'000;
  const Clock* clock = &MonotonicClock::Get();  // must outlive the device
};

struct RngMetrics {
  std::atomic<uint64_t> bytes{0};               // random bytes given to the guest
  std::atomic<uint64_t> requests{0};            // chains completed
  std::atomic<uint64_t> bad_requests{0};        // chains completed empty (malformed)
  std::atomic<uint64_t> throttled{0};           // times the rate limit deferred work
  std::atomic<uint64_t> source_unavailable{0};  // EAGAIN from the source
};

class RngDevice : public virtio::VirtioDevice {
 public:
  static absl::StatusOr<std::shared_ptr<RngDevice>> Create(std::unique_ptr<EntropySource> source,
                                                           RngOptions options);
  ~RngDevice() override;

  // virtio::VirtioDevice
  virtio::DeviceType device_type() const override { return virtio::DeviceType::kEntropy; }
  uint64_t device_features() const override {
    return virtio::kFeatureRingEventIdx | virtio::kFeatureRingIndirectDesc;
  }
  uint16_t num_queues() const override { return 1; }
  uint16_t queue_max_size(uint16_t) const override { return options_.queue_size; }
  // Section 5.4.4: no device configuration space.
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  void WriteConfig(uint64_t, std::span<const uint8_t>) override {}
  absl::Status Activate(const virtio::ActivateContext& context) override;
  void QueueNotify(uint16_t queue_index) override;
  void Reset() override;
  // Snapshots: nothing beyond the queue (the rate limit's bucket starts
  // full again in a restored VM, as at boot; a pending retry is redone by
  // the restored transport's first look at the queue).
  absl::StatusOr<nlohmann::json> SaveState() const override { return nlohmann::json::object(); }
  absl::Status RestoreState(const nlohmann::json& state) override;

  const RngMetrics& metrics() const { return metrics_; }
  // Whether a retry (rate limit or source EAGAIN) is scheduled. Loop thread.
  bool retry_pending() const { return retry_timer_ >= 0; }

 private:
  RngDevice(std::unique_ptr<EntropySource> source, RngOptions options);
  void Process();
  virtio::ChainResult Fill(const virtio::DescriptorChain& chain);
  void ScheduleRetry(int64_t delay_ns);
  void CancelRetry();

  const std::unique_ptr<EntropySource> source_;
  const RngOptions options_;
  TokenBucket bucket_;
  RngMetrics metrics_;
  std::vector<uint8_t> scratch_;

  // Loop thread, valid between Activate() and Reset().
  virtio::Activation activation_;
  virtio::QueueWorker worker_{activation_, 0, virtio::kDefaultChainBudget, [this] { Process(); }};
  int retry_timer_ = -1;
};

}  // namespace dsec::devices
