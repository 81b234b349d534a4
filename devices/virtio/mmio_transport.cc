// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/mmio_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_fields.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::virtio {

namespace {

// Feature bits 24..40 are reserved for the transport and ring (section 6);
// of those the queue implements only these.
constexpr uint64_t kReservedFeatureMask = ((1ull << 41) - 1) & ~((1ull << 24) - 1);
constexpr uint64_t kTransportFeatures =
    kFeatureRingIndirectDesc | kFeatureRingEventIdx | kFeatureVersion1;

uint64_t OfferedFeatures(const VirtioDevice& device) {
  uint64_t f = device.device_features();
  return (f & ~kReservedFeatureMask) | (f & kTransportFeatures) | kFeatureVersion1;
}

void SetLow(uint64_t& v, uint32_t low) { v = (v & ~0xffffffffull) | low; }
void SetHigh(uint64_t& v, uint32_t high) { v = (v & 0xffffffffull) | (uint64_t{high} << 32); }

}  // namespace

class MmioTransport::Notifier : public DriverNotifier {
 public:
  explicit Notifier(MmioTransport* t) : t_(t) {}
  void SignalUsed(uint16_t queue_index) override { t_->SignalUsed(queue_index); }
  void SignalConfigChanged() override { t_->SignalConfigChanged(); }
  void ReportBroken(const absl::Status& reason) override { t_->ReportBroken(reason); }

 private:
  MmioTransport* const t_;
};

MmioTransport::MmioTransport(Options options)
    : name_(std::move(options.name)),
      base_(options.base),
      device_(std::move(options.device)),
      memory_(options.memory),
      interrupt_(std::move(options.interrupt)),
      loop_(options.loop),
      registrar_(options.registrar),
      offered_features_(OfferedFeatures(*device_)),
      notifier_(std::make_unique<Notifier>(this)) {}

absl::StatusOr<std::shared_ptr<MmioTransport>> MmioTransport::Create(Options options) {
  if (!options.device || options.memory == nullptr || !options.interrupt ||
      options.loop == nullptr) {
    return absl::InvalidArgumentError("virtio-mmio: device, memory, interrupt and loop required");
  }
  uint16_t n = options.device->num_queues();
  if (n == 0) return absl::InvalidArgumentError("virtio-mmio: device has no queues");
  std::shared_ptr<MmioTransport> t(new MmioTransport(std::move(options)));
  {
    absl::MutexLock lock(&t->mu_);
    for (uint16_t i = 0; i < n; ++i) {
      uint16_t max = t->device_->queue_max_size(i);
      if (max == 0 || max > kMaxQueueSize || (max & (max - 1)) != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("virtio-mmio: queue %d max size %d invalid", i, max));
      }
      t->config_queues_.emplace_back(max);
    }
  }
  for (uint16_t i = 0; i < n; ++i) {
    DSEC_ASSIGN_OR_RETURN(EventFd fd, EventFd::Create(EFD_NONBLOCK));
    t->notify_fds_.push_back(std::move(fd));
  }
  for (uint16_t i = 0; i < n; ++i) {
    MmioTransport* raw = t.get();
    absl::Status s = t->loop_->Add(t->notify_fds_[i].fd(), EPOLLIN,
                                   [raw, i](uint32_t) { raw->OnQueueNotify(i); });
    if (!s.ok()) {
      for (uint16_t j = 0; j < i; ++j) (void)t->loop_->Remove(t->notify_fds_[j].fd());
      t->notify_fds_.clear();  // the destructor must not Remove them again
      return s;
    }
  }
  if (t->registrar_ != nullptr) {
    for (uint16_t i = 0; i < n; ++i) {
      DSEC_ASSIGN_OR_RETURN(auto reg, t->registrar_->Register(t->base_ + mmio::kQueueNotify, 4, i,
                                                              t->notify_fds_[i].fd()));
      t->registrations_.push_back(std::move(reg));
    }
  }
  return t;
}

void MmioTransport::ResetDeviceForTeardown() {
  if (device_activated_) device_->Reset();
  device_activated_ = false;
}

MmioTransport::~MmioTransport() {
  registrations_.clear();
  for (const EventFd& fd : notify_fds_) (void)loop_->Remove(fd.fd());
  if (device_activated_) device_->Reset();
}

