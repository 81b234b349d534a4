// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/exec_helper.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "vmm/base/status.h"

namespace dsec::container {

namespace {

constexpr int kRequestFds = 4;  // stdin, stdout, stderr, error
constexpr uint32_t kMaxRequest = 64u << 20;
constexpr const char* kNamespaces[] = {"net", "uts", "ipc", "cgroup", "pid", "mnt"};

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void PutList(std::string* out, const std::vector<std::string>& list) {
  PutU32(out, static_cast<uint32_t>(list.size()));
  for (const std::string& s : list) {
    PutU32(out, static_cast<uint32_t>(s.size()));
    out->append(s);
  }
}

// Reads from a request buffer; any overrun marks it bad.
struct Reader {
  const char* p;
  const char* end;
  bool ok = true;
  uint64_t Get(size_t n) {
    uint64_t v = 0;
    if (static_cast<size_t>(end - p) < n) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, p, n);
    p += n;
    return v;
  }
  std::vector<std::string> List() {
    std::vector<std::string> out;
    uint32_t n = static_cast<uint32_t>(Get(4));
    for (uint32_t i = 0; ok && i < n; ++i) {
      uint32_t len = static_cast<uint32_t>(Get(4));
      if (static_cast<size_t>(end - p) < len) {
        ok = false;
        break;
      }
      out.emplace_back(p, len);
      p += len;
    }
    return out;
  }
};

bool ReadFull(int fd, void* buf, size_t len) {
  char* c = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::read(fd, c, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    c += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteFull(int fd, const void* buf, size_t len) {
  const char* c = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, c, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    c += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

void Reply(int sock, int32_t v) { (void)WriteFull(sock, &v, sizeof(v)); }

constexpr size_t kChildStackBytes = 256 << 10;

int ExecChild(void* plan) { RunExecProcess(*static_cast<const ExecPlan*>(plan)); }

// The helper's body (a fork of the runtime, single-threaded; glibc's fork
// leaves malloc usable, and nothing here takes other locks).
[[noreturn]] void HelperMain(int sock, pid_t parent, const SeccompProgram* seccomp) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(0);
  // Only the socket stays open: no other sandbox's descriptor lives here.
  // It moves to 4 or above and /dev/null fills 0-3, so that the fds of a
  // request arrive above 3 and RunExecProcess's dup2 onto 0-3 clears their
  // close-on-exec flag (dup2 of an fd onto itself would not).
  if (sock < 4) sock = ::fcntl(sock, F_DUPFD_CLOEXEC, 4);
  if (sock < 0) ::_exit(1);
  ::syscall(SYS_close_range, 0, sock - 1, 0);
  ::syscall(SYS_close_range, sock + 1, ~0u, 0);
  for (int i = 0; i < 4; ++i) {
    if (::open("/dev/null", O_RDWR | O_CLOEXEC) != i) ::_exit(1);
  }
  uint32_t init_pid = 0;
  if (!ReadFull(sock, &init_pid, sizeof(init_pid))) ::_exit(0);
  for (const char* ns : kNamespaces) {
    std::string path = absl::StrCat("/proc/", init_pid, "/ns/", ns);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, 0) != 0) {
      Reply(sock, -errno);
      ::_exit(1);
    }
    ::close(fd);
  }
  Reply(sock, 0);
  char* stack = nullptr;  // for exec processes (CLONE_VM), made once
  while (true) {
    uint32_t len = 0;
    char control[CMSG_SPACE(sizeof(int) * kRequestFds)];
    iovec iov{&len, sizeof(len)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n;
    do {
      n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    } while (n < 0 && errno == EINTR);
    if (n != sizeof(len)) ::_exit(0);  // the runtime closed the socket
    int fds[kRequestFds] = {-1, -1, -1, -1};
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(fds))) {
      std::memcpy(fds, CMSG_DATA(c), sizeof(fds));
    }
    std::string body;
    if (len <= kMaxRequest) {
      body.resize(len);
      if (!ReadFull(sock, body.data(), len)) ::_exit(0);
    }
    Reader r{body.data(), body.data() + body.size()};
    ExecPlan plan;
    plan.uid = static_cast<uid_t>(r.Get(4));
    plan.gid = static_cast<gid_t>(r.Get(4));
    plan.nofile = r.Get(8);
    plan.argv = r.List();
    plan.env = r.List();
    plan.exec_paths = r.List();
    std::vector<std::string> cwd = r.List();
    int32_t result = -EINVAL;
    if (len <= kMaxRequest && r.ok && cwd.size() == 1 && !plan.argv.empty() && fds[3] >= 0) {
      plan.cwd = cwd[0];
      plan.seccomp = seccomp;
      plan.stdin_fd = fds[0];
      plan.stdout_fd = fds[1];
      plan.stderr_fd = fds[2];
      plan.error_fd = fds[3];
      plan.Finalize();
      // A sibling: the runtime is its parent and waits for it. CLONE_VM |
      // CLONE_VFORK, as posix_spawn does: the helper's address space (a
      // copy of the whole runtime's) is not copied for a process that
      // execs right away (a fork of a 10 MiB process costs ~0.5 ms more
      // here, growing with the runtime's size); the helper sleeps until
      // the child has exec'd or exited. RunExecProcess allocates nothing
      // and writes no shared memory; signals stay blocked until it has
      // reset every handler.
      if (stack == nullptr) {
        void* m = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) ::_exit(1);
        stack = static_cast<char*>(m);
      }
      sigset_t all, old;
      sigfillset(&all);
      ::pthread_sigmask(SIG_SETMASK, &all, &old);
      int pid = ::clone(&ExecChild, stack + kChildStackBytes,
                        CLONE_PARENT | CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
      int clone_errno = errno;
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      result = pid > 0 ? static_cast<int32_t>(pid) : -clone_errno;
    }
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    Reply(sock, result);
  }
}

}  // namespace

