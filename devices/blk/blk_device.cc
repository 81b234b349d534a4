// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_device.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "devices/virtio/queue.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {

// Largest seg_max: the data iovecs of a request, plus a few from splitting
// at guest memory region boundaries, must stay under IOV_MAX (1024).
constexpr uint32_t kMaxSegMax = 1022;
// Discard granularity hint (virtio 1.2 section 5.2.4): 4 KiB, the block size
// of the file systems images live on; smaller discards still work.
constexpr uint32_t kDiscardSectorAlignment = 8;

const char* TypeName(BlkRequestType type) {
  switch (type) {
    case BlkRequestType::kIn:
      return "read";
    case BlkRequestType::kOut:
      return "write";
    case BlkRequestType::kFlush:
      return "flush";
    case BlkRequestType::kGetId:
      return "get_id";
    case BlkRequestType::kDiscard:
      return "discard";
    case BlkRequestType::kWriteZeroes:
      return "write_zeroes";
    case BlkRequestType::kUnsupported:
      break;
  }
  return "unsupported";
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlkDevice>> BlkDevice::Create(DiskImage image,
                                                             BlkDeviceConfig config) {
  if (config.serial.size() > kBlkIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("virtio-blk serial is longer than ",
                                                   kBlkIdBytes, " bytes: ", config.serial));
  }
  const uint16_t qs = config.queue_size;
  if (qs < 4 || (qs & (qs - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("virtio-blk queue size must be a power of two >= 4, got ", qs));
  }
  if (config.io_depth == 0) {
    return absl::InvalidArgumentError("virtio-blk io_depth must be at least 1");
  }
  if (config.seg_max == 0) config.seg_max = qs - 2u;
  config.seg_max = std::min(config.seg_max, kMaxSegMax);
  if (config.max_discard_seg == 0 || config.max_write_zeroes_seg == 0) {
    return absl::InvalidArgumentError("virtio-blk discard/write-zeroes segment limits must be >= 1");
  }
  return std::unique_ptr<BlkDevice>(new BlkDevice(std::move(image), std::move(config)));
}

BlkDevice::BlkDevice(DiskImage image, BlkDeviceConfig config)
    : image_(std::move(image)),
      config_(std::move(config)),
      clock_(config_.clock != nullptr ? config_.clock : &MonotonicClock::Get()),
      bytes_bucket_(config_.rate_bytes_per_second, config_.burst_bytes, clock_),
      ops_bucket_(config_.rate_ops_per_second, config_.burst_ops, clock_),
      // Chains completed at once (invalid or refused requests, GET_ID) take
      // no I/O slot: the budget bounds them per run.
      worker_(activation_, 0, config_.queue_size, [this] { ProcessQueue(); }) {
  const bool ro = image_.read_only();
  features_ = kBlkFeatureSegMax | kBlkFeatureBlkSize | kBlkFeatureFlush |
              virtio::kFeatureRingEventIdx | virtio::kFeatureRingIndirectDesc;
  // Section 5.2.3: RO tells the driver writes will fail; discard and write
  // zeroes are writes, so a read-only device does not offer them.
  features_ |= ro ? kBlkFeatureRo : (kBlkFeatureDiscard | kBlkFeatureWriteZeroes);

  config_space_.capacity = image_.capacity_sectors();
  config_space_.seg_max = config_.seg_max;
  config_space_.blk_size = kBlkSectorSize;
  if (!ro) {
    config_space_.max_discard_sectors = config_.max_discard_sectors;
    config_space_.max_discard_seg = config_.max_discard_seg;
    config_space_.discard_sector_alignment = kDiscardSectorAlignment;
    config_space_.max_write_zeroes_sectors = config_.max_write_zeroes_sectors;
    config_space_.max_write_zeroes_seg = config_.max_write_zeroes_seg;
    config_space_.write_zeroes_may_unmap = config_.write_zeroes_may_unmap ? 1 : 0;
  }
}

BlkDevice::~BlkDevice() {
  if (activation_.active()) Reset();
}

void BlkDevice::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  // Guest-controlled: offset and size; bytes beyond the struct read as zero.
  const auto* bytes = reinterpret_cast<const uint8_t*>(&config_space_);
  for (size_t i = 0; i < data.size(); ++i) {
    const bool inside = offset < sizeof(config_space_) && i < sizeof(config_space_) - offset;
    data[i] = inside ? bytes[offset + i] : 0;
  }
}