uint32_t MmioTransport::status() const {
  absl::MutexLock lock(&mu_);
  return status_ | (needs_reset_ ? kStatusDeviceNeedsReset : 0);
}

// --- vCPU side ----------------------------------------------------------------

void MmioTransport::Read(uint64_t offset, std::span<uint8_t> data) {
  if (offset >= mmio::kConfig) {
    // Guest-controlled: offset/size; the device zero-fills beyond its config.
    device_->ReadConfig(offset - mmio::kConfig, data);
    return;
  }
  std::memset(data.data(), 0, data.size());
  // Section 4.2.2.2: the driver uses 32-bit aligned accesses for registers.
  if (data.size() != 4 || offset % 4 != 0) {
    DSEC_LOG_RATELIMITED(warn, 5, "device={} virtio-mmio bad read offset={:#x} size={}", name_,
                         offset, data.size());
    return;
  }
  uint32_t value = ReadRegister(offset);
  std::memcpy(data.data(), &value, 4);
}

void MmioTransport::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (offset >= mmio::kConfig) {
    device_->WriteConfig(offset - mmio::kConfig, data);
    return;
  }
  if (data.size() != 4 || offset % 4 != 0) {
    DSEC_LOG_RATELIMITED(warn, 5, "device={} virtio-mmio bad write offset={:#x} size={}", name_,
                         offset, data.size());
    return;
  }
  uint32_t value;
  std::memcpy(&value, data.data(), 4);
  WriteRegister(offset, value);
}

Queue* MmioTransport::SelectedQueueLocked() {
  // Guest-controlled: queue_sel_.
  if (queue_sel_ >= config_queues_.size()) return nullptr;
  return &config_queues_[queue_sel_];
}

uint32_t MmioTransport::ReadRegister(uint64_t offset) {
  switch (offset) {
    case mmio::kMagicValue:
      return mmio::kMagic;
    case mmio::kVersion:
      return mmio::kVersion2;
    case mmio::kDeviceId:
      return static_cast<uint32_t>(device_->device_type());
    case mmio::kVendorId:
      return mmio::kVendor;
    case mmio::kInterruptStatus:
      return isr_.load();
    case mmio::kConfigGeneration:
      return config_generation_.load();
    case mmio::kShmLenLow:
    case mmio::kShmLenHigh:
    case mmio::kShmBaseLow:
    case mmio::kShmBaseHigh:
      return 0xffffffff;  // section 4.2.2: no shared memory region
    default:
      break;
  }
  absl::MutexLock lock(&mu_);
  switch (offset) {
    case mmio::kDeviceFeatures:
      // Guest-controlled: the selector; pages beyond 1 read as 0.
      if (device_features_sel_ > 1) return 0;
      return static_cast<uint32_t>(offered_features_ >> (32 * device_features_sel_));
    case mmio::kQueueNumMax: {
      Queue* q = SelectedQueueLocked();
      return q == nullptr ? 0 : q->max_size();
    }
    case mmio::kQueueNum: {
      Queue* q = SelectedQueueLocked();
      return q == nullptr ? 0 : q->size();
    }
    case mmio::kQueueReady: {
      Queue* q = SelectedQueueLocked();
      return q != nullptr && q->ready() ? 1 : 0;
    }
    case mmio::kStatus:
      return status_ | (needs_reset_ ? kStatusDeviceNeedsReset : 0);
    default:
      return 0;
  }
}

