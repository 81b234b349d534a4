// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/server.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/frame_conn.h"
#include "guest-kernel/agent/handlers.h"
#include "guest-kernel/agent/messages.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

// How long a refused or failing connection may take to accept our ERROR.
constexpr int64_t kErrorWriteMs = 1'000;

absl::Status Handshake(const ServerOptions& options, FrameConn& conn, int stop_fd) {
  DSEC_ASSIGN_OR_RETURN(Frame f, conn.Read(DeadlineAfterMs(options.handshake_timeout_ms), stop_fd));
  if (f.type != MsgType::kHello) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol: expected HELLO first, got ", TypeName(f.type)));
  }
  DSEC_ASSIGN_OR_RETURN(Hello hello, Decode<Hello>(f));
  if (hello.version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("protocol: version ", hello.version,
                                                      " is not supported (agent speaks ",
                                                      kProtocolVersion, ")"));
  }
  Hello reply;
  reply.software = "dsec-agent";
  for (const char* cap : kCapabilities) reply.capabilities.push_back(cap);
  if (options.set_clock) reply.capabilities.push_back(kClockCapability);
  if (options.reseed) reply.capabilities.push_back(kEntropyCapability);
  return conn.Write(ToFrame(reply), DeadlineAfterMs(options.write_stall_timeout_ms), stop_fd);
}

// A request a PID 1 hook serves: the hook's error as ERROR, else `done` ({}).
absl::Status AnswerHook(HandlerEnv& env, FrameConn& conn, const absl::Status& s, MsgType done) {
  if (!s.ok()) return SendRequestError(env, conn, s);
  return conn.Write(EmptyFrame(done), env.WriteDeadline(), env.stop_fd);
}

absl::Status HandleNetwork(HandlerEnv& env, FrameConn& conn, const NetworkRequest& request) {
  absl::Status s = env.options.configure_network
                       ? env.options.configure_network(request.net)
                       : absl::FailedPreconditionError("this agent manages no network (it is not a guest's PID 1)");
  return AnswerHook(env, conn, s, MsgType::kNetworkDone);
}

absl::Status HandleClock(HandlerEnv& env, FrameConn& conn, const ClockRequest& request) {
  absl::Status s = env.options.set_clock
                       ? env.options.set_clock(request.unix_ns)
                       : absl::FailedPreconditionError("this agent sets no clock (it is not a guest's PID 1)");
  return AnswerHook(env, conn, s, MsgType::kClockDone);
}

absl::Status HandleEntropy(HandlerEnv& env, FrameConn& conn, const EntropyRequest& request) {
  absl::Status s = env.options.reseed
                       ? env.options.reseed(request.seed)
                       : absl::FailedPreconditionError("this agent reseeds no CRNG (it is not a guest's PID 1)");
  return AnswerHook(env, conn, s, MsgType::kEntropyDone);
}

// Handles one request frame; see handlers.h for the return convention.
absl::Status Dispatch(HandlerEnv& env, FrameConn& conn, const Frame& f) {
  switch (f.type) {
    case MsgType::kExec: {
      DSEC_ASSIGN_OR_RETURN(ExecRequest req, Decode<ExecRequest>(f));
      return HandleExec(env, conn, req);
    }
    case MsgType::kFileRead: {
      DSEC_ASSIGN_OR_RETURN(FileReadRequest req, Decode<FileReadRequest>(f));
      return HandleFileRead(env, conn, req);
    }
    case MsgType::kFileWrite: {
      DSEC_ASSIGN_OR_RETURN(FileWriteRequest req, Decode<FileWriteRequest>(f));
      return HandleFileWrite(env, conn, req);
    }
    case MsgType::kListDir: {
      DSEC_ASSIGN_OR_RETURN(ListDirRequest req, Decode<ListDirRequest>(f));
      return HandleListDir(env, conn, req);
    }
    case MsgType::kWatch: {
      DSEC_ASSIGN_OR_RETURN(WatchRequest req, Decode<WatchRequest>(f));
      return HandleWatch(env, conn, req);
    }
    case MsgType::kNetwork: {
      DSEC_ASSIGN_OR_RETURN(NetworkRequest req, Decode<NetworkRequest>(f));
      return HandleNetwork(env, conn, req);
    }
    case MsgType::kClock: {
      DSEC_ASSIGN_OR_RETURN(ClockRequest req, Decode<ClockRequest>(f));
      return HandleClock(env, conn, req);
    }
    case MsgType::kEntropy: {
      DSEC_ASSIGN_OR_RETURN(EntropyRequest req, Decode<EntropyRequest>(f));
      return HandleEntropy(env, conn, req);
    }
    case MsgType::kPackDiff:
      DSEC_RETURN_IF_ERROR(CheckEmptyObject(f));
      return HandlePackDiff(env, conn);
    case MsgType::kStdin:
    case MsgType::kStdinClose:
    case MsgType::kSignal:
      // Stdin of (or a signal for) a command that has finished: it crossed
      // EXEC_DONE in flight. Dropped.
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("protocol: unexpected ", TypeName(f.type), " frame"));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  int fd = open(options.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(absl::StrCat("open root ", options.root));
  ScopedFd root(fd);
  DSEC_ASSIGN_OR_RETURN(EventFd stop, EventFd::Create(EFD_NONBLOCK));
  return std::unique_ptr<Server>(new Server(std::move(options), std::move(root), std::move(stop)));
}

Server::Server(ServerOptions options, ScopedFd root, EventFd stop)
    : options_(std::move(options)),
      root_(std::move(root)),
      stop_(std::move(stop)),
      launcher_(options_.launcher != nullptr ? options_.launcher : &default_launcher_) {}

Server::~Server() {
  (void)stop_.Signal();
  std::list<ConnThread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (ConnThread& t : threads) t.thread.join();
}

size_t Server::active_connections() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

bool Server::WaitIdle(int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Milliseconds(timeout_ms));
}

