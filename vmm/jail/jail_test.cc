// SPDX-License-Identifier: Apache-2.0
// The jail's pieces, each in a forked child (filters and credentials are the
// child's own): a call outside a thread's list kills the process, the calls on
// it still work, the privilege drop holds, the gate orders it all.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <atomic>
#include <thread>

#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "platform/kvm/kvm_ioctl_numbers.h"
#include "vmm/jail/monitor_jail.h"
#include "vmm/jail/privileges.h"
#include "vmm/jail/seccomp_filters.h"

namespace dsec::jail {
namespace {

struct ChildEnd {
  bool exited = false;
  int code = -1;
  int signal = 0;
};

// Runs `body` in a child; its return value is the exit code.
ChildEnd InChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  ChildEnd end;
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return end;
  if (WIFEXITED(status)) {
    end.exited = true;
    end.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
  }
  return end;
}

// Installs `kind`'s filter (widened by `extras`) in kill mode, then runs
// `after`.
ChildEnd Filtered(ThreadKind kind, const std::function<int()>& after,
                  SeccompMode mode = SeccompMode::kKill, const FilterExtras& extras = {}) {
  return InChild([&] {
    if (!InstallSigsysReporter().ok() || !InstallThreadFilter(kind, mode, extras).ok()) return 100;
    return after();
  });
}

// What a VM with a vsock-like and a disk-like device adds (the monitor takes
// these from the device kinds; the jail does not know devices).
FilterExtras DeviceLikeExtras() {
  FilterExtras e;
  e.syscalls = {{ThreadKind::kEventLoop, "socket", true, "vsock: guest connections"},
                {ThreadKind::kEventLoop, "pwritev2", false, "disk: writes"},
                {ThreadKind::kMain, "io_uring_enter", false, "disk: teardown"}};
  e.ioctls = {{ThreadKind::kEventLoop, FIONREAD, "vsock: bytes waiting"}};
  return e;
}

// Stopped by a filter: the reporter's exit status.
bool Stopped(const ChildEnd& end) {
  return end.exited && end.code == kSeccompExitStatus;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(SeccompFiltersTest, NamesParseAndBadOnesAreRefused) {
  for (ThreadKind k : kAllThreadKinds) {
    auto parsed = ParseThreadKind(ThreadKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_FALSE(ParseThreadKind("gpu").ok());
  EXPECT_EQ(*ParseSeccompMode("kill"), SeccompMode::kKill);
  EXPECT_EQ(*ParseSeccompMode("log"), SeccompMode::kLog);
  EXPECT_EQ(*ParseSeccompMode("off"), SeccompMode::kOff);
  absl::Status bad = ParseSeccompMode("strict").status();
  EXPECT_NE(bad.message().find("kill, log or off"), std::string::npos) << bad;
}

TEST(SeccompFiltersTest, ListsAreNarrowAndDifferPerKind) {
  for (ThreadKind k : kAllThreadKinds) {
    std::vector<std::string> list = AllowedSyscalls(k);
    for (const char* never : {"execve", "execveat", "ptrace", "clone", "clone3", "fork",
                              "mount", "setuid", "setresuid", "chroot", "bpf", "kexec_load",
                              "init_module", "process_vm_writev", "open_by_handle_at", "getppid"}) {
      EXPECT_FALSE(Has(list, never)) << ThreadKindName(k) << " allows " << never;
    }
  }
  const auto vcpu = AllowedSyscalls(ThreadKind::kVcpu);
  EXPECT_TRUE(Has(vcpu, "ioctl"));
  EXPECT_FALSE(Has(vcpu, "openat"));
  EXPECT_FALSE(Has(vcpu, "socket"));
  // Device back-ends' calls only with the devices that make them (the
  // control and reclaim threads have accept4 and fallocate of their own).
  for (ThreadKind k : {ThreadKind::kVcpu, ThreadKind::kEventLoop, ThreadKind::kMain}) {
    for (const char* device_call : {"socket", "connect", "accept4", "pwritev2", "preadv",
                                    "fdatasync", "fallocate", "io_uring_setup", "io_uring_enter"}) {
      EXPECT_FALSE(Has(AllowedSyscalls(k), device_call)) << ThreadKindName(k) << " " << device_call;
    }
  }
  const FilterExtras extras = DeviceLikeExtras();
  EXPECT_TRUE(Has(AllowedSyscalls(ThreadKind::kEventLoop, extras), "socket"));
  EXPECT_TRUE(Has(AllowedSyscalls(ThreadKind::kEventLoop, extras), "pwritev2"));
  EXPECT_FALSE(Has(AllowedSyscalls(ThreadKind::kVcpu, extras), "pwritev2"));
  EXPECT_TRUE(Has(AllowedSyscalls(ThreadKind::kMain, extras), "io_uring_enter"));
  const auto loop_ioctls = AllowedIoctls(ThreadKind::kEventLoop, extras);
  EXPECT_NE(std::find(loop_ioctls.begin(), loop_ioctls.end(), FIONREAD), loop_ioctls.end());
  const auto plain_ioctls = AllowedIoctls(ThreadKind::kEventLoop);
  EXPECT_EQ(std::find(plain_ioctls.begin(), plain_ioctls.end(), FIONREAD), plain_ioctls.end());
  EXPECT_TRUE(Has(AllowedSyscalls(ThreadKind::kControl), "openat"));
  // The control thread's ioctls: the pause's clock, nothing else.
  const auto control_ioctls = AllowedIoctls(ThreadKind::kControl);
  std::vector<unsigned long> pause(kvm::PauseIoctls().begin(), kvm::PauseIoctls().end());
  std::sort(pause.begin(), pause.end());
  EXPECT_EQ(control_ioctls, pause);
  EXPECT_NE(AllowedSyscalls(ThreadKind::kVcpu), AllowedSyscalls(ThreadKind::kEventLoop));
}

TEST(SeccompFiltersTest, ACallOutsideTheListKillsTheProcess) {
  for (ThreadKind k : kAllThreadKinds) {
    ChildEnd end = Filtered(k, [] {
      ::syscall(SYS_getppid);
      return 0;
    });
    EXPECT_TRUE(Stopped(end)) << ThreadKindName(k) << " code " << end.code << " signal " << end.signal;
  }
}

TEST(SeccompFiltersTest, CallsOnTheListWork) {
  int raw[2];
  ASSERT_EQ(::pipe(raw), 0);
  ScopedFd ends[2] = {ScopedFd(raw[0]), ScopedFd(raw[1])};
  const int fds[2] = {ends[0].get(), ends[1].get()};
  ChildEnd end = Filtered(ThreadKind::kVcpu, [&] {
    char c = 'x';
    if (::write(fds[1], &c, 1) != 1) return 3;
    if (::read(fds[0], &c, 1) != 1 || c != 'x') return 4;
    void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 5;
    static_cast<char*>(p)[4096] = 1;
    if (::munmap(p, 1 << 20) != 0) return 6;
    std::string big(1 << 16, 'a');  // malloc
    // KVM_RUN on a fd that is not a vCPU: allowed through, refused by the kernel.
    if (::ioctl(fds[0], kvm::kIoctlRun, 0) != -1) return 7;
    return big.size() == 1 << 16 ? 0 : 8;
  });
  EXPECT_TRUE(end.exited) << "signal " << end.signal;
  EXPECT_EQ(end.code, 0);
}

TEST(SeccompFiltersTest, ArgumentsAreChecked) {
  // Executable memory, on every kind.
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kEventLoop, [] {
              ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
              return 0;
            })));
  // An ioctl number not on the vCPU list (a terminal's TIOCSTI).
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kVcpu, [] {
              char c = 'x';
              ::ioctl(0, TIOCSTI, &c);
              return 0;
            })));
  // Sockets: unix only, and only with a device that asks for them.
  const FilterExtras extras = DeviceLikeExtras();
  EXPECT_TRUE(Stopped(Filtered(
      ThreadKind::kEventLoop,
      [] {
        ::socket(AF_INET, SOCK_STREAM, 0);
        return 0;
      },
      SeccompMode::kKill, extras)));
  ChildEnd unix_ok = Filtered(
      ThreadKind::kEventLoop,
      [] {
        int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        return fd >= 0 ? 0 : 3;
      },
      SeccompMode::kKill, extras);
  EXPECT_TRUE(unix_ok.exited && unix_ok.code == 0) << unix_ok.signal;
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kEventLoop, [] {
              ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
              return 0;
            })));
  // openat: read-only on the control thread, never on a vCPU.
  ChildEnd ro = Filtered(ThreadKind::kControl, [] {
    int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    return fd >= 0 ? 0 : 3;
  });
  EXPECT_TRUE(ro.exited && ro.code == 0) << ro.signal;
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kControl, [] {
              ::open("/tmp/dsec-jail-test-never", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
              return 0;
            })));
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kVcpu, [] {
              ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
              return 0;
            })));
  // Signals only to this process.
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kMain, [] {
              ::syscall(SYS_tgkill, 1, 1, 0);
              return 0;
            })));
}

