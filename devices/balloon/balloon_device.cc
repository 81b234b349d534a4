// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_device.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_fields.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {
// struct virtio_balloon_config up to `actual` (section 5.5.4); the optional
// fields after it belong to features the device does not offer.
constexpr uint64_t kConfigBytes = 8;
constexpr uint64_t kActualOffset = 4;
}  // namespace

BalloonDevice::BalloonDevice(std::unique_ptr<BalloonBackend> backend, BalloonOptions options)
    : backend_(std::move(backend)),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : &MonotonicClock::Get()),
      bucket_(options.release_pages_per_sec, options.release_burst_pages, clock_),
      pages_(backend_->releasable()) {
  features_ = virtio::kFeatureRingEventIdx | virtio::kFeatureRingIndirectDesc;
  if (options_.stats) features_ |= kBalloonFeatureStatsVq;
  if (options_.deflate_on_oom) features_ |= kBalloonFeatureDeflateOnOom;
  if (options_.free_page_reporting) features_ |= kBalloonFeatureReporting;
  num_queues_ = static_cast<uint16_t>(2 + (options_.stats ? 1 : 0) +
                                      (options_.free_page_reporting ? 1 : 0));
  for (const BalloonRange& r : backend_->releasable()) ram_pages_ += r.size >> kBalloonPageShift;
  workers_.reserve(num_queues_);  // never reallocated: continuations point at them
  for (uint16_t i = 0; i < num_queues_; ++i) {
    workers_.emplace_back(activation_, i, virtio::kDefaultChainBudget,
                          [this, i] { ProcessQueue(i); });
  }
}

absl::StatusOr<std::shared_ptr<BalloonDevice>> BalloonDevice::Create(
    std::unique_ptr<BalloonBackend> backend, BalloonOptions options) {
  if (!backend || backend->releasable().empty()) {
    return absl::InvalidArgumentError("virtio-balloon: backend has no releasable RAM");
  }
  uint64_t prev_end = 0;
  for (const BalloonRange& r : backend->releasable()) {
    if (r.size == 0 || r.gpa % kBalloonPageSize != 0 || r.size % kBalloonPageSize != 0 ||
        r.gpa < prev_end || r.end() < r.gpa) {
      return absl::InvalidArgumentError("virtio-balloon: releasable ranges unsorted or unaligned");
    }
    prev_end = r.end();
  }
  const uint16_t q = options.queue_size;
  if (q == 0 || q > virtio::kMaxQueueSize || (q & (q - 1)) != 0) {
    return absl::InvalidArgumentError("virtio-balloon: queue size must be a power of two");
  }
  if (options.max_pfns_per_request == 0 || options.max_stats_entries == 0 ||
      options.max_report_ranges == 0) {
    return absl::InvalidArgumentError("virtio-balloon: per-request caps must be non-zero");
  }
  const uint64_t burst = options.release_burst_pages != 0 ? options.release_burst_pages
                                                          : options.release_pages_per_sec;
  if (options.release_pages_per_sec != 0 && burst < options.max_pfns_per_request) {
    return absl::InvalidArgumentError(
        "virtio-balloon: release burst must hold max_pfns_per_request pages");
  }
  return std::shared_ptr<BalloonDevice>(new BalloonDevice(std::move(backend), options));
}

BalloonDevice::~BalloonDevice() { CancelTimers(); }

// --- Config space (vCPU threads) ---------------------------------------------

void BalloonDevice::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  // Guest-controlled: offset and size; bytes beyond the struct read as zero.
  uint8_t config[kConfigBytes];
  const uint32_t num_pages = num_pages_.load();
  const uint32_t actual = actual_.load();
  std::memcpy(config, &num_pages, 4);
  std::memcpy(config + kActualOffset, &actual, 4);
  for (size_t i = 0; i < data.size(); ++i) {
    const bool inside = offset < kConfigBytes && i < kConfigBytes - offset;
    data[i] = inside ? config[offset + i] : 0;
  }
}