void BlkDevice::WriteConfig(uint64_t, std::span<const uint8_t>) {
  // Every field is read-only: `writeback` is writable only with
  // VIRTIO_BLK_F_CONFIG_WCE, which is not offered (section 5.2.4).
}

absl::Status BlkDevice::Activate(const virtio::ActivateContext& context) {
  if (activation_.active()) return absl::FailedPreconditionError("virtio-blk already active");
  if (context.queues.size() != 1 || context.memory == nullptr || context.notifier == nullptr ||
      context.loop == nullptr) {
    return absl::InvalidArgumentError("virtio-blk needs one queue, memory, notifier and loop");
  }
  DSEC_ASSIGN_OR_RETURN(backend_, CreateBlkBackend(config_.backend, image_.fd(), context.loop,
                                                   config_.io_depth));
  const uint64_t acked = context.acked_features;
  limits_ = BlkLimits{};
  limits_.capacity_sectors = image_.capacity_sectors();
  limits_.read_only = image_.read_only();
  limits_.seg_max = config_.seg_max;
  limits_.discard = !image_.read_only() && (acked & kBlkFeatureDiscard) != 0;
  limits_.max_discard_sectors = config_.max_discard_sectors;
  limits_.max_discard_seg = config_.max_discard_seg;
  limits_.write_zeroes = !image_.read_only() && (acked & kBlkFeatureWriteZeroes) != 0;
  limits_.max_write_zeroes_sectors = config_.max_write_zeroes_sectors;
  limits_.max_write_zeroes_seg = config_.max_write_zeroes_seg;
  flush_negotiated_ = (acked & kBlkFeatureFlush) != 0;
  activation_.Begin(context);
  DSEC_LOG(info, "device=blk image={} backend={} capacity_sectors={} read_only={} flush={}",
           image_.path(), backend_->name(), image_.capacity_sectors(), image_.read_only(),
           flush_negotiated_);
  return absl::OkStatus();
}

void BlkDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index == 0) ProcessQueue();
}

void BlkDevice::Reset() {
  if (throttle_timer_ >= 0 && activation_.active()) {
    (void)activation_.loop().CancelTimer(throttle_timer_);
  }
  throttle_timer_ = -1;
  // Waits for the kernel to finish with guest buffers and drops the
  // completions: the abandoned requests belong to the driver again.
  backend_.reset();
  in_flight_.clear();
  activation_.End();
}

BlkMetrics BlkDevice::metrics() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  BlkMetrics m;
  m.requests = get(counters_.requests);
  m.read_requests = get(counters_.read_requests);
  m.write_requests = get(counters_.write_requests);
  m.flush_requests = get(counters_.flush_requests);
  m.discard_requests = get(counters_.discard_requests);
  m.write_zeroes_requests = get(counters_.write_zeroes_requests);
  m.get_id_requests = get(counters_.get_id_requests);
  m.bytes_read = get(counters_.bytes_read);
  m.bytes_written = get(counters_.bytes_written);
  m.errors = get(counters_.errors);
  m.unsupported = get(counters_.unsupported);
  m.invalid_chains = get(counters_.invalid_chains);
  m.throttled = get(counters_.throttled);
  return m;
}

void BlkDevice::ProcessQueue() {
  // A request completing frees a slot and runs the queue again.
  worker_.Run([this] { return in_flight_.size() < config_.io_depth; },
              [this](virtio::DescriptorChain& chain) { return HandleChain(chain); });
}

