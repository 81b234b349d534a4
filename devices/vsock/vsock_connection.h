// SPDX-License-Identifier: Apache-2.0
// One virtio-vsock stream connection between a host port and a guest port:
// the state machine of virtio 1.2 section 5.10.6.4-5.10.6.6 and credit-based
// flow control (section 5.10.6.3) in both directions. Pure logic: input
// events (guest packets, bytes from or to the host socket, time) change the
// state and queue packets for the guest; the owner (VsockMuxer) does the I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "devices/vsock/vsock_packet.h"
#include "base/clock.h"

namespace dsec::devices {

// A FIFO of bytes with a fixed capacity (the per-connection bounded buffers).
class ByteQueue {
 public:
  size_t size() const { return data_.size() - head_; }
  bool empty() const { return size() == 0; }
  std::span<const uint8_t> Front() const { return {data_.data() + head_, size()}; }
  void Append(std::span<const uint8_t> bytes);
  void Consume(size_t n);
  void Clear();

 private:
  std::vector<uint8_t> data_;
  size_t head_ = 0;
};

// virtio 1.2 section 5.10.6.3: the credit a peer with receive buffer
// `buf_alloc` that has forwarded `fwd_cnt` bytes gives a sender that has sent
// `tx_cnt`: buf_alloc - (tx_cnt - fwd_cnt), in wrapping u32 arithmetic (the
// counters are free-running), and 0 if the peer reports more in flight than
// its buffer holds.
constexpr uint32_t VsockCredit(uint32_t buf_alloc, uint32_t tx_cnt, uint32_t fwd_cnt) {
  const uint32_t in_flight = tx_cnt - fwd_cnt;
  return in_flight > buf_alloc ? 0 : buf_alloc - in_flight;
}

struct VsockConnectionOptions {
  uint64_t guest_cid = kVsockMinGuestCid;
  // Our receive buffer for guest -> host bytes, advertised as buf_alloc: the
  // guest may have at most this many bytes in flight that the host socket has
  // not yet taken.
  uint32_t buf_alloc = 256 * 1024;
  // Host -> guest bytes read from the host socket ahead of the guest.
  uint32_t host_buffer = 64 * 1024;
  // A host-initiated REQUEST without RESPONSE, or our SHUTDOWN without the
  // guest's RST, is reset after this long.
  int64_t connect_timeout_ns = 2'000'000'000;
  int64_t shutdown_timeout_ns = 2'000'000'000;
};

// Threads: one owner (the event-loop thread). Lives as long as its entry in
// the muxer; `clock` must outlive it.
class VsockConnection {
 public:
  enum class State {
    kConnecting,  // host-initiated: REQUEST queued or sent, awaiting RESPONSE
    kConnected,
    kClosing,  // we sent SHUTDOWN(RCV|SEND), awaiting the guest's RST
    kClosed,   // done; an RST may still be queued for the guest
  };

  // The host connects to `guest_port`: queues a REQUEST from `host_port`.
  static VsockConnection HostInitiated(const VsockConnectionOptions& options, const Clock& clock,
                                       uint32_t host_port, uint32_t guest_port);
  // The guest sent a REQUEST (already validated) and the host side accepted
  // it: connected, queues a RESPONSE.
  static VsockConnection GuestInitiated(const VsockConnectionOptions& options, const Clock& clock,
                                        const VsockHeader& request);

  uint32_t host_port() const { return host_port_; }
  uint32_t guest_port() const { return guest_port_; }
  State state() const { return state_; }
  // Closed and nothing left to tell the guest: the owner may drop it.
  bool Finished() const { return state_ == State::kClosed && !send_rst_; }

  // --- guest side ---
  // A validated packet whose ports match this connection.
  void OnGuestPacket(const VsockHeader& hdr, std::span<const uint8_t> payload);
  // Whether PopRxPacket(kVsockMaxPayload) would return a packet.
  bool HasRxPacket() const;
  // The next packet for the guest's rx queue, with at most `max_payload`
  // payload bytes (control packets need none).
  std::optional<VsockPacket> PopRxPacket(uint32_t max_payload);

