// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "devices/blk/blk_backend.h"
#include "devices/blk/blk_request.h"
#include "devices/blk/disk_image.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "base/clock.h"
#include "base/token_bucket.h"

namespace dsec::devices {

// Device-specific feature bits (virtio 1.2 section 5.2.3).
inline constexpr uint64_t kBlkFeatureSegMax = 1ull << 2;        // VIRTIO_BLK_F_SEG_MAX
inline constexpr uint64_t kBlkFeatureRo = 1ull << 5;            // VIRTIO_BLK_F_RO
inline constexpr uint64_t kBlkFeatureBlkSize = 1ull << 6;       // VIRTIO_BLK_F_BLK_SIZE
inline constexpr uint64_t kBlkFeatureFlush = 1ull << 9;         // VIRTIO_BLK_F_FLUSH
inline constexpr uint64_t kBlkFeatureDiscard = 1ull << 13;      // VIRTIO_BLK_F_DISCARD
inline constexpr uint64_t kBlkFeatureWriteZeroes = 1ull << 14;  // VIRTIO_BLK_F_WRITE_ZEROES

// struct virtio_blk_config (virtio 1.2 section 5.2.4) up to
// write_zeroes_may_unmap and its padding; fields the device does not offer
// (size_max, geometry, topology, writeback, num_queues) read as zero.
struct __attribute__((packed)) BlkConfigSpace {
  uint64_t capacity;  // 512-byte sectors
  uint32_t size_max;
  uint32_t seg_max;
  uint16_t geometry_cylinders;
  uint8_t geometry_heads;
  uint8_t geometry_sectors;
  uint32_t blk_size;
  uint8_t physical_block_exp;
  uint8_t alignment_offset;
  uint16_t min_io_size;
  uint32_t opt_io_size;
  uint8_t writeback;
  uint8_t unused0;
  uint16_t num_queues;
  uint32_t max_discard_sectors;
  uint32_t max_discard_seg;
  uint32_t discard_sector_alignment;
  uint32_t max_write_zeroes_sectors;
  uint32_t max_write_zeroes_seg;
  uint8_t write_zeroes_may_unmap;
  uint8_t unused1[3];
};
static_assert(sizeof(BlkConfigSpace) == 60);
static_assert(offsetof(BlkConfigSpace, blk_size) == 20);
static_assert(offsetof(BlkConfigSpace, max_discard_sectors) == 36);
static_assert(offsetof(BlkConfigSpace, write_zeroes_may_unmap) == 56);

struct BlkDeviceConfig {
  // GET_ID answer: up to 20 bytes, NUL-padded (virtio 1.2 section 5.2.6).
  std::string serial;
  uint16_t queue_size = 256;  // power of two
  // Data buffers per request; 0 means queue_size - 2 (header and status take
  // the other two descriptors), capped at 1022 so iovecs stay under IOV_MAX.
  uint32_t seg_max = 0;
  uint32_t max_discard_sectors = 1u << 22;  // 2 GiB per segment
  uint32_t max_discard_seg = 32;
  uint32_t max_write_zeroes_sectors = 1u << 22;
  uint32_t max_write_zeroes_seg = 32;
  bool write_zeroes_may_unmap = true;
  // Requests in flight in the backend; the rest wait in the ring.
  uint32_t io_depth = 64;
  BlkBackendKind backend = BlkBackendKind::kAuto;
  // Rate limits (TokenBucket semantics: rate 0 = unlimited, burst 0 = one
  // second's worth). Bytes count IN/OUT data; every request costs one op.
  uint64_t rate_bytes_per_second = 0;
  uint64_t burst_bytes = 0;
  uint64_t rate_ops_per_second = 0;
  uint64_t burst_ops = 0;
  // Clock of the rate limiter; must outlive the device. nullptr: monotonic.
  const Clock* clock = nullptr;
};

// Snapshot of the device's counters.
struct BlkMetrics {
  uint64_t requests = 0;         // chains taken from the ring
  uint64_t read_requests = 0;
  uint64_t write_requests = 0;
  uint64_t flush_requests = 0;
  uint64_t discard_requests = 0;
  uint64_t write_zeroes_requests = 0;
  uint64_t get_id_requests = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t errors = 0;           // completed with IOERR (invalid or failed I/O)
  uint64_t unsupported = 0;      // completed with UNSUPP
  uint64_t invalid_chains = 0;   // no status byte: returned with length 0
  uint64_t throttled = 0;        // times the rate limiter deferred the queue
};

// virtio-blk (virtio 1.2 section 5.2): one request queue over a raw image.
//
// Requests are parsed (blk_request.h), admitted by a pair of token buckets
// (bytes and ops), and handed to an asynchronous backend (io_uring, or the
// synchronous fallback); at most io_depth are in flight, the rest stay in
// the ring. The ring is served by a virtio::QueueWorker: a request handed to
// the backend is a kept chain, returned by its completion (which then takes
// more requests from the ring, since a slot is free). A request the limiter
// refuses goes back to the ring (UndoPop) and a one-shot timer re-runs the
// queue when the buckets will have refilled: throttling delays requests, it
// never drops them. Without VIRTIO_BLK_F_FLUSH
// negotiated the device is write-through (each write is followed by
// fdatasync before it completes, section 5.2.6.2).
//
// Threads: device_type()/device_features()/num_queues()/queue_max_size()/
// ReadConfig()/WriteConfig() from any thread (constant data); metrics() from
// any thread (atomic counters); everything else on the event-loop thread,
// where all backend completions also run. Reset() (or destruction) waits for
// the backend's in-flight I/O and abandons those requests.
class BlkDevice : public virtio::VirtioDevice {
 public:
  // InvalidArgument for a bad configuration (serial > 20 bytes, queue size
  // not a power of two).
  static absl::StatusOr<std::unique_ptr<BlkDevice>> Create(DiskImage image,
                                                           BlkDeviceConfig config);
  ~BlkDevice() override;