void MmioTransport::WriteRegister(uint64_t offset, uint32_t value) {
  if (offset == mmio::kQueueNotify) {
    // Guest-controlled: the queue index (section 4.2.3.3, no
    // VIRTIO_F_NOTIFICATION_DATA). Same path as an ioeventfd kick.
    if (value < notify_fds_.size()) (void)notify_fds_[value].Signal();
    return;
  }
  if (offset == mmio::kInterruptAck) {
    isr_.fetch_and(~value);
    return;
  }
  absl::MutexLock lock(&mu_);
  switch (offset) {
    case mmio::kDeviceFeaturesSel:
      device_features_sel_ = value;
      return;
    case mmio::kDriverFeaturesSel:
      driver_features_sel_ = value;
      return;
    case mmio::kDriverFeatures:
      // Section 3.1.1: features are fixed once FEATURES_OK is set.
      if ((status_ & kStatusFeaturesOk) || driver_features_sel_ > 1) return;
      if (driver_features_sel_ == 0) {
        SetLow(driver_features_, value);
      } else {
        SetHigh(driver_features_, value);
      }
      return;
    case mmio::kQueueSel:
      queue_sel_ = value;
      return;
    case mmio::kStatus:
      WriteStatusLocked(value);
      return;
    default:
      break;
  }
  // Queue configuration: only before DRIVER_OK (section 4.2.3.2; no
  // VIRTIO_F_RING_RESET).
  Queue* q = SelectedQueueLocked();
  if (q == nullptr) return;
  if (status_ & kStatusDriverOk) {
    DSEC_LOG_RATELIMITED(warn, 5, "device={} virtio-mmio queue write {:#x} after DRIVER_OK ignored",
                         name_, offset);
    return;
  }
  uint64_t addr;
  switch (offset) {
    case mmio::kQueueNum:
      // Guest-controlled: checked against QueueNumMax at activation.
      q->set_size(value > 0xffff ? 0 : static_cast<uint16_t>(value));
      return;
    case mmio::kQueueReady:
      q->set_ready(value == 1);
      return;
    case mmio::kQueueDescLow:
    case mmio::kQueueDescHigh:
      addr = q->desc_addr();
      offset == mmio::kQueueDescLow ? SetLow(addr, value) : SetHigh(addr, value);
      q->set_desc_addr(addr);
      return;
    case mmio::kQueueDriverLow:
    case mmio::kQueueDriverHigh:
      addr = q->avail_addr();
      offset == mmio::kQueueDriverLow ? SetLow(addr, value) : SetHigh(addr, value);
      q->set_avail_addr(addr);
      return;
    case mmio::kQueueDeviceLow:
    case mmio::kQueueDeviceHigh:
      addr = q->used_addr();
      offset == mmio::kQueueDeviceLow ? SetLow(addr, value) : SetHigh(addr, value);
      q->set_used_addr(addr);
      return;
    default:
      return;  // read-only or unknown register
  }
}

void MmioTransport::WriteStatusLocked(uint32_t value) {
  if (value == 0) {
    ResetLocked();
    return;
  }
  // Guest-controlled: value. Only a reset clears bits (section 2.1.2), and
  // DEVICE_NEEDS_RESET is the device's to set.
  uint32_t old = status_;
  value &= ~kStatusDeviceNeedsReset;
  if ((value & old) != old) {
    DSEC_LOG_RATELIMITED(warn, 5, "device={} virtio status {:#x} -> {:#x} clears bits; ignored",
                         name_, old, value);
    return;
  }
  uint32_t added = value & ~old;
  if (added & kStatusFeaturesOk) {
    // Section 3.1.1 step 5/6 and 2.2.2: refuse feature sets we did not offer
    // or (section 6.1) without VERSION_1; the driver re-reads Status.
    bool ok = (old & kStatusDriver) && (driver_features_ & ~offered_features_) == 0 &&
              (driver_features_ & kFeatureVersion1);
    if (!ok) {
      DSEC_LOG_RATELIMITED(info, 5, "device={} FEATURES_OK refused: driver features {:#x}", name_,
                           driver_features_);
      value &= ~kStatusFeaturesOk;
    }
  }
  if ((added & kStatusDriverOk) && !(value & kStatusFeaturesOk)) value &= ~kStatusDriverOk;
  status_ = value;
  if ((added & kStatusDriverOk) && (value & kStatusDriverOk) && !(value & kStatusFailed)) {
    std::weak_ptr<MmioTransport> weak = weak_from_this();
    uint64_t epoch = epoch_.load();
    std::vector<Queue> snapshot = config_queues_;
    uint64_t features = driver_features_;
    loop_->Post([weak, epoch, snapshot = std::move(snapshot), features]() mutable {
      if (auto t = weak.lock()) t->ActivateOnLoop(epoch, std::move(snapshot), features);
    });
  }
}

void MmioTransport::ResetLocked() {
  // Section 2.4 / 4.2.2.1: reset clears the status, the negotiated features,
  // InterruptStatus and every queue's configuration and QueueReady.
  status_ = 0;
  needs_reset_ = false;
  driver_features_ = 0;
  device_features_sel_ = driver_features_sel_ = queue_sel_ = 0;
  for (Queue& q : config_queues_) q.Reset();
  isr_.store(0);
  data_plane_live_.store(false);
  epoch_.fetch_add(1);
  std::weak_ptr<MmioTransport> weak = weak_from_this();
  loop_->Post([weak] {
    if (auto t = weak.lock()) t->DeactivateOnLoop();
  });
}

