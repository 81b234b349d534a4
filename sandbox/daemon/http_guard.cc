// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/http_guard.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::daemon {

namespace {

// How long an answered connection that is being closed may still send
// (its unread body) before it is cut: closing with unread bytes would
// reset the connection and could destroy the answer before the client
// reads it (RFC 9112 section 9.6).
constexpr int64_t kDrainNs = 2'000'000'000;
// Deadlines are checked this often (so they hold to within this).
constexpr int64_t kSweepNs = 100'000'000;

int64_t MsToNs(int ms) { return int64_t{ms} * 1'000'000; }

}  // namespace

std::string GuardMetrics::Text() const {
  return absl::StrCat(
      "# TYPE dsec_http_refused_connections_total counter\n",
      "dsec_http_refused_connections_total{reason=\"client_cap\"} ", refused_client_cap.load(), "\n",
      "dsec_http_refused_connections_total{reason=\"total_cap\"} ", refused_total_cap.load(), "\n",
      "# TYPE dsec_http_cut_requests_total counter\n",
      "dsec_http_cut_requests_total{reason=\"head_deadline\"} ", head_deadline.load(), "\n",
      "dsec_http_cut_requests_total{reason=\"body_deadline\"} ", body_deadline.load(), "\n",
      "dsec_http_cut_requests_total{reason=\"bad_head\"} ", bad_head.load(), "\n",
      "dsec_http_cut_requests_total{reason=\"body_too_large\"} ", body_too_large.load(), "\n");
}

absl::StatusOr<std::unique_ptr<GuardedServer>> GuardedServer::Create(GuardOptions options,
                                                                     std::shared_ptr<GuardMetrics> metrics) {
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<EventLoop> loop, EventLoop::Create());
  DSEC_ASSIGN_OR_RETURN(EventFd stop, EventFd::Create());
  std::unique_ptr<GuardedServer> s(
      new GuardedServer(std::move(options), std::move(metrics), std::move(loop), std::move(stop)));
  GuardedServer* raw = s.get();
  const size_t threads = static_cast<size_t>(s->options_.threads);
  s->new_task_queue = [raw, threads] {
    auto* pool = new httplib::ThreadPool(threads);
    raw->pool_.store(pool);
    return pool;
  };
  DSEC_ASSIGN_OR_RETURN(int timer, s->loop_->AddTimer(kSweepNs, kSweepNs, [raw] { raw->Sweep(); }));
  (void)timer;
  s->loop_thread_ = std::thread([raw] {
    if (absl::Status st = raw->loop_->Run(); !st.ok()) DSEC_LOG(err, "http guard: {}", st.ToString());
  });
  return s;
}

GuardedServer::GuardedServer(GuardOptions options, std::shared_ptr<GuardMetrics> metrics,
                             std::unique_ptr<EventLoop> loop, EventFd stop)
    : options_(std::move(options)),
      metrics_(std::move(metrics)),
      clients_(options_.max_connections_per_client, options_.max_connections),
      loop_(std::move(loop)),
      stop_(std::move(stop)) {}

GuardedServer::~GuardedServer() { Shutdown(); }

void GuardedServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  (void)stop_.Signal();
  loop_->Stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  conns_.clear();  // the loop no longer runs: this thread owns the map
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_shared<Connection>();
  c->fd = ScopedFd(sock);
  IdentifyPeer(sock, *c);
  if (stopping_) return false;
  auto slot = clients_.Admit(c->client);
  if (!slot.ok()) {
    const bool per_client = absl::IsResourceExhausted(slot.status());
    (per_client ? metrics_->refused_client_cap : metrics_->refused_total_cap)++;
    DSEC_LOG_RATELIMITED(warn, 1, "http: refused a connection of {}: {}", c->client, std::string(slot.status().message()));
    // What has arrived is read first, so that closing sends FIN, not RST.
    char sink[16384];
    for (int i = 0; i < 4 && ::recv(sock, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
    }
    SendNow(sock, ErrorResponse(per_client ? 429 : 503, slot.status()));
    ::shutdown(sock, SHUT_WR);
    return false;
  }
  c->slot = std::move(*slot);
  // Idle until its first byte, like a kept-alive connection: clients open
  // connections ahead of their requests, and an idle connection is closed
  // without an answer (a 408 there would be read as the answer to the
  // request the client sends next).
  c->state = Connection::State::kIdle;
  ToGuard(std::move(c), /*drain=*/false);
  return true;
}

void GuardedServer::ToGuard(std::shared_ptr<Connection> c, bool drain) {
  if (stopping_) return;  // closed with `c`
  if (drain) {
    Drain(*c);
  } else {
    c->state = Connection::State::kIdle;
    c->deadline_ns = MonotonicNowNs() + MsToNs(options_.keep_alive_timeout_ms);
  }
  loop_->Post([this, c] {
    Register(c);
    if (c->state != Connection::State::kDrain) Examine(c);  // a pipelined request may be here already
  });
}

void GuardedServer::Register(std::shared_ptr<Connection> c) {
  const int fd = c->fd.get();
  if (absl::Status s = loop_->Add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t) { OnEvent(fd); }); !s.ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "http guard: {}", s.ToString());
    return;
  }
  conns_[fd] = std::move(c);
}

