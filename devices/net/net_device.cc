// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_device.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "devices/virtio/queue.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {

constexpr uint16_t kMinMtu = 68;  // RFC 791: the smallest IPv4 MTU

uint64_t OffloadFeatures(const NetOffloads& supported) {
  uint64_t f = 0;
  if (supported.csum) f |= kNetFCsum | kNetFGuestCsum;
  // TSO needs checksum offload in both directions (section 5.1.3.1).
  if (supported.csum && supported.tso4) f |= kNetFHostTso4 | kNetFGuestTso4;
  if (supported.csum && supported.tso6) f |= kNetFHostTso6 | kNetFGuestTso6;
  return f;
}

void Bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetDevice>> NetDevice::Create(NetDeviceConfig config,
                                                             std::unique_ptr<NetBackend> backend) {
  if (backend == nullptr) return absl::InvalidArgumentError("virtio-net needs a backend");
  if (config.clock == nullptr) return absl::InvalidArgumentError("virtio-net needs a clock");
  if (config.mtu < kMinMtu) {
    return absl::InvalidArgumentError(absl::StrCat("virtio-net mtu ", config.mtu, " < ", kMinMtu));
  }
  if (config.queue_size < 2 || (config.queue_size & (config.queue_size - 1)) != 0 ||
      config.queue_size > virtio::kMaxQueueSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("virtio-net queue size ", config.queue_size, " is not a power of two"));
  }
  if (!IsUnicastMac(config.mac)) {
    return absl::InvalidArgumentError(
        absl::StrCat("virtio-net MAC ", FormatMac(config.mac), " is not a unicast address"));
  }
  uint64_t features = kNetFMac | kNetFMtu | kNetFStatus | virtio::kFeatureRingEventIdx |
                      virtio::kFeatureRingIndirectDesc |
                      OffloadFeatures(backend->SupportedOffloads());
  return std::unique_ptr<NetDevice>(new NetDevice(std::move(config), std::move(backend), features));
}

NetDevice::NetDevice(NetDeviceConfig config, std::unique_ptr<NetBackend> backend,
                     uint64_t features)
    : config_(std::move(config)),
      backend_(std::move(backend)),
      features_(features),
      // One queue's worth of frames per run.
      rx_worker_(activation_, kRxQueue, config_.queue_size, [this] { ProcessRx(); }),
      tx_worker_(activation_, kTxQueue, config_.queue_size, [this] { ProcessTx(); }),
      rx_limiter_(config_.rx_limit, config_.clock),
      tx_limiter_(config_.tx_limit, config_.clock) {
  std::memcpy(config_space_.mac, config_.mac.data(), sizeof(config_space_.mac));
  config_space_.status = kNetSLinkUp;
  config_space_.max_virtqueue_pairs = 1;
  config_space_.mtu = config_.mtu;
  iov_scratch_.reserve(kMaxNetIov);
}

NetDevice::~NetDevice() {
  if (activation_.active()) Reset();
}

NetMetrics NetDevice::metrics() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return NetMetrics{
      .rx_packets = get(metrics_.rx_packets),
      .rx_bytes = get(metrics_.rx_bytes),
      .rx_dropped = get(metrics_.rx_dropped),
      .rx_throttled = get(metrics_.rx_throttled),
      .tx_packets = get(metrics_.tx_packets),
      .tx_bytes = get(metrics_.tx_bytes),
      .tx_dropped = get(metrics_.tx_dropped),
      .tx_throttled = get(metrics_.tx_throttled),
  };
}

void NetDevice::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  // Guest-controlled: offset and data.size(); bytes past the struct are 0.
  const auto* bytes = reinterpret_cast<const uint8_t*>(&config_space_);
  for (size_t i = 0; i < data.size(); ++i) {
    bool inside = offset < sizeof(config_space_) && i < sizeof(config_space_) - offset;
    data[i] = inside ? bytes[offset + i] : 0;
  }
}

void NetDevice::WriteConfig(uint64_t, std::span<const uint8_t>) {
  // virtio 1.2 section 5.1.4.2: with VIRTIO_F_VERSION_1 every field is
  // read-only for the driver (mac is writable only in legacy devices).
}

