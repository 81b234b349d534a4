// SPDX-License-Identifier: Apache-2.0
// virtio-balloon (virtio 1.2 section 5.5), device type 5.
//
// Queues, in the order Linux and the virtio 1.3 draft number them: the
// indices are compacted over the features the driver negotiated, so
//   0 inflateq, 1 deflateq, then statsq (if VIRTIO_BALLOON_F_STATS_VQ),
//   then reporting_vq (if VIRTIO_BALLOON_F_REPORTING).
// (free_page_vq, VIRTIO_BALLOON_F_FREE_PAGE_HINT, is not offered.)
// num_queues() reports every queue the device offers; with fewer features
// acked the driver simply leaves the last ones disabled.
//
// Config space (section 5.5.4): le32 num_pages (the host's target, written by
// SetTargetPages), le32 actual (written by the driver).
//
// Host side: inflated and reported pages are released through a
// BalloonBackend (memfd hole punching for guest RAM); deflated pages need
// nothing, the guest faults them back in as zero pages (their content is
// lost, section 5.5.6.1). VIRTIO_BALLOON_F_MUST_TELL_HOST is not offered, so
// the guest may reuse deflated pages at once; VIRTIO_BALLOON_F_DEFLATE_ON_OOM
// lets it deflate under memory pressure (counted as unrequested deflation).
//
// Hostile guest: a PFN outside guest RAM, inside guest memory that is not
// releasable RAM (a pmem window), inflated twice or deflated without being
// inflated, a reported range that is unaligned or inside the balloon, and
// work beyond the per-second page budget are refused and counted; the host
// never releases anything but RAM pages the guest gave up. Malformed buffers
// are completed empty (counted); ring violations mark the device broken.
//
// Threads: the VirtioDevice contract (virtio_device.h) for the transport;
// the BalloonControl methods (SetTargetPages, GetStats, metrics, ...) from
// any thread. Lifetime: owned by shared_ptr (posted work holds a weak_ptr).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/balloon/balloon_backend.h"
#include "devices/balloon/balloon_control.h"
#include "devices/balloon/balloon_pages.h"
#include "devices/balloon/balloon_request.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "base/clock.h"
#include "base/token_bucket.h"

