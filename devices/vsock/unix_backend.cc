// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/unix_backend.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {

// "CONNECT 4294967295\n" fits easily; a longer line is not a CONNECT.
constexpr size_t kMaxConnectLine = 64;
constexpr size_t kReadChunk = 64 * 1024;

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vsock: unix socket path must be 1..", sizeof(addr.sun_path) - 1,
                     " bytes: '", path, "'"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Parses "CONNECT <port>" (the line without its '\n'; a trailing '\r' is
// tolerated for clients such as `socat -` that send CRLF).
std::optional<uint32_t> ParseConnectLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  constexpr std::string_view kPrefix = "CONNECT ";
  if (!line.starts_with(kPrefix)) return std::nullopt;
  line.remove_prefix(kPrefix.size());
  uint32_t port = 0;
  auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), port);
  if (ec != std::errc() || end != line.data() + line.size() || line.empty()) return std::nullopt;
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixVsockBackend>> UnixVsockBackend::Create(
    EventLoop* loop, UnixVsockBackendOptions options) {
  if (options.guest_cid < kVsockMinGuestCid || options.guest_cid > 0xffffffffull - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vsock: guest cid must be 3..4294967294, got ", options.guest_cid));
  }
  if (options.max_connections == 0 || options.connection.buf_alloc == 0 ||
      options.connection.host_buffer == 0) {
    return absl::InvalidArgumentError("vsock: connection limit and buffers must be non-zero");
  }
  options.connection.guest_cid = options.guest_cid;
  DSEC_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(options.path));
  ScopedFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return ErrnoToStatus("socket(AF_UNIX)");
  if (options.unlink_existing && ::unlink(options.path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(absl::StrCat("unlink ", options.path));
  }
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrCat("vsock: ", options.path, " already exists"));
    }
    return ErrnoToStatus(absl::StrCat("bind ", options.path));
  }
  if (::listen(listener.get(), 128) != 0) {
    absl::Status s = ErrnoToStatus(absl::StrCat("listen ", options.path));
    ::unlink(options.path.c_str());
    return s;
  }
  std::unique_ptr<UnixVsockBackend> backend(
      new UnixVsockBackend(loop, std::move(options), std::move(listener)));
  UnixVsockBackend* raw = backend.get();
  absl::Status s = loop->Add(raw->listener_.get(), EPOLLIN,
                             [raw](uint32_t) { raw->OnListenerReadable(); });
  if (!s.ok()) return s;  // the destructor unlinks the path
  absl::StatusOr<int> timer = loop->AddTimer(raw->options_.timer_interval_ns,
                                             raw->options_.timer_interval_ns,
                                             [raw] { raw->CheckTimeouts(); });
  if (!timer.ok()) return timer.status();
  raw->timer_id_ = *timer;
  raw->read_buf_.resize(kReadChunk);
  return backend;
}

UnixVsockBackend::~UnixVsockBackend() {
  if (timer_id_) (void)loop_->CancelTimer(*timer_id_);
  for (auto& [fd, client] : clients_) (void)loop_->Remove(fd);
  for (auto& [fd, key] : stream_by_fd_) (void)loop_->Remove(fd);
  if (listener_.valid()) {
    (void)loop_->Remove(listener_.get());
    ::unlink(options_.path.c_str());
  }
}

void UnixVsockBackend::SetRxReadyCallback(std::function<void()> callback) {
  rx_ready_ = std::move(callback);
}

void UnixVsockBackend::NotifyRx() {
  if (rx_ready_ && HasRxPacket()) rx_ready_();
}

void UnixVsockBackend::OnListenerReadable() {
  while (true) {
    ScopedFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) DSEC_LOG_RATELIMITED(warn, 1, "vsock: accept4 failed errno={}", errno);
      break;
    }
    if (clients_.size() >= options_.max_pending_clients ||
        streams_.size() >= options_.max_connections) {
      ++metrics_.clients_rejected;
      ++metrics_.limit_refusals;
      continue;  // closing the socket tells the client
    }
    const int raw = fd.get();
    absl::Status s = loop_->Add(raw, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                [this, raw](uint32_t events) { OnFdEvent(raw, events); });
    if (!s.ok()) {
      DSEC_LOG_RATELIMITED(warn, 1, "vsock: cannot watch host client: {}", s.ToString());
      continue;
    }
    clients_.emplace(raw, HostClient{std::move(fd),
                                     options_.clock->NowNs() + options_.handshake_timeout_ns});
    OnClientReadable(raw);  // the line may already be there
  }
  NotifyRx();
}