absl::Status NetDevice::Activate(const virtio::ActivateContext& context) {
  if (activation_.active()) return absl::FailedPreconditionError("virtio-net is already active");
  if (context.queues.size() != num_queues() || context.memory == nullptr ||
      context.notifier == nullptr || context.loop == nullptr) {
    return absl::InvalidArgumentError("virtio-net activation context is incomplete");
  }
  const uint64_t f = context.acked_features & features_;
  TxPolicy tx_policy{
      .offloads = {.csum = (f & kNetFCsum) != 0,
                   .tso4 = (f & kNetFHostTso4) != 0,
                   .tso6 = (f & kNetFHostTso6) != 0},
      .max_plain_frame_len =
          (f & kNetFMtu) ? uint32_t{config_.mtu} + kMaxL2HeaderLen : kMaxFrameLen,
  };
  NetOffloads rx_offloads{.csum = (f & kNetFGuestCsum) != 0,
                          .tso4 = (f & kNetFGuestTso4) != 0,
                          .tso6 = (f & kNetFGuestTso6) != 0};
  // Section 5.1.3.1: HOST_TSO* require CSUM, GUEST_TSO* require GUEST_CSUM.
  if ((tx_policy.offloads.tso4 || tx_policy.offloads.tso6) && !tx_policy.offloads.csum) {
    return absl::InvalidArgumentError("driver negotiated HOST_TSO without CSUM");
  }
  if ((rx_offloads.tso4 || rx_offloads.tso6) && !rx_offloads.csum) {
    return absl::InvalidArgumentError("driver negotiated GUEST_TSO without GUEST_CSUM");
  }
  DSEC_RETURN_IF_ERROR(backend_->SetRxOffloads(rx_offloads));

  tx_policy_ = tx_policy;
  rx_offloads_ = rx_offloads;
  activation_.Begin(context);
  // Receive starts by watching the backend; the first frame (or the
  // activation kick) finds out whether the driver gave buffers yet.
  rx_watch_ = context.queues[kRxQueue].active();
  tx_wait_writable_ = false;
  UpdateBackendWatch();
  if (activation_.broken()) return absl::InternalError("virtio-net could not watch its backend");
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> NetDevice::SaveState() const {
  MacAddress mac;
  std::memcpy(mac.data(), config_space_.mac, mac.size());
  return nlohmann::json{{"mac", FormatMac(mac)}, {"mtu", static_cast<unsigned>(config_space_.mtu)}};
}

absl::Status NetDevice::RestoreState(const nlohmann::json& state) {
  if (!state.is_object() || state.size() != 2 || !state.contains("mac") || !state["mac"].is_string() ||
      !state.contains("mtu") || !state["mtu"].is_number_integer() ||
      (!state["mtu"].is_number_unsigned() && state["mtu"].get<int64_t>() < 0)) {
    return absl::InvalidArgumentError(
        "virtio-net: its snapshot state is {\"mac\": \"xx:xx:xx:xx:xx:xx\", \"mtu\": N}");
  }
  absl::StatusOr<MacAddress> mac = ParseMac(state["mac"].get<std::string>());
  if (!mac.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("virtio-net: the snapshot's mac: ", mac.status().message()));
  }
  const uint64_t mtu = state["mtu"].get<uint64_t>();
  if (mtu != config_.mtu) {
    return absl::FailedPreconditionError(absl::StrCat("virtio-net: the snapshot's MTU is ", mtu, ", this device's ",
                                                      config_.mtu, " (the guest sized its buffers by it)"));
  }
  if (activation_.active()) return absl::FailedPreconditionError("virtio-net: restored while active");
  std::memcpy(config_space_.mac, mac->data(), mac->size());
  return absl::OkStatus();
}

void NetDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index == kRxQueue) {
    ProcessRx();
  } else if (queue_index == kTxQueue) {
    ProcessTx();
  }
}

void NetDevice::Reset() {
  CancelTimers();
  rx_watch_ = false;
  tx_wait_writable_ = false;
  UpdateBackendWatch();
  activation_.End();
  // The rate limiters keep their state: a driver reset must not refill them.
}

bool NetDevice::AppendHostRanges(std::span<const virtio::GuestBuffer> ranges,
                                 std::vector<iovec>& iov) const {
  for (const virtio::GuestBuffer& range : ranges) {
    // Guest-controlled: gpa/len were checked by the queue to lie in guest
    // memory; a range may still cross from one region into the next.
    uint64_t gpa = range.gpa;
    uint64_t left = range.len;
    while (left > 0) {
      const memory::GuestRegion* region = activation_.memory().FindRegion(gpa);
      if (region == nullptr || iov.size() >= kMaxNetIov) return false;
      uint64_t n = std::min(left, region->end() - gpa);
      if (n == 0) return false;
      iov.push_back(iovec{region->host + (gpa - region->gpa), static_cast<size_t>(n)});
      gpa += n;
      left -= n;
    }
  }
  return true;
}

