// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_device.h"

#include <algorithm>
#include <cstring>

#include "devices/rng/rng_request.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

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
  activation_.Begin(context);
  return absl::OkStatus();
}

void RngDevice::Reset() {
  CancelRetry();
  activation_.End();
}

absl::Status RngDevice::RestoreState(const nlohmann::json& state) {
  if (!state.is_object() || !state.empty()) {
    return absl::InvalidArgumentError("virtio-rng: its snapshot state is an empty object");
  }
  return absl::OkStatus();
}

void RngDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index == 0) Process();
}

void RngDevice::CancelRetry() {
  if (retry_timer_ >= 0 && activation_.active()) (void)activation_.loop().CancelTimer(retry_timer_);
  retry_timer_ = -1;
}

void RngDevice::ScheduleRetry(int64_t delay_ns) {
  if (retry_timer_ >= 0) return;
  absl::StatusOr<int> id = activation_.loop().AddTimer(delay_ns, 0, activation_.Guard([this] {
    retry_timer_ = -1;  // one-shot timers remove themselves
    Process();
  }));
  if (!id.ok()) {
    activation_.MarkBroken(id.status());
    return;
  }
  retry_timer_ = *id;
}

void RngDevice::Process() {
  // A pending retry runs Process() when bytes may be had again; a kick (or
  // a continuation) cannot make that sooner.
  worker_.Run([this] { return !retry_pending(); },
              [this](virtio::DescriptorChain& chain) { return Fill(chain); });
}

virtio::ChainResult RngDevice::Fill(const virtio::DescriptorChain& chain) {
  absl::StatusOr<RngRequest> request = ParseRngRequest(chain);
  if (!request.ok()) {
    metrics_.bad_requests.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-rng {}", request.status().ToString());
    metrics_.requests.fetch_add(1, std::memory_order_relaxed);
    return virtio::ChainResult::Used(0);
  }
  uint64_t allowance = bucket_.unlimited() ? UINT64_MAX : bucket_.Available();
  uint64_t want = RngFillLength(*request, options_.max_bytes_per_request, allowance);
  if (want == 0) {
    metrics_.throttled.fetch_add(1, std::memory_order_relaxed);
    ScheduleRetry(std::max<int64_t>(bucket_.NsUntilAvailable(1), 1));
    return virtio::ChainResult::PutBack();
  }
  scratch_.resize(want);
  absl::StatusOr<size_t> got = source_->Fill(std::span<uint8_t>(scratch_.data(), want));
  if (!got.ok()) {
    if (!absl::IsUnavailable(got.status())) return virtio::ChainResult::Broken(got.status());
    metrics_.source_unavailable.fetch_add(1, std::memory_order_relaxed);
    ScheduleRetry(options_.retry_ns);
    return virtio::ChainResult::PutBack();
  }
  size_t n = std::min<size_t>(*got, want);
  (void)bucket_.Take(n);
  virtio::ChainWriter writer(activation_.memory(), chain);
  // Cannot fail: n <= capacity, and the queue checked the buffers.
  if (absl::Status s = writer.Write(std::span<const uint8_t>(scratch_.data(), n)); !s.ok()) {
    return virtio::ChainResult::Broken(s);
  }
  metrics_.bytes.fetch_add(n, std::memory_order_relaxed);
  metrics_.requests.fetch_add(1, std::memory_order_relaxed);
  return virtio::ChainResult::Used(static_cast<uint32_t>(n));
}

}  // namespace dsec::devices
