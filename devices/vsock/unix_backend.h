// SPDX-License-Identifier: Apache-2.0
// The unix-socket host side of virtio-vsock: one listening socket per VM at
// `path`. Host clients connect to it and write "CONNECT <port>\n" to reach
// guest port <port>; guest connections to host port P go to a unix listener
// at "<path>_<P>". See README.md for the client protocol.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/vsock/vsock_backend.h"
#include "devices/vsock/vsock_connection.h"
#include "base/clock.h"
#include "base/event_loop.h"
#include "base/scoped_fd.h"

namespace dsec::devices {

struct UnixVsockBackendOptions {
  std::string path;                 // the VM's host socket
  uint64_t guest_cid = kVsockMinGuestCid;
  bool unlink_existing = false;     // replace a stale socket file at `path`
  size_t max_connections = 1024;    // streams, host- and guest-initiated
  size_t max_pending_clients = 64;  // host clients that have not sent CONNECT
  size_t max_pending_rst = 256;     // RSTs for unknown streams awaiting rx buffers
  int64_t handshake_timeout_ns = 5'000'000'000;  // for the CONNECT line
  int64_t timer_interval_ns = 250'000'000;       // deadline checks
  VsockConnectionOptions connection;             // guest_cid is overwritten
  const Clock* clock = &MonotonicClock::Get();
};

// Counters of one VM's vsock host side (exported by the metrics endpoint).
struct VsockBackendMetrics {
  uint64_t host_connects = 0;       // CONNECT lines accepted
  uint64_t guest_connects = 0;      // guest REQUESTs connected to a listener
  uint64_t guest_connect_refused = 0;  // no listener at <path>_<port>
  uint64_t clients_rejected = 0;    // bad CONNECT line, limit, timeout
  uint64_t rst_unknown_stream = 0;  // guest packets for no stream
  uint64_t rst_dropped = 0;         // RSTs dropped: too many pending
  uint64_t resets = 0;              // streams that ended in RST from our side
  uint64_t limit_refusals = 0;      // max_connections reached
};

// Threads: created, used and destroyed on the event-loop thread (or before
// the loop runs / after it stopped). The loop must outlive the backend; the
// destructor removes every fd and the timer from it and unlinks `path`.
class UnixVsockBackend : public VsockBackend {
 public:
  static absl::StatusOr<std::unique_ptr<UnixVsockBackend>> Create(EventLoop* loop,
                                                                   UnixVsockBackendOptions options);
  ~UnixVsockBackend() override;
  UnixVsockBackend(const UnixVsockBackend&) = delete;
  UnixVsockBackend& operator=(const UnixVsockBackend&) = delete;

  void HandleGuestPacket(const VsockPacket& packet) override;
  bool HasRxPacket() const override;
  std::optional<VsockPacket> PopRxPacket(uint32_t max_payload) override;
  void SetRxReadyCallback(std::function<void()> callback) override;
  void ResetConnections() override;

  // Enforces handshake, connect and shutdown deadlines against the clock
  // (the backend's timer calls it; tests call it after moving a FakeClock).
  void CheckTimeouts();

  size_t connection_count() const { return streams_.size(); }
  size_t pending_clients() const { return clients_.size(); }
  const VsockConnection* FindConnection(uint32_t host_port, uint32_t guest_port) const;
  const VsockBackendMetrics& metrics() const { return metrics_; }
  const std::string& path() const { return options_.path; }

 private:
  using Key = uint64_t;  // host_port << 32 | guest_port
  static Key MakeKey(uint32_t host_port, uint32_t guest_port) {
    return static_cast<uint64_t>(host_port) << 32 | guest_port;
  }
  struct HostClient {  // accepted, waiting for its CONNECT line
    ScopedFd fd;
    int64_t deadline_ns = 0;
  };
  struct Stream {
    Stream(VsockConnection c, ScopedFd f) : conn(std::move(c)), fd(std::move(f)) {}
    VsockConnection conn;
    ScopedFd fd;
    // Edge-triggered readiness: true until a read/write returns EAGAIN.
    bool readable = true;
    bool writable = true;
    bool queued = false;     // in ready_
    std::string preamble;    // "OK <port>\n" still to write to a host client
  };

  UnixVsockBackend(EventLoop* loop, UnixVsockBackendOptions options, ScopedFd listener)
      : loop_(loop), options_(std::move(options)), listener_(std::move(listener)) {}

  void OnListenerReadable();
  void OnFdEvent(int fd, uint32_t events);
  void OnClientReadable(int fd);
  void DropClient(int fd);
  void StartHostConnect(ScopedFd fd, uint32_t guest_port);
  void AcceptGuestConnect(const VsockHeader& request);
  void QueueRst(const VsockHeader& to_guest_packet);
  std::optional<uint32_t> AllocateHostPort(uint32_t guest_port);
  bool AddStream(Key key, std::unique_ptr<Stream> stream);
  // Does all host I/O the stream's state allows, removes it when finished,
  // queues it for rx when it has packets.
  void Service(Key key);
  void FlushToHost(Stream& s);
  void ReadFromHost(Stream& s);
  void RemoveStream(Key key);
  void NotifyRx();

  EventLoop* loop_;
  UnixVsockBackendOptions options_;
  ScopedFd listener_;
  std::optional<int> timer_id_;
  std::function<void()> rx_ready_;
  std::unordered_map<int, HostClient> clients_;  // by fd
  std::unordered_map<Key, std::unique_ptr<Stream>> streams_;
  std::unordered_map<int, Key> stream_by_fd_;
  std::deque<Key> ready_;
  std::deque<VsockPacket> pending_rst_;
  uint32_t next_host_port_ = kFirstHostPort;
  std::vector<uint8_t> read_buf_;
  VsockBackendMetrics metrics_;

  // Host-initiated streams use local ports from here up (below the wildcard
  // VMADDR_PORT_ANY, 0xffffffff), so they do not meet well-known guest-facing
  // service ports.
  static constexpr uint32_t kFirstHostPort = 1u << 30;
};

}  // namespace dsec::devices