void BalloonDevice::WriteConfig(uint64_t offset, std::span<const uint8_t> data) {
  // Guest-controlled: offset, size and value. Only `actual` is writable by
  // the driver (section 5.5.4); it is informational, the host trusts its own
  // page set (balloon_pages()).
  for (size_t i = 0; i < data.size(); ++i) {
    if (offset > kConfigBytes || i >= kConfigBytes - offset) break;
    const uint64_t at = offset + i;
    if (at < kActualOffset) continue;
    const unsigned shift = static_cast<unsigned>(at - kActualOffset) * 8;
    uint32_t old_value = actual_.load();
    uint32_t new_value;
    do {
      new_value = (old_value & ~(0xffu << shift)) | (static_cast<uint32_t>(data[i]) << shift);
    } while (!actual_.compare_exchange_weak(old_value, new_value));
  }
}

// --- Control API (any thread) ------------------------------------------------

void BalloonDevice::SetTargetPages(uint32_t pages) {
  const uint32_t target = static_cast<uint32_t>(std::min<uint64_t>(pages, ram_pages_));
  if (num_pages_.exchange(target) == target) return;
  absl::MutexLock lock(&mu_);
  // Section 5.5.6.1: the driver reacts to a configuration change
  // notification; without a running driver it reads num_pages when it starts.
  if (notifier_ != nullptr) notifier_->SignalConfigChanged();
}

bool BalloonDevice::driver_active() const {
  absl::MutexLock lock(&mu_);
  return notifier_ != nullptr;
}

bool BalloonDevice::stats_enabled() const {
  absl::MutexLock lock(&mu_);
  return stats_negotiated_;
}

void BalloonDevice::RequestStats() {
  absl::MutexLock lock(&mu_);
  if (loop_ == nullptr || !stats_negotiated_) return;
  std::weak_ptr<BalloonDevice> weak = weak_from_this();
  const uint64_t generation = generation_;
  loop_->Post([weak, generation] {
    auto self = weak.lock();
    if (!self || !self->activation_.running() || self->loop_generation_ != generation) return;
    self->ReturnStatsBuffer();
  });
}

std::optional<BalloonStatsSample> BalloonDevice::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

BalloonMetrics BalloonDevice::metrics() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  const Counters& c = counters_;
  BalloonMetrics m;
  m.inflated_pages = get(c.inflated);
  m.deflated_pages = get(c.deflated);
  m.deflated_unrequested_pages = get(c.deflated_unrequested);
  m.released_bytes = get(c.released_bytes);
  m.reported_pages = get(c.reported);
  m.reported_released_bytes = get(c.reported_released_bytes);
  m.refused_not_ram = get(c.refused_not_ram);
  m.refused_not_releasable = get(c.refused_not_releasable);
  m.refused_duplicate = get(c.refused_duplicate);
  m.refused_not_inflated = get(c.refused_not_inflated);
  m.refused_unaligned = get(c.refused_unaligned);
  m.refused_rate = get(c.refused_rate);
  m.throttled = get(c.throttled);
  m.bad_requests = get(c.bad_requests);
  m.release_errors = get(c.release_errors);
  m.stats_updates = get(c.stats_updates);
  m.stats_requests = get(c.stats_requests);
  return m;
}

// --- Lifecycle (loop thread) -------------------------------------------------

absl::Status BalloonDevice::Activate(const virtio::ActivateContext& context) {
  if (activation_.active()) return absl::FailedPreconditionError("virtio-balloon already active");
  if (context.queues.size() != num_queues_ || context.memory == nullptr ||
      context.notifier == nullptr || context.loop == nullptr) {
    return absl::InvalidArgumentError("virtio-balloon: bad activation context");
  }
  activation_.Begin(context);
  // Compacted queue numbering over the negotiated features (file comment).
  kinds_.fill(Kind::kNone);
  uint16_t next = 0;
  kinds_[next++] = Kind::kInflate;
  kinds_[next++] = Kind::kDeflate;
  const bool stats = (context.acked_features & kBalloonFeatureStatsVq) != 0;
  if (stats) kinds_[next++] = Kind::kStats;
  if ((context.acked_features & kBalloonFeatureReporting) != 0) kinds_[next++] = Kind::kReporting;
  {
    absl::MutexLock lock(&mu_);
    notifier_ = context.notifier;
    loop_ = context.loop;
    stats_negotiated_ = stats;
    stats_.reset();
    loop_generation_ = ++generation_;
  }
  if (restored_stats_head_) {
    if (stats) stats_head_ = restored_stats_head_;
    restored_stats_head_.reset();
  }
  if (stats && options_.stats_period_ns > 0) {
    DSEC_ASSIGN_OR_RETURN(stats_timer_,
                          context.loop->AddTimer(options_.stats_period_ns, options_.stats_period_ns,
                                                 activation_.Guard([this] {
                                                   if (activation_.running()) ReturnStatsBuffer();
                                                 })));
  }
  return absl::OkStatus();
}