TEST(SeccompFiltersTest, ADevicesCallsAreAllowedOnItsThreadOnly) {
  const FilterExtras extras = DeviceLikeExtras();
  int raw[2];
  ASSERT_EQ(::pipe(raw), 0);
  ScopedFd ends[2] = {ScopedFd(raw[0]), ScopedFd(raw[1])};
  const int fds[2] = {ends[0].get(), ends[1].get()};
  auto write_v2 = [&] {
    char c = 'x';
    iovec iov{&c, 1};
    // A pipe is not seekable: offset -1 (the current position) is the only
    // one pwritev2 takes on it.
    return ::pwritev2(fds[1], &iov, 1, -1, 0) == 1 ? 0 : 3;
  };
  ChildEnd loop = Filtered(ThreadKind::kEventLoop, write_v2, SeccompMode::kKill, extras);
  EXPECT_TRUE(loop.exited && loop.code == 0) << loop.code << " " << loop.signal;
  // The same call on the vCPU thread, or on the loop of a VM without the
  // device: stopped.
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kVcpu, write_v2, SeccompMode::kKill, extras)));
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kEventLoop, write_v2)));
  // An ioctl a device declares by number, on its thread only.
  auto fionread = [&] {
    int n = 0;
    return ::ioctl(fds[0], FIONREAD, &n) == 0 ? 0 : 3;
  };
  ChildEnd ioctl_ok = Filtered(ThreadKind::kEventLoop, fionread, SeccompMode::kKill, extras);
  EXPECT_TRUE(ioctl_ok.exited && ioctl_ok.code == 0) << ioctl_ok.code << " " << ioctl_ok.signal;
  EXPECT_TRUE(Stopped(Filtered(ThreadKind::kEventLoop, fionread)));
}