void UnixVsockBackend::OnFdEvent(int fd, uint32_t events) {
  if (clients_.contains(fd)) {
    OnClientReadable(fd);
    NotifyRx();
    return;
  }
  auto it = stream_by_fd_.find(fd);
  if (it == stream_by_fd_.end()) return;
  const Key key = it->second;
  Stream& s = *streams_.at(key);
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s.readable = true;
  if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) s.writable = true;
  Service(key);
  NotifyRx();
}

void UnixVsockBackend::DropClient(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  (void)loop_->Remove(fd);
  clients_.erase(it);  // closes the socket
}

void UnixVsockBackend::OnClientReadable(int fd) {
  char line[kMaxConnectLine];
  // Peek so that bytes after the newline stay in the socket: they are the
  // first bytes of the stream.
  ssize_t n;
  do {
    n = ::recv(fd, line, sizeof(line), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return;
  if (n <= 0) {
    DropClient(fd);
    return;
  }
  const char* nl = static_cast<const char*>(std::memchr(line, '\n', static_cast<size_t>(n)));
  if (nl == nullptr) {
    if (static_cast<size_t>(n) == sizeof(line)) {
      ++metrics_.clients_rejected;
      DropClient(fd);
    }
    return;  // partial line: the next bytes raise another edge
  }
  const size_t line_len = static_cast<size_t>(nl - line);
  std::optional<uint32_t> port = ParseConnectLine(std::string_view(line, line_len));
  if (!port) {
    ++metrics_.clients_rejected;
    DropClient(fd);
    return;
  }
  // Consume exactly the line; this cannot block or come up short, the bytes
  // are queued.
  if (::recv(fd, line, line_len + 1, MSG_DONTWAIT) != static_cast<ssize_t>(line_len + 1)) {
    DropClient(fd);
    return;
  }
  auto it = clients_.find(fd);
  ScopedFd owned = std::move(it->second.fd);
  clients_.erase(it);
  if (streams_.size() >= options_.max_connections) {
    ++metrics_.limit_refusals;
    (void)loop_->Remove(fd);
    return;
  }
  StartHostConnect(std::move(owned), *port);
}

std::optional<uint32_t> UnixVsockBackend::AllocateHostPort(uint32_t guest_port) {
  // At most max_connections keys are taken, so this finds one quickly.
  for (size_t attempt = 0; attempt <= options_.max_connections; ++attempt) {
    const uint32_t port = next_host_port_;
    next_host_port_ = port >= 0xfffffffeu ? kFirstHostPort : port + 1;
    if (!streams_.contains(MakeKey(port, guest_port))) return port;
  }
  return std::nullopt;
}

bool UnixVsockBackend::AddStream(Key key, std::unique_ptr<Stream> stream) {
  const int fd = stream->fd.get();
  stream_by_fd_[fd] = key;
  streams_.emplace(key, std::move(stream));
  return true;
}

void UnixVsockBackend::StartHostConnect(ScopedFd fd, uint32_t guest_port) {
  // The fd is already watched (edge-triggered, dispatching by fd).
  const int raw = fd.get();
  std::optional<uint32_t> host_port = AllocateHostPort(guest_port);
  if (!host_port) {
    ++metrics_.limit_refusals;
    (void)loop_->Remove(raw);
    return;
  }
  ++metrics_.host_connects;
  const Key key = MakeKey(*host_port, guest_port);
  auto stream = std::make_unique<Stream>(
      VsockConnection::HostInitiated(options_.connection, *options_.clock, *host_port, guest_port),
      std::move(fd));
  AddStream(key, std::move(stream));
  Service(key);
}

void UnixVsockBackend::QueueRst(const VsockHeader& in) {
  if (pending_rst_.size() >= options_.max_pending_rst) {
    ++metrics_.rst_dropped;
    return;
  }
  VsockPacket rst;
  rst.hdr.src_cid = kVsockHostCid;
  rst.hdr.dst_cid = options_.guest_cid;
  rst.hdr.src_port = in.dst_port;
  rst.hdr.dst_port = in.src_port;
  rst.hdr.type = kVsockTypeStream;
  rst.hdr.op = VsockOp::kRst;
  pending_rst_.push_back(std::move(rst));
}

void UnixVsockBackend::AcceptGuestConnect(const VsockHeader& request) {
  if (streams_.size() >= options_.max_connections) {
    ++metrics_.limit_refusals;
    QueueRst(request);
    return;
  }
  // Guest-controlled: dst_port, only used as a decimal suffix of our path.
  const std::string path = absl::StrCat(options_.path, "_", request.dst_port);
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int rc = -1;
  if (addr.ok() && fd.valid()) {
    do {
      rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
    } while (rc != 0 && errno == EINTR);
  }
  if (rc != 0) {
    // ENOENT / ECONNREFUSED: nobody listens; EAGAIN: its backlog is full.
    ++metrics_.guest_connect_refused;
    QueueRst(request);
    return;
  }
  const int raw = fd.get();
  const Key key = MakeKey(request.dst_port, request.src_port);
  absl::Status s = loop_->Add(raw, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                              [this, raw](uint32_t events) { OnFdEvent(raw, events); });
  if (!s.ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "vsock: cannot watch host socket: {}", s.ToString());
    QueueRst(request);
    return;
  }
  ++metrics_.guest_connects;
  AddStream(key, std::make_unique<Stream>(
                     VsockConnection::GuestInitiated(options_.connection, *options_.clock, request),
                     std::move(fd)));
  Service(key);
}

void UnixVsockBackend::HandleGuestPacket(const VsockPacket& packet) {
  const VsockHeader& hdr = packet.hdr;
  const Key key = MakeKey(hdr.dst_port, hdr.src_port);
  auto it = streams_.find(key);
  if (it == streams_.end()) {
    if (hdr.op == VsockOp::kRequest) {
      AcceptGuestConnect(hdr);
    } else if (hdr.op != VsockOp::kRst) {
      // virtio 1.2 section 5.10.6.4: a packet for no connection gets RST.
      ++metrics_.rst_unknown_stream;
      QueueRst(hdr);
    }
    return;
  }
  it->second->conn.OnGuestPacket(hdr, packet.payload);
  Service(key);
}

void UnixVsockBackend::FlushToHost(Stream& s) {
  while (s.writable) {
    const bool preamble = !s.preamble.empty();
    std::span<const uint8_t> data =
        preamble ? std::span(reinterpret_cast<const uint8_t*>(s.preamble.data()), s.preamble.size())
                 : s.conn.PendingToHost();
    if (data.empty()) return;
    ssize_t n = ::send(s.fd.get(), data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        s.writable = false;  // EPOLLOUT will tell us when the host reads
        return;
      }
      // EPIPE / ECONNRESET: the host side is gone for writing.
      if (preamble) {
        s.conn.Abort();
      } else {
        s.conn.OnHostWriteError();
      }
      s.writable = false;
      return;
    }
    if (preamble) {
      s.preamble.erase(0, static_cast<size_t>(n));
    } else {
      s.conn.OnHostConsumed(static_cast<size_t>(n));
    }
  }
}

