// SPDX-License-Identifier: Apache-2.0
#include "vmm/jail/seccomp_filters.h"

#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <set>
#include <span>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "platform/kvm/kvm_ioctl_numbers.h"

namespace dsec::jail {

namespace {

// The calling thread's kind once its filter is on (for the reporter).
thread_local int current_kind = -1;

// Async-signal-safe: appends the decimal of `v` to buf at *n.
void AppendNumber(char* buf, size_t* n, size_t cap, long v) {
  char digits[24];
  size_t d = 0;
  const bool neg = v < 0;
  unsigned long u = neg ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
  do {
    digits[d++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && d < sizeof(digits));
  if (neg && *n < cap) buf[(*n)++] = '-';
  while (d > 0 && *n < cap) buf[(*n)++] = digits[--d];
}

void AppendText(char* buf, size_t* n, size_t cap, const char* s) {
  while (*s != '\0' && *n < cap) buf[(*n)++] = *s++;
}

void AppendHex(char* buf, size_t* n, size_t cap, unsigned long v) {
  AppendText(buf, n, cap, "0x");
  char digits[16];
  size_t d = 0;
  do {
    digits[d++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0 && d < sizeof(digits));
  while (d > 0 && *n < cap) buf[(*n)++] = digits[--d];
}

void ReportSigsys(int, siginfo_t* info, void* context) {
  char line[400];
  size_t n = 0;
  AppendText(line, &n, sizeof(line), "dsec-monitor: seccomp: system call ");
  AppendNumber(line, &n, sizeof(line), info->si_syscall);
  AppendText(line, &n, sizeof(line), " is not allowed on a ");
  static const char* const kNames[] = {"main", "vcpu", "event-loop", "control", "reclaim", "pager"};
  const int k = current_kind;
  AppendText(line, &n, sizeof(line), k >= 0 && k < 6 ? kNames[k] : "unfiltered");
  AppendText(line, &n, sizeof(line), " thread; stopping");
  // Where it came from, so that a call off the lists can be found (the
  // binary is static and not position-independent: addr2line maps the
  // address), and for a file opened, which file (the thread's own pointer,
  // read in its own handler; the copy is bounded).
  const auto* uc = static_cast<const ucontext_t*>(context);
  if (uc != nullptr) {
    AppendText(line, &n, sizeof(line), " (at ");
    AppendHex(line, &n, sizeof(line), static_cast<unsigned long>(uc->uc_mcontext.gregs[REG_RIP]));
    const long nr = info->si_syscall;
    const char* path = nullptr;
    if (nr == SYS_openat) path = reinterpret_cast<const char*>(uc->uc_mcontext.gregs[REG_RSI]);
    if (nr == SYS_open) path = reinterpret_cast<const char*>(uc->uc_mcontext.gregs[REG_RDI]);
    if (path != nullptr) {
      AppendText(line, &n, sizeof(line), ", path ");
      for (int i = 0; i < 120 && path[i] != '\0' && n < sizeof(line); ++i) line[n++] = path[i];
    }
    AppendText(line, &n, sizeof(line), ")");
  }
  AppendText(line, &n, sizeof(line), "\n");
  ::syscall(SYS_write, 2, line, n);
  ::syscall(SYS_exit_group, kSeccompExitStatus);
}

// How a rule's arguments are restricted.
enum class Cond {
  kAny,
  kIoctl,        // arg1 (request) is one of the kind's ioctl numbers
  kUnixSocket,   // socket(AF_UNIX, ...)
  kNoExec,       // mmap/mprotect: arg2 (prot) without PROT_EXEC
  kOwnProcess,   // tgkill(getpid(), ...)
  kReadOnly,     // openat: no O_WRONLY/O_RDWR/O_CREAT/O_TRUNC in arg2
  // Snapshot files (FilterExtras::snapshot_dir_fd, passed to AddRule):
  kCreateInDir,  // openat(dir, ..., O_WRONLY|O_CREAT|O_EXCL[|O_CLOEXEC])
  kInDir,        // unlinkat(dir, ...)
  kBothInDir,    // renameat(dir, ..., dir, ...), renameat2 likewise
};

struct Rule {
  const char* name;
  Cond cond;
  // Why the thread kind needs it (the README lists these).
  const char* why;
};

using Rules = std::initializer_list<Rule>;

// Every thread: memory, locks, time, its own exit, logging to stderr.
constexpr Rules kCommon = {
    {"read", Cond::kAny, "eventfds, signalfd, pipes"},
    {"write", Cond::kAny, "eventfd wake-ups, log lines on stderr"},
    {"writev", Cond::kAny, "log lines (stdio)"},
    {"close", Cond::kAny, "fds the thread is done with"},
    {"futex", Cond::kAny, "mutexes and condition variables"},
    {"mmap", Cond::kNoExec, "malloc (never executable memory)"},
    {"mprotect", Cond::kNoExec, "malloc arenas (never executable)"},
    {"munmap", Cond::kAny, "free"},
    {"mremap", Cond::kAny, "realloc of large blocks"},
    {"madvise", Cond::kAny, "free (MADV_DONTNEED), balloon and pageout on guest RAM"},
    {"brk", Cond::kAny, "malloc"},
    {"rt_sigprocmask", Cond::kAny, "signal masks around blocking calls"},
    {"rt_sigreturn", Cond::kAny, "return from the vCPU kick handler"},
    {"sigaltstack", Cond::kAny, "thread exit releases its signal stack"},
    {"clock_gettime", Cond::kAny, "timestamps (vDSO fallback)"},
    {"clock_nanosleep", Cond::kAny, "back-off sleeps"},
    {"nanosleep", Cond::kAny, "back-off sleeps"},
    {"sched_yield", Cond::kAny, "spin locks (absl)"},
    {"sched_getaffinity", Cond::kAny, "absl counts CPUs for its spin locks"},
    {"gettid", Cond::kAny, "thread ids in logs"},
    {"getpid", Cond::kAny, "own pid for signals"},
    {"tgkill", Cond::kOwnProcess, "kick a vCPU thread of this process; abort()"},
    {"rseq", Cond::kAny, "glibc's restartable sequences"},
    {"getrandom", Cond::kAny, "hash seeds (absl)"},
    {"fstat", Cond::kAny, "stdio"},
    {"newfstatat", Cond::kAny, "stdio"},
    {"lseek", Cond::kAny, "stdio"},
    {"restart_syscall", Cond::kAny, "interrupted sleeps"},
    {"timerfd_create", Cond::kAny, "timers made at run time (console retry, PIT)"},
    {"timerfd_settime", Cond::kAny, "timers armed by device models (the PIT on a vCPU)"},
    {"timerfd_gettime", Cond::kAny, "PIT counter reads"},
    {"eventfd2", Cond::kAny, "wake-up fds of back-ends made when the guest starts a device"},
    {"exit", Cond::kAny, "thread exit"},
    {"exit_group", Cond::kAny, "process exit"},
};

// vCPU threads: KVM_RUN and the exits' device emulation.
constexpr Rules kVcpu = {
    {"ioctl", Cond::kIoctl, "KVM_RUN, vCPU state, interrupt injection"},
    {"pread64", Cond::kAny, "device register reads backed by files"},
    {"pwrite64", Cond::kAny, "device register writes backed by files"},
};

// The device event loop: timers, interrupt injection, and what the VM's
// devices declare for their back-ends (FilterExtras: disk I/O for a disk,
// unix sockets for vsock, ...).
constexpr Rules kEventLoop = {
    {"epoll_wait", Cond::kAny, "the loop"},
    {"epoll_pwait", Cond::kAny, "the loop"},
    {"epoll_ctl", Cond::kAny, "register and drop fds (back-ends' connections, timers)"},
    {"ioctl", Cond::kIoctl, "interrupt injection (KVM_IRQ_LINE, KVM_SIGNAL_MSI)"},
    {"fcntl", Cond::kAny, "flags of fds made at run time (O_NONBLOCK on accepted connections)"},
};

// The control socket: clients, and the stats it answers (/proc/self).
constexpr Rules kControl = {
    {"poll", Cond::kAny, "clients"},
    {"ppoll", Cond::kAny, "clients"},
    {"accept4", Cond::kAny, "clients"},
    {"sendto", Cond::kAny, "responses"},
    {"recvfrom", Cond::kAny, "requests"},
    {"openat", Cond::kReadOnly, "/proc/self/{status,smaps_rollup} for stats (read-only)"},
    {"pread64", Cond::kAny, "/proc/self/pagemap"},
    {"mincore", Cond::kAny, "guest RAM the host backs"},
    {"getdents64", Cond::kAny, "/proc/self listings"},
};

// The control thread with --snapshot-dir (FilterExtras::snapshot_dir_fd):
// writing a snapshot of the paused VM into that directory.
constexpr Rules kControlSnapshot = {
    {"openat", Cond::kCreateInDir, "create the snapshot's files, in its directory only"},
    {"pwrite64", Cond::kAny, "write guest RAM and the manifest"},
    {"ftruncate", Cond::kAny, "size the memory file"},
    {"fsync", Cond::kAny, "make the snapshot durable"},
    {"renameat", Cond::kBothInDir, "publish the manifest"},
    {"renameat2", Cond::kBothInDir, "publish the manifest"},
    {"unlinkat", Cond::kInDir, "remove a snapshot that failed half-way"},
};

// The reclaim controller: its timer loop, /proc and DAMON's sysfs files
// (DAMON only as root: openat may write), madvise on guest RAM.
constexpr Rules kReclaim = {
    {"epoll_wait", Cond::kAny, "its timer loop"},
    {"epoll_pwait", Cond::kAny, "its timer loop"},
    {"epoll_ctl", Cond::kAny, "its timer loop"},
    {"openat", Cond::kAny, "/proc/self/pagemap, /proc/meminfo, PSI, DAMON sysfs (written)"},
    {"pread64", Cond::kAny, "/proc/self/pagemap"},
    {"mincore", Cond::kAny, "resident guest pages"},
    {"process_madvise", Cond::kAny, "pageout of cold guest pages"},
    {"getdents64", Cond::kAny, "DAMON sysfs listings"},
    {"fallocate", Cond::kAny, "balloon hole punching"},
};

// A lazy restore's pager (platform/memory/uffd_pager.h): waits on its
// userfaultfd and copies guest pages in.
constexpr Rules kPager = {
    {"poll", Cond::kAny, "its userfaultfd and wake-up eventfds"},
    {"ppoll", Cond::kAny, "its userfaultfd and wake-up eventfds"},
    {"ioctl", Cond::kIoctl, "UFFDIO_COPY, UFFDIO_ZEROPAGE, UFFDIO_WAKE"},
};

// The main thread after the jail: waiting for the stop, then tearing the VM
// down and writing its report (to files opened before the jail).
constexpr Rules kMain = {
    {"poll", Cond::kAny, "the stop eventfd and the signalfd"},
    {"ppoll", Cond::kAny, "the stop eventfd and the signalfd"},
    {"ioctl", Cond::kIoctl, "final vCPU registers; unregistering irqfds/ioeventfds/memslots"},
    {"openat", Cond::kReadOnly, "/proc/self for the final stats (read-only)"},
    {"pread64", Cond::kAny, "/proc/self/pagemap"},
    {"mincore", Cond::kAny, "guest RAM the host backed"},
    {"getdents64", Cond::kAny, "/proc/self listings"},
    {"unlink", Cond::kAny, "the control socket at exit"},
    {"unlinkat", Cond::kAny, "the control socket at exit"},
    {"rmdir", Cond::kAny, "the sandbox cgroup of a placed VM"},
    {"epoll_ctl", Cond::kAny, "device teardown"},
    {"epoll_wait", Cond::kAny, "the device loop's last work, run here once its thread ended"},
    {"epoll_pwait", Cond::kAny, "the same"},
};

// ioctl request numbers of a kind's own list (TCGETS from stdio on the main
// thread); devices add theirs through FilterExtras.
std::vector<unsigned long> BaseIoctls(ThreadKind kind) {
  std::vector<unsigned long> out;
  auto add = [&out](std::span<const unsigned long> s) { out.insert(out.end(), s.begin(), s.end()); };
  switch (kind) {
    case ThreadKind::kVcpu:
      add(kvm::VcpuRunIoctls());
      break;
    case ThreadKind::kEventLoop:
      add(kvm::InterruptIoctls());
      break;
    case ThreadKind::kMain:
      add(kvm::TeardownIoctls());
      out.push_back(TCGETS);
      break;
    case ThreadKind::kControl:
      add(kvm::PauseIoctls());
      break;
    case ThreadKind::kPager:
      out.push_back(UFFDIO_COPY);
      out.push_back(UFFDIO_ZEROPAGE);
      out.push_back(UFFDIO_WAKE);
      break;
    default:
      break;
  }
  return out;
}

bool SnapshotWrites(ThreadKind kind, const FilterExtras& extras) {
  return kind == ThreadKind::kControl && extras.snapshot_dir_fd >= 0;
}

// Calls no thread of the monitor makes, whatever its devices: an extra that
// names one is refused (the jail's promise in its README, and the calls an
// escaped guest would want most).
constexpr const char* kNeverAllowed[] = {
    "execve", "execveat", "fork", "vfork", "clone", "clone3", "ptrace", "process_vm_readv",
    "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "capset", "prctl", "seccomp", "bpf", "perf_event_open",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "open_by_handle_at", "name_to_handle_at", "keyctl", "add_key", "request_key", "reboot",
    "swapon", "swapoff", "acct", "personality", "rt_sigaction", "sigaction",
};

std::vector<const Rules*> RulesFor(ThreadKind kind) {
  switch (kind) {
    case ThreadKind::kVcpu:
      return {&kCommon, &kVcpu};
    case ThreadKind::kEventLoop:
      return {&kCommon, &kEventLoop};
    case ThreadKind::kControl:
      return {&kCommon, &kControl};
    case ThreadKind::kReclaim:
      return {&kCommon, &kReclaim};
    case ThreadKind::kPager:
      return {&kCommon, &kPager};
    case ThreadKind::kMain:
      return {&kCommon, &kMain};
  }
  return {&kCommon};
}

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

absl::Status SeccompError(const char* what, int rc) {
  return absl::InternalError(absl::StrCat("seccomp: ", what, ": ", std::strerror(-rc)));
}

absl::Status AddRule(scmp_filter_ctx ctx, const Rule& rule, const std::vector<unsigned long>& ioctls,
                     int dir_fd = -1) {
  const int nr = seccomp_syscall_resolve_name(rule.name);
  if (nr == __NR_SCMP_ERROR) {
    return absl::InternalError(absl::StrCat("seccomp: unknown system call ", rule.name));
  }
  int rc = 0;
  switch (rule.cond) {
    case Cond::kAny:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
      break;
    case Cond::kIoctl:
      for (unsigned long req : ioctls) {
        // The request is an unsigned int in the kernel: compare 32 bits.
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, req & 0xffffffffu));
        if (rc != 0) break;
      }
      break;
    case Cond::kUnixSocket:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
      break;
    case Cond::kNoExec:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                            SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
      break;
    case Cond::kOwnProcess:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                            SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(::getpid())));
      break;
    case Cond::kReadOnly:
      rc = seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, nr, 1,
          SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND, O_RDONLY));
      break;
    case Cond::kCreateInDir:
      rc = seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, nr, 2, SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(dir_fd)),
          SCMP_A2(SCMP_CMP_MASKED_EQ,
                  O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_DIRECTORY | O_PATH,
                  O_WRONLY | O_CREAT | O_EXCL));
      break;
    case Cond::kInDir:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                            SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(dir_fd)));
      break;
    case Cond::kBothInDir:
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 2,
                            SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(dir_fd)),
                            SCMP_A2(SCMP_CMP_EQ, static_cast<scmp_datum_t>(dir_fd)));
      break;
  }
  if (rc != 0) return SeccompError(rule.name, rc);
  return absl::OkStatus();
}

}  // namespace