TEST(SeccompFiltersTest, ExtrasCannotWidenPastTheJailsLimits) {
  auto refused = [](ExtraSyscall e) {
    FilterExtras extras;
    extras.syscalls.push_back(std::move(e));
    return CheckFilterExtras(extras);
  };
  for (const char* never : {"execve", "clone", "ptrace", "mount", "setuid", "bpf",
                            "init_module", "process_vm_writev", "open_by_handle_at",
                            "rt_sigaction"}) {
    absl::Status s = refused({ThreadKind::kEventLoop, never, false, "a device"});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << never;
    EXPECT_NE(s.message().find(never), std::string::npos) << s;
  }
  EXPECT_FALSE(refused({ThreadKind::kEventLoop, "no_such_call", false, "typo"}).ok());
  EXPECT_FALSE(refused({ThreadKind::kEventLoop, "ioctl", false, "every request"}).ok());
  EXPECT_FALSE(refused({ThreadKind::kEventLoop, "socket", false, "any family"}).ok());
  EXPECT_TRUE(refused({ThreadKind::kEventLoop, "socket", true, "unix"}).ok());
  // A call the kind's list has keeps its argument checks: an extra mmap does
  // not make executable memory possible.
  FilterExtras mmap_extra;
  mmap_extra.syscalls = {{ThreadKind::kEventLoop, "mmap", false, "a device"}};
  EXPECT_TRUE(Stopped(Filtered(
      ThreadKind::kEventLoop,
      [] {
        ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return 0;
      },
      SeccompMode::kKill, mmap_extra)));
  // The monitor's jail refuses such options before anything starts.
  JailOptions o;
  o.extras.syscalls = {{ThreadKind::kMain, "execve", false, "a device"}};
  EXPECT_FALSE(ValidateJailOptions(o).ok());
}

TEST(SeccompFiltersTest, LogModeAllowsAndOffInstallsNothing) {
  for (SeccompMode m : {SeccompMode::kLog, SeccompMode::kOff}) {
    ChildEnd end = Filtered(
        ThreadKind::kVcpu,
        [] { return ::syscall(SYS_getppid) > 0 ? 0 : 3; }, m);
    EXPECT_TRUE(end.exited && end.code == 0) << SeccompModeName(m) << " signal " << end.signal;
  }
}

TEST(SeccompFiltersTest, OtherArchitecturesAreKilled) {
  // A kernel without IA32 emulation (CONFIG_IA32_EMULATION off, or
  // ia32_emulation=0) answers int 0x80 with SIGSEGV before any filter runs:
  // there is no i386 entry to guard then.
  ChildEnd unfiltered = InChild([] {
    long r;
    asm volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    return 0;
  });
  if (unfiltered.signal == SIGSEGV) {
    GTEST_SKIP() << "this kernel has no IA32 emulation: int 0x80 raises SIGSEGV without a filter";
  }
  ASSERT_EQ(unfiltered.signal, 0) << "int 0x80 getpid without a filter";
  // int 0x80 (the i386 ABI) with a call every list allows on x86_64 (getpid
  // is 20 there): the filter's architecture check kills it.
  ChildEnd end = Filtered(ThreadKind::kVcpu, [] {
    long r;
    asm volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    return 0;
  });
  EXPECT_EQ(end.signal, SIGSYS);
}