virtio::ChainResult NetDevice::ReceiveInto(const virtio::DescriptorChain& chain) {
  using virtio::ChainResult;
  // Guest-controlled: the chain's writable lengths. A chain that cannot hold
  // even a header and an Ethernet header goes back empty, without a frame.
  if (chain.WritableBytes() < kVirtioNetHdrSize + kMinFrameLen) return ChainResult::Used(0);
  virtio::ChainWriter writer(activation_.memory(), chain);
  if (!writer.Skip(kVirtioNetHdrSize).ok()) return ChainResult::Used(0);
  std::vector<virtio::GuestBuffer> ranges = writer.TakeRanges(kMaxFrameLen);
  uint64_t room = 0;
  for (const auto& r : ranges) room += r.len;

  VirtioNetHdr backend_hdr;
  uint8_t spare = 0;
  iov_scratch_.clear();
  iov_scratch_.push_back(iovec{&backend_hdr, sizeof(backend_hdr)});
  if (!AppendHostRanges(ranges, iov_scratch_) || iov_scratch_.size() >= kMaxNetIov) {
    return ChainResult::Used(0);
  }
  // A frame that does not fit spills into this byte (see NetIo::bytes).
  iov_scratch_.push_back(iovec{&spare, 1});

  absl::StatusOr<NetIo> io = backend_->Receive(iov_scratch_);
  if (!io.ok()) return ChainResult::Broken(Annotate(io.status(), "virtio-net backend receive"));
  if (io->would_block) return ChainResult::PutBack();
  absl::StatusOr<VirtioNetHdr> hdr =
      absl::InvalidArgumentError("backend frame shorter than the header");
  if (io->bytes >= kVirtioNetHdrSize) {
    const uint64_t len = io->bytes - kVirtioNetHdrSize;
    if (len > room) {
      hdr = absl::ResourceExhaustedError(
          absl::StrCat("frame larger than the ", room, "-byte receive buffer"));
    } else {
      hdr = BuildRxHeader(backend_hdr, static_cast<uint32_t>(len), rx_offloads_);
    }
  }
  if (!hdr.ok()) {
    Bump(metrics_.rx_dropped);
    DSEC_LOG_RATELIMITED(warn, 5, "device=virtio-net net={} event=rx_drop reason={}", config_.id,
                         hdr.status().ToString());
    return ChainResult::Requeue();  // the buffer is reused for the next frame
  }
  const uint64_t frame_len = io->bytes - kVirtioNetHdrSize;
  virtio::ChainWriter header_writer(activation_.memory(), chain);
  if (absl::Status s = header_writer.WriteObj(*hdr); !s.ok()) return ChainResult::Broken(s);
  Bump(metrics_.rx_packets);
  Bump(metrics_.rx_bytes, frame_len);
  rx_limiter_.Charge(frame_len);
  return ChainResult::Used(static_cast<uint32_t>(io->bytes));
}

bool NetDevice::AdmitRx() {
  if (rx_timer_.has_value()) return false;  // throttled: the timer resumes receive
  const int64_t wait = rx_limiter_.NsUntilAdmitted();
  if (wait <= 0) return true;
  Bump(metrics_.rx_throttled);
  ArmTimer(rx_timer_, wait, &NetDevice::ProcessRx);
  return false;
}

void NetDevice::ProcessRx() {
  virtio::RunResult run =
      rx_worker_.Run([this] { return AdmitRx(); },
                     [this](virtio::DescriptorChain& chain) { return ReceiveInto(chain); });
  if (run.stop == virtio::RunStop::kInactive || !activation_.running()) return;
  // Watch the backend while frames can go somewhere: not without receive
  // buffers (until the driver kicks) and not while throttled (the timer
  // resumes). Out of budget, a continuation is posted and epoll reports the
  // backend again too.
  rx_watch_ = run.stop != virtio::RunStop::kEmpty && run.stop != virtio::RunStop::kNotAdmitted;
  UpdateBackendWatch();
}