void UnixVsockBackend::ReadFromHost(Stream& s) {
  while (s.readable) {
    // Backpressure: read no more than the guest's credit and our buffer
    // allow; the rest waits in the host socket (and then in its sender).
    const size_t budget = std::min(s.conn.HostReadBudget(), read_buf_.size());
    if (budget == 0) return;
    ssize_t n = ::recv(s.fd.get(), read_buf_.data(), budget, MSG_DONTWAIT);
    if (n > 0) {
      s.conn.OnHostData(std::span(read_buf_.data(), static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) {
      s.readable = false;
      s.conn.OnHostEof();
      return;
    }
    if (errno == EINTR) continue;
    s.readable = false;
    if (errno != EAGAIN) s.conn.Abort();
    return;
  }
}

void UnixVsockBackend::Service(Key key) {
  auto it = streams_.find(key);
  if (it == streams_.end()) return;
  Stream& s = *it->second;
  const bool was_closed = s.conn.state() == VsockConnection::State::kClosed;
  if (s.conn.TakeEstablished()) s.preamble = absl::StrCat("OK ", s.conn.host_port(), "\n");
  FlushToHost(s);
  if (s.preamble.empty() && s.conn.WantsHostWriteShutdown()) {
    (void)::shutdown(s.fd.get(), SHUT_WR);
    s.conn.OnHostWriteShutdown();
  }
  if (s.conn.WantsHostReadShutdown()) {
    (void)::shutdown(s.fd.get(), SHUT_RD);
    s.conn.OnHostReadShutdown();
  }
  ReadFromHost(s);
  if (!was_closed && s.conn.state() == VsockConnection::State::kClosed &&
      *s.conn.reset_reason() != '\0') {
    ++metrics_.resets;
    DSEC_LOG_RATELIMITED(info, 5, "vsock: reset cid={} host_port={} guest_port={} reason={}",
                         options_.guest_cid, s.conn.host_port(), s.conn.guest_port(),
                         s.conn.reset_reason());
  }
  if (s.conn.HasRxPacket()) {
    if (!s.queued) {
      s.queued = true;
      ready_.push_back(key);
    }
    return;
  }
  if (s.conn.Finished()) RemoveStream(key);
}

void UnixVsockBackend::RemoveStream(Key key) {
  auto it = streams_.find(key);
  if (it == streams_.end()) return;
  const int fd = it->second->fd.get();
  (void)loop_->Remove(fd);
  stream_by_fd_.erase(fd);
  streams_.erase(it);  // closes the host socket: the client sees EOF
}

bool UnixVsockBackend::HasRxPacket() const {
  if (!pending_rst_.empty()) return true;
  for (Key key : ready_) {
    auto it = streams_.find(key);
    if (it != streams_.end() && it->second->conn.HasRxPacket()) return true;
  }
  return false;
}

std::optional<VsockPacket> UnixVsockBackend::PopRxPacket(uint32_t max_payload) {
  if (!pending_rst_.empty()) {
    VsockPacket p = std::move(pending_rst_.front());
    pending_rst_.pop_front();
    return p;
  }
  // Round robin over streams with output; each is visited at most once per
  // call, so a stream whose data does not fit `max_payload` cannot spin.
  for (size_t visits = ready_.size(); visits > 0 && !ready_.empty(); --visits) {
    const Key key = ready_.front();
    ready_.pop_front();
    auto it = streams_.find(key);
    if (it == streams_.end()) continue;
    it->second->queued = false;
    std::optional<VsockPacket> p = it->second->conn.PopRxPacket(max_payload);
    // Sending may have freed buffer space or finished the stream.
    Service(key);
    if (p) return p;
  }
  return std::nullopt;
}

void UnixVsockBackend::ResetConnections() {
  std::vector<Key> keys;
  keys.reserve(streams_.size());
  for (auto& [key, s] : streams_) keys.push_back(key);
  for (Key key : keys) RemoveStream(key);
  ready_.clear();
  pending_rst_.clear();
}

void UnixVsockBackend::CheckTimeouts() {
  const int64_t now = options_.clock->NowNs();
  std::vector<int> expired;
  for (auto& [fd, client] : clients_) {
    if (now >= client.deadline_ns) expired.push_back(fd);
  }
  for (int fd : expired) {
    ++metrics_.clients_rejected;
    DropClient(fd);
  }
  std::vector<Key> keys;
  for (auto& [key, s] : streams_) {
    if (s->conn.deadline_ns()) keys.push_back(key);
  }
  for (Key key : keys) {
    streams_.at(key)->conn.CheckTimeout();
    Service(key);
  }
  NotifyRx();
}

const VsockConnection* UnixVsockBackend::FindConnection(uint32_t host_port,
                                                        uint32_t guest_port) const {
  auto it = streams_.find(MakeKey(host_port, guest_port));
  return it == streams_.end() ? nullptr : &it->second->conn;
}

}  // namespace dsec::devices