virtio::ChainResult BlkDevice::HandleChain(const virtio::DescriptorChain& chain) {
  absl::StatusOr<BlkRequest> req = ParseBlkRequest(activation_.memory(), chain, limits_);
  const bool has_data = req.ok() && req->status == kBlkStatusOk &&
                        (req->type == BlkRequestType::kIn || req->type == BlkRequestType::kOut);
  // Every chain costs one op, so refused requests cannot be spammed for
  // free; IN/OUT data also costs bytes.
  if (!Admit(has_data ? req->data_len : 0)) return virtio::ChainResult::PutBack();
  Count(counters_.requests);
  if (!req.ok()) {
    // No status byte to report through: return the chain with nothing
    // written so the driver gets its descriptors back.
    Count(counters_.invalid_chains);
    DSEC_LOG_RATELIMITED(warn, 5, "device=blk image={} invalid request: {}", image_.path(),
                         std::string(req.status().message()));
    return virtio::ChainResult::Used(0);
  }
  if (req->status != kBlkStatusOk) {
    Count(req->status == kBlkStatusUnsupp ? counters_.unsupported : counters_.errors);
    return virtio::ChainResult::Used(WriteStatus(req->status_gpa, req->status, 1));
  }
  auto request = std::make_unique<InFlight>();
  request->head = chain.head;
  request->req = std::move(*req);
  Start(std::move(request));  // completes it at once (GET_ID) or from the backend
  return virtio::ChainResult::Kept();
}

bool BlkDevice::Admit(uint64_t bytes) {
  if (ops_bucket_.unlimited() && bytes_bucket_.unlimited()) return true;
  // A request larger than the byte burst can never find that many tokens;
  // it is admitted when the bucket is full and takes what is there.
  const uint64_t need_bytes = bytes_bucket_.unlimited() ? 0 : std::min(bytes, bytes_bucket_.burst());
  const int64_t wait = std::max(ops_bucket_.NsUntilAvailable(1),
                                bytes_bucket_.NsUntilAvailable(need_bytes));
  if (wait == 0) {
    (void)ops_bucket_.TryTake(1);
    (void)bytes_bucket_.Take(bytes);
    return true;
  }
  Count(counters_.throttled);
  if (throttle_timer_ >= 0) return false;  // already waiting
  absl::StatusOr<int> timer = activation_.loop().AddTimer(wait, 0, [this] {
    throttle_timer_ = -1;
    ProcessQueue();
  });
  if (!timer.ok()) {
    // Without a timer nothing would restart the queue; better to exceed the
    // limit than to stall the guest's disk.
    DSEC_LOG_RATELIMITED(err, 1, "device=blk image={} rate-limit timer: {}", image_.path(),
                         std::string(timer.status().message()));
    return true;
  }
  throttle_timer_ = *timer;
  return false;
}

void BlkDevice::Start(std::unique_ptr<InFlight> request) {
  InFlight* r = request.get();
  r->id = next_id_++;
  in_flight_.emplace(r->id, std::move(request));
  const uint64_t id = r->id;
  auto done = [this, id](int64_t result) { OnIoDone(id, result); };
  switch (r->req.type) {
    case BlkRequestType::kIn:
    case BlkRequestType::kOut: {
      const bool read = r->req.type == BlkRequestType::kIn;
      Count(read ? counters_.read_requests : counters_.write_requests);
      absl::StatusOr<std::vector<iovec>> iov =
          GuestRangesToIovecs(activation_.memory(), r->req.data);
      if (!iov.ok()) {
        Finish(id, kBlkStatusIoErr);
        return;
      }
      if (read) {
        backend_->Read(r->req.offset(), std::move(*iov), std::move(done));
      } else {
        backend_->Write(r->req.offset(), std::move(*iov), std::move(done));
      }
      return;
    }
    case BlkRequestType::kFlush:
      Count(counters_.flush_requests);
      backend_->Flush(std::move(done));
      return;
    case BlkRequestType::kGetId: {
      Count(counters_.get_id_requests);
      // Section 5.2.6: NUL-padded, no terminator when 20 bytes long.
      std::array<uint8_t, kBlkIdBytes> id_bytes{};
      std::memcpy(id_bytes.data(), config_.serial.data(), config_.serial.size());
      size_t pos = 0;
      for (const virtio::GuestBuffer& b : r->req.data) {
        if (!activation_.memory()
                 .Write(b.gpa, std::span<const uint8_t>(id_bytes).subspan(pos, b.len))
                 .ok()) {
          Finish(id, kBlkStatusIoErr);
          return;
        }
        pos += b.len;
      }
      Finish(id, kBlkStatusOk);
      return;
    }
    case BlkRequestType::kDiscard:
    case BlkRequestType::kWriteZeroes:
      Count(r->req.type == BlkRequestType::kDiscard ? counters_.discard_requests
                                                    : counters_.write_zeroes_requests);
      NextSegment(r);
      return;
    case BlkRequestType::kUnsupported:
      break;
  }
  Finish(id, kBlkStatusUnsupp);  // unreachable: the parser refused it
}

