// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_connection.h"

#include <algorithm>

#include "base/status.h"

namespace dsec::devices {

void ByteQueue::Append(std::span<const uint8_t> bytes) {
  // Compact before growing so that a long-lived connection does not keep a
  // buffer larger than twice its bound.
  if (head_ > 0 && head_ >= data_.size() / 2) {
    data_.erase(data_.begin(), data_.begin() + static_cast<ptrdiff_t>(head_));
    head_ = 0;
  }
  data_.insert(data_.end(), bytes.begin(), bytes.end());
}

void ByteQueue::Consume(size_t n) {
  DSEC_CHECK(n <= size());
  head_ += n;
  if (head_ == data_.size()) Clear();
}

void ByteQueue::Clear() {
  data_.clear();
  head_ = 0;
}

VsockConnection::VsockConnection(const VsockConnectionOptions& options, const Clock& clock,
                                 uint32_t host_port, uint32_t guest_port, State state)
    : options_(options), clock_(&clock), host_port_(host_port), guest_port_(guest_port),
      state_(state) {}

VsockConnection VsockConnection::HostInitiated(const VsockConnectionOptions& options,
                                               const Clock& clock, uint32_t host_port,
                                               uint32_t guest_port) {
  VsockConnection c(options, clock, host_port, guest_port, State::kConnecting);
  c.send_request_ = true;
  c.deadline_ns_ = clock.NowNs() + options.connect_timeout_ns;
  return c;
}

VsockConnection VsockConnection::GuestInitiated(const VsockConnectionOptions& options,
                                                const Clock& clock, const VsockHeader& request) {
  VsockConnection c(options, clock, request.dst_port, request.src_port, State::kConnected);
  c.send_response_ = true;
  c.peer_buf_alloc_ = request.buf_alloc;
  c.peer_fwd_cnt_ = request.fwd_cnt;
  return c;
}

uint32_t VsockConnection::PeerCredit() const {
  return VsockCredit(peer_buf_alloc_, tx_cnt_, peer_fwd_cnt_);
}

VsockHeader VsockConnection::MakeHeader(VsockOp op, uint32_t flags) const {
  VsockHeader h;
  h.src_cid = kVsockHostCid;
  h.dst_cid = options_.guest_cid;
  h.src_port = host_port_;
  h.dst_port = guest_port_;
  h.type = kVsockTypeStream;
  h.op = op;
  h.flags = flags;
  h.buf_alloc = options_.buf_alloc;
  h.fwd_cnt = fwd_cnt_;
  return h;
}

VsockPacket VsockConnection::Emit(VsockOp op, uint32_t flags) {
  VsockPacket p;
  p.hdr = MakeHeader(op, flags);
  // Every packet carries our credit, so a pending CREDIT_UPDATE is moot.
  last_sent_fwd_cnt_ = fwd_cnt_;
  send_credit_update_ = false;
  return p;
}

void VsockConnection::CloseWithRst(const char* reason) {
  // A REQUEST the guest never saw needs no RST.
  const bool guest_knows = !(state_ == State::kConnecting && send_request_);
  state_ = State::kClosed;
  reset_reason_ = reason;
  send_rst_ = guest_knows;
  send_request_ = send_response_ = send_credit_update_ = shutdown_pending_ = false;
  deadline_ns_.reset();
  to_guest_.Clear();
  to_host_.Clear();
}

void VsockConnection::ProtocolError(const char* reason) { CloseWithRst(reason); }

void VsockConnection::Abort() {
  if (state_ != State::kClosed) CloseWithRst("aborted by the host side");
}

void VsockConnection::AddLocalShutdown(uint32_t flags) {
  if ((local_shutdown_ | flags) == local_shutdown_) return;
  local_shutdown_ |= flags;
  shutdown_pending_ = true;
}

void VsockConnection::OnGuestPacket(const VsockHeader& hdr, std::span<const uint8_t> payload) {
  if (state_ == State::kClosed) return;
  // Guest-controlled: buf_alloc and fwd_cnt; PeerCredit() tolerates any
  // values (a lying guest only starves itself).
  peer_buf_alloc_ = hdr.buf_alloc;
  peer_fwd_cnt_ = hdr.fwd_cnt;
  if (hdr.op == VsockOp::kRst) {
    // virtio 1.2 section 5.10.6.5: the peer reset the connection; no reply.
    state_ = State::kClosed;
    send_rst_ = false;
    send_request_ = send_response_ = send_credit_update_ = shutdown_pending_ = false;
    deadline_ns_.reset();
    to_guest_.Clear();
    to_host_.Clear();
    return;
  }
  switch (state_) {
    case State::kConnecting:
      if (hdr.op == VsockOp::kResponse && !send_request_) {
        state_ = State::kConnected;
        established_ = true;
        deadline_ns_.reset();
      } else {
        ProtocolError("unexpected packet while connecting");
      }
      return;
    case State::kConnected:
      OnConnectedPacket(hdr, payload);
      MaybeFinish();
      return;
    case State::kClosing:
      // Waiting for the guest's RST; everything else is stale.
      return;
    case State::kClosed:
      return;
  }
}

void VsockConnection::OnConnectedPacket(const VsockHeader& hdr, std::span<const uint8_t> payload) {
  switch (hdr.op) {
    case VsockOp::kRw: {
      if (peer_shutdown_ & kVsockShutdownSend) {
        ProtocolError("data after SHUTDOWN(SEND)");
        return;
      }
      // Guest-controlled: the payload size; the guest must stay within the
      // credit we gave it (virtio 1.2 section 5.10.6.3.1), which bounds
      // to_host_.
      if (to_host_.size() + payload.size() > options_.buf_alloc) {
        ProtocolError("guest exceeded its credit");
        return;
      }
      rx_cnt_ += static_cast<uint32_t>(payload.size());
      if (host_write_closed_) {
        // The host cannot take it; count it as forwarded so credit flows.
        fwd_cnt_ += static_cast<uint32_t>(payload.size());
        MaybeQueueCreditUpdate();
      } else {
        to_host_.Append(payload);
      }
      return;
    }
    case VsockOp::kShutdown:
      // Guest-controlled: flags; unknown bits are ignored.
      peer_shutdown_ |= hdr.flags & kVsockShutdownBoth;
      if (peer_shutdown_ & kVsockShutdownRcv) to_guest_.Clear();
      return;
    case VsockOp::kCreditUpdate:
      return;  // the credit fields were taken above
    case VsockOp::kCreditRequest:
      send_credit_update_ = true;
      return;
    default:
      ProtocolError("unexpected op on a connected stream");
      return;
  }
}

void VsockConnection::MaybeFinish() {
  if (state_ != State::kConnected) return;
  const bool to_guest_done =
      (peer_shutdown_ & kVsockShutdownRcv) || (host_eof_ && to_guest_.empty());
  const bool to_host_done = host_write_closed_;
  if (!to_guest_done || !to_host_done) return;
  if ((peer_shutdown_ & kVsockShutdownBoth) == kVsockShutdownBoth) {
    // virtio 1.2 section 5.10.6.5: the guest shut down both directions and
    // waits for our RST to complete the clean disconnect.
    state_ = State::kClosed;
    send_rst_ = true;
    shutdown_pending_ = send_credit_update_ = false;
    return;
  }
  // Our side is done: tell the guest and wait (bounded) for its RST.
  AddLocalShutdown(kVsockShutdownBoth);
  state_ = State::kClosing;
  deadline_ns_ = clock_->NowNs() + options_.shutdown_timeout_ns;
}

bool VsockConnection::DataReady() const {
  return state_ == State::kConnected && !to_guest_.empty() && PeerCredit() > 0;
}

bool VsockConnection::ShutdownReady() const {
  return shutdown_pending_ && (state_ == State::kConnected || state_ == State::kClosing);
}

bool VsockConnection::HasRxPacket() const {
  if (send_rst_) return true;
  if (state_ == State::kClosed) return false;
  return send_request_ || send_response_ || DataReady() || ShutdownReady() || send_credit_update_;
}

std::optional<VsockPacket> VsockConnection::PopRxPacket(uint32_t max_payload) {
  if (send_rst_) {
    send_rst_ = false;
    return Emit(VsockOp::kRst, 0);
  }
  if (state_ == State::kClosed) return std::nullopt;
  if (send_request_) {
    send_request_ = false;
    return Emit(VsockOp::kRequest, 0);
  }
  if (send_response_) {
    send_response_ = false;
    return Emit(VsockOp::kResponse, 0);
  }
  if (DataReady() && max_payload > 0) {
    const size_t n = std::min<size_t>(
        {to_guest_.size(), PeerCredit(), max_payload, static_cast<size_t>(kVsockMaxPayload)});
    VsockPacket p = Emit(VsockOp::kRw, 0);
    auto front = to_guest_.Front().subspan(0, n);
    p.payload.assign(front.begin(), front.end());
    p.hdr.len = static_cast<uint32_t>(n);
    to_guest_.Consume(n);
    tx_cnt_ += static_cast<uint32_t>(n);
    // SHUTDOWN(SEND) follows the last byte (virtio 1.2 section 5.10.6.5).
    if (host_eof_ && to_guest_.empty()) AddLocalShutdown(kVsockShutdownSend);
    MaybeFinish();
    return p;
  }
  if (ShutdownReady()) {
    shutdown_pending_ = false;
    return Emit(VsockOp::kShutdown, local_shutdown_);
  }
  if (send_credit_update_) return Emit(VsockOp::kCreditUpdate, 0);
  return std::nullopt;
}

size_t VsockConnection::HostReadBudget() const {
  if (state_ != State::kConnected || host_eof_ || host_read_shut_ ||
      (peer_shutdown_ & kVsockShutdownRcv)) {
    return 0;
  }
  const size_t buffered = to_guest_.size();
  const size_t room = options_.host_buffer > buffered ? options_.host_buffer - buffered : 0;
  const size_t credit = PeerCredit();
  const size_t credit_left = credit > buffered ? credit - buffered : 0;
  return std::min(room, credit_left);
}

void VsockConnection::OnHostData(std::span<const uint8_t> data) {
  DSEC_CHECK(data.size() <= HostReadBudget());
  to_guest_.Append(data);
}

void VsockConnection::OnHostEof() {
  if (state_ != State::kConnected || host_eof_) return;
  host_eof_ = true;
  if (to_guest_.empty()) AddLocalShutdown(kVsockShutdownSend);
  MaybeFinish();
}

void VsockConnection::OnHostConsumed(size_t n) {
  to_host_.Consume(n);
  fwd_cnt_ += static_cast<uint32_t>(n);
  MaybeQueueCreditUpdate();
  MaybeFinish();
}

void VsockConnection::MaybeQueueCreditUpdate() {
  if (state_ != State::kConnected || fwd_cnt_ == last_sent_fwd_cnt_) return;
  if (peer_shutdown_ & kVsockShutdownSend) return;  // the guest sends no more
  // The space the guest believes it has, from the last fwd_cnt it heard.
  const uint32_t guest_view_used = rx_cnt_ - last_sent_fwd_cnt_;
  const uint32_t guest_view_free =
      guest_view_used >= options_.buf_alloc ? 0 : options_.buf_alloc - guest_view_used;
  const uint32_t threshold = options_.buf_alloc / 2;
  const uint32_t actual_free = options_.buf_alloc - static_cast<uint32_t>(to_host_.size());
  // Tell the guest once it may be starved and we freed a useful amount: a
  // Linux driver does not ask (CREDIT_REQUEST) before blocking.
  if (guest_view_free < threshold && (actual_free >= threshold || to_host_.empty())) {
    send_credit_update_ = true;
  }
}

bool VsockConnection::WantsHostWriteShutdown() const {
  return state_ == State::kConnected && (peer_shutdown_ & kVsockShutdownSend) &&
         to_host_.empty() && !host_write_closed_;
}

void VsockConnection::OnHostWriteShutdown() {
  host_write_closed_ = true;
  MaybeFinish();
}

bool VsockConnection::WantsHostReadShutdown() const {
  return state_ == State::kConnected && (peer_shutdown_ & kVsockShutdownRcv) && !host_read_shut_;
}

void VsockConnection::OnHostReadShutdown() {
  host_read_shut_ = true;
  MaybeFinish();
}

void VsockConnection::OnHostWriteError() {
  if (state_ != State::kConnected || host_write_closed_) return;
  host_write_closed_ = true;
  fwd_cnt_ += static_cast<uint32_t>(to_host_.size());
  to_host_.Clear();
  // We can receive no more (virtio 1.2 section 5.10.6.5): the guest's sends
  // fail instead of filling a buffer nobody drains.
  if (!(peer_shutdown_ & kVsockShutdownSend)) AddLocalShutdown(kVsockShutdownRcv);
  MaybeFinish();
}

bool VsockConnection::TakeEstablished() { return std::exchange(established_, false); }

void VsockConnection::CheckTimeout() {
  if (!deadline_ns_ || clock_->NowNs() < *deadline_ns_) return;
  if (state_ == State::kConnecting) {
    CloseWithRst("connect timeout");
  } else if (state_ == State::kClosing) {
    CloseWithRst("shutdown timeout");
  }
}

}  // namespace dsec::devices
