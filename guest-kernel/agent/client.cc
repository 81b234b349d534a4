// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec::agent {

// --- ExecStream -----------------------------------------------------------

ExecStream::~ExecStream() {
  if (!done_) {
    // Abandoned mid-command: the connection is out of step from now on.
    (void)client_->Break(absl::CancelledError("exec abandoned before its end"));
    client_->exec_running_ = false;
  }
}

absl::Status ExecStream::WriteStdin(std::string_view data) {
  DSEC_RETURN_IF_ERROR(client_->Usable());
  if (done_) return absl::FailedPreconditionError("exec: the command has ended");
  while (!data.empty()) {
    size_t n = std::min(data.size(), kDataChunkBytes);
    DSEC_RETURN_IF_ERROR(client_->conn_.Queue(DataFrame(MsgType::kStdin, data.substr(0, n))));
    data.remove_prefix(n);
    // Keep taking output while our stdin waits for room, so that neither
    // side blocks the other.
    absl::Status s = client_->conn_.Flush(client_->IoDeadline(), -1, /*read_while_waiting=*/true);
    if (!s.ok()) return client_->Break(s);
  }
  return absl::OkStatus();
}

absl::Status ExecStream::CloseStdin() {
  DSEC_RETURN_IF_ERROR(client_->Usable());
  if (done_) return absl::OkStatus();
  DSEC_RETURN_IF_ERROR(client_->conn_.Queue(EmptyFrame(MsgType::kStdinClose)));
  absl::Status s = client_->conn_.Flush(client_->IoDeadline(), -1, /*read_while_waiting=*/true);
  return s.ok() ? s : client_->Break(s);
}

absl::Status ExecStream::Signal(int sig) {
  DSEC_RETURN_IF_ERROR(client_->Usable());
  if (done_) return absl::OkStatus();
  if (sig < 1 || sig > 64) return absl::InvalidArgumentError("exec: no such signal");
  DSEC_RETURN_IF_ERROR(client_->conn_.Queue(ToFrame(SignalRequest{sig})));
  absl::Status s = client_->conn_.Flush(client_->IoDeadline(), -1, /*read_while_waiting=*/true);
  return s.ok() ? s : client_->Break(s);
}

absl::StatusOr<ExecEvent> ExecStream::Next(int64_t timeout_ms) {
  DSEC_RETURN_IF_ERROR(client_->Usable());
  if (done_) return absl::FailedPreconditionError("exec: the command has ended");
  const int64_t asked = DeadlineAfterMs(timeout_ms);
  absl::StatusOr<Frame> f;
  for (;;) {
    const int64_t bound = client_->ExecDeadlineAsMonotonic(deadline_ns_);
    f = client_->conn_.Read(std::min(asked, bound));
    if (f.ok() || !absl::IsDeadlineExceeded(f.status())) break;
    // A deadline of our caller's choosing leaves the stream intact; the
    // exec's own bound or any other error does not. The bound's clock may
    // have stood still meanwhile (a paused sandbox): then it is further.
    if (asked < bound) return f.status();
    if (client_->ExecClockNs() >= deadline_ns_) break;
  }
  if (!f.ok()) return client_->Break(f.status());
  ExecEvent ev;
  if (f->type == MsgType::kOutput) {
    OutputChunk chunk;
    absl::Status s = FromFrame(*f, &chunk);
    if (!s.ok()) return client_->Break(s);
    ev.kind = ExecEvent::Kind::kOutput;
    ev.stream = chunk.stream;
    ev.data = std::move(chunk.data);
    return ev;
  }
  if (f->type == MsgType::kExecDone) {
    absl::Status s = FromFrame(*f, &ev.done);
    if (!s.ok()) return client_->Break(s);
    ev.kind = ExecEvent::Kind::kDone;
    done_ = true;
    client_->exec_running_ = false;
    return ev;
  }
  return client_->Break(absl::InvalidArgumentError(
      absl::StrCat("protocol: unexpected ", TypeName(f->type), " during exec")));
}

