// SPDX-License-Identifier: Apache-2.0
#include "bench/net_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/clone3.h"
#include "base/status.h"

namespace dsec::bench::net {
namespace {

constexpr size_t kChunk = 256 << 10;
constexpr int64_t kSecond = 1'000'000'000;

// What a child reports last (after its samples): the stage it stopped at
// and the errno there; stage kDone when all went well.
enum Stage : int32_t { kDone = 0, kCgroup, kSetns, kSocket, kConnect, kWrite };
struct Trailer {
  int32_t stage = kDone;
  int32_t err = 0;
};

const char* StageName(int32_t stage) {
  switch (stage) {
    case kCgroup: return "join the cgroup";
    case kSetns: return "enter the network namespace";
    case kSocket: return "socket";
    case kConnect: return "connect";
    case kWrite: return "write";
    default: return "?";
  }
}

// Whole buffer or nothing (a pipe, in the child).
bool WriteAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// In the child: the cgroup first (so the sockets belong to it), then the
// namespace. Only system calls.
Trailer EnterPlace(const char* procs, int netns_fd) {
  ScopedFd f(::open(procs, O_WRONLY | O_CLOEXEC));
  if (!f.valid() || ::write(f.get(), "0", 1) != 1) return {kCgroup, errno};
  if (::setns(netns_fd, CLONE_NEWNET) != 0) return {kSetns, errno};
  return {};
}

// A forked child, killed and reaped if still there when this goes.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Forks; in the child, runs `body` and _exit()s with its result.
  template <typename Body>
  absl::Status Start(Body body) {
    int pidfd = -1;
    long pid = Clone3(0, &pidfd);
    if (pid < 0) return ErrnoStatus("clone3");
    if (pid == 0) ::_exit(body());
    pid_ = static_cast<pid_t>(pid);
    pidfd_.Reset(pidfd);
    return absl::OkStatus();
  }
  // Its exit status, waiting until `deadline_ns` (CLOCK_MONOTONIC).
  absl::StatusOr<int> Wait(int64_t deadline_ns) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    const int64_t left_ms = std::max<int64_t>(0, (deadline_ns - MonotonicNowNs()) / 1'000'000);
    if (::poll(&p, 1, static_cast<int>(left_ms)) <= 0) return absl::DeadlineExceededError("client child hangs");
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_) return ErrnoStatus("waitpid");
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  ScopedFd pidfd_;
};

absl::StatusOr<std::pair<ScopedFd, ScopedFd>> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  return std::make_pair(ScopedFd(fds[0]), ScopedFd(fds[1]));
}

absl::StatusOr<sockaddr_in> Address(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", address));
  }
  return a;
}

void SetTimeout(int fd, int option, int seconds) {
  timeval tv{seconds, 0};
  (void)::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

// The child's trailer from the end of what it sent, as a Status.
absl::Status CheckTrailer(const std::string& report, int exit_code) {
  Trailer t;
  if (report.size() < sizeof(t)) {
    return absl::InternalError(absl::StrCat("client child exited ", exit_code, " without a report"));
  }
  memcpy(&t, report.data() + report.size() - sizeof(t), sizeof(t));
  if (t.stage != kDone) {
    return ErrnoToStatus(absl::StrCat("client child: ", StageName(t.stage)), t.err);
  }
  if (exit_code != 0) return absl::InternalError(absl::StrCat("client child exited ", exit_code));
  return absl::OkStatus();
}

// Accepts and closes every pending connection of a non-blocking listener.
void DrainAccepts(int listener) {
  for (;;) {
    ScopedFd c(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!c.valid()) return;
  }
}

}  // namespace

absl::StatusOr<ScopedFd> ListenIn(int netns_fd, const std::string& address, int* port) {
  DSEC_ASSIGN_OR_RETURN(sockaddr_in a, Address(address, 0));
  ScopedFd fd;
  absl::Status status;
  std::thread([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      status = ErrnoStatus("setns");
      return;
    }
    fd.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      status = ErrnoStatus("socket");
      return;
    }
    const int one = 1;
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t len = sizeof(a);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
      status = ErrnoStatus(absl::StrCat("bind ", address));
    } else if (::listen(fd.get(), 4096) != 0) {
      status = ErrnoStatus("listen");
    } else if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      status = ErrnoStatus("getsockname");
    }
  }).join();
  DSEC_RETURN_IF_ERROR(status);
  *port = ntohs(a.sin_port);
  return fd;
}

