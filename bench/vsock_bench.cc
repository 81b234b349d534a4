// SPDX-License-Identifier: Apache-2.0
#include "bench/vsock_bench.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "base/eventfd.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "devices/vsock/vsock_spec.h"
#include "vmm/vm/vm.h"
#include "vmm/vm/vm_config.h"

namespace dsec::bench {

namespace {

constexpr uint32_t kGuestCid = 3;
constexpr uint32_t kPort = 5000;
constexpr size_t kReadBytes = 256 << 10;   // host read size (the guest's buf_alloc)
constexpr size_t kWriteBytes = 64 << 10;   // host write size
constexpr int kPollMs = 120000;            // no progress for this long: give up

double MibPerS(uint64_t bytes, int64_t ns) {
  return ns <= 0 ? 0.0 : static_cast<double>(bytes) / (1 << 20) / (static_cast<double>(ns) / 1e9);
}

// What a reader saw: bytes in total, and the span from the end of the first
// read that returned data to the end of the last one (the first read's bytes
// are not in `timed_bytes`: they arrived before the clock started).
struct Transfer {
  uint64_t bytes = 0;
  uint64_t timed_bytes = 0;
  int64_t first_ns = 0;
  int64_t last_ns = 0;
  double MibS() const { return MibPerS(timed_bytes, last_ns - first_ns); }
};

// Waits until `fd` has `events` or `stop_fd` (-1: none) is readable.
absl::Status WaitFor(int fd, short events, int stop_fd, const char* what) {
  pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, kPollMs);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("poll");
    if (n == 0) return absl::DeadlineExceededError(absl::StrCat("no progress while ", what));
    if (fds[0].revents != 0) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("the VM stopped while ", what));
  }
}

// Reads `fd` to EOF; byte i of the stream must be pattern[i % period].
absl::StatusOr<Transfer> ReadToEof(int fd, int stop_fd, const std::vector<uint8_t>& pattern,
                                   size_t period) {
  std::vector<uint8_t> buf(kReadBytes);
  Transfer t;
  for (;;) {
    DSEC_RETURN_IF_ERROR(WaitFor(fd, POLLIN, stop_fd, "reading the stream"));
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return ErrnoStatus("read");
    if (n == 0) return t;
    int64_t now = MonotonicNowNs();
    if (std::memcmp(buf.data(), pattern.data() + t.bytes % period, static_cast<size_t>(n)) != 0) {
      return absl::DataLossError(absl::StrCat("stream differs near byte ", t.bytes));
    }
    if (t.bytes == 0) {
      t.first_ns = now;
    } else {
      t.timed_bytes += static_cast<uint64_t>(n);
    }
    t.bytes += static_cast<uint64_t>(n);
    t.last_ns = now;
  }
}