absl::StatusOr<ExecDone> ExecStream::Wait(const OutputCallback& on_chunk) {
  for (;;) {
    DSEC_ASSIGN_OR_RETURN(ExecEvent ev, Next(-1));
    if (ev.kind == ExecEvent::Kind::kDone) return ev.done;
    if (on_chunk) on_chunk(ev.stream, ev.data);
  }
}

// --- Client ---------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ScopedFd fd, ClientOptions options) {
  std::unique_ptr<Client> c(new Client(FrameConn(std::move(fd)), options));
  Hello hello;
  hello.software = "dsec-host";
  DSEC_RETURN_IF_ERROR(c->Send(ToFrame(hello)));
  DSEC_ASSIGN_OR_RETURN(Frame f, c->Receive(c->IoDeadline()));
  if (f.type != MsgType::kHello) return c->Unexpected(f, MsgType::kHello);
  absl::Status s = FromFrame(f, &c->agent_hello_);
  if (!s.ok()) return s;
  if (c->agent_hello_.version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("agent speaks protocol version ",
                                                      c->agent_hello_.version, ", we speak ",
                                                      kProtocolVersion));
  }
  return c;
}

absl::Status Client::Usable() const {
  if (broken_) return absl::FailedPreconditionError("agent client: connection is broken");
  return absl::OkStatus();
}

absl::Status Client::Break(absl::Status status) {
  broken_ = true;
  return status;
}

absl::Status Client::Send(const Frame& frame) {
  DSEC_RETURN_IF_ERROR(Usable());
  if (exec_running_) return absl::FailedPreconditionError("agent client: a command is running");
  if (watching_) return absl::FailedPreconditionError("agent client: the connection holds a watch");
  absl::Status s = conn_.Write(frame, IoDeadline());
  return s.ok() ? s : Break(s);
}

int64_t Client::ExecClockNs() const {
  return options_.exec_clock != nullptr ? options_.exec_clock->NowNs() : MonotonicNowNs();
}

int64_t Client::ExecDeadlineAfterMs(int64_t ms) const {
  if (ms < 0) return kNoDeadline;
  const int64_t now = ExecClockNs();
  if (ms > (kNoDeadline - now) / 1'000'000) return kNoDeadline;
  return now + ms * 1'000'000;
}

int64_t Client::ExecDeadlineAsMonotonic(int64_t exec_deadline_ns) const {
  if (exec_deadline_ns == kNoDeadline) return kNoDeadline;
  if (options_.exec_clock == nullptr) return exec_deadline_ns;
  const int64_t left = exec_deadline_ns - ExecClockNs();
  const int64_t now = MonotonicNowNs();
  if (left <= 0) return now;
  // At least 100 ms: while that clock stands still, a bound nearly reached
  // is waited for in steps of that, not of a millisecond; a bound of a
  // timeout plus its grace is not the worse for being seen 100 ms late.
  const int64_t wait = std::max<int64_t>(left, 100'000'000);
  return wait > kNoDeadline - now ? kNoDeadline : now + wait;
}

absl::StatusOr<Frame> Client::Receive(int64_t deadline_ns) {
  absl::StatusOr<Frame> f = conn_.Read(deadline_ns);
  if (!f.ok()) return Break(f.status());
  return f;
}

absl::Status Client::Unexpected(const Frame& frame, MsgType wanted) {
  if (frame.type == MsgType::kError) {
    ErrorMsg err;
    absl::Status s = FromFrame(frame, &err);
    if (!s.ok()) return Break(s);
    return StatusFromError(err);
  }
  return Break(absl::InvalidArgumentError(
      absl::StrCat("protocol: expected ", TypeName(wanted), ", got ", TypeName(frame.type))));
}