  virtio::DeviceType device_type() const override { return virtio::DeviceType::kBlock; }
  uint64_t device_features() const override { return features_; }
  uint16_t num_queues() const override { return 1; }
  uint16_t queue_max_size(uint16_t) const override { return config_.queue_size; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  void WriteConfig(uint64_t offset, std::span<const uint8_t> data) override;
  absl::Status Activate(const virtio::ActivateContext& context) override;
  void QueueNotify(uint16_t queue_index) override;
  void Reset() override;

  BlkMetrics metrics() const;
  const BlkConfigSpace& config_space() const { return config_space_; }
  const DiskImage& image() const { return image_; }
  // The backend in use while active ("io_uring" / "sync"), else "".
  const char* backend_name() const { return backend_ ? backend_->name() : ""; }

 private:
  struct Counters {
    std::atomic<uint64_t> requests{0}, read_requests{0}, write_requests{0}, flush_requests{0},
        discard_requests{0}, write_zeroes_requests{0}, get_id_requests{0}, bytes_read{0},
        bytes_written{0}, errors{0}, unsupported{0}, invalid_chains{0}, throttled{0};
  };
  // A request handed to the backend.
  struct InFlight {
    uint64_t id = 0;
    uint16_t head = 0;
    BlkRequest req;
    size_t next_segment = 0;  // DISCARD / WRITE_ZEROES progress
  };

  BlkDevice(DiskImage image, BlkDeviceConfig config);

  void ProcessQueue();
  virtio::ChainResult HandleChain(const virtio::DescriptorChain& chain);
  // True if the buckets admit `bytes`; otherwise arms the timer.
  bool Admit(uint64_t bytes);
  void Start(std::unique_ptr<InFlight> request);
  void NextSegment(InFlight* request);
  // A backend completion for `id`.
  void OnIoDone(uint64_t id, int64_t result);
  // Writes the status byte; the used length to return the chain with.
  uint32_t WriteStatus(uint64_t status_gpa, uint8_t status, uint32_t used_len);
  void Finish(uint64_t id, uint8_t status);
  void Count(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }

  const DiskImage image_;
  const BlkDeviceConfig config_;
  BlkConfigSpace config_space_{};
  uint64_t features_ = 0;
  const Clock* const clock_;
  TokenBucket bytes_bucket_;
  TokenBucket ops_bucket_;
  Counters counters_;

  // Active state (loop thread).
  virtio::Activation activation_;
  virtio::QueueWorker worker_;
  BlkLimits limits_;
  bool flush_negotiated_ = false;
  int throttle_timer_ = -1;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<InFlight>> in_flight_;
  // Declared last: destroyed first, so no completion can reach the state
  // above once it is gone.
  std::unique_ptr<BlkBackend> backend_;
};

}  // namespace dsec::devices