// Writes `total` bytes (byte i = pattern[i % period]) to `fd` while reading
// the echo from it; half-closes after the last write and reads to EOF. Times
// the first write to the last echoed byte.
absl::StatusOr<Transfer> EchoThrough(int fd, int stop_fd, uint64_t total,
                                     const std::vector<uint8_t>& pattern, size_t period) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return ErrnoStatus("fcntl");
  std::vector<uint8_t> buf(kReadBytes);
  uint64_t written = 0;
  Transfer t;
  bool write_shut = false;
  t.first_ns = MonotonicNowNs();
  for (;;) {
    pollfd fds[2] = {{fd, static_cast<short>(POLLIN | (write_shut ? 0 : POLLOUT)), 0},
                     {stop_fd, POLLIN, 0}};
    int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, kPollMs);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("poll");
    if (n == 0) return absl::DeadlineExceededError("no progress while echoing");
    if (fds[0].revents == 0) return absl::AbortedError("the VM stopped while echoing");
    if (!write_shut && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      while (written < total) {
        size_t off = written % period;
        size_t len = static_cast<size_t>(std::min<uint64_t>(kWriteBytes, total - written));
        ssize_t w = ::send(fd, pattern.data() + off, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN) break;
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ErrnoStatus("write");
        written += static_cast<uint64_t>(w);
      }
      if (written == total) {
        if (::shutdown(fd, SHUT_WR) != 0) return ErrnoStatus("shutdown(SHUT_WR)");
        write_shut = true;
      }
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      for (;;) {
        ssize_t r = ::read(fd, buf.data(), buf.size());
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) break;
        if (r < 0) return ErrnoStatus("read");
        if (r == 0) {
          if (t.bytes != total) {
            return absl::DataLossError(
                absl::StrCat("echo ended after ", t.bytes, " of ", total, " bytes"));
          }
          t.timed_bytes = t.bytes;
          return t;
        }
        // The pattern buffer holds period + kWriteBytes bytes; reads can be
        // longer, so compare in pieces.
        for (ssize_t done = 0; done < r;) {
          size_t piece = static_cast<size_t>(std::min<ssize_t>(r - done, kWriteBytes));
          if (std::memcmp(buf.data() + done, pattern.data() + (t.bytes % period), piece) != 0) {
            return absl::DataLossError(absl::StrCat("echo differs near byte ", t.bytes));
          }
          done += static_cast<ssize_t>(piece);
          t.bytes += piece;
        }
        if (t.bytes > total) return absl::DataLossError("more bytes echoed than sent");
        t.last_ns = MonotonicNowNs();
      }
    }
  }
}