TEST(JailOptionsTest, BadOptionsAreNamed) {
  JailOptions o;
  o.uid = 1234;
  EXPECT_NE(ValidateJailOptions(o).message().find("--uid and --gid"), std::string::npos);
  o.gid = 0;
  EXPECT_NE(ValidateJailOptions(o).message().find("must not be 0"), std::string::npos);
  o.gid = 1234;
  EXPECT_TRUE(ValidateJailOptions(o).ok());
  o.test_hooks = {"syscall:gpu"};
  EXPECT_NE(ValidateJailOptions(o).message().find("syscall:gpu"), std::string::npos);
  o.test_hooks = {"open:"};
  EXPECT_FALSE(ValidateJailOptions(o).ok());
  o.test_hooks = {"open:/x", "syscall:vcpu"};
  EXPECT_TRUE(ValidateJailOptions(o).ok());
}

class PrivilegesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  }
};

TEST_F(PrivilegesTest, DropHoldsAndRootFilesAreClosed) {
  char path[] = "/tmp/dsec-jail-secret-XXXXXX";
  {
    ScopedFd fd(::mkstemp(path));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::fchmod(fd.get(), 0600), 0);
  }
  ChildEnd end = InChild([&] {
    if (!DropPrivileges(1'900'123'457, 1'900'123'457).ok()) return 3;
    Credentials c = CurrentCredentials();
    if (c.euid != 1'900'123'457 || c.egid != 1'900'123'457 || c.any_capability || c.groups) return 4;
    if (::open(path, O_RDONLY) >= 0 || errno != EACCES) return 5;
    if (::setuid(0) == 0) return 6;
    // /proc/self stays ours (the monitor reads its statistics there).
    if (::open("/proc/self/status", O_RDONLY) < 0) return 7;
    return 0;
  });
  ::unlink(path);
  EXPECT_TRUE(end.exited) << end.signal;
  EXPECT_EQ(end.code, 0);
  EXPECT_FALSE(DropPrivileges(0, 5).ok());
}

TEST_F(PrivilegesTest, TheGateDropsThenFiltersEveryThread) {
  ChildEnd end = InChild([] {
    JailOptions o;
    o.uid = 1'900'123'458;
    o.gid = 1'900'123'458;
    o.seccomp = SeccompMode::kKill;
    MonitorJail jail(o);
    absl::Status a, b;
    uid_t seen_uid = 0;
    std::thread t1([&] { a = jail.EnterThread(ThreadKind::kEventLoop); seen_uid = ::geteuid(); });
    std::thread t2([&] { b = jail.EnterThread(ThreadKind::kControl); });
    absl::Status locked = jail.Lock(2, -1);
    t1.join();
    t2.join();
    if (!locked.ok() || !a.ok() || !b.ok()) return 3;
    if (seen_uid != 1'900'123'458 || jail.credentials().euid != 1'900'123'458) return 4;
    // The main thread is filtered too.
    ::syscall(SYS_getppid);
    return 5;
  });
  EXPECT_TRUE(Stopped(end)) << "exited " << end.exited << " code " << end.code;
}

TEST_F(PrivilegesTest, AThreadTheJailDoesNotKnowStopsIt) {
  ChildEnd end = InChild([] {
    JailOptions o;
    o.seccomp = SeccompMode::kKill;
    MonitorJail jail(o);
    absl::Status a;
    std::thread known([&] { a = jail.EnterThread(ThreadKind::kReclaim); });
    std::atomic<bool> quit{false};
    std::thread stranger([&] {
      while (!quit.load()) ::usleep(1000);
    });
    absl::Status locked = jail.Lock(1, -1);
    quit.store(true);
    known.join();
    stranger.join();
    if (locked.ok()) return 3;
    if (locked.message().find("without a filter") == std::string_view::npos) return 4;
    return a.ok() ? 5 : 0;  // the waiting thread gets the failure
  });
  EXPECT_TRUE(end.exited) << end.signal;
  EXPECT_EQ(end.code, 0);
}

TEST_F(PrivilegesTest, AStoppedVmAbortsTheWait) {
  ChildEnd end = InChild([] {
    MonitorJail jail(JailOptions{});
    int fds[2];
    if (::pipe(fds) != 0) return 2;
    char c = 1;
    if (::write(fds[1], &c, 1) != 1) return 2;
    absl::Status s = jail.Lock(1, fds[0]);  // nobody comes
    return s.code() == absl::StatusCode::kAborted ? 0 : 3;
  });
  EXPECT_TRUE(end.exited) << end.signal;
  EXPECT_EQ(end.code, 0);
}

}  // namespace
}  // namespace dsec::jail
