// SPDX-License-Identifier: Apache-2.0
// Host-side helpers for the virtio integration tests: an in-process VM whose
// report lines can be awaited, private network namespaces with a tap in them,
// raw frames on that tap, and the vsock unix-socket handshake.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"
#include "vmm/vm/vm.h"

namespace dsec::testing {

// FNV-1a 64, as the test guest computes it (guest-kernel/README.md), and its
// rendering in the guest's reports: "0x" + lower-case hex, no leading zeros.
inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
uint64_t Fnv1a64(uint64_t h, const uint8_t* p, size_t n);
std::string FnvHex(uint64_t h);

// Deterministic pseudo-random bytes (xorshift64*), for stream payloads.
std::vector<uint8_t> PseudoRandomBytes(size_t n, uint64_t seed);

// A VM started in-process whose test-device report lines can be waited for.
// Threads: owned by the test thread; the VM's event loop appends lines.
// Lifetime: the destructor stops the VM and joins its threads.
class ObservedVm {
 public:
  static absl::StatusOr<std::unique_ptr<ObservedVm>> Start(const vm::VmConfig& config);
  ~ObservedVm();

  // The first report line that starts with `prefix`, waiting until it
  // arrives, the VM stops, or `timeout_ms` passes (then nullopt).
  std::optional<std::string> WaitForLine(const std::string& prefix, int timeout_ms);
  vm::VmStats Wait() { return vm_->Wait(); }
  std::vector<std::string> Messages() const { return vm_->TestMessages(); }
  vm::Vm& vm() { return *vm_; }

 private:
  explicit ObservedVm(EventFd line_event) : line_event_(std::move(line_event)) {}
  std::optional<std::string> FindLine(const std::string& prefix);

  EventFd line_event_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  // Declared last: destroyed (stopped, joined) before what its callback uses.
  std::unique_ptr<vm::Vm> vm_;
};

// "" if the host can run tap tests, else why not (for GTEST_SKIP).
std::string TapUnavailableReason();

// Runs `body` on a new thread that first moves into a new network namespace
// (unshare(CLONE_NEWNET) affects only that thread and the threads it
// starts, which is where an in-process VM's tap is opened). The namespace
// and every interface in it vanish when the thread ends and the last
// descriptor bound to it is closed, also when the body fails half-way.
// Returns false, with the reason in *why, if the namespace cannot be made.
bool RunInPrivateNetns(const std::function<void()>& body, std::string* why);

// A tap name that is unlikely to exist anywhere: "dsecvt" + 8 hex digits.
std::string UniqueTapName();
// In the calling thread's network namespace: creates a persistent
// single-queue tap and turns IPv6 off on it (no router solicitations or MLD
// reports that a guest would count as frames). The tap stays down.
absl::Status CreateTap(const std::string& name);
// Sets IFF_UP. Bringing a tap up while a process is attached to it (so it
// has carrier) installs its qdisc at once; a tap that was up before the
// attach gets it later, from the kernel's link watcher, and until then
// drops every frame sent to it (seen here as QDISC_DROP, ~4% of runs).
absl::Status BringUp(const std::string& name);
// A non-blocking AF_PACKET socket bound to `ifname` (all protocols).
absl::StatusOr<ScopedFd> PacketSocket(const std::string& ifname);

using Mac = std::array<uint8_t, 6>;
std::optional<Mac> ParseMacText(const std::string& text);

// A frame received on a packet socket (not one this host sent).
struct Frame {
  std::vector<uint8_t> bytes;
};
// Receives frames with ethertype `ethertype` until `count` arrived or
// `timeout_ms` passed; stops early if `stop_fd` (>= 0) is readable and no
// frame is pending.
std::vector<Frame> ReceiveFrames(int packet_fd, uint16_t ethertype, size_t count, int timeout_ms,
                                 int stop_fd);

// Connects to a VM's vsock unix socket and performs the host handshake
// (`CONNECT <port>\n`, `OK <host_port>\n`), reading byte by byte so that no
// stream data after the OK line is consumed. Returns the stream socket.
absl::StatusOr<ScopedFd> ConnectVsock(const std::string& socket_path, uint32_t port,
                                      int timeout_ms);
// A listening unix stream socket at `path`.
absl::StatusOr<ScopedFd> ListenUnix(const std::string& path);

// Blocking-style I/O over a socket with a deadline, using poll. Each returns
// the number of bytes moved (short on EOF, error or deadline).
size_t WriteAll(int fd, const uint8_t* p, size_t n, int64_t deadline_ns);
size_t ReadFull(int fd, uint8_t* p, size_t n, int64_t deadline_ns);
// Reads and discards until EOF; false if the deadline passed first.
bool ReadToEof(int fd, int64_t deadline_ns);
int64_t DeadlineAfterMs(int64_t ms);

// The monitor's counters for the virtio-net device at `slot`, the tap's
// kernel counters (from /proc/thread-self/net/dev, so call it on the thread
// in the tap's namespace) and the guest's report lines: failure context.
std::string NetDiagnostics(vm::Vm& vm, size_t slot, const std::string& tap);

// True once guest RAM holds the available ring that `virtio-scribble`
// publishes on a 256-entry queue (flags 0, idx 1, ring[0] = 256), on the
// page after its descriptor table (the test guest gives each ring area its
// own page and links free descriptor i to i + 1).
bool GuestPublishedScribble(const memory::MemfdGuestMemory& mem, uint64_t ram_bytes);

// Calls `done` (yielding between calls) until it is true or the deadline
// passes; for state with no fd to wait on (guest RAM, a transport's status
// register). False on timeout.
bool SpinUntil(const std::function<bool()>& done, int timeout_ms);

}  // namespace dsec::testing
