// SPDX-License-Identifier: Apache-2.0
// The jailed monitor for real: dsec-vmm booting the test guest under KVM in
// its own cgroups and namespaces, behind a pivot_root'ed minimal root; the
// control socket (stats, pause, resume); kill and cleanup; early exits.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/microvm/vm_process.h"
#include "base/clock.h"
#include "base/scoped_fd.h"

namespace dsec::microvm {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Link(const std::string& path) {
  char buf[256];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string StatusField(pid_t pid, const std::string& key) {
  std::istringstream in(ReadAll(absl::StrCat("/proc/", pid, "/status")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      size_t v = line.find_first_not_of(" \t", key.size() + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
  }
  return "";
}

// utime + stime of every thread of `pid`, in clock ticks.
uint64_t CpuTicks(pid_t pid) {
  std::string text = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream f(text.substr(paren + 2));
  std::string v;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; f >> v; ++i) {
    if (i == 14) utime = std::stoull(v);
    if (i == 15) {
      stime = std::stoull(v);
      break;
    }
  }
  return utime + stime;
}

// Threads of `pid` that run or wait to run (state R), as "tid (comm)".
std::vector<std::string> RunnableThreads(pid_t pid) {
  std::vector<std::string> out;
  const std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  if (DIR* d = ::opendir(task_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string stat = ReadAll(absl::StrCat(task_dir, "/", e->d_name, "/stat"));
      const size_t paren = stat.rfind(')');
      if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'R') {
        out.push_back(stat.substr(0, paren + 1));
      }
    }
    ::closedir(d);
  }
  return out;
}

// Waits (bounded) until `pred` holds, re-checking on the monitor's pidfd:
// an exit ends the wait early. For states that change without an event
// (CPU time, a thread's state, a thread's filter): the pidfd's 20 ms
// timeout paces the re-checks.
template <typename Pred>
bool WaitFor(VmProcess& vm, Pred pred, int64_t timeout_ms) {
  const int64_t end = MonotonicNowNs() + timeout_ms * 1'000'000;
  while (!pred()) {
    if (MonotonicNowNs() > end || vm.Exited()) return pred();
    WaitReadable(vm.exit_fd(), 20);
  }
  return true;
}

class VmProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root (namespaces, cgroups, mounts)";
    }
    if (::access("/dev/kvm", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "this host has no usable /dev/kvm";
    }
    if (::access(DSEC_TESTGUEST_ELF_PATH, R_OK) != 0) {
      GTEST_SKIP() << "test guest not built";
    }
    char tmpl[] = "/tmp/dsec-mvm-vmproc-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    static int n = 0;
    id_ = absl::StrCat("t", ::getpid(), "-", n++);
  }
  void TearDown() override {
    if (!dir_.empty()) {
      EXPECT_TRUE(container::RemoveTree(dir_).ok());
    }
  }

  VmPlan Plan(const std::string& workload) const {
    VmPlan p;
    p.monitor_binary = DSEC_MONITOR_BINARY_PATH;
    p.kernel = DSEC_TESTGUEST_ELF_PATH;
    p.cmdline = "console=ttyS0 testguest.run=" + workload;
    p.mem_mib = 64;
    p.timeout_ms = 120000;
    return p;
  }
  VmJailOptions Jail() const {
    VmJailOptions j;
    j.id = id_;
    j.state_dir = dir_;
    j.overhead_mib = 64;
    return j;
  }

  std::string dir_;
  std::string id_;
};