void BalloonDevice::Reset() {
  CancelTimers();
  {
    absl::MutexLock lock(&mu_);
    notifier_ = nullptr;
    loop_ = nullptr;
    stats_negotiated_ = false;
    ++generation_;
  }
  // The guest owns all of its memory again (a new driver starts with an
  // empty balloon); released pages simply read as zero.
  pages_.Clear();
  balloon_pages_.store(0);
  actual_.store(0);
  stats_head_.reset();
  activation_.End();
}

void BalloonDevice::CancelTimers() {
  for (int* timer : {&retry_timer_, &stats_timer_}) {
    if (*timer >= 0 && activation_.active()) (void)activation_.loop().CancelTimer(*timer);
    *timer = -1;
  }
}

std::optional<uint16_t> BalloonDevice::QueueOf(Kind kind) const {
  for (uint16_t i = 0; i < kinds_.size(); ++i) {
    if (kinds_[i] == kind) return i;
  }
  return std::nullopt;
}

void BalloonDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index < num_queues_) ProcessQueue(queue_index);
}

void BalloonDevice::ScheduleRetry(int64_t delay_ns) {
  if (retry_timer_ >= 0) return;
  absl::StatusOr<int> id = activation_.loop().AddTimer(
      std::max(delay_ns, options_.min_retry_ns), 0, activation_.Guard([this] {
        retry_timer_ = -1;  // one-shot timers remove themselves
        if (auto q = QueueOf(Kind::kInflate)) ProcessQueue(*q);
      }));
  if (!id.ok()) {
    activation_.MarkBroken(id.status());
    return;
  }
  retry_timer_ = *id;
}

// --- Data plane (loop thread) ------------------------------------------------

void BalloonDevice::ProcessQueue(uint16_t index) {
  const Kind kind = kinds_[index];
  if (kind == Kind::kNone) return;
  workers_[index].Run(
      // A throttled inflate queue runs again from its timer; a kick cannot
      // make the budget refill sooner.
      [this, kind] { return kind != Kind::kInflate || retry_timer_ < 0; },
      [this, kind, index](virtio::DescriptorChain& chain) {
        return HandleChain(kind, index, chain);
      });
}

virtio::ChainResult BalloonDevice::HandleChain(Kind kind, uint16_t index,
                                               const virtio::DescriptorChain& chain) {
  switch (kind) {
    case Kind::kInflate:
      return Inflate(chain) ? virtio::ChainResult::Used(0) : virtio::ChainResult::PutBack();
    case Kind::kDeflate:
      Deflate(chain);
      break;
    case Kind::kReporting:
      Report(chain);
      break;
    case Kind::kStats:
      // The stats queue holds its buffer until the host wants new statistics.
      ReceiveStats(index, chain);
      return virtio::ChainResult::Kept();
    case Kind::kNone:
      break;
  }
  return virtio::ChainResult::Used(0);
}

void BalloonDevice::RefuseNotRam(uint64_t pfn) {
  // Inside guest memory but not releasable RAM (pmem, other mapped windows)
  // versus outside guest memory entirely.
  if (activation_.memory().FindRegion(pfn << kBalloonPageShift) != nullptr) {
    Count(counters_.refused_not_releasable);
  } else {
    Count(counters_.refused_not_ram);
  }
}

void BalloonDevice::Release(uint64_t first_pfn, uint64_t count,
                            std::atomic<uint64_t>& released) {
  if (count == 0) return;
  absl::StatusOr<uint64_t> bytes =
      backend_->Release(first_pfn << kBalloonPageShift, count << kBalloonPageShift);
  if (!bytes.ok()) {
    Count(counters_.release_errors);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-balloon release failed: {}",
                         bytes.status().ToString());
    return;
  }
  Count(released, *bytes);
}

