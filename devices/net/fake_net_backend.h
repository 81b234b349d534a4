// SPDX-License-Identifier: Apache-2.0
// A NetBackend for tests (target dsec_devices_net_fake): frames the device
// sends are recorded, frames injected by the test are handed to Receive in
// order. PollFd is a semaphore eventfd whose counter is the number of frames
// waiting, so epoll sees it readable exactly while Receive has a frame.
#pragma once

#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "devices/net/net_backend.h"
#include "base/eventfd.h"
#include "base/status.h"

namespace dsec::devices {

class FakeNetBackend : public NetBackend {
 public:
  struct Frame {
    VirtioNetHdr hdr;
    std::vector<uint8_t> bytes;
  };

  explicit FakeNetBackend(NetOffloads supported = NetOffloads{})
      : supported_(supported),
        ready_(std::make_unique<EventFd>(EventFd::Create(EFD_NONBLOCK | EFD_SEMAPHORE).value())) {}

  // --- Test side -------------------------------------------------------
  void Inject(const VirtioNetHdr& hdr, std::vector<uint8_t> frame) {
    pending_.push_back(Frame{hdr, std::move(frame)});
    DSEC_CHECK_OK(ready_->Signal(1));
  }
  size_t pending() const { return pending_.size(); }
  const std::vector<Frame>& sent() const { return sent_; }
  uint64_t receive_calls() const { return receive_calls_; }
  const NetOffloads& rx_offloads() const { return rx_offloads_; }
  // While set, Send reports would_block.
  void set_send_blocked(bool blocked) { send_blocked_ = blocked; }

  // --- NetBackend --------------------------------------------------------
  NetOffloads SupportedOffloads() const override { return supported_; }
  absl::Status SetRxOffloads(const NetOffloads& offloads) override {
    rx_offloads_ = offloads;
    return absl::OkStatus();
  }
  absl::StatusOr<NetIo> Send(std::span<const iovec> iov) override {
    if (send_blocked_) return NetIo{.would_block = true, .bytes = 0};
    std::vector<uint8_t> all;
    for (const iovec& v : iov) {
      const auto* p = static_cast<const uint8_t*>(v.iov_base);
      all.insert(all.end(), p, p + v.iov_len);
    }
    if (all.size() < sizeof(VirtioNetHdr)) return absl::InvalidArgumentError("short send");
    Frame f;
    std::memcpy(&f.hdr, all.data(), sizeof(f.hdr));
    f.bytes.assign(all.begin() + sizeof(f.hdr), all.end());
    sent_.push_back(std::move(f));
    return NetIo{.would_block = false, .bytes = all.size()};
  }
  // Copies as much as fits and reports the bytes copied, like a tap.
  absl::StatusOr<NetIo> Receive(std::span<const iovec> iov) override {
    ++receive_calls_;
    if (pending_.empty()) return NetIo{.would_block = true, .bytes = 0};
    Frame f = std::move(pending_.front());
    pending_.pop_front();
    DSEC_CHECK(ready_->Consume().ok());
    std::vector<uint8_t> all(sizeof(f.hdr));
    std::memcpy(all.data(), &f.hdr, sizeof(f.hdr));
    all.insert(all.end(), f.bytes.begin(), f.bytes.end());
    size_t done = 0;
    for (const iovec& v : iov) {
      size_t n = std::min(v.iov_len, all.size() - done);
      std::memcpy(v.iov_base, all.data() + done, n);
      done += n;
    }
    return NetIo{.would_block = false, .bytes = done};
  }
  int PollFd() const override { return ready_->fd(); }

 private:
  NetOffloads supported_;
  NetOffloads rx_offloads_;
  std::unique_ptr<EventFd> ready_;
  std::deque<Frame> pending_;
  std::vector<Frame> sent_;
  uint64_t receive_calls_ = 0;
  bool send_blocked_ = false;
};

}  // namespace dsec::devices