namespace dsec::devices {

struct BalloonOptions {
  bool stats = true;                // offer VIRTIO_BALLOON_F_STATS_VQ
  bool deflate_on_oom = true;       // offer VIRTIO_BALLOON_F_DEFLATE_ON_OOM
  bool free_page_reporting = true;  // offer VIRTIO_BALLOON_F_REPORTING
  uint16_t queue_size = 256;        // power of two
  // Per-buffer caps on guest input (Linux sends 256 PFNs, 32 ranges).
  uint32_t max_pfns_per_request = 1024;
  uint32_t max_stats_entries = 64;
  uint32_t max_report_ranges = 256;
  // Budget of pages (inflated + reported) handled per second, so that a
  // guest cannot keep the event loop busy releasing memory. Inflate buffers
  // over budget wait (throttled); reported pages over budget are refused
  // (reporting is only a hint). 0 = unlimited. Burst 0 = one second's worth;
  // it must hold at least max_pfns_per_request.
  uint64_t release_pages_per_sec = 1 << 18;  // 1 GiB/s
  uint64_t release_burst_pages = 0;
  // If > 0, the device asks the guest for fresh statistics this often.
  int64_t stats_period_ns = 0;
  // Delay before re-running a throttled inflate queue at the earliest.
  int64_t min_retry_ns = 1'000'000;
  const Clock* clock = nullptr;  // nullptr: monotonic; must outlive the device
};

class BalloonDevice : public virtio::VirtioDevice,
                      public BalloonControl,
                      public std::enable_shared_from_this<BalloonDevice> {
 public:
  // InvalidArgument for a bad configuration or a backend without RAM.
  static absl::StatusOr<std::shared_ptr<BalloonDevice>> Create(
      std::unique_ptr<BalloonBackend> backend, BalloonOptions options);
  ~BalloonDevice() override;

  // virtio::VirtioDevice
  virtio::DeviceType device_type() const override { return virtio::DeviceType::kBalloon; }
  uint64_t device_features() const override { return features_; }
  uint16_t num_queues() const override { return num_queues_; }
  uint16_t queue_max_size(uint16_t) const override { return options_.queue_size; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  void WriteConfig(uint64_t offset, std::span<const uint8_t> data) override;
  absl::Status Activate(const virtio::ActivateContext& context) override;
  void QueueNotify(uint16_t queue_index) override;
  void Reset() override;

  // BalloonControl
  void SetTargetPages(uint32_t pages) override;
  uint32_t target_pages() const override { return num_pages_.load(); }
  uint32_t actual_pages() const override { return actual_.load(); }
  uint64_t balloon_pages() const override { return balloon_pages_.load(); }
  bool driver_active() const override;
  bool stats_enabled() const override;
  void RequestStats() override;
  std::optional<BalloonStatsSample> GetStats() const override;
  BalloonMetrics metrics() const override;

  // Pages of releasable guest RAM (the largest sensible target).
  uint64_t ram_pages() const { return ram_pages_; }

  // Snapshots: the target, the driver's `actual`, the pages in the balloon
  // (runs of PFNs: a restored balloon refuses to deflate what it never
  // held) and the statistics buffer it holds (HeldBuffers). Statistics
  // samples and counters start again.
  absl::StatusOr<nlohmann::json> SaveState() const override;
  absl::Status RestoreState(const nlohmann::json& state) override;
  uint16_t HeldBuffers(uint16_t queue_index) const override;

 private:
  enum class Kind : uint8_t { kNone, kInflate, kDeflate, kStats, kReporting };
  struct Counters {
    std::atomic<uint64_t> inflated{0}, deflated{0}, deflated_unrequested{0}, released_bytes{0},
        reported{0}, reported_released_bytes{0}, refused_not_ram{0}, refused_not_releasable{0},
        refused_duplicate{0}, refused_not_inflated{0}, refused_unaligned{0}, refused_rate{0},
        throttled{0}, bad_requests{0}, release_errors{0}, stats_updates{0}, stats_requests{0};
  };
  static void Count(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }

  BalloonDevice(std::unique_ptr<BalloonBackend> backend, BalloonOptions options);

  // Loop thread.
  void ProcessQueue(uint16_t index);
  virtio::ChainResult HandleChain(Kind kind, uint16_t index, const virtio::DescriptorChain& chain);
  // False if the chain must wait (page budget exhausted).
  bool Inflate(const virtio::DescriptorChain& chain);
  void Deflate(const virtio::DescriptorChain& chain);
  void Report(const virtio::DescriptorChain& chain);
  void ReceiveStats(uint16_t index, const virtio::DescriptorChain& chain);
  void ReturnStatsBuffer();
  // Counts a page that is not releasable RAM under the right reason.
  void RefuseNotRam(uint64_t pfn);
  // Releases [first_pfn, first_pfn + count) through the backend.
  void Release(uint64_t first_pfn, uint64_t count, std::atomic<uint64_t>& released);
  // The pages of `run` that are RAM outside the balloon, each counted in
  // `taken` (and put in the balloon with `into_balloon`), released in
  // maximal sub-runs; the others are refused (in the balloon: duplicate;
  // not RAM: RefuseNotRam). Inflate and free page reporting differ only
  // in what they count and whether the balloon keeps the pages.
  void ReleasePagesOutside(const PageRun& run, bool into_balloon, std::atomic<uint64_t>& taken,
                           std::atomic<uint64_t>& released);
  void ScheduleRetry(int64_t delay_ns);
  void CancelTimers();
  std::optional<uint16_t> QueueOf(Kind kind) const;

  const std::unique_ptr<BalloonBackend> backend_;
  const BalloonOptions options_;
  const Clock* const clock_;
  uint64_t features_ = 0;
  uint16_t num_queues_ = 2;
  uint64_t ram_pages_ = 0;
  Counters counters_;
  std::atomic<uint32_t> num_pages_{0};
  std::atomic<uint32_t> actual_{0};
  std::atomic<uint64_t> balloon_pages_{0};

  // Shared with the controller's threads.
  mutable absl::Mutex mu_;
  virtio::DriverNotifier* notifier_ ABSL_GUARDED_BY(mu_) = nullptr;
  EventLoop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Reset(): stale work is ignored
  bool stats_negotiated_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<BalloonStatsSample> stats_ ABSL_GUARDED_BY(mu_);

  // Loop thread, valid between Activate() and Reset().
  virtio::Activation activation_;
  std::vector<virtio::QueueWorker> workers_;  // by queue index; built once
  uint64_t loop_generation_ = 0;  // generation_ as of Activate()
  std::array<Kind, 4> kinds_{};   // by queue index
  TokenBucket bucket_;
  BalloonPageSet pages_;
  std::optional<uint16_t> stats_head_;  // the stats buffer the device holds
  std::optional<uint16_t> restored_stats_head_;  // RestoreState, taken at Activate
  int retry_timer_ = -1;
  int stats_timer_ = -1;
};

}  // namespace dsec::devices