absl::StatusOr<std::vector<ConnectSample>> ConnectLoop(const ClientPlace& place, int listener,
                                                       const std::string& address, int port,
                                                       int iterations) {
  DSEC_ASSIGN_OR_RETURN(sockaddr_in target, Address(address, port));
  DSEC_ASSIGN_OR_RETURN(auto pipe, MakePipe());
  // Everything the child touches exists before the fork.
  std::vector<ConnectSample> samples(static_cast<size_t>(iterations));
  const std::string procs = place.cgroup_dir + "/cgroup.procs";
  const int netns = place.netns_fd, out = pipe.second.get();
  Child child;
  DSEC_RETURN_IF_ERROR(child.Start([&]() -> int {
    Trailer t = EnterPlace(procs.c_str(), netns);
    for (size_t i = 0; t.stage == kDone && i < samples.size(); ++i) {
      ScopedFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!s.valid()) {
        t = {kSocket, errno};
        break;
      }
      SetTimeout(s.get(), SO_SNDTIMEO, 2);  // bounds a connect that would retry
      const int64_t t0 = MonotonicNowNs();
      const int r = ::connect(s.get(), reinterpret_cast<const sockaddr*>(&target), sizeof(target));
      const int err = r == 0 ? 0 : errno;
      s.Reset();
      samples[i] = {MonotonicNowNs() - t0, err};
    }
    if (t.stage == kDone && !WriteAll(out, samples.data(), samples.size() * sizeof(ConnectSample))) {
      return 1;
    }
    return WriteAll(out, &t, sizeof(t)) && t.stage == kDone ? 0 : 1;
  }));
  pipe.second.Reset();
  std::string report;
  const int64_t deadline = MonotonicNowNs() + 60 * kSecond + int64_t{iterations} * 2 * kSecond;
  char buf[64 << 10];
  for (;;) {
    pollfd p[2] = {{pipe.first.get(), POLLIN, 0}, {listener, POLLIN, 0}};
    const int n = ::poll(p, listener >= 0 ? 2 : 1, 1000);
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll");
    if (MonotonicNowNs() > deadline) return absl::DeadlineExceededError("connect loop hangs");
    if (listener >= 0 && (p[1].revents & POLLIN)) DrainAccepts(listener);
    if (p[0].revents & (POLLIN | POLLHUP)) {
      const ssize_t r = ::read(pipe.first.get(), buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus("read the child's report");
      if (r == 0) break;
      report.append(buf, static_cast<size_t>(r));
    }
  }
  if (listener >= 0) DrainAccepts(listener);
  DSEC_ASSIGN_OR_RETURN(int code, child.Wait(MonotonicNowNs() + 10 * kSecond));
  DSEC_RETURN_IF_ERROR(CheckTrailer(report, code));
  if (report.size() != samples.size() * sizeof(ConnectSample) + sizeof(Trailer)) {
    return absl::InternalError("client child's report is cut short");
  }
  memcpy(samples.data(), report.data(), samples.size() * sizeof(ConnectSample));
  return samples;
}

absl::StatusOr<BulkResult> BulkTransfer(const ClientPlace& place, int listener, const std::string& address,
                                        int port, uint64_t bytes) {
  DSEC_ASSIGN_OR_RETURN(sockaddr_in target, Address(address, port));
  DSEC_ASSIGN_OR_RETURN(auto pipe, MakePipe());
  std::vector<char> chunk(kChunk, 'x');
  const std::string procs = place.cgroup_dir + "/cgroup.procs";
  const int netns = place.netns_fd, out = pipe.second.get();
  Child child;
  DSEC_RETURN_IF_ERROR(child.Start([&]() -> int {
    Trailer t = EnterPlace(procs.c_str(), netns);
    if (t.stage == kDone) {
      ScopedFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!s.valid()) {
        t = {kSocket, errno};
      } else {
        SetTimeout(s.get(), SO_SNDTIMEO, 10);
        if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&target), sizeof(target)) != 0) {
          t = {kConnect, errno};
        }
        for (uint64_t sent = 0; t.stage == kDone && sent < bytes;) {
          const ssize_t n = ::write(s.get(), chunk.data(), std::min<uint64_t>(chunk.size(), bytes - sent));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) t = {kWrite, n < 0 ? errno : EPIPE};
          if (n > 0) sent += static_cast<uint64_t>(n);
        }
      }
    }
    return WriteAll(out, &t, sizeof(t)) && t.stage == kDone ? 0 : 1;
  }));
  pipe.second.Reset();
  const int64_t deadline = MonotonicNowNs() + 30 * kSecond;
  ScopedFd conn;
  while (!conn.valid()) {
    pollfd p[2] = {{listener, POLLIN, 0}, {pipe.first.get(), POLLIN, 0}};
    if (::poll(p, 2, 1000) < 0 && errno != EINTR) return ErrnoStatus("poll");
    if (p[0].revents & POLLIN) conn.Reset(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    // The child's report before any connection: it failed.
    if (!conn.valid() && (p[1].revents & (POLLIN | POLLHUP))) break;
    if (MonotonicNowNs() > deadline) return absl::DeadlineExceededError("bulk sender never connected");
  }
  BulkResult result;
  if (conn.valid()) {
    const int64_t t0 = MonotonicNowNs();
    SetTimeout(conn.get(), SO_RCVTIMEO, 10);
    std::vector<char> sink(1 << 20);
    for (;;) {
      const ssize_t n = ::read(conn.get(), sink.data(), sink.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("read the bulk stream");
      if (n == 0) break;
      result.bytes += static_cast<uint64_t>(n);
    }
    result.ns = MonotonicNowNs() - t0;
  }
  std::string report;
  char buf[64];
  for (ssize_t n; (n = ::read(pipe.first.get(), buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read the child's report");
    report.append(buf, static_cast<size_t>(n));
  }
  DSEC_ASSIGN_OR_RETURN(int code, child.Wait(MonotonicNowNs() + 10 * kSecond));
  DSEC_RETURN_IF_ERROR(CheckTrailer(report, code));
  if (result.bytes != bytes) {
    return absl::InternalError(absl::StrCat("bulk transfer received ", result.bytes, " of ", bytes, " bytes"));
  }
  return result;
}

}  // namespace dsec::bench::net