void MmioTransport::RaiseInterrupt(uint32_t isr_bit) {
  isr_.fetch_or(isr_bit);
  absl::Status s = interrupt_->Trigger();
  if (!s.ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "device={} interrupt failed: {}", name_, s.ToString());
  }
}

// --- Loop side ----------------------------------------------------------------

ActivateContext MmioTransport::ContextFor(uint64_t features) {
  ActivateContext context;
  context.acked_features = features;
  context.memory = memory_;
  context.queues = std::span<Queue>(active_queues_);
  context.notifier = notifier_.get();
  context.loop = loop_;
  return context;
}

void MmioTransport::ActivateOnLoop(uint64_t epoch, std::vector<Queue> queues, uint64_t features) {
  if (epoch != epoch_.load()) return;  // a reset overtook this activation
  DeactivateOnLoop();
  active_epoch_.store(epoch);
  active_queues_ = std::move(queues);
  for (size_t i = 0; i < active_queues_.size(); ++i) {
    absl::Status s = active_queues_[i].Activate(*memory_, features);
    if (!s.ok()) {
      ReportBroken(Annotate(s, absl::StrFormat("queue %d", i)));
      return;
    }
  }
  device_activated_ = true;
  absl::Status s = device_->Activate(ContextFor(features));
  if (!s.ok()) {
    ReportBroken(Annotate(s, "activate"));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (epoch != epoch_.load() || needs_reset_) return;
    data_plane_live_.store(true);
  }
  // A kick may have been consumed before activation: look at every queue.
  for (size_t i = 0; i < active_queues_.size(); ++i) {
    if (!data_plane_live_.load()) break;
    if (active_queues_[i].active()) device_->QueueNotify(static_cast<uint16_t>(i));
  }
}

void MmioTransport::DeactivateOnLoop() {
  if (device_activated_) device_->Reset();
  device_activated_ = false;
  active_queues_.clear();
  active_epoch_.store(~0ull);
}

void MmioTransport::OnQueueNotify(uint16_t index) {
  (void)notify_fds_[index].Consume();
  if (!data_plane_live_.load() || active_epoch_.load() != epoch_.load()) return;
  device_->QueueNotify(index);
}

void MmioTransport::SignalUsed(uint16_t index) {
  if (active_epoch_.load() != epoch_.load() || index >= active_queues_.size()) return;
  // Section 2.7.7 / 2.7.10: the queue applies the driver's suppression.
  if (active_queues_[index].NeedsInterrupt()) RaiseInterrupt(mmio::kIsrUsedBuffer);
}

void MmioTransport::SignalConfigChanged() {
  config_generation_.fetch_add(1);
  bool driver_ok;
  {
    absl::MutexLock lock(&mu_);
    driver_ok = (status_ & kStatusDriverOk) != 0;
  }
  // Section 4.2.3.4 / 2.5.2: config change notification.
  if (driver_ok) RaiseInterrupt(mmio::kIsrConfigChange);
}

void MmioTransport::ReportBroken(const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    // A data plane that a reset has already retired cannot break the new one.
    if (active_epoch_.load() != epoch_.load()) return;
    if (needs_reset_) return;
    needs_reset_ = true;
    data_plane_live_.store(false);
  }
  DSEC_LOG_RATELIMITED(warn, 5, "device={} virtio device needs reset: {}", name_,
                       reason.ToString());
  // Section 2.1.2: DEVICE_NEEDS_RESET plus a configuration change
  // notification once DRIVER_OK is set (which it is: we were active).
  RaiseInterrupt(mmio::kIsrConfigChange);
}

// --- Snapshots ----------------------------------------------------------------

