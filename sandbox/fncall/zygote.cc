// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/zygote.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/fncall/protocol.h"
#include "base/fd_passing.h"
#include "base/little_endian.h"

namespace dsec::fncall {

namespace {

// Steps after the container tier's (ChildStepName covers those below 100).
enum Step : int32_t {
  kWaitGo = 100,
  kIpcLimits,
  kSignals,
  kDumpable,
  kExecInterpreter,
  kControlFd,
  kStepEnd,
};
constexpr const char* kStepNames[] = {"wait for runtime",  "disable SysV IPC", "reset signals",
                                      "clear dumpable",    "exec interpreter", "control fd"};

constexpr char kPythonZygote[] = R"PY(
import os, sys, socket, struct, signal
_ctl = int(sys.argv[1])
for _name in sys.argv[2].split(","):
    if _name:
        __import__(_name)
import atexit, builtins, ctypes, gc, io, traceback, types
# Not dumpable: a call (same uid, same capabilities) cannot open
# /proc/1/mem or ptrace its zygote.
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
    sys.exit("dsec-fncall zygote: prctl(PR_SET_DUMPABLE) failed")
signal.signal(signal.SIGINT, signal.SIG_IGN)
_sock = socket.socket(fileno=_ctl)
_U32 = struct.Struct("<I")
_MAX = 4 << 20

def _send(*fields):
    body = b"".join(_U32.pack(len(f)) + f for f in fields)
    _sock.sendall(_U32.pack(len(body)) + body)

def _recv_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = _sock.recv(n - len(buf))
        if not chunk:
            os._exit(0)
        buf += chunk
    return bytes(buf)

def _recv_call():
    fds, head = [], b""
    while len(head) < 4:
        data, anc, _, _ = _sock.recvmsg(4 - len(head), socket.CMSG_SPACE(3 * 4))
        if not data:
            os._exit(0)  # the runtime closed the pool
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds.extend(struct.unpack("%di" % (usable // 4), payload[:usable]))
        head += data
    (size,) = _U32.unpack(head)
    if size > _MAX:
        os._exit(125)
    body = _recv_exact(size)
    fields, off = [], 0
    while off < len(body):
        if len(body) - off < 4:
            os._exit(125)
        (n,) = _U32.unpack_from(body, off)
        off += 4
        fields.append(body[off:off + n])
        off += n
    return fields, fds

def _status_of(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1

def _warm():
    # Runs while the child waits for its call: the copy-on-write faults of
    # the interpreter's hot pages (refcounts, frames, the compiler) are
    # taken now instead of on the call's clock.
    saved = sys.stdout
    sys.stdout = io.StringIO()
    try:
        exec(compile("import sys, os\nprint(len(sys.argv), os.sep)", "<warm>", "exec"),
             {"__name__": "__warm__", "__builtins__": builtins})
    finally:
        sys.stdout = saved

def _child():
    # The OOM killer takes the call before its zygote (raising needs no
    # privilege, unlike lowering the zygote's).
    fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    os.write(fd, b"1000")
    os.close(fd)
    _warm()
    fields, fds = _recv_call()
    if len(fds) != 3 or len(fields) < 5 or fields[0] != b"call":
        os._exit(125)
    code, cwd, argc = fields[1], fields[2], int(fields[3])
    args = fields[4:4 + argc]
    envc = int(fields[4 + argc])
    env = fields[5 + argc:5 + argc + envc]
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
    os.closerange(3, 1 << 20)
    os.environb.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        if k:
            os.environb[k] = v
    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["-c"] + [a.decode("utf-8", "surrogateescape") for a in args]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        status = _status_of(e.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 120
    os._exit(status)

# Objects of the warm interpreter stay out of the children's collections
# (which would otherwise touch, and copy, every page holding them).
gc.collect()
gc.freeze()
_send(b"ready", b"%d" % os.getpid())
while True:
    pid = os.fork()
    if pid == 0:
        try:
            _child()
        except BaseException:
            try:
                traceback.print_exc()
            except BaseException:
                pass
        os._exit(125)
    # The runtime learns the call child's pid from this (it may kill only
    # that process; a sweep could hit the next pre-forked child).
    _send(b"forked")
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:
            pass
    # PID 1 of the worker's namespace: kill(-1) reaches every other process
    # in it, i.e. whatever the call left behind.
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    if os.WIFSIGNALED(status):
        kind, value = b"signal", os.WTERMSIG(status)
    else:
        kind, value = b"exit", os.WEXITSTATUS(status)
    _send(b"done", kind, b"%d" % value, b"%d" % usage.ru_maxrss)
)PY";

// --- async-signal-safe helpers for the bash zygote --------------------------

size_t StrLen(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

// Decimal of v into buf (at least 24 bytes); returns length.
size_t FormatInt(int64_t v, char* buf) {
  char tmp[24];
  size_t n = 0;
  bool neg = v < 0;
  uint64_t u = neg ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u);
  size_t len = 0;
  if (neg) buf[len++] = '-';
  while (n) buf[len++] = tmp[--n];
  return len;
}

bool ParseUint(const char* p, uint32_t len, uint32_t* out) {
  if (len == 0 || len > 9) return false;
  uint32_t v = 0;
  for (uint32_t i = 0; i < len; ++i) {
    if (p[i] < '0' || p[i] > '9') return false;
    v = v * 10 + static_cast<uint32_t>(p[i] - '0');
  }
  *out = v;
  return true;
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Sends ["done"|"ready", ...] built from up to 4 C-string fields.
bool SendFrame(int fd, const char* const* fields, int count) {
  char buf[256];
  size_t off = 4;
  for (int i = 0; i < count; ++i) {
    size_t len = StrLen(fields[i]);
    if (off + 4 + len > sizeof(buf)) return false;
    StoreLe32(buf + off, static_cast<uint32_t>(len));
    std::memcpy(buf + off + 4, fields[i], len);
    off += 4 + len;
  }
  StoreLe32(buf, static_cast<uint32_t>(off - 4));
  size_t sent = 0;
  while (sent < off) {
    ssize_t n = ::send(fd, buf + sent, off - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void ChildFail(const char* what, int err, int code) {
  char num[24];
  size_t n = FormatInt(err, num);
  WriteAll(2, "dsec-fncall: ", 13);
  WriteAll(2, what, StrLen(what));
  WriteAll(2, ": errno ", 8);
  WriteAll(2, num, n);
  WriteAll(2, "\n", 1);
  ::_exit(code);
}

bool ReadExact(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One call's child: receive the request, set up stdio, exec bash.
[[noreturn]] void BashChild(const ZygotePlan& plan) {
  const int ctl = plan.control_fd;
  // The OOM killer takes the call before its zygote (before the call
  // arrives: off its clock).
  int oom = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom < 0 || ::write(oom, "1000", 4) != 4) ::_exit(125);
  ::close(oom);
  char head[4];
  size_t got = 0;
  int fds[3] = {-1, -1, -1};
  size_t nfds = 0;
  while (got < 4) {
    // Descriptors past the three a call carries are closed on arrival.
    int more[3];
    size_t nmore = 0;
    ssize_t n = ReceiveWithFds(ctl, head + got, 4 - got, more, 3 - nfds, &nmore);
    if (n <= 0) ::_exit(0);  // the runtime closed the pool
    for (size_t i = 0; i < nmore; ++i) fds[nfds++] = more[i];
    got += static_cast<size_t>(n);
  }
  const uint32_t size = LoadLe32(head);
  if (size > kMaxFrameBytes || nfds != 3) ::_exit(125);
  // Payload, then NUL-terminated copies of the fields and pointer arrays.
  const size_t map_len = 2 * static_cast<size_t>(size) + 64 +
                         (static_cast<size_t>(size) / 2 + 16) * sizeof(char*);
  void* mem = ::mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) ::_exit(125);
  char* payload = static_cast<char*>(mem);
  if (!ReadExact(ctl, payload, size)) ::_exit(0);
  char* strings = payload + size;
  char** ptrs = reinterpret_cast<char**>(
      (reinterpret_cast<uintptr_t>(strings + size + 32) + 15) & ~uintptr_t{15});
  size_t nfields = 0;
  uint32_t off = 0;
  char* out = strings;
  const char* field_data[8];
  uint32_t field_len[8];
  // Fields: "call", code, cwd, argc, argv..., envc, env...
  // Guest-controlled lengths are checked against the payload size.
  while (off < size) {
    if (size - off < 4) ::_exit(125);
    uint32_t len = LoadLe32(payload + off);
    off += 4;
    if (len > size - off) ::_exit(125);
    if (nfields < 8) {
      field_data[nfields] = payload + off;
      field_len[nfields] = len;
    }
    ptrs[nfields] = out;
    std::memcpy(out, payload + off, len);
    out[len] = '\0';
    out += len + 1;
    off += len;
    ++nfields;
  }
  uint32_t argc = 0, envc = 0;
  if (nfields < 5 || field_len[0] != 4 || std::memcmp(field_data[0], "call", 4) != 0 ||
      !ParseUint(ptrs[3], static_cast<uint32_t>(StrLen(ptrs[3])), &argc) ||
      nfields < 5ull + argc ||
      !ParseUint(ptrs[4 + argc], static_cast<uint32_t>(StrLen(ptrs[4 + argc])), &envc) ||
      nfields != 5ull + argc + envc) {
    ::_exit(125);
  }
  // argv: bash -c CODE bash ARGS... (argv[0] of the script is "bash").
  char** argv = ptrs + nfields + 1;
  static char kBash[] = "bash";
  static char kDashC[] = "-c";
  size_t a = 0;
  argv[a++] = kBash;
  argv[a++] = kDashC;
  argv[a++] = ptrs[1];
  argv[a++] = kBash;
  for (uint32_t i = 0; i < argc; ++i) argv[a++] = ptrs[4 + i];
  argv[a++] = nullptr;
  char** envp = argv + a;
  for (uint32_t i = 0; i < envc; ++i) envp[i] = ptrs[5 + argc + i];
  envp[envc] = nullptr;
  for (int i = 0; i < 3; ++i) {
    // dup2 onto itself keeps close-on-exec: clear it explicitly.
    if (::dup2(fds[i], i) < 0 || ::fcntl(i, F_SETFD, 0) != 0) ::_exit(125);
  }
  ::syscall(SYS_close_range, 3, ~0u, 0);
  if (::chdir(ptrs[2]) != 0) ChildFail("chdir", errno, 126);
  ::execve(plan.interpreter.c_str(), argv, envp);
  ChildFail("execve bash", errno, errno == ENOENT ? 127 : 126);
}

[[noreturn]] void BashZygoteLoop(const ZygotePlan& plan) {
  char pid_text[24];
  pid_text[FormatInt(::getpid(), pid_text)] = '\0';
  const char* ready[] = {"ready", pid_text};
  if (!SendFrame(plan.control_fd, ready, 2)) ::_exit(0);
  while (true) {
    long pid = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid < 0) ::_exit(1);
    if (pid == 0) BashChild(plan);
    const char* forked[] = {"forked"};
    if (!SendFrame(plan.control_fd, forked, 1)) ::_exit(0);
    int status = 0;
    rusage usage{};
    while (::wait4(static_cast<pid_t>(pid), &status, 0, &usage) < 0 && errno == EINTR) {
    }
    // PID 1 of the namespace: kill(-1) reaches everything the call left.
    ::kill(-1, SIGKILL);
    while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
    }
    char value[24], rss[24];
    bool signaled = WIFSIGNALED(status);
    value[FormatInt(signaled ? WTERMSIG(status) : WEXITSTATUS(status), value)] = '\0';
    rss[FormatInt(usage.ru_maxrss, rss)] = '\0';
    const char* done[] = {"done", signaled ? "signal" : "exit", value, rss};
    if (!SendFrame(plan.control_fd, done, 4)) ::_exit(0);
  }
}

void WriteFileOrFail(int report, const char* path, const char* value) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) container::FailChild(report, kIpcLimits, errno);
  size_t len = StrLen(value);
  if (::write(fd, value, len) != static_cast<ssize_t>(len)) {
    container::FailChild(report, kIpcLimits, errno);
  }
  ::close(fd);
}

}  // namespace

const char* LanguageName(Language language) {
  return language == Language::kPython ? "python" : "bash";
}

const char* PythonZygoteScript() { return kPythonZygote; }

const char* ZygoteStepName(int32_t step) {
  if (step >= kWaitGo && step < kStepEnd) return kStepNames[step - kWaitGo];
  return container::ChildStepName(step);
}

void ZygotePlan::Finalize() {
  argv_c.clear();
  env_c.clear();
  for (std::string& s : argv) argv_c.push_back(s.data());
  argv_c.push_back(nullptr);
  for (std::string& s : env) env_c.push_back(s.data());
  env_c.push_back(nullptr);
}

void RunZygote(const ZygotePlan& plan) {
  const int report = plan.report_fd;
  // Keep only the control socket and the two sync pipes.
  int keep[3] = {plan.control_fd, plan.go_fd, report};
  for (int i = 0; i < 3; ++i) {
    for (int j = i + 1; j < 3; ++j) {
      if (keep[j] < keep[i]) {
        int t = keep[i];
        keep[i] = keep[j];
        keep[j] = t;
      }
    }
  }
  int lo = 0;
  for (int fd : keep) {
    if (fd > lo) ::syscall(SYS_close_range, lo, fd - 1, 0);
    lo = fd + 1;
  }
  ::syscall(SYS_close_range, lo, ~0u, 0);
  // Die with the runtime thread that made us.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  char go = 0;
  if (::read(plan.go_fd, &go, 1) != 1) container::FailChild(report, kWaitGo, errno ? errno : EPIPE);
  ::close(plan.go_fd);
  // SysV IPC objects would outlive a call in the worker's ipc namespace:
  // allow none (the host's /proc is still ours before the pivot, and these
  // sysctls are per ipc namespace).
  WriteFileOrFail(report, "/proc/sys/kernel/shmmni", "0");
  WriteFileOrFail(report, "/proc/sys/kernel/msgmni", "0");
  WriteFileOrFail(report, "/proc/sys/kernel/sem", "0 0 0 0");
  container::BuildSandboxRoot(plan.root);
  // /dev/null for the zygote's own stdio.
  int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(null_fd, 1) < 0 || ::dup2(null_fd, 2) < 0) {
    container::FailChild(report, kSignals, errno);
  }
  if (null_fd > 2) ::close(null_fd);
  // Handlers and mask inherited from the runtime must not survive: a call
  // could otherwise run a runtime signal handler in its zygote.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) container::FailChild(report, kDumpable, errno);
  rlimit core{0, 0};
  ::setrlimit(RLIMIT_CORE, &core);
  int32_t step = 0;
  if (int err = container::LockDownProcess(plan.seccomp, 0, 0, &step); err != 0) {
    container::FailChild(report, step, err);
  }
  if (plan.language == Language::kBash) {
    ::close(report);
    BashZygoteLoop(plan);
  }
  // The interpreter inherits the control socket (not close-on-exec) and
  // reports "ready" on it; the report pipe closes on a successful exec.
  if (::fcntl(plan.control_fd, F_SETFD, 0) != 0) container::FailChild(report, kControlFd, errno);
  ::execve(plan.interpreter.c_str(), plan.argv_c.data(), plan.env_c.data());
  container::FailChild(report, kExecInterpreter, errno);
}

}  // namespace dsec::fncall