// A scratch directory for the VM's unix sockets, removed with them.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create() {
    std::string path = "/tmp/dsec-bench-vsock-XXXXXX";
    if (::mkdtemp(path.data()) == nullptr) return ErrnoStatus("mkdtemp");
    return TempDir(std::move(path));
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  ~TempDir() {
    if (path_.empty()) return;
    for (const std::string& f : {Socket(), Listener()}) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
  }
  std::string Socket() const { return path_ + "/v.sock"; }
  std::string Listener() const { return absl::StrCat(Socket(), "_", kPort); }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::StatusOr<ScopedFd> UnixSocket(const std::string& path, bool listen) {
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus("socket(AF_UNIX)");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("socket path too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  auto* sa = reinterpret_cast<const sockaddr*>(&addr);
  if (listen) {
    if (::bind(fd.get(), sa, sizeof(addr)) != 0) return ErrnoStatus(absl::StrCat("bind ", path));
    if (::listen(fd.get(), 4) != 0) return ErrnoStatus("listen");
  } else if (::connect(fd.get(), sa, sizeof(addr)) != 0) {
    return ErrnoStatus(absl::StrCat("connect ", path));
  }
  return fd;
}

// A test-guest boot with vsock; `ready` is signalled on the guest's
// `vsock listening` line.
struct GuestVm {
  std::unique_ptr<vm::Vm> machine;
  std::unique_ptr<EventFd> ready;
  std::shared_ptr<absl::Mutex> mu = std::make_shared<absl::Mutex>();
  std::shared_ptr<std::vector<std::string>> lines = std::make_shared<std::vector<std::string>>();
};

absl::StatusOr<GuestVm> StartGuest(const VsockBenchOptions& o, const std::string& socket,
                                   const std::string& run) {
  vm::VmConfig config;
  config.kernel_path = o.kernel;
  config.cmdline = absl::StrCat("testguest.run=", run);
  config.mem_mib = 64;
  config.console.kind = vm::ConsoleConfig::Kind::kNone;
  config.devices = {devices::VsockSpec::Make(kGuestCid, socket)};
  config.timeout_ms = 600000;
  GuestVm g;
  DSEC_ASSIGN_OR_RETURN(EventFd ready, EventFd::Create(EFD_NONBLOCK));
  g.ready = std::make_unique<EventFd>(std::move(ready));
  DSEC_ASSIGN_OR_RETURN(g.machine, vm::Vm::Create(config));
  EventFd* ready_ptr = g.ready.get();
  g.machine->SetTestMessageCallback([mu = g.mu, lines = g.lines, ready_ptr](std::string_view l) {
    if (l.rfind("vsock listening", 0) == 0) (void)ready_ptr->Signal();
    absl::MutexLock lock(mu.get());
    lines->emplace_back(l);
  });
  DSEC_RETURN_IF_ERROR(g.machine->Start());
  return g;
}

// Waits for the guest and returns its result (or error) line. `ok_exit`:
// the exit code expected.
absl::StatusOr<std::string> FinishGuest(GuestVm& g, uint32_t ok_exit) {
  vm::VmStats stats = g.machine->Wait();
  absl::MutexLock lock(g.mu.get());
  std::string report;
  for (const std::string& l : *g.lines) {
    if (l.rfind("result ", 0) == 0 || l.rfind("error ", 0) == 0) report = l;
  }
  if (stats.stop.reason != vm::StopReason::kGuestShutdown ||
      stats.stop.guest_exit_code != ok_exit) {
    return absl::InternalError(absl::StrCat(
        "guest stopped: ", std::string(vm::StopReasonName(stats.stop.reason)), " code ",
        stats.stop.guest_exit_code, " ", stats.stop.detail, " ", report));
  }
  return report;
}

// Guest -> host: the guest's vsock-send to a listener on `<socket>_PORT`.
absl::StatusOr<Transfer> GuestToHost(const VsockBenchOptions& o, const TempDir& dir,
                                     uint64_t bytes, const std::vector<uint8_t>& pattern) {
  DSEC_ASSIGN_OR_RETURN(ScopedFd listener, UnixSocket(dir.Listener(), /*listen=*/true));
  // The path is only needed until the monitor has connected; the next run
  // binds it again.
  struct Unlink {
    std::string path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_listener{dir.Listener()};
  DSEC_ASSIGN_OR_RETURN(GuestVm g,
                        StartGuest(o, dir.Socket(), absl::StrCat("vsock-send:", kPort, ",", bytes)));
  const int stop_fd = g.machine->stop_requested_fd();
  absl::StatusOr<Transfer> t = [&]() -> absl::StatusOr<Transfer> {
    DSEC_RETURN_IF_ERROR(WaitFor(listener.get(), POLLIN, stop_fd, "waiting for the guest"));
    ScopedFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) return ErrnoStatus("accept4");
    // The guest's stream repeats every 256 bytes.
    return ReadToEof(conn.get(), stop_fd, pattern, 256);
  }();
  if (!t.ok()) g.machine->RequestStop(vm::StopReason::kHostRequest, "bench failed");
  // The guest expects its bytes echoed; it reports `error vsock-short` with
  // sent=BYTES received=0 and exit code 1 when the host just reads.
  absl::StatusOr<std::string> report = FinishGuest(g, 1);
  if (!t.ok()) return t.status();
  if (!report.ok()) return report.status();
  if (report->find(absl::StrCat(" sent=", bytes, " ")) == std::string::npos) {
    return absl::InternalError(absl::StrCat("guest report: ", *report));
  }
  if (t->bytes != bytes) {
    return absl::DataLossError(absl::StrCat("host received ", t->bytes, " of ", bytes));
  }
  return t;
}

// Host -> guest -> host: the guest's vsock-echo, reached with `CONNECT`.
absl::StatusOr<Transfer> EchoRoundTrip(const VsockBenchOptions& o, const TempDir& dir,
                                       uint64_t bytes, const std::vector<uint8_t>& pattern,
                                       size_t period) {
  DSEC_ASSIGN_OR_RETURN(GuestVm g, StartGuest(o, dir.Socket(), absl::StrCat("vsock-echo:", kPort)));
  const int stop_fd = g.machine->stop_requested_fd();
  absl::StatusOr<Transfer> t = [&]() -> absl::StatusOr<Transfer> {
    DSEC_RETURN_IF_ERROR(WaitFor(g.ready->fd(), POLLIN, stop_fd, "waiting for vsock listening"));
    DSEC_ASSIGN_OR_RETURN(ScopedFd conn, UnixSocket(dir.Socket(), /*listen=*/false));
    std::string hello = absl::StrCat("CONNECT ", kPort, "\n");
    if (::send(conn.get(), hello.data(), hello.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(hello.size())) {
      return ErrnoStatus("write CONNECT");
    }
    // Nothing is echoed before we send, so the answer is exactly one line.
    std::string answer;
    while (answer.empty() || answer.back() != '\n') {
      DSEC_RETURN_IF_ERROR(WaitFor(conn.get(), POLLIN, stop_fd, "waiting for OK"));
      char c;
      ssize_t n = ::read(conn.get(), &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || answer.size() > 64) {
        return absl::UnavailableError(absl::StrCat("CONNECT refused: '", answer, "'"));
      }
      answer.push_back(c);
    }
    if (answer.rfind("OK ", 0) != 0) return absl::UnavailableError("CONNECT: " + answer);
    return EchoThrough(conn.get(), stop_fd, bytes, pattern, period);
  }();
  if (!t.ok()) g.machine->RequestStop(vm::StopReason::kHostRequest, "bench failed");
  absl::StatusOr<std::string> report = FinishGuest(g, 0);
  if (!t.ok()) return t.status();
  if (!report.ok()) return report.status();
  if (report->find(absl::StrCat(" bytes=", bytes, " ")) == std::string::npos) {
    return absl::InternalError(absl::StrCat("guest report: ", *report));
  }
  return t;
}

// The peers: the same bytes through a unix socket pair inside this process.
absl::StatusOr<Transfer> UnixOneWay(uint64_t bytes, const std::vector<uint8_t>& pattern) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoStatus("socketpair");
  ScopedFd reader(sv[0]);
  ScopedFd writer(sv[1]);
  std::thread sender([&writer, bytes, &pattern] {
    uint64_t sent = 0;
    while (sent < bytes) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(kWriteBytes, bytes - sent));
      ssize_t w = ::send(writer.get(), pattern.data() + sent % 256, len, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // the reader reports the short stream
      sent += static_cast<uint64_t>(w);
    }
    writer.Reset();
  });
  absl::StatusOr<Transfer> t = ReadToEof(reader.get(), -1, pattern, 256);
  reader.Reset();  // unblocks the sender if the reader failed
  sender.join();
  if (t.ok() && t->bytes != bytes) return absl::DataLossError("short unix stream");
  return t;
}

