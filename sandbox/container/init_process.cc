// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/container/init_protocol.h"
#include "base/fd_passing.h"

namespace dsec::container {

namespace {

constexpr size_t kChildStackBytes = 64 << 10;
// Requests that fit use the init's standing buffer; larger ones (up to
// kMaxExecRequestBytes) map one of their own for the duration.
constexpr size_t kStandingBodyBytes = 256 << 10;
constexpr size_t kStandingSlots = 16 << 10;
constexpr size_t kStandingBytes = kStandingBodyBytes + kStandingSlots * sizeof(char*);
// Exec processes whose exit is still to be reported (the runtime refuses
// execs beyond it, so the oldest is dropped only after an exec gave up).
constexpr int kMaxTracked = kMaxInitTracked;

struct Tracked {
  pid_t pid = 0;
  bool kill_group = false;
  int report_fd = -1;  // the exec's report pipe: kExited goes there
};

struct InitState {
  int control = -1;  // -1 once the runtime's end is gone
  int sigfd = -1;
  char* stack_top = nullptr;
  char* standing = nullptr;
  Tracked tracked[kMaxTracked];
  int ntracked = 0;
  int oom_score = -1;  // its own /proc/self/oom_score_adj, open for writing
};

struct SpawnArgs {
  const ParsedExecRequest* request = nullptr;
  int fds[kExecRequestFds] = {-1, -1, -1, -1, -1};
  uid_t uid = 0;
  gid_t gid = 0;
};

// What an exec process and a copy do first: their own session, the
// request's descriptors on 0-3 and no other, signals unblocked, the
// request's ids. Failures go to the error pipe. Allocates nothing.
void EnterChild(const SpawnArgs& a) {
  const int err_fd = a.fds[3];
  if (::setsid() < 0) FailChild(err_fd, kSetsid, errno);
  // Received descriptors are all above 3 (the init keeps /dev/null on
  // 0-3), so none is overwritten before it is duplicated, and dup2 onto
  // 0-2 clears close-on-exec; the error pipe stays close-on-exec on 3.
  if (::dup2(a.fds[0], 0) < 0 || ::dup2(a.fds[1], 1) < 0 || ::dup2(a.fds[2], 2) < 0 ||
      ::dup3(err_fd, 3, O_CLOEXEC) < 0) {
    FailChild(err_fd, kStdio, errno);
  }
  ::syscall(SYS_close_range, 4, ~0u, 0);
  // Every disposition is the default (RunInit), so nothing of the init's
  // can run here once signals are unblocked.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (a.uid != 0 || a.gid != 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(a.gid, a.gid, a.gid) != 0 ||
        ::setresuid(a.uid, a.uid, a.uid) != 0) {
      FailChild(3, kSetId, errno);
    }
  }
}

// The exec process: a CLONE_VFORK child of the init, running on its own
// stack in the init's memory (or, when it switches ids, a copy of it) until
// execve. It writes nothing the init reads (errno aside, which the init
// does not look at across the clone) and allocates nothing.
int ExecChild(void* arg) {
  const SpawnArgs& a = *static_cast<const SpawnArgs*>(arg);
  EnterChild(a);
  // After the switch: a uid enters only the directories it may enter.
  if (::chdir(a.request->cwd) != 0) FailChild(3, kChdir, errno);
  int last = ENOENT;
  for (uint32_t i = 0; i < a.request->npaths; ++i) {
    ::execve(a.request->paths[i], a.request->argv, a.request->envp);
    // Keep the most telling error: EACCES beats a later ENOENT.
    if (errno != ENOENT || last == ENOENT) last = errno;
  }
  FailChild(3, kExec, last);
}

// The copy's buffer (kExecCopyStdinToStdout). Only copies touch it, each
// in its own memory: the init's pages of it stay untouched.
char g_copy_buffer[64 << 10];