absl::StatusOr<nlohmann::json> MmioTransport::SaveState() {
  nlohmann::json queues = nlohmann::json::array();
  nlohmann::json j;
  {
    absl::MutexLock lock(&mu_);
    const bool active = active_epoch_.load() == epoch_.load() && !active_queues_.empty();
    for (size_t i = 0; i < config_queues_.size(); ++i) {
      const Queue& c = config_queues_[i];
      nlohmann::json q = {{"size", c.size()},           {"ready", c.ready()},
                          {"desc", c.desc_addr()},      {"avail", c.avail_addr()},
                          {"used", c.used_addr()},      {"next_avail", 0},
                          {"used_idx", 0},              {"signalled_used", 0},
                          {"held", 0}};
      if (active && i < active_queues_.size() && active_queues_[i].active()) {
        const Queue& a = active_queues_[i];
        const uint16_t held = device_->HeldBuffers(static_cast<uint16_t>(i));
        if (a.in_flight() != held) {
          return absl::UnavailableError(absl::StrCat(name_, ": queue ", i, " has ",
                                                     a.in_flight() - held, " requests in flight"));
        }
        q["next_avail"] = a.next_avail();
        q["used_idx"] = a.used_idx();
        q["signalled_used"] = a.signalled_used();
        q["held"] = held;
      }
      queues.push_back(std::move(q));
    }
    j = {{"status", status_},
         {"device_features_sel", device_features_sel_},
         {"driver_features_sel", driver_features_sel_},
         {"driver_features", driver_features_},
         {"queue_sel", queue_sel_},
         {"needs_reset", needs_reset_},
         {"isr", isr_.load()},
         {"config_generation", config_generation_.load()},
         {"active", active && data_plane_live_.load()},
         {"queues", std::move(queues)}};
  }
  absl::StatusOr<nlohmann::json> device = device_->SaveState();
  if (!device.ok()) {
    return absl::Status(device.status().code(),
                        absl::StrCat(name_, ": ", device.status().message()));
  }
  j["device"] = *std::move(device);
  return j;
}