bool BalloonDevice::Inflate(const virtio::DescriptorChain& chain) {
  absl::StatusOr<std::vector<uint32_t>> pfns =
      ParsePfnRequest(chain, activation_.memory(), options_.max_pfns_per_request);
  if (!pfns.ok()) {
    Count(counters_.bad_requests);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-balloon {}", pfns.status().ToString());
    return true;
  }
  // Every PFN costs budget, refused ones included (they cost work too).
  if (!bucket_.unlimited() && !bucket_.TryTake(pfns->size())) {
    Count(counters_.throttled);
    ScheduleRetry(bucket_.NsUntilAvailable(pfns->size()));
    return false;
  }
  CoalescedPfns co = CoalescePfns(std::move(*pfns));
  Count(counters_.refused_duplicate, co.duplicates);
  for (const PageRun& run : co.runs) {
    ReleasePagesOutside(run, /*into_balloon=*/true, counters_.inflated, counters_.released_bytes);
  }
  balloon_pages_.store(pages_.count());
  return true;
}

void BalloonDevice::ReleasePagesOutside(const PageRun& run, bool into_balloon,
                                        std::atomic<uint64_t>& taken, std::atomic<uint64_t>& released) {
  // Guest-controlled: each PFN. Release maximal sub-runs of pages that are
  // RAM and not in the balloon.
  uint64_t pending = 0;
  for (uint64_t pfn = run.first_pfn; pfn < run.first_pfn + run.count; ++pfn) {
    switch (pages_.Find(pfn)) {
      case BalloonPageSet::Lookup::kOut:
        if (into_balloon) pages_.Insert(pfn);
        Count(taken);
        ++pending;
        continue;
      case BalloonPageSet::Lookup::kIn:
        // Inflated twice, or (reporting) a page that is not the guest's.
        Count(counters_.refused_duplicate);
        break;
      case BalloonPageSet::Lookup::kNotRam:
        RefuseNotRam(pfn);
        break;
    }
    Release(pfn - pending, pending, released);
    pending = 0;
  }
  Release(run.first_pfn + run.count - pending, pending, released);
}

void BalloonDevice::Deflate(const virtio::DescriptorChain& chain) {
  absl::StatusOr<std::vector<uint32_t>> pfns =
      ParsePfnRequest(chain, activation_.memory(), options_.max_pfns_per_request);
  if (!pfns.ok()) {
    Count(counters_.bad_requests);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-balloon {}", pfns.status().ToString());
    return;
  }
  CoalescedPfns co = CoalescePfns(std::move(*pfns));
  Count(counters_.refused_duplicate, co.duplicates);
  const uint64_t target = num_pages_.load();
  for (const PageRun& run : co.runs) {
    for (uint64_t pfn = run.first_pfn; pfn < run.first_pfn + run.count; ++pfn) {
      // Nothing to do on the host: the guest faults the page back in (zeroed).
      const bool above_target = pages_.count() > target;
      if (pages_.Erase(pfn)) {
        Count(counters_.deflated);
        if (!above_target) Count(counters_.deflated_unrequested);
      } else if (pages_.Find(pfn) == BalloonPageSet::Lookup::kNotRam) {
        RefuseNotRam(pfn);
      } else {
        Count(counters_.refused_not_inflated);
      }
    }
  }
  balloon_pages_.store(pages_.count());
}

void BalloonDevice::Report(const virtio::DescriptorChain& chain) {
  absl::StatusOr<std::vector<BalloonGuestRange>> ranges =
      ParseReportRequest(chain, options_.max_report_ranges);
  if (!ranges.ok()) {
    Count(counters_.bad_requests);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-balloon {}", ranges.status().ToString());
    return;
  }
  std::vector<BalloonGuestRange> aligned;
  for (const BalloonGuestRange& r : *ranges) {
    // Guest-controlled: a range that is not whole pages is refused whole.
    if (r.gpa % kBalloonPageSize != 0 || r.len % kBalloonPageSize != 0) {
      Count(counters_.refused_unaligned, (r.len + kBalloonPageSize - 1) / kBalloonPageSize);
      continue;
    }
    aligned.push_back(r);
  }
  CoalescedRanges co = CoalesceRanges(aligned);
  Count(counters_.refused_duplicate, co.duplicate_pages);
  uint64_t total = 0;
  for (const PageRun& run : co.runs) total += run.count;
  // Reporting is a hint: over budget, the pages are simply not released.
  if (!bucket_.unlimited() && !bucket_.TryTake(total)) {
    Count(counters_.refused_rate, total);
    return;
  }
  for (const PageRun& run : co.runs) {
    ReleasePagesOutside(run, /*into_balloon=*/false, counters_.reported, counters_.reported_released_bytes);
  }
}