void Server::JoinFinished() {
  std::list<ConnThread> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), threads_, it);
      it = next;
    }
  }
  for (ConnThread& t : finished) t.thread.join();
}

void Server::ServeConnection(ScopedFd conn) {
  JoinFinished();
  {
    absl::MutexLock lock(&mu_);
    if (active_ < options_.max_connections) {
      ++active_;
      metrics_.connections.fetch_add(1);
      threads_.emplace_back();
      auto it = std::prev(threads_.end());
      it->thread = std::thread([this, it, fd = conn.Release()] {
        RunConnection(ScopedFd(fd));
        absl::MutexLock done_lock(&mu_);
        it->done = true;
        --active_;
      });
      return;
    }
  }
  metrics_.connections_refused.fetch_add(1);
  FrameConn c(std::move(conn));
  (void)c.Write(ToFrame(ErrorFromStatus(absl::ResourceExhaustedError(
                    absl::StrCat(options_.max_connections, " connections already active")))),
                DeadlineAfterMs(kErrorWriteMs));
}

void Server::RunConnection(ScopedFd fd) {
  // Writing to a command's stdin pipe after it exited raises SIGPIPE for this
  // thread: keep it blocked here (it is discarded with the thread). Children
  // reset their signal mask before exec.
  sigset_t pipe_mask;
  sigemptyset(&pipe_mask);
  sigaddset(&pipe_mask, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_mask, nullptr);

  FrameConn conn(std::move(fd));
  HandlerEnv env{options_, root_.get(), stop_.fd(), *launcher_, active_execs_, metrics_};
  absl::Status status = Handshake(options_, conn, stop_.fd());
  while (status.ok()) {
    absl::StatusOr<Frame> f = conn.Read(kNoDeadline, stop_.fd());
    if (!f.ok()) {
      status = f.status();
      break;
    }
    if (f->type == MsgType::kShutdown) {
      status = CheckEmptyObject(*f);
      if (!status.ok()) break;
      status = conn.Write(EmptyFrame(MsgType::kShutdownAck), env.WriteDeadline(), stop_.fd());
      if (!status.ok()) break;
      // Give the host time to read the ack before the VM powers off: wait
      // for it to close (its Read then fails) or for the linger to pass.
      int64_t linger = DeadlineAfterMs(options_.shutdown_linger_ms);
      while (conn.Read(linger, stop_.fd()).ok()) {
      }
      DSEC_LOG(info, "agent: shutdown requested");
      if (options_.on_shutdown) options_.on_shutdown();
      return;
    }
    status = Dispatch(env, conn, *f);
  }
  if (absl::IsInvalidArgument(status) || absl::IsFailedPrecondition(status)) {
    // A protocol violation: say why, then close this connection only.
    metrics_.protocol_errors.fetch_add(1);
    DSEC_LOG_RATELIMITED(warn, 10, "agent: closing connection: {}", status.ToString());
    (void)conn.Write(ToFrame(ErrorFromStatus(status)), DeadlineAfterMs(kErrorWriteMs), stop_.fd());
  }
}

}  // namespace dsec::agent