absl::StatusOr<Transfer> UnixEcho(uint64_t bytes, const std::vector<uint8_t>& pattern,
                                  size_t period) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoStatus("socketpair");
  ScopedFd client(sv[0]);
  ScopedFd echo(sv[1]);
  // Like the guest: reads up to 256 KiB, sends it all back, EOF after EOF.
  std::thread echoer([&echo] {
    std::vector<uint8_t> buf(kReadBytes);
    for (;;) {
      ssize_t n = ::read(echo.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t done = 0; done < n;) {
        ssize_t w = ::send(echo.get(), buf.data() + done, static_cast<size_t>(n - done),
                           MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        done += w;
      }
    }
    ::shutdown(echo.get(), SHUT_WR);
  });
  absl::StatusOr<Transfer> t = EchoThrough(client.get(), -1, bytes, pattern, period);
  ::shutdown(client.get(), SHUT_RDWR);  // unblocks the echoer if the client failed
  echoer.join();
  return t;
}

}  // namespace

int RunVsockBench(const VsockBenchOptions& o) {
  if (o.kernel.empty() || ::access(o.kernel.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "bench vsock: test guest not found (%s); build it first\n",
                 o.kernel.c_str());
    return 2;
  }
  const uint64_t bytes = o.mib << 20;
  // The send pattern: the guest's vsock-send stream (byte i = i*7+3) for the
  // one-way runs; for the echo, 1 MiB of PRNG bytes repeated. Both buffers
  // hold one extra write's worth so that any window of a write is contiguous.
  const size_t echo_period = 1 << 20;
  std::vector<uint8_t> send_pattern(256 + kReadBytes);
  for (size_t i = 0; i < send_pattern.size(); ++i) send_pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  std::vector<uint8_t> echo_pattern(echo_period + kReadBytes);
  uint64_t state = 0x243f6a8885a308d3ull;
  for (size_t i = 0; i < echo_period; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    echo_pattern[i] = static_cast<uint8_t>(state >> 56);
  }
  std::memcpy(echo_pattern.data() + echo_period, echo_pattern.data(), kReadBytes);

  auto dir = TempDir::Create();
  if (!dir.ok()) {
    std::fprintf(stderr, "bench vsock: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  // Own and peer runs interleaved, so drift on a shared machine hits both;
  // each figure is the median over runs.
  std::vector<double> g2h, unix_one_way, echo, unix_echo, g2h_ms, echo_ms;
  for (int r = 0; r < o.runs; ++r) {
    auto a = GuestToHost(o, *dir, bytes, send_pattern);
    auto b = UnixOneWay(bytes, send_pattern);
    auto c = EchoRoundTrip(o, *dir, bytes, echo_pattern, echo_period);
    auto d = UnixEcho(bytes, echo_pattern, echo_period);
    for (const absl::Status& s : {a.status(), b.status(), c.status(), d.status()}) {
      if (!s.ok()) {
        std::fprintf(stderr, "bench vsock: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    g2h.push_back(a->MibS());
    unix_one_way.push_back(b->MibS());
    echo.push_back(c->MibS());
    unix_echo.push_back(d->MibS());
    g2h_ms.push_back(static_cast<double>(a->last_ns - a->first_ns) / 1e6);
    echo_ms.push_back(static_cast<double>(c->last_ns - c->first_ns) / 1e6);
  }
  const double g2h_mib_s = Percentile(g2h, 50), unix_mib_s = Percentile(unix_one_way, 50);
  const double echo_mib_s = Percentile(echo, 50), unix_echo_mib_s = Percentile(unix_echo, 50);
  if (o.json) {
    nlohmann::json out = {
        {"mib", o.mib},
        {"guest_to_host_mib_s", g2h_mib_s},
        {"echo_mib_s", echo_mib_s},
        {"host_unix_mib_s", unix_mib_s},
        {"host_unix_echo_mib_s", unix_echo_mib_s},
        {"guest_to_host_ratio", g2h_mib_s / unix_mib_s},
        {"echo_ratio", echo_mib_s / unix_echo_mib_s},
        {"runs", o.runs},
        {"guest_to_host_mib_s_runs", g2h},
        {"echo_mib_s_runs", echo},
        {"guest_to_host_ms", Percentile(g2h_ms, 50)},
        {"echo_ms", Percentile(echo_ms, 50)},
    };
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("bench vsock: %llu MiB each way, median of %d runs, timed on the host "
              "(CLOCK_MONOTONIC); peers are a\n  unix socket pair in this process moving the same "
              "bytes (64 KiB writes, 256 KiB reads),\n  interleaved with the VM runs\n",
              static_cast<unsigned long long>(o.mib), o.runs);
  std::printf("  guest -> host (vsock-send; first to last byte read)   %9.1f MiB/s   unix pair "
              "%9.1f MiB/s   vsock/unix %.3f\n",
              g2h_mib_s, unix_mib_s, g2h_mib_s / unix_mib_s);
  std::printf("  host -> guest -> host (vsock-echo; first write to last echoed byte, round trip)\n"
              "                                                        %9.1f MiB/s   unix echo "
              "%9.1f MiB/s   vsock/unix %.3f\n",
              echo_mib_s, unix_echo_mib_s, echo_mib_s / unix_echo_mib_s);
  return 0;
}

}  // namespace dsec::bench