std::string_view ThreadKindName(ThreadKind kind) {
  switch (kind) {
    case ThreadKind::kMain:
      return "main";
    case ThreadKind::kVcpu:
      return "vcpu";
    case ThreadKind::kEventLoop:
      return "event-loop";
    case ThreadKind::kControl:
      return "control";
    case ThreadKind::kReclaim:
      return "reclaim";
    case ThreadKind::kPager:
      return "pager";
  }
  return "?";
}

absl::StatusOr<ThreadKind> ParseThreadKind(std::string_view name) {
  for (ThreadKind k : kAllThreadKinds) {
    if (ThreadKindName(k) == name) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown thread kind \"", std::string(name), "\" (main, vcpu, event-loop, control, reclaim, pager)"));
}

std::string_view SeccompModeName(SeccompMode mode) {
  switch (mode) {
    case SeccompMode::kOff:
      return "off";
    case SeccompMode::kLog:
      return "log";
    case SeccompMode::kKill:
      return "kill";
  }
  return "?";
}

absl::StatusOr<SeccompMode> ParseSeccompMode(std::string_view name) {
  for (SeccompMode m : {SeccompMode::kOff, SeccompMode::kLog, SeccompMode::kKill}) {
    if (SeccompModeName(m) == name) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--seccomp ", std::string(name), ": expected kill, log or off"));
}

absl::Status CheckFilterExtras(const FilterExtras& extras) {
  for (const ExtraSyscall& e : extras.syscalls) {
    const std::string what = absl::StrCat("seccomp: ", e.name, " for the ",
                                          std::string(ThreadKindName(e.thread)), " thread (",
                                          e.why, ")");
    if (seccomp_syscall_resolve_name(e.name.c_str()) == __NR_SCMP_ERROR) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": unknown system call"));
    }
    if (std::find(std::begin(kNeverAllowed), std::end(kNeverAllowed), e.name) !=
        std::end(kNeverAllowed)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": never allowed in the monitor"));
    }
    // Arguments are checked here, not left to the extra: ioctl by request
    // number (ExtraIoctl), socket by family.
    if (e.name == "ioctl") {
      return absl::InvalidArgumentError(absl::StrCat(what, ": declare ioctl requests by number"));
    }
    if (e.name == "socket" && !e.unix_socket_only) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": sockets are AF_UNIX only"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> AllowedSyscalls(ThreadKind kind, const FilterExtras& extras) {
  std::vector<std::string> out;
  for (const Rules* rules : RulesFor(kind)) {
    for (const Rule& r : *rules) out.emplace_back(r.name);
  }
  for (const ExtraSyscall& e : extras.syscalls) {
    if (e.thread == kind) out.push_back(e.name);
  }
  if (SnapshotWrites(kind, extras)) {
    for (const Rule& r : kControlSnapshot) out.emplace_back(r.name);
  }
  if (!AllowedIoctls(kind, extras).empty()) out.emplace_back("ioctl");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<unsigned long> AllowedIoctls(ThreadKind kind, const FilterExtras& extras) {
  std::vector<unsigned long> out = BaseIoctls(kind);
  for (const ExtraIoctl& e : extras.ioctls) {
    if (e.thread == kind) out.push_back(e.request);
  }
  if (SnapshotWrites(kind, extras)) {
    for (unsigned long r : kvm::SnapshotIoctls()) out.push_back(r);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::Status InstallThreadFilter(ThreadKind kind, SeccompMode mode, const FilterExtras& extras) {
  if (mode == SeccompMode::kOff) return absl::OkStatus();
  DSEC_RETURN_IF_ERROR(CheckFilterExtras(extras));
  std::unique_ptr<void, CtxDeleter> ctx(
      seccomp_init(mode == SeccompMode::kKill ? SCMP_ACT_TRAP : SCMP_ACT_LOG));
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
      rc != 0) {
    return SeccompError("bad-architecture action", rc);
  }
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 1); rc != 0) {
    return SeccompError("no_new_privs", rc);
  }
  const std::vector<unsigned long> ioctls = AllowedIoctls(kind, extras);
  std::set<std::string> listed;
  for (const Rules* rules : RulesFor(kind)) {
    for (const Rule& r : *rules) {
      DSEC_RETURN_IF_ERROR(AddRule(ctx.get(), r, ioctls));
      listed.insert(r.name);
    }
  }
  if (SnapshotWrites(kind, extras)) {
    for (const Rule& r : kControlSnapshot) {
      DSEC_RETURN_IF_ERROR(AddRule(ctx.get(), r, ioctls, extras.snapshot_dir_fd));
      listed.insert(r.name);
    }
  }
  // The extras for this kind, one rule per call (several devices may name
  // it): a call the kind's own list has keeps that list's argument checks;
  // socket is AF_UNIX-only (CheckFilterExtras refuses anything else).
  std::set<std::string> extra_calls;
  for (const ExtraSyscall& e : extras.syscalls) {
    if (e.thread == kind && listed.count(e.name) == 0) extra_calls.insert(e.name);
  }
  for (const std::string& name : extra_calls) {
    const Cond cond = name == "socket" ? Cond::kUnixSocket : Cond::kAny;
    DSEC_RETURN_IF_ERROR(AddRule(ctx.get(), Rule{name.c_str(), cond, "a device's"}, ioctls));
  }
  if (listed.count("ioctl") == 0 && !ioctls.empty()) {
    DSEC_RETURN_IF_ERROR(AddRule(ctx.get(), Rule{"ioctl", Cond::kIoctl, "a device's"}, ioctls));
  }
  if (int rc = seccomp_load(ctx.get()); rc != 0) return SeccompError("load", rc);
  current_kind = static_cast<int>(kind);
  return absl::OkStatus();
}

absl::Status InstallSigsysReporter() {
  struct sigaction sa = {};
  sa.sa_sigaction = &ReportSigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSYS, &sa, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("sigaction(SIGSYS): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace dsec::jail