absl::StatusOr<std::unique_ptr<ExecStream>> Client::StartExec(const ExecRequest& request) {
  for (const auto& [k, v] : request.env) {
    if (!IsValidUtf8(k) || k.empty() || k.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("exec: invalid environment key ", k));
    }
  }
  DSEC_RETURN_IF_ERROR(Send(ToFrame(request)));
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kExecStarted) return Unexpected(f, MsgType::kExecStarted);
  ExecStarted started;
  absl::Status s = FromFrame(f, &started);
  if (!s.ok()) return Break(s);
  int64_t deadline = request.timeout_ms == 0
                         ? ExecDeadlineAfterMs(options_.untimed_exec_wait_ms)
                         : ExecDeadlineAfterMs(static_cast<int64_t>(
                                               std::min<uint64_t>(request.timeout_ms, 1ull << 40)) +
                                           options_.exec_grace_ms);
  exec_running_ = true;
  return std::unique_ptr<ExecStream>(new ExecStream(this, started.pid, deadline));
}

absl::StatusOr<ExecDone> Client::Exec(const ExecRequest& request, const OutputCallback& on_chunk,
                                      std::string_view stdin_data) {
  if (!request.stdin && !stdin_data.empty()) {
    return absl::InvalidArgumentError("exec: stdin data without request.stdin");
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<ExecStream> stream, StartExec(request));
  if (request.stdin) {
    DSEC_RETURN_IF_ERROR(stream->WriteStdin(stdin_data));
    DSEC_RETURN_IF_ERROR(stream->CloseStdin());
  }
  return stream->Wait(on_chunk);
}

absl::StatusOr<std::string> Client::ReadFile(const std::string& path, uint64_t max_bytes,
                                             FileReadDone* info) {
  FileReadRequest req;
  req.path = path;
  req.max_bytes = max_bytes;
  DSEC_RETURN_IF_ERROR(Send(ToFrame(req)));
  std::string data;
  for (;;) {
    DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
    if (f.type == MsgType::kData) {
      if (f.payload.size() > max_bytes - data.size()) {
        return Break(absl::InvalidArgumentError("protocol: FILE_READ sent more than max_bytes"));
      }
      data += f.payload;
      continue;
    }
    if (f.type != MsgType::kFileReadDone) return Unexpected(f, MsgType::kFileReadDone);
    FileReadDone done;
    absl::Status s = FromFrame(f, &done);
    if (!s.ok()) return Break(s);
    if (done.bytes != data.size()) {
      return Break(absl::InvalidArgumentError("protocol: FILE_READ_DONE byte count mismatch"));
    }
    if (info != nullptr) *info = done;
    return data;
  }
}

