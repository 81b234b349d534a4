// SPDX-License-Identifier: Apache-2.0
// virtio-pmem (virtio 1.2 section 5.19): a guest-physical window onto a host
// file (mapped by pmem-dax/, not by this class) plus one request queue whose
// only request, FLUSH, asks the host to make the guest's writes durable.
//
// Flushes: fdatasync may block for as long as the disk takes, so it never
// runs on a vCPU thread or the event loop. Flush chains collect on the loop;
// one worker thread owned by the device runs one fdatasync for all chains
// collected when it starts (coalescing), at most one per
// `flush_min_interval_ns` (rate limit: a guest that flushes in a loop costs
// the host one sync per interval), and hands the result back to the loop,
// which completes the chains. On a read-only device a flush succeeds at once
// (nothing can have been written; the memslot is read-only).
//
// The backing file's size is checked before every fdatasync and every
// `size_check_interval_ns` while the device is active; a change (a layer
// truncated under a running guest) marks the device broken
// (DEVICE_NEEDS_RESET) and is counted.
//
// Threads: the VirtioDevice contract (virtio_device.h); config reads return
// constants. The worker thread lives from Create() to the destructor.
// metrics() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/pmem/pmem_backend.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "base/clock.h"

namespace dsec::devices {

struct PmemOptions {
  // Guest-physical window (config space start/size, section 5.19.4).
  uint64_t start = 0;
  uint64_t size = 0;
  bool read_only = false;
  uint16_t queue_size = 64;  // power of two
  int64_t flush_min_interval_ns = 10'000'000;
  int64_t size_check_interval_ns = 1'000'000'000;
  const Clock* clock = &MonotonicClock::Get();  // must outlive the device
};

struct PmemMetrics {
  std::atomic<uint64_t> flush_requests{0};    // FLUSH chains seen
  std::atomic<uint64_t> syncs{0};             // fdatasync calls (coalesced flushes)
  std::atomic<uint64_t> flush_errors{0};      // flushes answered with an error
  std::atomic<uint64_t> unknown_requests{0};  // answered with kPmemRespError
  std::atomic<uint64_t> bad_requests{0};      // malformed chains (completed empty)
  std::atomic<uint64_t> size_changes{0};      // backing file changed size
};

class PmemDevice : public virtio::VirtioDevice {
 public:
  static absl::StatusOr<std::shared_ptr<PmemDevice>> Create(std::unique_ptr<PmemBackend> backend,
                                                            PmemOptions options);
  ~PmemDevice() override;

  // virtio::VirtioDevice
  virtio::DeviceType device_type() const override { return virtio::DeviceType::kPmem; }
  uint64_t device_features() const override {
    return virtio::kFeatureRingEventIdx | virtio::kFeatureRingIndirectDesc;
  }
  uint16_t num_queues() const override { return 1; }
  uint16_t queue_max_size(uint16_t) const override { return options_.queue_size; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  // Section 5.19.4: the config space is read-only.
  void WriteConfig(uint64_t, std::span<const uint8_t>) override {}
  absl::Status Activate(const virtio::ActivateContext& context) override;
  void QueueNotify(uint16_t queue_index) override;
  void Reset() override;

  const PmemMetrics& metrics() const { return metrics_; }
  const PmemOptions& options() const { return options_; }

  // Snapshots: the window (a restored device must place the same one; its
  // image is the configuration's, which the caller keeps unchanged). Flush
  // chains are in flight for the transport, which waits them out.
  absl::StatusOr<nlohmann::json> SaveState() const override;
  absl::Status RestoreState(const nlohmann::json& state) override;
  // Flush chains waiting for, or covered by, an fdatasync. Loop thread.
  size_t pending_flushes() const { return waiting_.size() + in_sync_.size(); }

 private:
  class SyncThread;
  PmemDevice(std::unique_ptr<PmemBackend> backend, PmemOptions options);
  void Process();
  virtio::ChainResult Handle(virtio::DescriptorChain& chain);
  void MaybeStartSync();
  void OnSyncDone(const absl::Status& status);
  void CheckSizeNow();
  // Writes the response (`ret`, section 5.19.6) into the chain.
  absl::Status WriteResponse(const virtio::DescriptorChain& chain, uint32_t ret);
  void CancelTimers();

  const std::shared_ptr<PmemBackend> backend_;
  const PmemOptions options_;
  PmemMetrics metrics_;
  std::unique_ptr<SyncThread> sync_thread_;  // null for read-only devices

  // Loop thread, valid between Activate() and Reset().
  virtio::Activation activation_;
  virtio::QueueWorker worker_{activation_, 0, virtio::kDefaultChainBudget, [this] { Process(); }};
  std::vector<virtio::DescriptorChain> waiting_;  // not yet covered by a sync
  std::vector<virtio::DescriptorChain> in_sync_;  // covered by the running sync
  bool sync_running_ = false;
  int64_t last_sync_start_ns_ = 0;
  bool synced_once_ = false;
  int delay_timer_ = -1;
  int check_timer_ = -1;
};

}  // namespace dsec::devices
