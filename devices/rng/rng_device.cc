// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_device.h"

#include <algorithm>
#include <cstring>

#include "devices/rng/rng_request.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {
// Chains served per kick before yielding the loop to other devices.
constexpr int kMaxChainsPerRun = 64;
}  // namespace

RngDevice::RngDevice(std::unique_ptr<EntropySource> source, RngOptions options)
    : source_(std::move(source)),
      options_(options),
      bucket_(options.rate_bytes_per_sec, options.burst_bytes, options.clock) {}

absl::StatusOr<std::shared_ptr<RngDevice>> RngDevice::Create(std::unique_ptr<EntropySource> source,
                                                             RngOptions options) {
  if (!source) return absl::InvalidArgumentError("virtio-rng: no entropy source");
  uint16_t q = options.queue_size;
  if (q == 0 || q > virtio::kMaxQueueSize || (q & (q - 1)) != 0) {
    return absl::InvalidArgumentError("virtio-rng: queue size must be a power of two <= 32768");
  }
  if (options.max_bytes_per_request == 0 || options.clock == nullptr) {
    return absl::InvalidArgumentError("virtio-rng: max_bytes_per_request and clock required");
  }
  return std::shared_ptr<RngDevice>(new RngDevice(std::move(source), options));
}

RngDevice::~RngDevice() { CancelRetry(); }

void RngDevice::ReadConfig(uint64_t, std::span<uint8_t> data) {
  std::memset(data.data(), 0, data.size());
}

absl::Status RngDevice::Activate(const virtio::ActivateContext& context) {
  context_ = context;
  active_ = true;
  return absl::OkStatus();
}

void RngDevice::Reset() {
  CancelRetry();
  context_ = {};
  active_ = false;
  process_posted_ = false;
  ++generation_;
}

void RngDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index != 0) return;
  // A pending retry will run Process() when bytes may be had again; a kick
  // cannot make that sooner.
  if (retry_pending()) return;
  Process();
}

void RngDevice::CancelRetry() {
  if (retry_timer_ >= 0 && context_.loop != nullptr) (void)context_.loop->CancelTimer(retry_timer_);
  retry_timer_ = -1;
}

void RngDevice::ScheduleRetry(int64_t delay_ns) {
  if (retry_timer_ >= 0) return;
  std::weak_ptr<RngDevice> weak = weak_from_this();
  uint64_t generation = generation_;
  absl::StatusOr<int> id = context_.loop->AddTimer(delay_ns, 0, [weak, generation] {
    auto self = weak.lock();
    if (!self || self->generation_ != generation) return;
    self->retry_timer_ = -1;  // one-shot timers remove themselves
    self->Process();
  });
  if (!id.ok()) {
    context_.notifier->ReportBroken(id.status());
    return;
  }
  retry_timer_ = *id;
}

void RngDevice::Process() {
  if (!active_) return;
  virtio::Queue& queue = context_.queues[0];
  if (!queue.active()) return;
  bool used_any = false;
  bool more = false;
  for (int served = 0;; ++served) {
    if (served == kMaxChainsPerRun) {
      more = true;
      break;
    }
    absl::StatusOr<std::optional<virtio::DescriptorChain>> chain = queue.Pop();
    if (!chain.ok()) {
      context_.notifier->ReportBroken(chain.status());
      active_ = false;
      return;
    }
    if (!chain->has_value()) break;
    const virtio::DescriptorChain& c = **chain;
    absl::StatusOr<RngRequest> request = ParseRngRequest(c);
    uint32_t written = 0;
    if (!request.ok()) {
      metrics_.bad_requests.fetch_add(1, std::memory_order_relaxed);
      DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-rng {}", request.status().ToString());
    } else {
      uint64_t allowance = bucket_.unlimited() ? UINT64_MAX : bucket_.Available();
      uint64_t want = RngFillLength(*request, options_.max_bytes_per_request, allowance);
      if (want == 0) {
        queue.UndoPop();
        metrics_.throttled.fetch_add(1, std::memory_order_relaxed);
        ScheduleRetry(std::max<int64_t>(bucket_.NsUntilAvailable(1), 1));
        break;
      }
      scratch_.resize(want);
      absl::StatusOr<size_t> got = source_->Fill(std::span<uint8_t>(scratch_.data(), want));
      if (!got.ok()) {
        queue.UndoPop();
        if (absl::IsUnavailable(got.status())) {
          metrics_.source_unavailable.fetch_add(1, std::memory_order_relaxed);
          ScheduleRetry(options_.retry_ns);
        } else {
          context_.notifier->ReportBroken(got.status());
          active_ = false;
        }
        break;
      }
      size_t n = std::min<size_t>(*got, want);
      (void)bucket_.Take(n);
      virtio::ChainWriter writer(*context_.memory, c);
      // Cannot fail: n <= capacity, and the queue checked the buffers.
      if (absl::Status s = writer.Write(std::span<const uint8_t>(scratch_.data(), n)); !s.ok()) {
        context_.notifier->ReportBroken(s);
        active_ = false;
        return;
      }
      written = static_cast<uint32_t>(n);
      metrics_.bytes.fetch_add(n, std::memory_order_relaxed);
    }
    if (absl::Status s = queue.AddUsed(c.head, written); !s.ok()) {
      context_.notifier->ReportBroken(s);
      active_ = false;
      return;
    }
    metrics_.requests.fetch_add(1, std::memory_order_relaxed);
    used_any = true;
  }
  if (used_any) context_.notifier->SignalUsed(0);
  if (more && !process_posted_) {
    // Yield to other handlers, then continue where we stopped.
    process_posted_ = true;
    std::weak_ptr<RngDevice> weak = weak_from_this();
    uint64_t generation = generation_;
    context_.loop->Post([weak, generation] {
      auto self = weak.lock();
      if (!self || self->generation_ != generation) return;
      self->process_posted_ = false;
      if (!self->retry_pending()) self->Process();
    });
  }
}

}  // namespace dsec::devices