absl::Status MmioTransport::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, name_));
  DSEC_ASSIGN_OR_RETURN(uint64_t status, f.Uint("status", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t dfsel, f.Uint("device_features_sel", 0, UINT32_MAX));
  DSEC_ASSIGN_OR_RETURN(uint64_t drsel, f.Uint("driver_features_sel", 0, UINT32_MAX));
  DSEC_ASSIGN_OR_RETURN(uint64_t driver_features, f.Uint("driver_features", 0, UINT64_MAX));
  DSEC_ASSIGN_OR_RETURN(uint64_t queue_sel, f.Uint("queue_sel", 0, UINT32_MAX));
  DSEC_ASSIGN_OR_RETURN(bool needs_reset, f.Bool("needs_reset"));
  DSEC_ASSIGN_OR_RETURN(uint64_t isr, f.Uint("isr", 0, mmio::kIsrUsedBuffer | mmio::kIsrConfigChange));
  DSEC_ASSIGN_OR_RETURN(uint64_t generation, f.Uint("config_generation", 0, UINT32_MAX));
  DSEC_ASSIGN_OR_RETURN(bool active, f.Bool("active"));
  const nlohmann::json* qs = f.Raw("queues");
  const std::string qpath = f.Path("queues");
  if (qs == nullptr || !qs->is_array() || qs->size() != config_queues_.size()) {
    return InvalidField(qpath, absl::StrCat(qpath, " must list the device's ",
                                            config_queues_.size(), " queues"));
  }
  const nlohmann::json* device = f.Raw("device");
  if (device == nullptr) return InvalidField(f.Path("device"), f.Path("device") + " is required");
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  if ((driver_features & ~offered_features_) != 0) {
    return InvalidField(f.Path("driver_features"),
                        absl::StrCat(f.Path("driver_features"), " has features this device does "
                                     "not offer"));
  }
  if (active && ((status & kStatusDriverOk) == 0 || (status & kStatusFailed) != 0 || needs_reset)) {
    return InvalidField(f.Path("active"),
                        absl::StrCat(f.Path("active"), ": an active device needs DRIVER_OK"));
  }
  std::vector<Queue> queues = config_queues_;
  struct Progress {
    uint16_t next_avail, used_idx, signalled_used, held;
  };
  std::vector<Progress> progress;
  for (size_t i = 0; i < queues.size(); ++i) {
    const std::string path = JsonFields::ItemPath(qpath, i);
    DSEC_ASSIGN_OR_RETURN(JsonFields q, JsonFields::Of((*qs)[i], path));
    DSEC_ASSIGN_OR_RETURN(uint64_t size, q.Uint("size", 0, queues[i].max_size()));
    DSEC_ASSIGN_OR_RETURN(bool ready, q.Bool("ready"));
    DSEC_ASSIGN_OR_RETURN(uint64_t desc, q.Uint("desc", 0, UINT64_MAX));
    DSEC_ASSIGN_OR_RETURN(uint64_t avail, q.Uint("avail", 0, UINT64_MAX));
    DSEC_ASSIGN_OR_RETURN(uint64_t used, q.Uint("used", 0, UINT64_MAX));
    DSEC_ASSIGN_OR_RETURN(uint64_t next_avail, q.Uint("next_avail", 0, 0xffff));
    DSEC_ASSIGN_OR_RETURN(uint64_t used_idx, q.Uint("used_idx", 0, 0xffff));
    DSEC_ASSIGN_OR_RETURN(uint64_t signalled, q.Uint("signalled_used", 0, 0xffff));
    DSEC_ASSIGN_OR_RETURN(uint64_t held, q.Uint("held", 0, size));
    DSEC_RETURN_IF_ERROR(q.RejectUnknown());
    queues[i].set_size(static_cast<uint16_t>(size));
    queues[i].set_ready(ready);
    queues[i].set_desc_addr(desc);
    queues[i].set_avail_addr(avail);
    queues[i].set_used_addr(used);
    progress.push_back({static_cast<uint16_t>(next_avail), static_cast<uint16_t>(used_idx),
                        static_cast<uint16_t>(signalled), static_cast<uint16_t>(held)});
  }
  {
    absl::MutexLock lock(&mu_);
    status_ = static_cast<uint32_t>(status);
    device_features_sel_ = static_cast<uint32_t>(dfsel);
    driver_features_sel_ = static_cast<uint32_t>(drsel);
    driver_features_ = driver_features;
    queue_sel_ = static_cast<uint32_t>(queue_sel);
    needs_reset_ = needs_reset;
    config_queues_ = queues;
  }
  isr_.store(static_cast<uint32_t>(isr));
  config_generation_.store(static_cast<uint32_t>(generation));
  if (!active) {
    if (!device->is_null() && !device->empty()) {
      // An inactive device has only what Activate would set up again.
      DSEC_RETURN_IF_ERROR(device_->RestoreState(*device));
    }
    return absl::OkStatus();
  }
  // As ActivateOnLoop, with the queues where they were and the device's
  // state put back first. The loop does not run yet: this thread is it.
  const uint64_t epoch = epoch_.load();
  active_epoch_.store(epoch);
  active_queues_ = std::move(queues);
  for (size_t i = 0; i < active_queues_.size(); ++i) {
    if (absl::Status s = active_queues_[i].Activate(*memory_, driver_features); !s.ok()) {
      return InvalidField(JsonFields::ItemPath(qpath, i),
                          absl::StrCat(JsonFields::ItemPath(qpath, i), ": ", s.message()));
    }
    if (active_queues_[i].active()) {
      active_queues_[i].RestoreProgress(progress[i].next_avail, progress[i].used_idx,
                                        progress[i].signalled_used, progress[i].held);
    }
  }
  DSEC_RETURN_IF_ERROR(device_->RestoreState(*device));
  device_activated_ = true;
  if (absl::Status s = device_->Activate(ContextFor(driver_features)); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(name_, ": activating the restored device: ",
                                               s.message()));
  }
  for (size_t i = 0; i < active_queues_.size(); ++i) {
    if (active_queues_[i].active() &&
        active_queues_[i].in_flight() != device_->HeldBuffers(static_cast<uint16_t>(i))) {
      const std::string path = JsonFields::ItemPath(qpath, i);
      return InvalidField(path + ".held", absl::StrCat(path, ".held is not what the device holds"));
    }
  }
  data_plane_live_.store(true);
  // Requests the driver queued before the snapshot: looked at once the loop
  // runs (as after any activation).
  std::weak_ptr<MmioTransport> weak = weak_from_this();
  loop_->Post([weak] {
    auto t = weak.lock();
    if (!t || !t->data_plane_live_.load()) return;
    for (size_t i = 0; i < t->active_queues_.size(); ++i) {
      if (t->active_queues_[i].active()) t->device_->QueueNotify(static_cast<uint16_t>(i));
    }
  });
  return absl::OkStatus();
}

}  // namespace dsec::virtio