void BalloonDevice::ReceiveStats(uint16_t index, const virtio::DescriptorChain& chain) {
  absl::StatusOr<BalloonStats> stats =
      ParseStatsRequest(chain, activation_.memory(), options_.max_stats_entries);
  if (stats.ok()) {
    Count(counters_.stats_updates);
    absl::MutexLock lock(&mu_);
    const uint64_t sequence = stats_ ? stats_->sequence + 1 : 1;
    stats_ = BalloonStatsSample{*stats, clock_->NowNs(), sequence};
  } else {
    Count(counters_.bad_requests);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-balloon {}", stats.status().ToString());
  }
  // The driver has one stats buffer; a second one means it gave up on the
  // first (or is hostile): hand the old one back so nothing leaks.
  // (The run that brought the new one notifies the driver.)
  if (stats_head_ && !workers_[index].Complete(*stats_head_, 0)) return;
  stats_head_ = chain.head;
}

void BalloonDevice::ReturnStatsBuffer() {
  std::optional<uint16_t> index = QueueOf(Kind::kStats);
  if (!index || !stats_head_) return;
  // Section 5.5.6.3: returning the buffer asks the driver for new stats.
  if (!workers_[*index].Complete(*stats_head_, 0)) return;
  stats_head_.reset();
  Count(counters_.stats_requests);
  workers_[*index].SignalUsed();
}

// --- Snapshots ----------------------------------------------------------------

absl::StatusOr<nlohmann::json> BalloonDevice::SaveState() const {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& [pfn, pages] : pages_.Runs()) runs.push_back({pfn, pages});
  return nlohmann::json{{"num_pages", num_pages_.load()},
                        {"actual", actual_.load()},
                        {"balloon_pages", balloon_pages_.load()},
                        {"pages", std::move(runs)},
                        {"stats_head", stats_head_ ? nlohmann::json(*stats_head_) : nullptr}};
}

absl::Status BalloonDevice::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, "virtio-balloon"));
  DSEC_ASSIGN_OR_RETURN(uint64_t num_pages, f.Uint("num_pages", 0, ram_pages_));
  DSEC_ASSIGN_OR_RETURN(uint64_t actual, f.Uint("actual", 0, UINT32_MAX));
  DSEC_ASSIGN_OR_RETURN(uint64_t balloon_pages, f.Uint("balloon_pages", 0, ram_pages_));
  DSEC_ASSIGN_OR_RETURN(auto stats_head, f.OptUint("stats_head", 0, options_.queue_size - 1));
  const nlohmann::json* runs = f.Raw("pages");
  if (runs == nullptr || !runs->is_array()) {
    return InvalidField("virtio-balloon.pages", "virtio-balloon.pages must be a list of runs");
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  BalloonPageSet pages(backend_->releasable());
  for (size_t i = 0; i < runs->size(); ++i) {
    const nlohmann::json& r = (*runs)[i];
    const std::string path = absl::StrCat("virtio-balloon.pages[", i, "]");
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
        !r[1].is_number_unsigned() || r[1].get<uint64_t>() == 0 ||
        r[1].get<uint64_t>() > ram_pages_) {
      return InvalidField(path, absl::StrCat(path, " must be [first pfn, pages]"));
    }
    const uint64_t first = r[0].get<uint64_t>(), n = r[1].get<uint64_t>();
    for (uint64_t k = 0; k < n; ++k) {
      if (!pages.Insert(first + k)) {
        return InvalidField(path, absl::StrCat(path, " holds a page that is not RAM, or twice"));
      }
    }
  }
  if (pages.count() != balloon_pages) {
    return InvalidField("virtio-balloon.balloon_pages",
                        "virtio-balloon.balloon_pages is not the number of pages listed");
  }
  pages_ = std::move(pages);
  num_pages_.store(static_cast<uint32_t>(num_pages));
  actual_.store(static_cast<uint32_t>(actual));
  balloon_pages_.store(balloon_pages);
  restored_stats_head_.reset();
  if (stats_head) restored_stats_head_ = static_cast<uint16_t>(*stats_head);
  return absl::OkStatus();
}

uint16_t BalloonDevice::HeldBuffers(uint16_t queue_index) const {
  const std::optional<uint16_t> stats = QueueOf(Kind::kStats);
  return stats_head_ && stats && *stats == queue_index ? 1 : 0;
}

}  // namespace dsec::devices