// A copy of the init made for kExecCopyStdinToStdout: a fork, not a
// CLONE_VM child, so that the init goes on serving while it copies (and
// the copy's memory is its own, with this sandbox's cgroups charged for
// what it allocates). Exits 0 at stdin's EOF with everything written, else
// with the errno of the read or write that failed.
int CopyChild(void* arg) {
  EnterChild(*static_cast<const SpawnArgs*>(arg));
  // The first its memory cgroup's OOM killer takes: a file that does not
  // fit ends this copy, not the sandbox's own processes. Its /proc entry
  // opens only while it is dumpable (else the entry is host root's, which
  // in a user namespace the copy is not), so for that moment it is: a
  // process of the sandbox that attached to it meanwhile would hold a
  // copy that can do no more than the sandbox's root can (write this
  // file; its other descriptors are gone). Best effort: without the
  // sandbox's /proc the killer goes by size, as for any process.
  ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  const int adj = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (adj >= 0) {
    (void)!::write(adj, "1000", 4);
    ::close(adj);
  }
  // In the kernel where it can (stdin is a memory file, exec.cc), by hand
  // where it cannot.
  for (;;) {
    const ssize_t n = ::sendfile(1, 0, nullptr, 1 << 30);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) ::_exit(0);
    if (n < 0 && errno != EINVAL && errno != ENOSYS) ::_exit(errno & 0xff);
    if (n < 0) break;
  }
  for (;;) {
    const ssize_t n = ::read(0, g_copy_buffer, sizeof(g_copy_buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ::_exit(errno & 0xff);
    if (n == 0) ::_exit(0);
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(1, g_copy_buffer + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) ::_exit(errno & 0xff);
      if (w == 0) ::_exit(EIO);
      off += w;
    }
  }
}

// The init's OOM score: `value` ("0" or "-1000"). The runtime shielded
// the init (init_launch.h ShieldInitFromOom); each process it starts is
// cloned at 0, and the init goes back behind the shield after. Without the
// shield the "-1000" fails (EACCES) and the init stays at 0.
void SetOomScore(const InitState& in, const char* value) {
  if (in.oom_score >= 0) (void)!::pwrite(in.oom_score, value, std::strlen(value), 0);
}

// One message to the runtime, with `fd` attached if >= 0. Never blocks: a
// runtime that stopped reading loses messages, and the init goes on.
void Send(const InitState& in, const InitMessage& m, int fd) {
  if (in.control < 0) return;
  SendWithFds(in.control, &m, sizeof(m), &fd, fd >= 0 ? 1 : 0, MSG_DONTWAIT);
}

