// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/virtio_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "devices/net/net_device.h"
#include "vmm/vm/virtio_devices.h"

namespace dsec::testing {

namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int RemainingMs(int64_t deadline_ns) {
  int64_t left = deadline_ns - MonotonicNowNs();
  if (left <= 0) return 0;
  return static_cast<int>((left + 999'999) / 1'000'000);
}

// Waits for `events` on fd until the deadline; false on timeout.
bool PollUntil(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, RemainingMs(deadline_ns));
    if (n < 0 && errno == EINTR) continue;
    return n == 1;
  }
}

}  // namespace

uint64_t Fnv1a64(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string FnvHex(uint64_t h) { return absl::StrFormat("0x%x", h); }

std::vector<uint8_t> PseudoRandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  uint64_t x = seed | 1;
  for (size_t i = 0; i < n; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    uint64_t v = x * 0x2545f4914f6cdd1dull;
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

int64_t DeadlineAfterMs(int64_t ms) { return MonotonicNowNs() + ms * 1'000'000; }

// --- ObservedVm ---------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ObservedVm>> ObservedVm::Start(const vm::VmConfig& config) {
  auto event = EventFd::Create(EFD_NONBLOCK);
  if (!event.ok()) return event.status();
  std::unique_ptr<ObservedVm> o(new ObservedVm(std::move(*event)));
  auto created = vm::Vm::Create(config);
  if (!created.ok()) return created.status();
  o->vm_ = std::move(*created);
  ObservedVm* self = o.get();
  o->vm_->SetTestMessageCallback([self](std::string_view line) {
    {
      absl::MutexLock lock(&self->mu_);
      self->lines_.emplace_back(line);
    }
    (void)self->line_event_.Signal();
  });
  if (absl::Status s = o->vm_->Start(); !s.ok()) return s;
  return o;
}

ObservedVm::~ObservedVm() {
  if (vm_) {
    vm_->RequestStop(vm::StopReason::kHostRequest, "test ended");
    vm_->Wait();
  }
}

std::optional<std::string> ObservedVm::FindLine(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  for (const auto& l : lines_) {
    if (l.rfind(prefix, 0) == 0) return l;
  }
  return std::nullopt;
}

std::optional<std::string> ObservedVm::WaitForLine(const std::string& prefix, int timeout_ms) {
  const int64_t deadline = DeadlineAfterMs(timeout_ms);
  for (;;) {
    if (auto l = FindLine(prefix)) return l;
    pollfd fds[2] = {{line_event_.fd(), POLLIN, 0}, {vm_->stop_requested_fd(), POLLIN, 0}};
    int n = ::poll(fds, 2, RemainingMs(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return FindLine(prefix);
    if (fds[1].revents & POLLIN) {
      // Stopped: the lines posted before the stop are all we will get.
      return FindLine(prefix);
    }
    (void)line_event_.Consume();
  }
}

// --- network namespaces and taps ----------------------------------------------

std::string TapUnavailableReason() {
  ScopedFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return absl::StrCat("this host has no usable /dev/net/tun: ", std::strerror(errno));
  return "";
}

bool RunInPrivateNetns(const std::function<void()>& body, std::string* why) {
  bool ok = true;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      ok = false;
      *why = absl::StrCat("unshare(CLONE_NEWNET): ", std::strerror(errno));
      return;
    }
    body();
  });
  t.join();
  return ok;
}

std::string UniqueTapName() {
  std::random_device rd;
  return absl::StrFormat("dsecvt%08x", rd());
}

absl::Status CreateTap(const std::string& name) {
  {
    ScopedFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    if (!tun.valid()) return Errno("open /dev/net/tun");
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    if (::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) return Errno("TUNSETIFF " + name);
    if (::ioctl(tun.get(), TUNSETPERSIST, 1) != 0) return Errno("TUNSETPERSIST " + name);
  }
  // /proc/sys/net follows the opening thread's namespace. Without IPv6 in
  // the kernel the directory is absent and there is nothing to turn off.
  const std::string knob = absl::StrCat("/proc/sys/net/ipv6/conf/", name, "/disable_ipv6");
  if (::access(knob.c_str(), F_OK) == 0) {
    {
      std::ofstream(knob) << "1\n";
    }
    std::string value;
    std::ifstream(knob) >> value;
    if (value != "1") return absl::InternalError(absl::StrCat("could not set ", knob));
  }
  return absl::OkStatus();
}

absl::Status BringUp(const std::string& name) {
  ScopedFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Errno("socket(AF_INET)");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) return Errno("SIOCGIFFLAGS " + name);
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) return Errno("SIOCSIFFLAGS " + name);
  return absl::OkStatus();
}

absl::StatusOr<ScopedFd> PacketSocket(const std::string& ifname) {
  ScopedFd sock(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  if (!sock.valid()) return Errno("socket(AF_PACKET)");
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
  if (addr.sll_ifindex == 0) return Errno("if_nametoindex " + ifname);
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno("bind AF_PACKET " + ifname);
  }
  return sock;
}

std::optional<Mac> ParseMacText(const std::string& text) {
  Mac mac;
  unsigned v[6];
  char tail;
  if (std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4],
                  &v[5], &tail) != 6) {
    return std::nullopt;
  }
  for (int i = 0; i < 6; ++i) mac[i] = static_cast<uint8_t>(v[i]);
  return mac;
}