  // --- host side ---
  // Bytes the owner may read from the host socket now and pass to
  // OnHostData: bounded by the host buffer and by the guest's credit, so a
  // guest that does not read stops the host reads (backpressure).
  size_t HostReadBudget() const;
  void OnHostData(std::span<const uint8_t> data);  // data.size() <= HostReadBudget()
  void OnHostEof();                                // the host will send no more
  // Guest bytes waiting for the host socket; the owner writes what it can and
  // reports it with OnHostConsumed (which returns credit to the guest).
  std::span<const uint8_t> PendingToHost() const { return to_host_.Front(); }
  void OnHostConsumed(size_t n);
  // The guest will send no more and every byte went to the host: the owner
  // shuts down the socket's write side, then calls OnHostWriteShutdown.
  bool WantsHostWriteShutdown() const;
  void OnHostWriteShutdown();
  // The guest will receive no more (SHUTDOWN with RCV): the owner shuts down
  // the socket's read side (the host writer then gets EPIPE).
  bool WantsHostReadShutdown() const;
  void OnHostReadShutdown();
  // The host can no longer take bytes (EPIPE/ECONNRESET on write).
  void OnHostWriteError();
  // Anything fatal on the host side, or a limit: reset the connection.
  void Abort();

  // Host-initiated only: true once, when the guest's RESPONSE arrived.
  bool TakeEstablished();
  // Enforces the connect and shutdown deadlines.
  void CheckTimeout();
  std::optional<int64_t> deadline_ns() const { return deadline_ns_; }

  // Credit state (virtio 1.2 section 5.10.6.3), for tests and metrics.
  // The guest's credit for our bytes: peer_buf_alloc - (tx_cnt - peer_fwd_cnt),
  // in wrapping u32 arithmetic, 0 if the guest reports more in flight than
  // its buffer.
  uint32_t PeerCredit() const;
  uint32_t tx_cnt() const { return tx_cnt_; }
  uint32_t rx_cnt() const { return rx_cnt_; }
  uint32_t fwd_cnt() const { return fwd_cnt_; }
  size_t buffered_to_guest() const { return to_guest_.size(); }
  size_t buffered_to_host() const { return to_host_.size(); }
  // Why the connection was reset (for logs); empty if it was not.
  const char* reset_reason() const { return reset_reason_; }

 private:
  VsockConnection(const VsockConnectionOptions& options, const Clock& clock, uint32_t host_port,
                  uint32_t guest_port, State state);

  VsockHeader MakeHeader(VsockOp op, uint32_t flags) const;
  VsockPacket Emit(VsockOp op, uint32_t flags);
  void OnConnectedPacket(const VsockHeader& hdr, std::span<const uint8_t> payload);
  void ProtocolError(const char* reason);
  void CloseWithRst(const char* reason);
  void AddLocalShutdown(uint32_t flags);
  void MaybeQueueCreditUpdate();
  void MaybeFinish();
  bool DataReady() const;
  bool ShutdownReady() const;

  VsockConnectionOptions options_;
  const Clock* clock_;
  uint32_t host_port_;
  uint32_t guest_port_;
  State state_;
  std::optional<int64_t> deadline_ns_;
  const char* reset_reason_ = "";

  // Control packets waiting for an rx buffer.
  bool send_request_ = false;
  bool send_response_ = false;
  bool send_rst_ = false;
  bool send_credit_update_ = false;
  bool shutdown_pending_ = false;
  bool established_ = false;

  uint32_t peer_shutdown_ = 0;   // SHUTDOWN flags the guest sent
  uint32_t local_shutdown_ = 0;  // SHUTDOWN flags we sent or queued
  bool host_eof_ = false;
  bool host_write_closed_ = false;
  bool host_read_shut_ = false;

  // Guest-controlled: the guest's receive buffer and forwarded count, taken
  // from every packet it sends; only ever used through PeerCredit().
  uint32_t peer_buf_alloc_ = 0;
  uint32_t peer_fwd_cnt_ = 0;
  uint32_t tx_cnt_ = 0;            // payload bytes sent to the guest
  uint32_t rx_cnt_ = 0;            // payload bytes received from the guest
  uint32_t fwd_cnt_ = 0;           // of those, bytes the host socket took
  uint32_t last_sent_fwd_cnt_ = 0;  // fwd_cnt the guest last heard from us

  ByteQueue to_guest_;  // host -> guest, <= options_.host_buffer
  ByteQueue to_host_;   // guest -> host, <= options_.buf_alloc
};

}  // namespace dsec::devices