void BlkDevice::NextSegment(InFlight* r) {
  const BlkSegment& seg = r->req.segments[r->next_segment];
  const uint64_t offset = seg.sector << kBlkSectorShift;
  const uint64_t len = static_cast<uint64_t>(seg.num_sectors) << kBlkSectorShift;
  const uint64_t id = r->id;
  auto done = [this, id](int64_t result) { OnIoDone(id, result); };
  if (r->req.type == BlkRequestType::kDiscard) {
    backend_->Discard(offset, len, std::move(done));
  } else {
    backend_->WriteZeroes(offset, len, seg.unmap && config_.write_zeroes_may_unmap,
                          std::move(done));
  }
}

void BlkDevice::OnIoDone(uint64_t id, int64_t result) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  InFlight* r = it->second.get();
  const BlkRequestType type = r->req.type;
  // Section 5.2.6.2: the device MAY deallocate on discard, so a file system
  // without hole punching still completes it successfully.
  if (result < 0 && !(type == BlkRequestType::kDiscard && result == -EOPNOTSUPP)) {
    DSEC_LOG_RATELIMITED(warn, 5, "device=blk image={} op={} sector={} error={}", image_.path(),
                         TypeName(type), r->req.sector, std::strerror(static_cast<int>(-result)));
    Finish(id, kBlkStatusIoErr);
  } else if (type == BlkRequestType::kOut && !flush_negotiated_ && r->next_segment == 0) {
    // Write-through without VIRTIO_BLK_F_FLUSH: sync before completing
    // (next_segment marks that the flush was issued).
    r->next_segment = 1;
    backend_->Flush([this, id](int64_t res) { OnIoDone(id, res); });
    return;
  } else if ((type == BlkRequestType::kDiscard || type == BlkRequestType::kWriteZeroes) &&
             ++r->next_segment < r->req.segments.size()) {
    NextSegment(r);
    return;
  } else {
    Finish(id, kBlkStatusOk);
  }
  // A slot is free: take more requests from the ring (the run also tells
  // the driver about this completion).
  ProcessQueue();
}

void BlkDevice::Finish(uint64_t id, uint8_t status) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  std::unique_ptr<InFlight> r = std::move(it->second);
  in_flight_.erase(it);
  uint32_t used_len = 1;  // the status byte
  if (status == kBlkStatusOk) {
    switch (r->req.type) {
      case BlkRequestType::kIn:
        Count(counters_.bytes_read, r->req.data_len);
        used_len += static_cast<uint32_t>(std::min<uint64_t>(r->req.data_len, UINT32_MAX - 1));
        break;
      case BlkRequestType::kOut:
        Count(counters_.bytes_written, r->req.data_len);
        break;
      case BlkRequestType::kGetId:
        used_len += static_cast<uint32_t>(r->req.data_len);
        break;
      default:
        break;
    }
  } else {
    Count(status == kBlkStatusUnsupp ? counters_.unsupported : counters_.errors);
  }
  // A broken device writes nothing more into buffers the driver is about
  // to take back by resetting it.
  if (!activation_.running()) return;
  (void)worker_.Complete(r->head, WriteStatus(r->req.status_gpa, status, used_len));
}

uint32_t BlkDevice::WriteStatus(uint64_t status_gpa, uint8_t status, uint32_t used_len) {
  // The status byte's range was checked by the queue; a failure here would
  // mean guest memory changed shape, so report nothing written.
  if (!activation_.memory().WriteObj<uint8_t>(status_gpa, status).ok()) return 0;
  return used_len;
}

}  // namespace dsec::devices