bool ReadFull(int fd, char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = ::read(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

void Track(InitState& in, pid_t pid, bool kill_group, int report_fd) {
  if (in.ntracked == kMaxTracked) {
    // Its runtime side sees EOF: the exit is unknown.
    ::close(in.tracked[0].report_fd);
    std::memmove(&in.tracked[0], &in.tracked[1], sizeof(Tracked) * (kMaxTracked - 1));
    --in.ntracked;
  }
  in.tracked[in.ntracked++] = Tracked{pid, kill_group, report_fd};
}

// Reaps every child that has exited, own and adopted. For an exec process
// that asked for it, the rest of its process group is SIGKILLed while its
// zombie still holds the group's id (so no new process can have taken
// it), and the report says whether anything of the group was left.
void ReapChildren(InitState& in) {
  while (true) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    int index = -1;
    for (int i = 0; i < in.ntracked; ++i) {
      if (in.tracked[i].pid == pid) index = i;
    }
    const bool kill_group = index >= 0 && in.tracked[index].kill_group;
    if (kill_group) ::kill(-pid, SIGKILL);
    int status = 0;
    rusage usage{};
    if (::wait4(pid, &status, 0, &usage) != pid) return;
    if (index < 0) continue;
    InitMessage m;
    m.type = kInitExited;
    m.pid = pid;
    m.value = status;
    m.maxrss_kib = static_cast<uint64_t>(usage.ru_maxrss);
    // With the leader reaped, only members left behind still carry the id.
    m.group_left = kill_group && ::kill(-pid, 0) == 0 ? 1 : 0;
    const int report_fd = in.tracked[index].report_fd;
    std::memmove(&in.tracked[index], &in.tracked[index + 1],
                 sizeof(Tracked) * static_cast<size_t>(in.ntracked - index - 1));
    --in.ntracked;
    // One small write into an empty pipe only this init writes to: it
    // never blocks; a reader that gave up makes it fail (EPIPE, SIGPIPE
    // blocked), which is fine.
    (void)!::write(report_fd, &m, sizeof(m));
    ::close(report_fd);
  }
}

// Reads and serves one request. False when the control channel is done:
// closed by the runtime, or out of step (nothing after can be trusted).
bool ServeRequest(InitState& in) {
  ExecRequestHeader h;
  int fds[kExecRequestFds] = {-1, -1, -1, -1, -1};
  size_t nfds = 0;
  bool dropped = false;
  const ssize_t n = ReceiveWithFds(in.control, &h, sizeof(h), fds, kExecRequestFds, &nfds,
                                   MSG_WAITALL, &dropped);
  auto close_fds = [&fds] {
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  if (n != static_cast<ssize_t>(sizeof(h)) || dropped || h.magic != kExecRequestMagic ||
      h.body_bytes > kMaxExecRequestBytes) {
    close_fds();
    return false;
  }
  InitMessage reply;
  reply.type = kInitSpawnFailed;
  reply.value = EINVAL;
  reply.seq = h.seq;
  const size_t slots = ExecRequestPointerSlots(h);
  char* buf = in.standing;
  size_t mapped = 0;
  size_t body_room = kStandingBodyBytes;
  const bool fits = h.body_bytes <= kStandingBodyBytes && slots <= kStandingSlots;
  // A valid request has fewer pointer slots than body bytes + 3.
  const bool plausible = slots <= static_cast<size_t>(h.body_bytes) + 3;
  if (!fits && plausible) {
    body_room = (static_cast<size_t>(h.body_bytes) + 7) & ~size_t{7};
    mapped = body_room + slots * sizeof(char*);
    void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      mapped = 0;
      reply.value = ENOMEM;
    } else {
      buf = static_cast<char*>(m);
    }
  }
  const bool have_buffer = fits || mapped != 0;
  // The body is read even when it will be refused, to stay in step.
  bool in_step = true;
  if (have_buffer) {
    in_step = ReadFull(in.control, buf, h.body_bytes);
  } else {
    for (size_t left = h.body_bytes; in_step && left > 0;) {
      size_t chunk = left < kStandingBodyBytes ? left : kStandingBodyBytes;
      in_step = ReadFull(in.control, in.standing, chunk);
      left -= chunk;
    }
  }
  ParsedExecRequest request;
  bool fds_ok = nfds == kExecRequestFds;
  if (in_step && have_buffer && fds_ok &&
      ParseExecRequest(h, buf, h.body_bytes, reinterpret_cast<char**>(buf + body_room), slots,
                       &request)) {
    SpawnArgs args;
    args.request = &request;
    std::memcpy(args.fds, fds, sizeof(fds));
    args.uid = h.uid;
    args.gid = h.gid;
    int pidfd = -1;
    // Signals stay blocked in the child until it has reset its mask. A
    // child that changes its uid or gid gets a copy of the memory: the
    // kernel resets the dumpable flag of the memory of a task whose ids
    // change (to fs.suid_dumpable), and in shared memory that would be the
    // init's, opening /proc/1/mem to the sandbox's processes.
    const bool switch_ids = args.uid != 0 || args.gid != 0;
    // A copy is a fork (CopyChild): the init does not wait for it.
    const bool copy = (h.flags & kExecCopyStdinToStdout) != 0;
    SetOomScore(in, "0");
    int pid = copy ? ::clone(&CopyChild, in.stack_top, CLONE_PIDFD | SIGCHLD, &args, &pidfd)
                   : ::clone(&ExecChild, in.stack_top,
                             (switch_ids ? 0 : CLONE_VM) | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &args,
                             &pidfd);
    SetOomScore(in, "-1000");
    if (pid > 0) {
      Track(in, pid, (h.flags & kExecKillGroupOnExit) != 0, fds[4]);
      fds[4] = -1;  // kept until the exit is reported
      reply.type = kInitSpawned;
      reply.pid = pid;
      reply.value = 0;
      Send(in, reply, pidfd);
      ::close(pidfd);
    } else {
      reply.value = errno;
    }
  }
  if (reply.type == kInitSpawnFailed && in_step) Send(in, reply, -1);
  close_fds();
  if (mapped != 0) ::munmap(buf, mapped);
  return in_step;
}

}  // namespace