bool NetDevice::AdmitTx() {
  // A rate-limit timer or the backend's writability resumes transmit.
  if (tx_timer_.has_value() || tx_wait_writable_) return false;
  const int64_t wait = tx_limiter_.NsUntilAdmitted();
  if (wait <= 0) return true;
  Bump(metrics_.tx_throttled);
  ArmTimer(tx_timer_, wait, &NetDevice::ProcessTx);
  return false;
}

void NetDevice::ProcessTx() {
  tx_worker_.Run([this] { return AdmitTx(); },
                 [this](virtio::DescriptorChain& chain) { return Transmit(chain); });
}

virtio::ChainResult NetDevice::Transmit(const virtio::DescriptorChain& chain) {
  absl::Status why;
  absl::StatusOr<TxFrame> frame = ParseTxChain(activation_.memory(), chain, tx_policy_);
  if (frame.ok()) {
    iov_scratch_.clear();
    iov_scratch_.push_back(iovec{&frame->hdr, sizeof(frame->hdr)});
    if (!AppendHostRanges(frame->frame, iov_scratch_)) {
      why = absl::InvalidArgumentError("frame spread over too many guest buffers");
    } else {
      absl::StatusOr<NetIo> io = backend_->Send(iov_scratch_);
      if (io.ok() && io->would_block) {
        // Keep the frame: it goes when the backend is writable again.
        tx_wait_writable_ = true;
        UpdateBackendWatch();
        return virtio::ChainResult::PutBack();
      }
      if (!io.ok()) why = io.status();
    }
  } else {
    why = frame.status();
  }
  if (why.ok()) {
    Bump(metrics_.tx_packets);
    Bump(metrics_.tx_bytes, frame->frame_len);
    tx_limiter_.Charge(frame->frame_len);
  } else {
    Bump(metrics_.tx_dropped);
    DSEC_LOG_RATELIMITED(warn, 5, "device=virtio-net net={} event=tx_drop reason={}", config_.id,
                         why.ToString());
  }
  // Transmit buffers are read-only: the used length is 0 (section 5.1.6.2).
  return virtio::ChainResult::Used(0);
}

void NetDevice::OnBackendEvent(uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) {
    // A tap reports EPOLLERR only once its interface is gone for good.
    activation_.MarkBroken(
        absl::UnavailableError("virtio-net backend reported an error or hang-up"));
    return;
  }
  if ((events & EPOLLOUT) && tx_wait_writable_) {
    tx_wait_writable_ = false;
    UpdateBackendWatch();
    ProcessTx();
  }
  if (events & EPOLLIN) ProcessRx();
}

void NetDevice::UpdateBackendWatch() {
  uint32_t want = 0;
  if (activation_.running()) {
    if (rx_watch_) want |= EPOLLIN;
    if (tx_wait_writable_) want |= EPOLLOUT;
  }
  if (want == registered_events_) return;
  const int fd = backend_->PollFd();
  if (registered_events_ != 0) {
    (void)activation_.loop().Remove(fd);
    registered_events_ = 0;
  }
  if (want == 0) return;
  absl::Status s =
      activation_.loop().Add(fd, want, [this](uint32_t events) { OnBackendEvent(events); });
  if (!s.ok()) {
    activation_.MarkBroken(Annotate(s, "virtio-net watching its backend"));
    return;
  }
  registered_events_ = want;
}

void NetDevice::ArmTimer(std::optional<int>& slot, int64_t delay_ns, void (NetDevice::*process)()) {
  if (slot.has_value()) return;
  std::optional<int>* slot_ptr = &slot;
  absl::StatusOr<int> id = activation_.loop().AddTimer(delay_ns, 0, [this, slot_ptr, process] {
    slot_ptr->reset();  // one-shot: the loop already dropped it
    (this->*process)();
  });
  if (!id.ok()) {
    activation_.MarkBroken(Annotate(id.status(), "virtio-net timer"));
    return;
  }
  slot = *id;
}

void NetDevice::CancelTimers() {
  for (std::optional<int>* slot : {&rx_timer_, &tx_timer_}) {
    if (slot->has_value() && activation_.active()) (void)activation_.loop().CancelTimer(**slot);
    slot->reset();
  }
}

void NetDevice::OnBroken(const absl::Status& reason) {
  DSEC_LOG_RATELIMITED(warn, 5, "device=virtio-net net={} event=broken reason={}", config_.id,
                       reason.ToString());
  CancelTimers();
  UpdateBackendWatch();  // not running any more: stops watching
}

}  // namespace dsec::devices
