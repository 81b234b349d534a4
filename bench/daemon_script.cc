// SPDX-License-Identifier: Apache-2.0
#include "bench/daemon_script.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/mount.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"

#ifndef DSEC_SDK_BENCH_DIR
#define DSEC_SDK_BENCH_DIR ""
#endif

namespace dsec::bench {

namespace {

std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Executable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0; }
bool Readable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

std::string ScriptName(const std::string& bench) { return bench + "_bench.py"; }

std::string ScriptEnv(const std::string& bench) {
  std::string env = "DSEC_" + bench + "_BENCH_SCRIPT";
  for (char& c : env) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

// $DSEC_<BENCH>_BENCH_SCRIPT, else the checkout around a build directory,
// else the checkout this binary was built from.
std::string FindScript(const std::string& exe, const std::string& bench) {
  if (const char* env = std::getenv(ScriptEnv(bench).c_str()); env != nullptr && *env != '\0') return env;
  const std::string built_in = std::string(DSEC_SDK_BENCH_DIR);
  for (const std::string& dir : {DirOf(exe) + "/../sdk/python/bench", built_in}) {
    if (!dir.empty() && Readable(dir + "/" + ScriptName(bench))) return dir + "/" + ScriptName(bench);
  }
  return "";
}

// SIGINT and SIGTERM blocked and read from a signalfd while the script
// runs; the old mask is back on every return.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old_);
    fd_.Reset(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ~SignalsHeld() {
    // Drop what arrived, so that unblocking does not deliver it.
    signalfd_siginfo info;
    while (fd_ && ::read(fd_.get(), &info, sizeof(info)) == sizeof(info)) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

  int fd() const { return fd_.get(); }
  // The number of signals read now (without blocking).
  int Take() {
    int n = 0;
    signalfd_siginfo info;
    while (::read(fd_.get(), &info, sizeof(info)) == sizeof(info)) ++n;
    return n;
  }

 private:
  sigset_t old_;
  ScopedFd fd_;
};

// Waits for the script, passing signals on: the first as SIGINT (the
// script deletes what it made), a later one as SIGKILL. Returns its exit
// status (1 when killed by a signal); sets `interrupted`.
int WaitScript(Subprocess& script, SignalsHeld& signals, bool& interrupted, const std::string& bench) {
  int received = 0;
  while (script.running()) {
    pollfd fds[2] = {{script.pidfd(), POLLIN, 0}, {signals.fd(), POLLIN, 0}};
    int n = ::poll(fds, signals.fd() >= 0 ? 2 : 1, -1);
    if (n < 0 && errno != EINTR) break;
    if (n > 0 && (fds[1].revents & POLLIN) != 0) {
      int got = signals.Take();
      if (got > 0) {
        interrupted = true;
        received += got;
        fprintf(stderr, "dsec-vmm: bench %s: interrupted; %s\n", bench.c_str(),
                received == 1 ? "the script deletes what it made (again to kill it)" : "killing the script");
        (void)script.Signal(received == 1 ? SIGINT : SIGKILL);
      }
    }
    if (n > 0 && (fds[0].revents & POLLIN) != 0) break;
  }
  auto ended = script.Wait();
  if (!ended.ok()) {
    fprintf(stderr, "dsec-vmm: bench %s: %s\n", bench.c_str(), std::string(ended.status().message()).c_str());
    return 1;
  }
  return ended->signal == 0 ? ended->exit_code : 1;
}

}  // namespace

int RunDaemonScript(const DaemonScriptOptions& o) {
  const std::string exe = SelfExePath();
  const std::string daemon = DirOf(exe) + "/dsec-vmmd";
  const char* name = o.bench.c_str();
  if (!Executable(daemon)) {
    fprintf(stderr, "dsec-vmm: bench %s needs the daemon %s (build the dsec-vmmd target)\n", name,
            daemon.c_str());
    return 2;
  }
  const std::string script = o.script.empty() ? FindScript(exe, o.bench) : o.script;
  if (script.empty() || !Readable(script)) {
    fprintf(stderr, "dsec-vmm: bench %s: no sdk/python/bench/%s (set %s or --script)\n", name,
            ScriptName(o.bench).c_str(), ScriptEnv(o.bench).c_str());
    return 2;
  }
  if (!Executable("/usr/bin/python3")) {
    fprintf(stderr, "dsec-vmm: bench %s needs /usr/bin/python3\n", name);
    return 2;
  }
  SignalsHeld signals;
  std::string tmpl_s = "/tmp/dsec-bench-" + o.bench + "-XXXXXX";
  std::vector<char> tmpl(tmpl_s.begin(), tmpl_s.end());
  tmpl.push_back('\0');
  if (::mkdtemp(tmpl.data()) == nullptr) {
    fprintf(stderr, "dsec-vmm: bench %s: mkdtemp: %s\n", name, strerror(errno));
    return 1;
  }
  const std::string tmp = tmpl.data();
  for (const char* d : {"run", "containers", "fncall", "microvm", "trajectory", "layers", "work",
                        "work/fncall-layers"}) {
    (void)MakeDirs(tmp + "/" + d);
  }
  PrivateDaemon d;
  d.socket = tmp + "/run/api.sock";
  d.work = tmp + "/work";
  d.container_state_dir = tmp + "/containers";
  // The container tier's records on a tmpfs, as the daemon's default root
  // is (sandbox/container/state_dir.h, MountStateRootTmpfs, 1 GiB): on a
  // disk file system every sandbox's mkdirs and rmdirs go through it (on
  // this machine's ext4, mounted with online discard, each rmdir waited
  // for a discard), which a daemon on its defaults never pays.
  const bool state_tmpfs = ::mount("tmpfs", d.container_state_dir.c_str(), "tmpfs",
                                   MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=1g") == 0;
  if (!state_tmpfs) {
    fprintf(stderr, "dsec-vmm: bench %s: no tmpfs for the container state (%s): it stays on %s\n", name,
            strerror(errno), tmp.c_str());
  }
  const std::string log = tmp + "/daemon.log";
  ScopedFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_TRUNC, 0600));
  // Both children get sessions of their own: a terminal's Ctrl-C reaches
  // only this process, which passes it on in order (script, then daemon).
  SpawnOptions daemon_spawn;
  daemon_spawn.argv = {daemon, "--socket", d.socket, "--container-state-dir", d.container_state_dir,
                       "--fncall-state-dir", tmp + "/fncall", "--microvm-state-dir", tmp + "/microvm",
                       "--trajectory-dir", tmp + "/trajectory", "--store", tmp + "/layers",
                       "--snapshot-dir", tmp + "/snapshots",
                       // The fncall python layer the scripts build (harness.py) is an
                       // image file outside the store.
                       "--layer-image-dir", d.work + "/fncall-layers", "--log-level", "warn"};
  daemon_spawn.argv.insert(daemon_spawn.argv.end(), o.daemon_args.begin(), o.daemon_args.end());
  daemon_spawn.out = log_fd ? Stdio::Fd(log_fd.get()) : Stdio::Null();
  daemon_spawn.err = Stdio::SameAsStdout();
  daemon_spawn.new_session = true;
  auto daemon_process = Subprocess::Spawn(daemon_spawn);
  int rc = 1;
  bool interrupted = false;
  bool daemon_exited = false;
  if (!daemon_process.ok()) {
    fprintf(stderr, "dsec-vmm: bench %s: %s\n", name, std::string(daemon_process.status().message()).c_str());
  } else {
    d.pid = daemon_process->pid();
    SpawnOptions py;
    py.argv = {"/usr/bin/python3", "-B", script, "--socket", d.socket, "--work", d.work};
    if (o.script_args) {
      std::vector<std::string> more = o.script_args(d);
      py.argv.insert(py.argv.end(), more.begin(), more.end());
    }
    py.env = {"PYTHONPATH=" + DirOf(DirOf(script))};
    py.in = Stdio::Inherit();
    py.out = Stdio::Inherit();
    py.err = Stdio::Inherit();
    py.new_session = true;
    auto measured = Subprocess::Spawn(py);
    if (!measured.ok()) {
      fprintf(stderr, "dsec-vmm: bench %s: %s\n", name, std::string(measured.status().message()).c_str());
    } else {
      rc = WaitScript(*measured, signals, interrupted, o.bench);
    }
    // The daemon deletes what is left on SIGTERM; SIGKILL after 60 s.
    (void)daemon_process->Signal(SIGTERM);
    auto waited = daemon_process->Wait(60'000);
    daemon_exited = waited.ok() && !waited->timed_out;
  }
  // Once the daemon is gone, its records with it; a daemon that did not
  // exit keeps them (reported below as a mount left).
  if (state_tmpfs && (daemon_exited || !daemon_process.ok())) {
    (void)::umount2(d.container_state_dir.c_str(), MNT_DETACH);
  }
  if (interrupted) rc = 130;
  std::vector<std::string> left = MountPointsBelow(tmp).value_or(std::vector<std::string>{});
  if (!left.empty()) {
    fprintf(stderr, "dsec-vmm: bench %s: %zu mounts left under %s (e.g. %s); kept for inspection\n", name,
            left.size(), tmp.c_str(), left[0].c_str());
    return rc == 0 ? 1 : rc;
  }
  if (rc != 0 && !interrupted) {
    fprintf(stderr, "dsec-vmm: bench %s failed; daemon log tail:\n%s\n", name, FileTail(log, 3000).c_str());
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  if (ec) {
    fprintf(stderr, "dsec-vmm: bench %s: cannot remove %s: %s\n", name, tmp.c_str(), ec.message().c_str());
    return rc == 0 ? 1 : rc;
  }
  return rc;
}

}  // namespace dsec::bench