void RunInit(const InitPlan& plan) {
  const int report = plan.report_fd;
  // Before anything that binds to the network namespace (sysfs, lo).
  if (plan.net_fd >= 0 && ::setns(plan.net_fd, CLONE_NEWNET) != 0) FailChild(report, kSetns, errno);
  // Keep only the sync pipes, the control socket and the root's mount:
  // descriptors of the runtime (other sandboxes' among them) must not live
  // on in the sandbox.
  constexpr int kKeep = 6;
  int keep[kKeep] = {plan.go_fd, report, plan.control_fd, plan.root.overlay_fd, plan.root.sys_fd, plan.root.dev_fd};
  for (int i = 0; i < kKeep; ++i) {
    for (int j = i + 1; j < kKeep; ++j) {
      if (keep[j] < keep[i]) {
        int t = keep[i];
        keep[i] = keep[j];
        keep[j] = t;
      }
    }
  }
  int from = 0;
  for (int fd : keep) {
    if (fd < 0) continue;  // a descriptor not sent
    if (fd > from) ::syscall(SYS_close_range, from, fd - 1, 0);
    from = fd + 1;
  }
  ::syscall(SYS_close_range, from, ~0u, 0);
  char go = 0;
  if (::read(plan.go_fd, &go, 1) != 1) FailChild(report, kWaitGo, errno ? errno : EPIPE);
  ::close(plan.go_fd);
  // Made now, after the runtime put us in the sandbox's cgroups, so that
  // those become the cgroup namespace's root (BuildSandboxRoot).
  BuildSandboxRoot(plan.root);

  // No handler may run in an exec process before it execs (it shares this
  // memory): every disposition back to the default, and all signals
  // blocked here; SIGCHLD is read from a signalfd. Signals from inside the
  // pid namespace cannot kill its init, and blocked ones stay pending.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  // Inherited by every process of the sandbox.
  rlimit nofile{plan.nofile, plan.nofile};
  rlimit core{0, 0};
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0 || ::setrlimit(RLIMIT_CORE, &core) != 0) {
    FailChild(report, kRlimit, errno);
  }
  // Its own OOM score, to start each process outside the runtime's shield
  // (SetOomScore). The entry opens only while the init is dumpable (in a
  // user namespace its uid change made it not): for that moment it is,
  // before any other process of the sandbox exists. Without it every
  // process would inherit the shield, and a sandbox that fills its memory
  // would have nothing the OOM killer may take: the create fails instead.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) FailChild(report, kControl, errno);
  const int oom_score = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom_score < 0) FailChild(report, kControl, errno);
  // The sandbox's processes share our uid and capabilities: without this
  // they could open /proc/1/mem and rewrite the code that reports their
  // exit status. Exec processes get dumpable back when they execve.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) FailChild(report, kControl, errno);

  InitState in;
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) FailChild(report, kControl, errno);
  // Everything we keep moves above 3, and /dev/null fills 0-3, so that
  // received descriptors arrive above 3 (ExecChild relies on it).
  in.sigfd = ::fcntl(sigfd, F_DUPFD_CLOEXEC, 10);
  in.control = ::fcntl(plan.control_fd, F_DUPFD_CLOEXEC, 10);
  in.oom_score = ::fcntl(oom_score, F_DUPFD_CLOEXEC, 10);
  const int ready_fd = ::fcntl(report, F_DUPFD_CLOEXEC, 10);
  if (in.sigfd < 0 || in.control < 0 || in.oom_score < 0 || ready_fd < 0) FailChild(report, kControl, errno);
  ::close(sigfd);
  ::close(oom_score);
  ::close(plan.control_fd);
  ::close(report);
  for (int fd = 0; fd < 4; ++fd) {
    if (::open("/dev/null", O_RDWR | O_CLOEXEC) != fd) FailChild(ready_fd, kControl, errno);
  }
  void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  void* standing = ::mmap(nullptr, kStandingBytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack == MAP_FAILED || standing == MAP_FAILED) FailChild(ready_fd, kControl, errno);
  in.stack_top = static_cast<char*>(stack) + kChildStackBytes;
  in.standing = static_cast<char*>(standing);

  int32_t step = 0;
  if (int err = LockDownProcess(plan.seccomp, 0, 0, &step); err != 0) {
    FailChild(ready_fd, step, err);
  }
  ChildError ready{kReady, 0};
  (void)!::write(ready_fd, &ready, sizeof(ready));
  ::close(ready_fd);

  while (true) {
    pollfd fds[2] = {{in.sigfd, POLLIN, 0}, {in.control, POLLIN, 0}};
    int n = ::poll(fds, in.control >= 0 ? 2 : 1, -1);
    if (n < 0) continue;  // EINTR (nothing is handled, but be safe)
    if (fds[0].revents != 0) {
      signalfd_siginfo info[8];
      while (::read(in.sigfd, info, sizeof(info)) > 0) {
      }
      ReapChildren(in);
    }
    if (in.control >= 0 && fds[1].revents != 0 && !ServeRequest(in)) {
      // The runtime is gone or out of step: no more execs; keep reaping
      // until the sandbox is destroyed (or orphan cleanup kills us).
      ::close(in.control);
      in.control = -1;
    }
  }
}

}  // namespace dsec::container
