// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "sandbox/daemon/errors.h"

namespace dsec::daemon {

namespace {

// A chunked body may carry this much framing (chunk sizes, extensions,
// CRLFs, trailers) on top of its limit before it is cut: enough for any
// sane chunk size, too little to make the limit meaningless.
uint64_t ChunkedAllowance(size_t limit) { return limit + limit / 16 + (64u << 10); }

const char* Reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string IpString(const sockaddr_storage& ss, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    *port = ntohs(a->sin_port);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    *port = ntohs(a->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    }
  }
  return buf;
}

}  // namespace

struct ClientTable::Slot::Counts {
  Counts(int per_client, int total) : per_client(per_client), total(total) {}
  const int per_client;
  const int total;
  std::mutex mu;
  std::unordered_map<std::string, int> by_client ABSL_GUARDED_BY(mu);
  int open ABSL_GUARDED_BY(mu) = 0;
};

ClientTable::Slot::~Slot() {
  if (!counts_) return;
  std::lock_guard<std::mutex> lock(counts_->mu);
  counts_->open--;
  auto it = counts_->by_client.find(client_);
  if (it != counts_->by_client.end() && --it->second <= 0) counts_->by_client.erase(it);
}

ClientTable::ClientTable(int per_client, int total)
    : counts_(std::make_shared<Slot::Counts>(per_client, total)) {}

absl::StatusOr<ClientTable::Slot> ClientTable::Admit(const std::string& client) {
  std::lock_guard<std::mutex> lock(counts_->mu);
  if (counts_->open >= counts_->total) {
    return absl::UnavailableError(absl::StrCat("the API holds its maximum of ", counts_->total, " connections"));
  }
  int& mine = counts_->by_client[client];
  if (mine >= counts_->per_client) {
    if (mine == 0) counts_->by_client.erase(client);
    return absl::ResourceExhaustedError(
        absl::StrCat("at most ", counts_->per_client, " open connections per client"));
  }
  mine++;
  counts_->open++;
  Slot s;
  s.counts_ = counts_;
  s.client_ = client;
  return s;
}

int ClientTable::open() const {
  std::lock_guard<std::mutex> lock(counts_->mu);
  return counts_->open;
}

void IdentifyPeer(int fd, Connection& c) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family != AF_UNIX) {
    c.remote_ip = IpString(ss, &c.remote_port);
    c.client = "ip " + c.remote_ip;
    return;
  }
  // Unix socket (mode 0600: root's processes): each process is a client.
  ucred cred{};
  socklen_t clen = sizeof(cred);
  c.client = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 ? absl::StrCat("pid ", cred.pid)
                                                                         : std::string("unix");
}

std::string ErrorResponse(int http_status, const absl::Status& status) {
  const std::string body = ErrorJson(status).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return absl::StrCat("HTTP/1.1 ", http_status, " ", Reason(http_status),
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

void SendNow(int fd, const std::string& bytes) {
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

ConnectionStream::ConnectionStream(Connection& c, StreamLimits limits, int stop_fd)
    : c_(c), limits_(limits), stop_fd_(stop_fd) {
  const RequestHead& h = c.head;
  const uint64_t body = h.chunked ? ChunkedAllowance(c.body_limit) : h.has_length ? h.content_length : 0;
  allowance_ = c.head_len + body;
}

ConnectionStream::~ConnectionStream() { c_.buf.erase(0, pos_); }

bool ConnectionStream::body_consumed() const {
  return !c_.head.chunked && consumed_ >= allowance_;
}

bool ConnectionStream::WaitReadable() {
  while (true) {
    const int64_t now = MonotonicNowNs();
    if (now >= limits_.body_deadline_ns) {
      failure_ = Failure::kBodyDeadline;
      return false;
    }
    const int64_t left_ms = (limits_.body_deadline_ns - now + 999'999) / 1'000'000;
    pollfd p[2] = {{c_.fd.get(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int r = ::poll(p, 2, static_cast<int>(std::min<int64_t>(left_ms, limits_.read_timeout_ms)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p[1].revents & POLLIN) != 0) {
      failure_ = Failure::kStopped;
      return false;
    }
    if (r == 0) {
      // The read timeout (no byte for that long) or the body's deadline.
      failure_ = MonotonicNowNs() >= limits_.body_deadline_ns ? Failure::kBodyDeadline : Failure::kClosed;
      return false;
    }
    return true;
  }
}

bool ConnectionStream::is_readable() const {
  if (pos_ < c_.buf.size()) return true;
  pollfd p{c_.fd.get(), POLLIN, 0};
  return ::poll(&p, 1, limits_.read_timeout_ms) > 0;
}

bool ConnectionStream::is_writable() const {
  if (failure_ != Failure::kNone) return false;
  pollfd p{c_.fd.get(), POLLOUT, 0};
  return ::poll(&p, 1, limits_.write_timeout_ms) > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (failure_ != Failure::kNone) return -1;
  if (consumed_ >= allowance_) {
    // A chunked body past its limit; otherwise this request's end.
    if (c_.head.chunked) {
      failure_ = Failure::kBodyTooLarge;
      return -1;
    }
    return 0;
  }
  size = static_cast<size_t>(std::min<uint64_t>(size, allowance_ - consumed_));
  if (pos_ >= c_.buf.size()) {
    c_.buf.clear();
    pos_ = 0;
    char tmp[16384];
    ssize_t n = -1;
    while (n < 0) {
      if (!WaitReadable()) return -1;
      n = ::recv(c_.fd.get(), tmp, sizeof(tmp), MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
    }
    if (n <= 0) {
      failure_ = Failure::kClosed;
      return -1;
    }
    c_.buf.assign(tmp, static_cast<size_t>(n));
  }
  const size_t n = std::min(size, c_.buf.size() - pos_);
  std::copy_n(c_.buf.data() + pos_, n, ptr);
  pos_ += n;
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (failure_ != Failure::kNone) return -1;
  while (true) {
    pollfd p{c_.fd.get(), POLLOUT, 0};
    const int r = ::poll(&p, 1, limits_.write_timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    const ssize_t n = ::send(c_.fd.get(), ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    return n;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = c_.remote_ip;
  port = c_.remote_port;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  port = 0;
  ip.clear();
  if (::getsockname(c_.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip = IpString(ss, &port);
}

}  // namespace dsec::daemon