absl::Status Client::WriteFile(const std::string& path, std::string_view data, uint32_t mode) {
  FileWriteRequest req;
  req.path = path;
  req.mode = mode;
  req.size = data.size();
  DSEC_RETURN_IF_ERROR(Send(ToFrame(req)));
  while (!data.empty()) {
    size_t n = std::min(data.size(), kDataChunkBytes);
    DSEC_RETURN_IF_ERROR(Send(DataFrame(MsgType::kData, data.substr(0, n))));
    data.remove_prefix(n);
  }
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kFileWriteDone) return Unexpected(f, MsgType::kFileWriteDone);
  FileWriteDone done;
  absl::Status s = FromFrame(f, &done);
  if (!s.ok()) return Break(s);
  if (done.bytes != req.size) {
    return Break(absl::InvalidArgumentError("protocol: FILE_WRITE_DONE byte count mismatch"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DirEntry>> Client::ListDir(const std::string& path) {
  ListDirRequest req;
  req.path = path;
  DSEC_RETURN_IF_ERROR(Send(ToFrame(req)));
  std::vector<DirEntry> out;
  for (;;) {
    DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
    if (f.type != MsgType::kDirEntries) return Unexpected(f, MsgType::kDirEntries);
    DirEntries part;
    absl::Status s = FromFrame(f, &part);
    if (!s.ok()) return Break(s);
    for (DirEntry& e : part.entries) out.push_back(std::move(e));
    if (part.last) return out;
  }
}

// Feeds the pack_diff stream from the connection to MaterializeDiff and
// remembers whether the stream reached its end.
class ClientFrameSource : public FrameSource {
 public:
  explicit ClientFrameSource(Client* client) : client_(client) {}
  absl::StatusOr<Frame> NextFrame() override {
    DSEC_ASSIGN_OR_RETURN(Frame f, client_->Receive(client_->IoDeadline()));
    ended_ = f.type == MsgType::kDiffEnd || f.type == MsgType::kError;
    return f;
  }
  bool ended() const { return ended_; }

 private:
  Client* const client_;
  bool ended_ = false;
};

absl::StatusOr<DiffStats> Client::PackDiff(const std::string& dest_dir,
                                           const MaterializeOptions& options) {
  DSEC_RETURN_IF_ERROR(Send(EmptyFrame(MsgType::kPackDiff)));
  ClientFrameSource source(this);
  absl::StatusOr<DiffStats> stats = MaterializeDiff(source, dest_dir, options);
  // If we stopped before the stream's end, the rest of it is still coming.
  if (!stats.ok() && !source.ended()) return Break(stats.status());
  return stats;
}

absl::Status Client::ConfigureNetwork(const std::string& net) {
  NetworkRequest req;
  req.net = net;
  DSEC_RETURN_IF_ERROR(Send(ToFrame(req)));
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kNetworkDone) return Unexpected(f, MsgType::kNetworkDone);
  return CheckEmptyObject(f);
}

absl::StatusOr<uint64_t> Client::Watch(const WatchRequest& request) {
  DSEC_RETURN_IF_ERROR(Send(ToFrame(request)));
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kWatchStarted) return Unexpected(f, MsgType::kWatchStarted);
  WatchStarted started;
  absl::Status s = FromFrame(f, &started);
  if (!s.ok()) return Break(s);
  watching_ = true;
  return started.dirs;
}

absl::StatusOr<std::vector<FileEvent>> Client::NextWatchEvents(int64_t timeout_ms) {
  if (!watch_end_.ok()) {
    absl::Status end = std::move(watch_end_);
    watch_end_ = absl::OkStatus();
    return end;
  }
  DSEC_RETURN_IF_ERROR(Usable());
  if (!watching_) return absl::FailedPreconditionError("agent client: no watch runs on this connection");
  // The first frame within the caller's time, then every one that is here
  // already ("the changes since the last call", as a local inotify read
  // gives them), up to a bound per call.
  constexpr size_t kMaxEventsPerCall = 16384;
  std::vector<FileEvent> out;
  bool first = true;
  while (out.size() < kMaxEventsPerCall) {
    absl::StatusOr<std::optional<Frame>> f;
    if (first && timeout_ms != 0) {
      absl::StatusOr<Frame> waited = conn_.Read(timeout_ms < 0 ? kNoDeadline : DeadlineAfterMs(timeout_ms));
      if (waited.ok()) {
        f = std::optional<Frame>(*std::move(waited));
      } else if (absl::IsDeadlineExceeded(waited.status())) {
        f = std::optional<Frame>();
      } else {
        f = waited.status();
      }
    } else {
      f = conn_.ReadReady();
    }
    first = false;
    if (!f.ok()) {
      absl::Status broken = Break(f.status());
      if (out.empty()) return broken;
      break;  // the events first; the next call finds the client broken
    }
    if (!f->has_value()) break;  // none (more) in time
    const Frame& frame = **f;
    if (frame.type != MsgType::kWatchEvents) {
      // The watch's end: its ERROR (the connection serves requests again),
      // or a frame out of step; said after the events before it.
      watching_ = false;
      absl::Status end = Unexpected(frame, MsgType::kWatchEvents);
      if (out.empty()) return end;
      watch_end_ = std::move(end);
      break;
    }
    WatchEvents events;
    absl::Status s = FromFrame(frame, &events);
    if (!s.ok()) return Break(s);
    out.insert(out.end(), std::make_move_iterator(events.events.begin()),
               std::make_move_iterator(events.events.end()));
  }
  return out;
}

absl::Status Client::SetClock(int64_t unix_ns) {
  ClockRequest req;
  req.unix_ns = unix_ns;
  DSEC_RETURN_IF_ERROR(Send(ToFrame(req)));
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kClockDone) return Unexpected(f, MsgType::kClockDone);
  return CheckEmptyObject(f);
}