TEST_F(VmProcessTest, RunsTheTestGuestInItsOwnCgroupsNamespacesAndRoot) {
  auto vm = VmProcess::Start(Plan("idle:60"), Jail());
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->WaitRunning(30'000).ok()) << (*vm)->ExitReport();
  const pid_t pid = (*vm)->pid();

  // Cgroups: every one of ours, with the memory limit guest RAM + allowance.
  ASSERT_FALSE((*vm)->cgroups().dirs().empty());
  const std::string self_cg = ReadAll(absl::StrCat("/proc/", pid, "/cgroup"));
  for (const std::string& d : (*vm)->cgroups().dirs()) {
    EXPECT_NE(self_cg.find(d.substr(d.rfind('/'))), std::string::npos) << d << "\n" << self_cg;
    std::string limit = ReadAll(d + "/memory.limit_in_bytes");
    if (limit.empty()) limit = ReadAll(d + "/memory.max");
    if (!limit.empty() && d.find("memory") != std::string::npos) {
      EXPECT_EQ(std::stoull(limit), (64ull + 64) << 20) << d;
    }
  }
  // Namespaces: all new but the user and cgroup ones.
  for (const char* ns : {"mnt", "net", "pid", "ipc", "uts"}) {
    EXPECT_NE(Link(absl::StrCat("/proc/", pid, "/ns/", ns)), Link(absl::StrCat("/proc/self/ns/", ns))) << ns;
  }
  // Privileges and environment.
  EXPECT_EQ(StatusField(pid, "NoNewPrivs"), "1");
  EXPECT_EQ(StatusField(pid, "CapEff"), "0000000000000000");
  EXPECT_EQ(StatusField(pid, "CapBnd"), "0000000000000000");
  std::string env = ReadAll(absl::StrCat("/proc/", pid, "/environ"));
  EXPECT_EQ(env, std::string("PATH=/usr/sbin:/usr/bin:/sbin:/bin") + '\0' + "HOME=/" + '\0');
  // Filesystem view: the minimal root, not the host's.
  const std::string root = absl::StrCat("/proc/", pid, "/root");
  std::string listing;
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) absl::StrAppend(&listing, " ", e->d_name);
    ::closedir(d);
  }
  std::printf("the monitor's /:%s\n", listing.c_str());
  struct stat st;
  EXPECT_EQ(::stat((root + "/dev/kvm").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_NE(::stat((root + "/etc/passwd").c_str(), &st), 0) << "the host's /etc is visible";
  EXPECT_NE(::stat((root + "/dev/sda").c_str(), &st), 0);
  EXPECT_EQ(::stat((root + (*vm)->files().vsock_socket).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  // The same socket is reachable at the host path.
  EXPECT_EQ(::stat((*vm)->files().vsock_socket.c_str(), &st), 0);
  // No mount of the jail is visible in the host's namespace.
  EXPECT_EQ(ReadAll("/proc/self/mountinfo").find(dir_), std::string::npos);
  ASSERT_TRUE((*vm)->Stop(5000).ok());
}

TEST_F(VmProcessTest, ControlSocketPausesAndResumesTheVcpus) {
  auto vm = VmProcess::Start(Plan("spin:1000000000000"), Jail());
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->WaitRunning(30'000).ok()) << (*vm)->ExitReport();
  const pid_t pid = (*vm)->pid();
  auto stats = (*vm)->Control({{"op", "stats"}});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)["paused"], false);
  EXPECT_TRUE((*stats)["balloon"].is_object()) << stats->dump();
  const uint64_t hz = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  const uint64_t t0 = CpuTicks(pid);
  ASSERT_TRUE(WaitFor(**vm, [&] { return CpuTicks(pid) >= t0 + hz / 5; }, 20'000)) << "the vCPU does not run";

  ASSERT_TRUE((*vm)->Pause().ok());
  EXPECT_TRUE((*vm)->Pause().ok()) << "pause is idempotent";
  // Pause returns once the vCPU has parked: then no thread of the monitor
  // runs (the spinning vCPU was never seen asleep before), until resume.
  std::vector<std::string> runnable;
  EXPECT_TRUE(WaitFor(**vm, [&] { return (runnable = RunnableThreads(pid)).empty(); }, 5'000))
      << "a paused VM kept running: " << absl::StrJoin(runnable, ", ");
  auto paused = (*vm)->Control({{"op", "stats"}});
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ((*paused)["paused"], true);

  ASSERT_TRUE((*vm)->Resume().ok());
  const uint64_t r0 = CpuTicks(pid);
  EXPECT_TRUE(WaitFor(**vm, [&] { return CpuTicks(pid) >= r0 + hz / 5; }, 20'000))
      << "the vCPU did not run again after resume";
  ASSERT_TRUE((*vm)->Stop(5000).ok());
}

TEST_F(VmProcessTest, TheMonitorDropsToItsUidAndFiltersItsThreads) {
  VmPlan plan = Plan("spin:1000000000000");
  const uint32_t uid = 1'900'400'000u + static_cast<uint32_t>(::getpid() % 60000);
  plan.uid = uid;
  auto vm = VmProcess::Start(plan, Jail());
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->WaitRunning(30'000).ok()) << (*vm)->ExitReport();
  // The control socket answers once the monitor is locked in.
  auto stats = (*vm)->Control({{"op", "stats"}});
  ASSERT_TRUE(stats.ok()) << stats.status() << (*vm)->ExitReport();
  const pid_t pid = (*vm)->pid();
  const std::string ids = absl::StrCat(uid, "\t", uid, "\t", uid, "\t", uid);
  EXPECT_EQ(StatusField(pid, "Uid"), ids);
  EXPECT_EQ(StatusField(pid, "Gid"), ids);
  EXPECT_EQ(StatusField(pid, "Groups"), "");
  EXPECT_EQ(StatusField(pid, "CapEff"), "0000000000000000");
  EXPECT_EQ(StatusField(pid, "CapPrm"), "0000000000000000");
  EXPECT_EQ(StatusField(pid, "CapBnd"), "0000000000000000");
  EXPECT_EQ(StatusField(pid, "Seccomp"), "2");  // a filter on the main thread
  // Every thread, not only the main one. Each installs its filter as it
  // leaves the jail's gate (a vCPU before its first KVM_RUN), so one may
  // still be on its way there when the control thread answers: wait for it.
  const std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  int threads = 0;
  std::vector<std::string> unfiltered;
  WaitFor(**vm, [&] {
    threads = 0;
    unfiltered.clear();
    if (DIR* d = ::opendir(task_dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        ++threads;
        std::string st = ReadAll(absl::StrCat(task_dir, "/", e->d_name, "/status"));
        if (st.find("Seccomp:\t2") == std::string::npos) {
          unfiltered.push_back(absl::StrCat(e->d_name, " (", st.substr(6, st.find('\n') - 6), ")"));
        }
      }
      ::closedir(d);
    }
    return unfiltered.empty();
  }, 5'000);
  EXPECT_TRUE(unfiltered.empty()) << "threads without a filter after 5 s: "
                                  << absl::StrJoin(unfiltered, ", ");
  EXPECT_GE(threads, 4);  // main, vCPU, event loop, control
  ASSERT_TRUE((*vm)->Pause().ok());
  ASSERT_TRUE((*vm)->Resume().ok());
  ASSERT_TRUE((*vm)->Stop(5000).ok());
}

TEST_F(VmProcessTest, QosWithAUidIsRefusedAndCreatesNothing) {
  VmPlan plan = Plan("idle:60");
  plan.uid = 1'900'400'001u;
  plan.qos = "be";
  auto vm = VmProcess::Start(plan, Jail());
  ASSERT_FALSE(vm.ok());
  EXPECT_EQ(vm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(vm.status().message().find("qos"), std::string::npos) << vm.status();
  struct stat st;
  EXPECT_NE(::stat((dir_ + "/vm").c_str(), &st), 0) << "a refused start left its state";
}

TEST_F(VmProcessTest, StopLeavesNoProcessCgroupOrMount) {
  auto vm = VmProcess::Start(Plan("idle:60"), Jail());
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->WaitRunning(30'000).ok()) << (*vm)->ExitReport();
  const pid_t pid = (*vm)->pid();
  const std::vector<std::string> cgroups = (*vm)->cgroups().dirs();
  const std::string identity = container::ProcessIdentity(pid).value_or("");
  ASSERT_FALSE(identity.empty());
  ASSERT_TRUE((*vm)->Stop(5000).ok());
  EXPECT_NE(container::ProcessIdentity(pid).value_or(""), identity) << "the monitor still runs";
  for (const std::string& d : cgroups) {
    EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " left behind";
  }
  EXPECT_EQ(ReadAll("/proc/self/mountinfo").find(dir_), std::string::npos);
  // A clean stop (SIGTERM) wrote the stats and removed the sockets.
  EXPECT_NE((*vm)->ExitReport().find("stop_reason=host-request"), std::string::npos) << (*vm)->ExitReport();
  EXPECT_NE(::access((*vm)->files().control_socket.c_str(), F_OK), 0);
  vm->reset();  // destruction after Stop is a no-op
}

TEST_F(VmProcessTest, ASavedMachineGoesOnInAnotherJailedMonitor) {
  // Staging and destination on one file system (the save is moved).
  const std::string staging = dir_ + "/staging", saved = dir_ + "/saved", clone_state = dir_ + "/clone";
  for (const std::string& d : {staging, saved, clone_state}) ASSERT_EQ(::mkdir(d.c_str(), 0700), 0) << d;
  const uint32_t uid = 1'900'500'000u + static_cast<uint32_t>(::getpid() % 60000);
  VmPlan plan = Plan("snap:1000000");
  plan.uid = uid;
  plan.snapshot_dir = staging;
  plan.guest_messages = true;
  auto vm = VmProcess::Start(plan, Jail());
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->WaitRunning(30'000).ok()) << (*vm)->ExitReport();
  const std::string console = (*vm)->files().log;  // the guest's messages
  ASSERT_TRUE(WaitFor(**vm, [&] { return ReadAll(console).find("snap tick=20 ") != std::string::npos; }, 30'000))
      << ReadAll(console);

  auto save = (*vm)->SaveMachine(saved, 60'000);
  ASSERT_TRUE(save.ok()) << save.status() << (*vm)->ExitReport();
  EXPECT_EQ(save->memory_bytes, 64ull << 20);
  EXPECT_GT(save->memory_bytes_written, 4ull << 20);  // the guest's 4 MiB stream at least
  EXPECT_LE(save->memory_bytes_written, save->memory_bytes);
  // Moved out of the staging directory, root's and read-only.
  DIR* d = ::opendir(staging.c_str());
  ASSERT_NE(d, nullptr);
  int left = 0;
  while (dirent* e = ::readdir(d)) left += e->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(left, 0) << "the staging directory kept files";
  for (const char* name : {"memory", "manifest.json"}) {
    struct stat st;
    ASSERT_EQ(::stat((saved + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, 0u) << name;
    EXPECT_EQ(st.st_mode & 0777, 0400u) << name;
  }
  // The source runs on.
  const size_t source_seen = ReadAll(console).size();
  EXPECT_TRUE(WaitFor(**vm, [&] { return ReadAll(console).size() > source_seen; }, 30'000))
      << "the source stopped after its save";

  const size_t saved_hash = std::hash<std::string>{}(ReadAll(saved + "/memory"));
  // Another jailed monitor, its own uid, state and sockets, goes on from
  // the saved tick with the guest's memory intact.
  VmPlan restored = Plan("snap:1000000");
  restored.uid = uid + 1;
  restored.restore_dir = saved;
  restored.guest_messages = true;
  VmJailOptions jail = Jail();
  jail.id = id_ + "c";
  jail.state_dir = clone_state;
  auto clone = VmProcess::Start(restored, jail);
  ASSERT_TRUE(clone.ok()) << clone.status();
  ASSERT_TRUE((*clone)->WaitRunning(30'000).ok()) << (*clone)->ExitReport();
  const std::string clone_console = (*clone)->files().log;
  std::string text;
  EXPECT_TRUE(WaitFor(**clone, [&] { return (text = ReadAll(clone_console)).find("ok=1") != std::string::npos; },
                      30'000))
      << (*clone)->ExitReport();
  EXPECT_EQ(text.find("snap ready"), std::string::npos) << "the clone booted afresh: " << text;
  EXPECT_EQ(text.find("ok=0"), std::string::npos) << text;
  // A save of the clone is refused: it was given no snapshot directory.
  EXPECT_TRUE(absl::IsFailedPrecondition((*clone)->SaveMachine(saved, 1000).status()));
  ASSERT_TRUE((*clone)->Stop(5000).ok());
  ASSERT_TRUE((*vm)->Stop(5000).ok());
  // The clone's writes stayed its own.
  EXPECT_EQ(std::hash<std::string>{}(ReadAll(saved + "/memory")), saved_hash);
}

TEST_F(VmProcessTest, DestructionKillsAndCleansUp) {
  std::vector<std::string> cgroups;
  pid_t pid = 0;
  std::string identity;
  {
    auto vm = VmProcess::Start(Plan("idle:60"), Jail());
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->WaitRunning(30'000).ok()) << (*vm)->ExitReport();
    pid = (*vm)->pid();
    identity = container::ProcessIdentity(pid).value_or("");
    cgroups = (*vm)->cgroups().dirs();
  }
  EXPECT_NE(container::ProcessIdentity(pid).value_or(""), identity);
  for (const std::string& d : cgroups) {
    EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " left behind";
  }
}

TEST_F(VmProcessTest, TheMonitorDiesWithItsOwner) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ScopedFd from_owner(fds[0]), to_parent(fds[1]);
  const pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    // The owner (a "daemon"): its own spawner thread clones the monitor.
    from_owner.Reset();
    std::string msg;
    auto vm = VmProcess::Start(Plan("idle:60"), Jail());
    if (vm.ok() && (*vm)->WaitRunning(30'000).ok()) {
      msg = absl::StrCat((*vm)->pid(), "\n");
      for (const std::string& d : (*vm)->cgroups().dirs()) absl::StrAppend(&msg, d, "\n");
    }
    msg += "END\n";
    ssize_t ignored = ::write(to_parent.get(), msg.data(), msg.size());
    (void)ignored;
    for (;;) ::pause();  // dies by SIGKILL, never cleaning up
  }
  to_parent.Reset();
  std::string got;
  while (got.find("END\n") == std::string::npos) {
    if (!WaitReadable(from_owner.get(), 60'000)) break;
    char buf[512];
    ssize_t n = ::read(from_owner.get(), buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  from_owner.Reset();
  std::istringstream lines(got);
  std::string line;
  std::getline(lines, line);
  const pid_t vm_pid = static_cast<pid_t>(std::atol(line.c_str()));
  std::vector<std::string> cgroups;
  while (std::getline(lines, line) && line != "END") cgroups.push_back(line);
  ScopedFd vm_fd(static_cast<int>(::syscall(SYS_pidfd_open, vm_pid, 0)));
  ::kill(owner, SIGKILL);
  int status = 0;
  ::waitpid(owner, &status, 0);
  ASSERT_GT(vm_pid, 0) << "the owner could not start its VM: " << got;
  ASSERT_TRUE(vm_fd.valid());
  EXPECT_TRUE(WaitReadable(vm_fd.get(), 10'000)) << "the monitor outlived its owner (no parent-death signal)";
  for (const std::string& d : cgroups) {
    EXPECT_TRUE(RemoveCgroupTree(d).ok()) << d;
  }
}

TEST_F(VmProcessTest, AnEarlyExitReportsTheMonitorsOwnError) {
  const std::string bogus = dir_ + "/not-a-kernel";
  {
    std::ofstream out(bogus);
    out << "this is not a kernel image\n";
  }
  VmPlan plan = Plan("boot");
  plan.kernel = bogus;
  auto vm = VmProcess::Start(plan, Jail());
  ASSERT_TRUE(vm.ok()) << vm.status();  // the jail and execve worked
  absl::Status s = (*vm)->WaitRunning(30'000);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  const std::string msg(s.message());
  std::printf("early exit: %s\n", msg.c_str());
  EXPECT_NE(msg.find("stopped before its control socket answered"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exited with status"), std::string::npos) << msg;
  EXPECT_NE(msg.find("log: dsec-monitor:"), std::string::npos) << "the monitor's own message: " << msg;
  const std::vector<std::string> cgroups = (*vm)->cgroups().dirs();
  vm->reset();
  for (const std::string& d : cgroups) {
    EXPECT_NE(::access(d.c_str(), F_OK), 0) << d << " left behind";
  }
}

TEST_F(VmProcessTest, AMissingKernelIsNotFoundAndCreatesNothing) {
  VmPlan plan = Plan("boot");
  plan.kernel = dir_ + "/no-such-vmlinux";
  auto vm = VmProcess::Start(plan, Jail());
  ASSERT_FALSE(vm.ok());
  EXPECT_TRUE(absl::IsNotFound(vm.status())) << vm.status();
  EXPECT_NE(vm.status().message().find("no-such-vmlinux"), std::string::npos) << vm.status();
  struct stat st;
  EXPECT_NE(::stat((dir_ + "/vm").c_str(), &st), 0);
}

}  // namespace
}  // namespace dsec::microvm