std::vector<Frame> ReceiveFrames(int packet_fd, uint16_t ethertype, size_t count, int timeout_ms,
                                 int stop_fd) {
  std::vector<Frame> frames;
  const int64_t deadline = DeadlineAfterMs(timeout_ms);
  std::vector<uint8_t> buf(65536);
  while (frames.size() < count) {
    pollfd fds[2] = {{packet_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, RemainingMs(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!(fds[0].revents & POLLIN)) break;  // the VM stopped and nothing is pending
    sockaddr_ll from{};
    socklen_t from_len = sizeof(from);
    ssize_t got = ::recvfrom(packet_fd, buf.data(), buf.size(), 0,
                             reinterpret_cast<sockaddr*>(&from), &from_len);
    if (got < 0) continue;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own frames
    if (got < 14 || buf[12] != (ethertype >> 8) || buf[13] != (ethertype & 0xff)) continue;
    frames.push_back(Frame{std::vector<uint8_t>(buf.begin(), buf.begin() + got)});
  }
  return frames;
}

// --- unix sockets ---------------------------------------------------------------

namespace {

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError("socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

absl::StatusOr<ScopedFd> ConnectVsock(const std::string& socket_path, uint32_t port,
                                      int timeout_ms) {
  const int64_t deadline = DeadlineAfterMs(timeout_ms);
  auto addr = UnixAddress(socket_path);
  if (!addr.ok()) return addr.status();
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket(AF_UNIX)");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return Errno("connect " + socket_path);
  }
  const std::string hello = absl::StrCat("CONNECT ", port, "\n");
  if (WriteAll(fd.get(), reinterpret_cast<const uint8_t*>(hello.data()), hello.size(), deadline) !=
      hello.size()) {
    return absl::UnavailableError("could not send the CONNECT line");
  }
  std::string line;
  while (line.empty() || line.back() != '\n') {
    uint8_t c;
    if (ReadFull(fd.get(), &c, 1, deadline) != 1) {
      return absl::UnavailableError(absl::StrCat("no OK line, got '", line, "'"));
    }
    line.push_back(static_cast<char>(c));
    if (line.size() > 64) return absl::UnavailableError("overlong answer: " + line);
  }
  if (line.rfind("OK ", 0) != 0) return absl::UnavailableError("unexpected answer: " + line);
  return fd;
}

absl::StatusOr<ScopedFd> ListenUnix(const std::string& path) {
  auto addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket(AF_UNIX)");
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return Errno("bind " + path);
  }
  if (::listen(fd.get(), 4) != 0) return Errno("listen " + path);
  return fd;
}

size_t WriteAll(int fd, const uint8_t* p, size_t n, int64_t deadline_ns) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) break;
    if (!PollUntil(fd, POLLOUT, deadline_ns)) break;
  }
  return done;
}

size_t ReadFull(int fd, uint8_t* p, size_t n, int64_t deadline_ns) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) break;  // EOF
    if (errno == EINTR) continue;
    if (errno != EAGAIN) break;
    if (!PollUntil(fd, POLLIN, deadline_ns)) break;
  }
  return done;
}

bool ReadToEof(int fd, int64_t deadline_ns) {
  uint8_t buf[4096];
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r == 0) return true;
    if (r > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return true;  // reset counts as the end of the stream
    if (!PollUntil(fd, POLLIN, deadline_ns)) return false;
  }
}

// --- diagnostics and guest state -------------------------------------------------

std::string NetDiagnostics(vm::Vm& vm, size_t slot, const std::string& tap) {
  std::string out;
  const auto* net =
      dynamic_cast<const devices::NetDevice*>(&vm.virtio()->transport(slot).device());
  if (net != nullptr) {
    devices::NetMetrics m = net->metrics();
    out = absl::StrFormat("device: rx_packets=%d rx_dropped=%d tx_packets=%d tx_dropped=%d",
                          m.rx_packets, m.rx_dropped, m.tx_packets, m.tx_dropped);
  }
  // The tap's counters as the kernel sees them, from this thread's
  // namespace: TX is towards the monitor (frames it read, or dropped).
  std::ifstream dev("/proc/thread-self/net/dev");
  for (std::string l; std::getline(dev, l);) {
    if (l.find(tap + ":") != std::string::npos) absl::StrAppend(&out, "\n  kernel: ", l);
  }
  for (const auto& l : vm.TestMessages()) absl::StrAppend(&out, "\n  guest: ", l);
  return out;
}

// Layout from guest-kernel/testguest/virtio.c (virtq_setup, page_alloc); if
// the guest changes it, the scribble test times out saying so.
bool GuestPublishedScribble(const memory::MemfdGuestMemory& mem, uint64_t ram_bytes) {
  constexpr uint64_t kPage = 4096;
  constexpr uint8_t kHead[6] = {0, 0, 1, 0, 0, 1};
  auto host = mem.HostAddress(0, ram_bytes);
  if (!host.ok()) return false;
  const uint8_t* ram = *host;
  for (uint64_t gpa = 0x100000 + kPage; gpa + kPage <= ram_bytes; gpa += kPage) {
    if (std::memcmp(ram + gpa, kHead, sizeof(kHead)) != 0) continue;
    if (!std::all_of(ram + gpa + 6, ram + gpa + 6 + 2 * 256, [](uint8_t b) { return b == 0; })) {
      continue;
    }
    uint16_t next0, next255;
    std::memcpy(&next0, ram + gpa - kPage + 14, 2);
    std::memcpy(&next255, ram + gpa - kPage + 255 * 16 + 14, 2);
    if (next0 == 1 && next255 == 256) return true;
  }
  return false;
}

bool SpinUntil(const std::function<bool()>& done, int timeout_ms) {
  const int64_t deadline = DeadlineAfterMs(timeout_ms);
  while (!done()) {
    if (MonotonicNowNs() > deadline) return false;
    ::sched_yield();
  }
  return true;
}

}  // namespace dsec::testing