absl::Status Client::Reseed(const std::string& seed) {
  EntropyRequest req;
  req.seed = seed;
  DSEC_RETURN_IF_ERROR(Send(ToFrame(req)));
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kEntropyDone) return Unexpected(f, MsgType::kEntropyDone);
  return CheckEmptyObject(f);
}

absl::Status Client::Shutdown() {
  DSEC_RETURN_IF_ERROR(Send(EmptyFrame(MsgType::kShutdown)));
  DSEC_ASSIGN_OR_RETURN(Frame f, Receive(IoDeadline()));
  if (f.type != MsgType::kShutdownAck) return Unexpected(f, MsgType::kShutdownAck);
  // Closing lets the agent stop lingering and power off at once.
  conn_.Shutdown(SHUT_RDWR);
  broken_ = true;
  return absl::OkStatus();
}

// --- Connecting -------------------------------------------------------------

absl::StatusOr<ScopedFd> ConnectUnix(const std::string& path, int64_t timeout_ms) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  ScopedFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus("socket");
  // A unix connect blocks only while the listener's backlog is full, and
  // honours SO_SNDTIMEO.
  timeval tv = {static_cast<time_t>(timeout_ms / 1000),
                static_cast<suseconds_t>((timeout_ms % 1000) * 1000)};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  for (;;) {
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EINPROGRESS) {
      return absl::DeadlineExceededError(absl::StrCat("connect ", path, ": timed out"));
    }
    if (errno == ECONNREFUSED || errno == ENOENT) {
      return absl::UnavailableError(absl::StrCat("connect ", path, ": ", std::strerror(errno)));
    }
    return ErrnoToStatus(absl::StrCat("connect ", path));
  }
  timeval zero = {};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof(zero));
  return fd;
}

absl::StatusOr<ScopedFd> ConnectVsockUnix(const std::string& socket_path, uint32_t port,
                                          int64_t timeout_ms) {
  const int64_t deadline = DeadlineAfterMs(timeout_ms);
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, ConnectUnix(socket_path, timeout_ms));
  std::string line = absl::StrCat("CONNECT ", port, "\n");
  size_t off = 0;
  while (off < line.size()) {
    DSEC_RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline).status());
    ssize_t n = send(fd.get(), line.data() + off, line.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoToStatus("vsock: send CONNECT");
    }
    off += static_cast<size_t>(n);
  }
  // Byte by byte: everything after the newline belongs to the stream.
  std::string reply;
  for (;;) {
    absl::StatusOr<short> ready = WaitFd(fd.get(), POLLIN, deadline);
    if (!ready.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("vsock: no answer to CONNECT ", port, " on ", socket_path));
    }
    char c;
    ssize_t n = recv(fd.get(), &c, 1, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoToStatus("vsock: read CONNECT reply");
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat("vsock: port ", port, " on ", socket_path,
                                                 " refused the connection (no listener?)"));
    }
    if (c == '\n') break;
    reply += c;
    if (reply.size() > 64) return absl::InternalError("vsock: CONNECT reply too long");
  }
  if (reply.rfind("OK ", 0) != 0) {
    return absl::UnavailableError(
        absl::StrCat("vsock: CONNECT ", port, " answered \"", reply, "\""));
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<Client>> ConnectVsock(const std::string& socket_path, uint32_t port,
                                                     ClientOptions options) {
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, ConnectVsockUnix(socket_path, port, options.io_timeout_ms));
  return Client::Connect(std::move(fd), options);
}

}  // namespace dsec::agent