void GuardedServer::OnEvent(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  std::shared_ptr<Connection> c = it->second;
  char tmp[16384];
  while (true) {
    size_t room = sizeof(tmp);
    if (c->state != Connection::State::kDrain) {
      // A head is kept whole; one byte past the cap says it is too long.
      const size_t cap = options_.max_head_bytes + 1;
      room = c->buf.size() >= cap ? 0 : std::min(room, cap - c->buf.size());
      if (room == 0) break;
    }
    const ssize_t n = ::recv(fd, tmp, room, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return Close(fd);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (c->state != Connection::State::kDrain) c->buf.append(tmp, static_cast<size_t>(n));
  }
  if (c->state != Connection::State::kDrain) Examine(c);
}

void GuardedServer::Examine(const std::shared_ptr<Connection>& c) {
  if (c->buf.empty()) return;
  if (c->state == Connection::State::kIdle) {
    c->state = Connection::State::kHead;
    c->deadline_ns = MonotonicNowNs() + MsToNs(options_.header_timeout_ms);
  }
  const size_t end = FindHeadEnd(c->buf);
  if (end == absl::string_view::npos) {
    if (c->buf.size() > options_.max_head_bytes) {
      metrics_->bad_head++;
      Refuse(c, 431, absl::ResourceExhaustedError(
                         absl::StrCat("the request head is over ", options_.max_head_bytes, " bytes")));
    }
    return;
  }
  auto head = ParseRequestHead(absl::string_view(c->buf).substr(0, end));
  if (!head.ok()) {
    metrics_->bad_head++;
    return Refuse(c, absl::IsResourceExhausted(head.status()) ? 431 : 400, head.status());
  }
  const size_t limit = options_.body_limit ? options_.body_limit(*head) : BodyLimitFor(*head, options_.body);
  if (head->has_length && head->content_length > limit) {
    metrics_->body_too_large++;
    return Refuse(c, 413, absl::ResourceExhaustedError(absl::StrCat("request body of ", head->content_length,
                                                                     " bytes: over the ", limit, "-byte limit")));
  }
  c->head = std::move(*head);
  c->head_len = end;
  c->body_limit = limit;
  httplib::TaskQueue* pool = pool_.load();
  const int fd = c->fd.get();
  (void)loop_->Remove(fd);
  std::shared_ptr<Connection> taken = std::move(conns_[fd]);
  conns_.erase(fd);
  if (pool == nullptr) return;  // not listening: closed
  pool->enqueue([this, taken] { Serve(taken); });
}

void GuardedServer::Serve(std::shared_ptr<Connection> c) {
  c->requests++;
  // A chunked body cannot be told to have ended unless httplib read it all:
  // its connection carries no further request.
  const bool last = c->requests >= options_.max_requests_per_connection || c->head.chunked;
  ConnectionStream::Failure failure;
  bool keep = false;
  {
    StreamLimits limits;
    limits.body_deadline_ns = MonotonicNowNs() + MsToNs(options_.body_timeout_ms);
    limits.read_timeout_ms = options_.read_timeout_ms;
    limits.write_timeout_ms = options_.write_timeout_ms;
    ConnectionStream strm(*c, limits, stop_.fd());
    bool closed = false;
    // Ranges are the files handler's (http_server.cc): httplib would apply
    // any number of them to any answer, error bodies included.
    const bool ok = process_request(strm, last, closed, [](httplib::Request& req) { req.ranges.clear(); });
    failure = strm.failure();
    keep = ok && !closed && !last && failure == ConnectionStream::Failure::kNone && strm.body_consumed();
  }
  switch (failure) {
    case ConnectionStream::Failure::kBodyDeadline:
      metrics_->body_deadline++;
      SendNow(c->fd.get(),
              ErrorResponse(408, absl::DeadlineExceededError(absl::StrCat(
                                     "the request body did not come within ", options_.body_timeout_ms, " ms"))));
      break;
    case ConnectionStream::Failure::kBodyTooLarge:
      metrics_->body_too_large++;
      SendNow(c->fd.get(), ErrorResponse(413, absl::ResourceExhaustedError(absl::StrCat(
                                                  "request body over the ", c->body_limit, "-byte limit"))));
      break;
    case ConnectionStream::Failure::kStopped:
      return;  // closed with `c`
    default:
      break;
  }
  ToGuard(std::move(c), /*drain=*/!keep);
}

void GuardedServer::Refuse(const std::shared_ptr<Connection>& c, int http_status, const absl::Status& status) {
  DSEC_LOG_RATELIMITED(info, 1, "http: refused a request of {}: {} {}", c->client, http_status, std::string(status.message()));
  SendNow(c->fd.get(), ErrorResponse(http_status, status));
  Drain(*c);
}

void GuardedServer::Drain(Connection& c) {
  ::shutdown(c.fd.get(), SHUT_WR);
  c.state = Connection::State::kDrain;
  c.buf.clear();
  c.buf.shrink_to_fit();
  c.deadline_ns = MonotonicNowNs() + kDrainNs;
}

void GuardedServer::Close(int fd) {
  (void)loop_->Remove(fd);
  conns_.erase(fd);
}

void GuardedServer::Sweep() {
  const int64_t now = MonotonicNowNs();
  std::vector<int> expired;
  for (const auto& [fd, c] : conns_) {
    if (c->deadline_ns <= now) expired.push_back(fd);
  }
  for (int fd : expired) {
    std::shared_ptr<Connection> c = conns_[fd];
    if (c->state == Connection::State::kHead) {
      metrics_->head_deadline++;
      Refuse(c, 408, absl::DeadlineExceededError(absl::StrCat("the request head did not come within ",
                                                               options_.header_timeout_ms, " ms")));
    } else {
      Close(fd);  // idle past the keep-alive timeout, or drained
    }
  }
}

}  // namespace dsec::daemon