ExecHelper::ExecHelper(ExecHelper&& other) noexcept
    : pid_(std::exchange(other.pid_, 0)),
      joined_(std::exchange(other.joined_, false)),
      pidfd_(std::move(other.pidfd_)),
      sock_(std::move(other.sock_)) {}

ExecHelper& ExecHelper::operator=(ExecHelper&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = std::exchange(other.pid_, 0);
    joined_ = std::exchange(other.joined_, false);
    pidfd_ = std::move(other.pidfd_);
    sock_ = std::move(other.sock_);
  }
  return *this;
}

absl::StatusOr<ExecHelper> ExecHelper::Start(const SeccompProgram* seccomp) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoToStatus("exec helper: socketpair");
  }
  ScopedFd mine(sv[0]), theirs(sv[1]);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoToStatus("exec helper: fork");
  if (pid == 0) HelperMain(theirs.get(), parent, seccomp);
  ExecHelper h;
  h.pid_ = pid;
  h.sock_ = std::move(mine);
  h.pidfd_.Reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!h.pidfd_) return ErrnoToStatus("exec helper: pidfd_open");
  return h;
}

absl::Status ExecHelper::Join(pid_t init_pid) {
  uint32_t p = static_cast<uint32_t>(init_pid);
  int32_t reply = 0;
  if (!WriteFull(sock_.get(), &p, sizeof(p)) || !ReadFull(sock_.get(), &reply, sizeof(reply))) {
    return absl::InternalError("exec helper died before joining the sandbox");
  }
  if (reply != 0) return ErrnoToStatus("exec helper: setns into the sandbox", -reply);
  joined_ = true;
  return absl::OkStatus();
}

absl::StatusOr<pid_t> ExecHelper::Spawn(const ExecPlan& plan) {
  if (!running()) return absl::FailedPreconditionError("exec helper not running");
  std::string body;
  PutU32(&body, plan.uid);
  PutU32(&body, plan.gid);
  PutU64(&body, plan.nofile);
  PutList(&body, plan.argv);
  PutList(&body, plan.env);
  PutList(&body, plan.exec_paths);
  PutList(&body, {plan.cwd});
  if (body.size() > kMaxRequest) return absl::InvalidArgumentError("exec: argv and env too large");
  uint32_t len = static_cast<uint32_t>(body.size());
  int fds[kRequestFds] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd, plan.error_fd};
  char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{&len, sizeof(len)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(fds));
  std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  ssize_t n;
  do {
    n = ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  int32_t reply = 0;
  if (n != sizeof(len) || !WriteFull(sock_.get(), body.data(), body.size()) ||
      !ReadFull(sock_.get(), &reply, sizeof(reply))) {
    Stop();  // gone (killed by a timeout's cgroup sweep): the caller falls back
    return absl::UnavailableError("exec helper is gone");
  }
  if (reply < 0) return ErrnoToStatus("exec helper: clone exec process", -reply);
  return static_cast<pid_t>(reply);
}

void ExecHelper::Stop() {
  sock_.Reset();
  joined_ = false;
  if (pid_ <= 0) return;
  if (pidfd_) ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pidfd_.Reset();
  pid_ = 0;
}

}  // namespace dsec::container
