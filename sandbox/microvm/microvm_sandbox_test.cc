// SPDX-License-Identifier: Apache-2.0
// MicrovmSandbox's agent-facing logic against the real dsec-agent binary in
// host mode (host_agent_launcher.h): a busybox EROFS layer stacked under an
// overlay, exec, files, pack_diff into a real layer that a second sandbox
// stacks, pause/resume, destroy, orphan cleanup, refusal of compressed
// layers, fail-fast of a host process that dies, the boot deadline; a
// networked sandbox's tap (held by the host process, gone on destroy and
// after orphan cleanup).
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/container/test_image.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/pack_diff.h"
#include "sandbox/microvm/host_agent_launcher.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/microvm_tier.h"
#include "sandbox/network/sandbox_network.h"
#include "sandbox/network/netlink.h"
#include "sandbox/network/node_network.h"

namespace dsec::microvm {
namespace {

using container::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

char ProcState(pid_t pid) {
  std::string s = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = s.rfind(')');
  return paren == std::string::npos || paren + 2 >= s.size() ? '?' : s[paren + 2];
}

struct Collected {
  std::string out, err;
  agent::OutputCallback Callback() {
    return [this](int stream, std::string_view d) { (stream == 2 ? err : out).append(d.data(), d.size()); };
  }
};

class MicrovmSandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root (mounts, cgroups)";
      return;
    }
    if (::access(DSEC_AGENT_BINARY_PATH, X_OK) != 0) {
      skip_ = "dsec-agent not built";
      return;
    }
    auto dir = TempDir::Create("dsec-mvm-sandbox-");
    if (!dir.ok()) {
      skip_ = dir.status().ToString();
      return;
    }
    dir_ = new TempDir(std::move(*dir));
    const std::string tree = dir_->path() + "/tree";
    absl::Status s = container::testing::BuildBusyboxTree(tree);
    if (s.ok()) s = container::testing::WriteTreeFile(tree, "etc/greeting", "hello from the layer\n");
    if (s.ok()) s = container::testing::WriteTreeFile(tree, "etc/doomed", "delete me\n");
    if (s.ok()) s = container::testing::WriteTreeFile(tree, "tmp/.keep", "");
    if (s.ok()) s = container::testing::WriteTreeFile(tree, "work/.keep", "");
    if (!s.ok()) {
      skip_ = absl::StrCat("busybox layer: ", s.ToString());
      return;
    }
    auto store = layers::LayerStore::Create(Store());
    if (!store.ok()) {
      skip_ = store.status().ToString();
      return;
    }
    layers::BuildRequest req;
    req.name = "base";
    req.version = "1";
    auto built = store->Build(tree, req);
    if (!built.ok()) {
      skip_ = absl::StrCat("building the base layer: ", built.status().ToString());
      return;
    }
    base_image_ = new std::string(store->ImagePath(built->layer.digest));
    lz4_image_ = new std::string(dir_->path() + "/lz4.erofs");
    auto mkfs = container::testing::FindMkfsErofs();
    auto lz4 = mkfs.ok() ? container::testing::RunHostCommand({*mkfs, "--quiet", "-zlz4", *lz4_image_, tree})
                         : absl::StatusOr<std::string>(mkfs.status());
    if (!lz4.ok()) lz4_image_->clear();
  }
  static void TearDownTestSuite() {
    delete base_image_;
    delete lz4_image_;
    delete dir_;
  }
  static std::string Store() { return dir_->path() + "/store"; }

  void SetUp() override {
    if (!skip_.empty()) {
      GTEST_SKIP() << skip_;
    }
    static int n = 0;
    root_ = absl::StrCat(dir_->path(), "/state", n++);
    launcher_ = std::make_unique<HostAgentLauncher>(HostAgentLauncherOptions{DSEC_AGENT_BINARY_PATH});
    options_.state_root = root_;
    options_.boot_timeout_ms = 20'000;
  }
  void TearDown() override {
    if (skip_.empty()) {
      EXPECT_TRUE(container::RemoveTree(root_).ok()) << "state root not empty?";
    }
  }

  MicrovmSpec Spec(const std::string& id, std::vector<std::string> layers = {}) const {
    MicrovmSpec s;
    s.id = id;
    s.layers = layers.empty() ? std::vector<std::string>{*base_image_} : std::move(layers);
    s.memory_mib = 256;
    s.pids = 128;
    return s;
  }
  std::unique_ptr<MicrovmSandbox> MustCreate(const MicrovmSpec& spec) {
    auto sb = MicrovmSandbox::Create(*launcher_, spec, options_);
    EXPECT_TRUE(sb.ok()) << sb.status();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    if (auto dir = std::unique_ptr<DIR, int (*)(DIR*)>(::opendir(root_.c_str()), ::closedir); dir) {
      while (dirent* e = ::readdir(dir.get())) {
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
      }
    }
    return out;
  }

  static std::string skip_;
  static TempDir* dir_;
  static std::string* base_image_;
  static std::string* lz4_image_;
  std::string root_;
  std::unique_ptr<HostAgentLauncher> launcher_;
  MicrovmSandboxOptions options_;
};

std::string MicrovmSandboxTest::skip_;
TempDir* MicrovmSandboxTest::dir_ = nullptr;
std::string* MicrovmSandboxTest::base_image_ = nullptr;
std::string* MicrovmSandboxTest::lz4_image_ = nullptr;

TEST_F(MicrovmSandboxTest, ExecRunsCommandsAndReportsTheirOutcome) {
  auto sb = MustCreate(Spec("exec"));
  ASSERT_NE(sb, nullptr);
  EXPECT_GT(sb->boot_ms(), 0);

  Collected c;
  agent::ExecRequest req;
  req.argv = {"echo", "hello"};
  auto done = sb->Exec(req, c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(c.out, "hello\n");

  Collected c2;
  req.argv = {"sh", "-c", "echo oops >&2; exit 3"};
  done = sb->Exec(req, c2.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_EQ(c2.err, "oops\n");
  EXPECT_EQ(c2.out, "");

  // The layer is the command's working directory (host mode: not chrooted).
  Collected c3;
  req.argv = {"cat", "etc/greeting"};
  done = sb->Exec(req, c3.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(c3.out, "hello from the layer\n");

  // Killed at its timeout: a `sleep` that ran to its end would exit 0.
  Collected c4;
  req.argv = {"sleep", "30"};
  req.timeout_ms = 300;
  done = sb->Exec(req, c4.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->timed_out);
  EXPECT_EQ(done->killed_by, "timeout");
  EXPECT_FALSE(done->exit_code.has_value());

  Collected c5;
  req.argv = {"cat"};
  req.timeout_ms = 0;
  req.stdin = true;
  done = sb->Exec(req, c5.Callback(), "from stdin");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(c5.out, "from stdin");
  ASSERT_TRUE(sb->Destroy().ok());
}

// An ExecControl streams stdin after the start (a line sent once the
// command answered the first) and signals the command (SIGTERM reaches a
// trap; SIGKILL ends it, not as a timeout), through the agent.
TEST_F(MicrovmSandboxTest, AControlStreamsStdinAndSignalsTheCommand) {
  auto sb = MustCreate(Spec("control"));
  ASSERT_NE(sb, nullptr);
  auto control = ExecControl::Create(/*stdin_open=*/true);
  ASSERT_TRUE(control.ok()) << control.status();
  std::string out;
  agent::ExecRequest req;
  req.argv = {"sh", "-c", "while read l; do echo \"got $l\"; done; echo eof"};
  req.stdin = true;
  auto done = sb->Exec(
      req,
      [&](int, std::string_view data) {
        out.append(data);
        if (out == "got first\n") {
          EXPECT_TRUE((*control)->WriteStdin("second\n").ok());
          EXPECT_TRUE((*control)->CloseStdin().ok());
        }
      },
      "first\n", control->get());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(out, "got first\ngot second\neof\n");
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_TRUE((*control)->ended());

  for (int sig : {SIGTERM, SIGKILL}) {
    auto c = ExecControl::Create(false);
    ASSERT_TRUE(c.ok());
    std::string seen;
    agent::ExecRequest r;
    r.argv = {"sh", "-c", "trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done"};
    r.timeout_ms = 20'000;
    auto d = sb->Exec(
        r,
        [&](int stream, std::string_view data) {
          if (stream != 1) return;  // the shell may report its killed sleep on stderr
          seen.append(data);
          if (seen == "ready\n") {
            EXPECT_TRUE((*c)->Signal(sig).ok());
          }
        },
        {}, c->get());
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_FALSE(d->timed_out) << sig;
    if (sig == SIGTERM) {
      EXPECT_EQ(seen, "ready\nterm\n");
      EXPECT_EQ(d->exit_code, 3);
    } else {
      EXPECT_EQ(seen, "ready\n");
      EXPECT_EQ(d->signal, SIGKILL);
    }
  }
  ASSERT_TRUE(sb->Destroy().ok());
}

// Execs overlap, each on an agent connection of its own, and the files go
// beside them; KillExecs ends the running ones (signal 9, the agent kills
// their trees) and the sandbox serves on.
TEST_F(MicrovmSandboxTest, ExecsOverlapFilesGoBesideThemAndKillExecsEndsThem) {
  auto sb = MustCreate(Spec("overlap"));
  ASSERT_NE(sb, nullptr);
  // A waits for what B does: in series A would time out. (The host-mode
  // agent runs commands in its root, not chrooted: relative paths.)
  agent::ExecRequest a_req;
  a_req.argv = {"sh", "-c", "touch a-started; while [ ! -e b-done ]; do sleep 0.02; done; echo A"};
  a_req.timeout_ms = 20'000;
  absl::StatusOr<agent::ExecDone> a_done = absl::UnknownError("not run");
  std::string a_out;
  std::thread a([&] { a_done = sb->Exec(a_req, [&](int, std::string_view d) { a_out.append(d); }); });
  struct Join {
    std::thread* t;
    ~Join() {
      if (t->joinable()) t->join();
    }
  } join_a{&a};
  bool started = false;
  for (int i = 0; i < 500 && !started; ++i) {  // A's file, read beside A: bounded poll
    started = sb->ReadFile("/a-started", 16).ok();
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(started);
  agent::ExecRequest b_req;
  b_req.argv = {"sh", "-c", "touch b-done; echo B"};
  std::string b_out;
  auto b_done = sb->Exec(b_req, [&](int, std::string_view d) { b_out.append(d); });
  a.join();
  ASSERT_TRUE(b_done.ok()) << b_done.status();
  EXPECT_EQ(b_done->exit_code, 0);
  EXPECT_EQ(b_out, "B\n");
  ASSERT_TRUE(a_done.ok()) << a_done.status();
  EXPECT_EQ(a_done->exit_code, 0);
  EXPECT_EQ(a_out, "A\n");

  agent::ExecRequest sleeper;
  sleeper.argv = {"sh", "-c", "echo up; exec sleep 60"};
  sleeper.timeout_ms = 30'000;
  std::atomic<bool> up{false};
  bool spawned = false;
  absl::StatusOr<agent::ExecDone> s_done = absl::UnknownError("not run");
  const auto t0 = std::chrono::steady_clock::now();
  std::thread s([&] {
    s_done = sb->Exec(
        sleeper, [&](int stream, std::string_view d) { if (stream == 1 && d == "up\n") up = true; }, {}, nullptr,
        [&] { spawned = true; });
  });
  Join join_s{&s};
  for (int i = 0; i < 500 && !up; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(up);
  EXPECT_TRUE(sb->KillExecs());
  s.join();
  EXPECT_TRUE(spawned);
  ASSERT_TRUE(s_done.ok()) << s_done.status();
  EXPECT_EQ(s_done->signal, 9);
  EXPECT_FALSE(s_done->exit_code.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  agent::ExecRequest again;
  again.argv = {"sh", "-c", "echo still"};
  std::string again_out;
  auto again_done = sb->Exec(again, [&](int, std::string_view d) { again_out.append(d); });
  ASSERT_TRUE(again_done.ok()) << again_done.status();
  EXPECT_EQ(again_out, "still\n") << "signal " << again_done->signal.value_or(0);
  ASSERT_TRUE(sb->Destroy().ok());
}

TEST_F(MicrovmSandboxTest, FilesGoThroughTheAgentInsideTheRoot) {
  auto sb = MustCreate(Spec("files"));
  ASSERT_NE(sb, nullptr);
  auto greeting = sb->ReadFile("/etc/greeting", 1 << 20);
  ASSERT_TRUE(greeting.ok()) << greeting.status();
  EXPECT_EQ(*greeting, "hello from the layer\n");
  ASSERT_TRUE(sb->WriteFile("/tmp/note.txt", "written by the host", 0600).ok());
  auto back = sb->ReadFile("/tmp/note.txt", 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "written by the host");
  auto list = sb->ListDir("/tmp");
  ASSERT_TRUE(list.ok()) << list.status();
  bool found = false;
  for (const agent::DirEntry& e : *list) {
    if (e.name == "note.txt") {
      found = true;
      EXPECT_EQ(e.type, agent::EntryType::kFile);
      EXPECT_EQ(e.mode, 0600u);
      EXPECT_EQ(e.size, 19u);
    }
  }
  EXPECT_TRUE(found);
  // ".." cannot leave the root.
  auto escape = sb->ReadFile("/../../../../etc/hostname", 100);
  if (escape.ok()) {
    EXPECT_NE(*escape, ReadAll("/etc/hostname"));
  }
  EXPECT_TRUE(absl::IsNotFound(sb->ReadFile("/no/such/file", 10).status()));
  ASSERT_TRUE(sb->Destroy().ok());
}

TEST_F(MicrovmSandboxTest, PackDiffMakesALayerThatANewSandboxStacks) {
  auto sb = MustCreate(Spec("packer"));
  ASSERT_NE(sb, nullptr);
  ASSERT_TRUE(sb->WriteFile("/work/result.txt", "made in the sandbox\n", 0644).ok());
  agent::ExecRequest req;
  req.argv = {"rm", "etc/doomed"};
  auto done = sb->Exec(req, nullptr);
  ASSERT_TRUE(done.ok() && done->exit_code == 0) << done.status();

  auto upper = sb->PackDiffDir();
  ASSERT_TRUE(upper.ok()) << upper.status();
  EXPECT_EQ(upper->rfind(sb->state_dir() + "/", 0), 0u) << *upper;
  struct stat st;
  ASSERT_EQ(::lstat((*upper + "/work/result.txt").c_str(), &st), 0);
  ASSERT_EQ(::lstat((*upper + "/etc/doomed").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == 0) << "a whiteout";

  auto store = layers::LayerStore::Create(Store());
  ASSERT_TRUE(store.ok());
  layers::BuildRequest breq;
  breq.name = "packed";
  breq.version = "1";
  breq.parents = {"base:1"};
  auto built = layers::PackDiff(*store, *upper, breq);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::string image = store->ImagePath(built->layer.digest);
  // A second pack_diff replaces the first copy.
  auto again = sb->PackDiffDir();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(::access(upper->c_str(), F_OK), 0) << "the previous copy stays";
  ASSERT_TRUE(sb->Destroy().ok());

  auto next = MustCreate(Spec("stacker", {*base_image_, image}));
  ASSERT_NE(next, nullptr);
  auto result = next->ReadFile("/work/result.txt", 1 << 20);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, "made in the sandbox\n");
  EXPECT_TRUE(absl::IsNotFound(next->ReadFile("/etc/doomed", 100).status()))
      << "the whiteout hides the lower file";
  ASSERT_TRUE(next->Destroy().ok());
}

// A watch holds an agent connection of its own: the file calls and
// commands go on beside it, a paused sandbox refuses a new one and stills
// the running one, its directory's removal ends it (NotFound), Close wakes
// a waiting Next and the sandbox's end ends the others.
TEST_F(MicrovmSandboxTest, WatchesAGuestDirectoryBesideFilesAndCommands) {
  auto sb = MustCreate(Spec("watcher"));
  ASSERT_NE(sb, nullptr);
  ASSERT_TRUE(sb->WriteFile("/w/keep", "k", 0644).ok());
  EXPECT_TRUE(absl::IsNotFound(sb->WatchDir("/no/such", true, 64).status()));
  auto made = sb->WatchDir("/w", /*recursive=*/true, 64);
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<DirWatch> w = *std::move(made);
  std::vector<std::string> seen;
  auto wait_for = [&](const std::string& what) {
    for (int i = 0; i < 100; ++i) {
      if (std::find(seen.begin(), seen.end(), what) != seen.end()) return true;
      auto evs = w->Next(100);
      if (!evs.ok()) return false;
      for (const FileEvent& e : *evs) {
        static const char* kNames[] = {"create", "write", "remove", "rename", "chmod"};
        seen.push_back(absl::StrCat(kNames[static_cast<int>(e.type)], " ", e.name));
      }
    }
    return std::find(seen.begin(), seen.end(), what) != seen.end();
  };
  ASSERT_TRUE(sb->WriteFile("/w/a", "x", 0644).ok());
  EXPECT_TRUE(wait_for("create a")) << absl::StrJoin(seen, ", ");
  agent::ExecRequest req;
  req.argv = {"sh", "-c", "mkdir w/sub && echo y > w/sub/b && rm w/a"};  // the host-mode agent's root is its cwd
  auto done = sb->Exec(req, nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_TRUE(wait_for("remove a")) << absl::StrJoin(seen, ", ");
  EXPECT_TRUE(wait_for("create sub/b")) << absl::StrJoin(seen, ", ");
  EXPECT_TRUE(sb->ListDir("/w").ok());

  ASSERT_TRUE(sb->Pause().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(sb->WatchDir("/w", false, 64).status()));
  auto still = w->Next(50);
  ASSERT_TRUE(still.ok()) << still.status();
  ASSERT_TRUE(sb->Resume().ok());

  // The directory removed: NotFound, said by the agent.
  req.argv = {"rm", "-rf", "w"};
  ASSERT_TRUE(sb->Exec(req, nullptr).ok());
  absl::Status end;
  for (int i = 0; i < 100 && end.ok(); ++i) end = w->Next(100).status();
  EXPECT_TRUE(absl::IsNotFound(end)) << end;

  // Close wakes a waiting Next.
  auto closing = sb->WatchDir("/", false, 64);
  ASSERT_TRUE(closing.ok()) << closing.status();
  absl::Status closed;
  std::thread waiter([&] { closed = (*closing)->Next(30'000).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  (*closing)->Close();
  waiter.join();
  EXPECT_TRUE(absl::IsUnavailable(closed)) << closed;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));

  // The sandbox's end ends a watch that nobody closed.
  auto orphan = sb->WatchDir("/", false, 64);
  ASSERT_TRUE(orphan.ok()) << orphan.status();
  ASSERT_TRUE(sb->Destroy().ok());
  end = absl::OkStatus();
  for (int i = 0; i < 100 && end.ok(); ++i) end = (*orphan)->Next(100).status();
  EXPECT_TRUE(absl::IsUnavailable(end)) << end;
  EXPECT_TRUE(Entries().empty());
}

TEST_F(MicrovmSandboxTest, PauseStopsEveryProcessAndResumeContinues) {
  auto sb = MustCreate(Spec("pauser"));
  ASSERT_NE(sb, nullptr);
  const pid_t pid = sb->host().pid();
  ASSERT_TRUE(sb->Pause().ok());
  EXPECT_TRUE(sb->paused());
  EXPECT_EQ(ProcState(pid), 'T');
  EXPECT_TRUE(absl::IsFailedPrecondition(sb->ReadFile("/etc/greeting", 10).status()));
  // pack_diff of a paused sandbox resumes it for the copy, then pauses again.
  auto upper = sb->PackDiffDir();
  ASSERT_TRUE(upper.ok()) << upper.status();
  EXPECT_EQ(ProcState(pid), 'T');
  ASSERT_TRUE(sb->Resume().ok());
  EXPECT_NE(ProcState(pid), 'T');
  agent::ExecRequest req;
  req.argv = {"true"};
  auto done = sb->Exec(req, nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  // Destroying a paused sandbox works too.
  ASSERT_TRUE(sb->Pause().ok());
  ASSERT_TRUE(sb->Destroy().ok());
  EXPECT_TRUE(Entries().empty());
}

TEST_F(MicrovmSandboxTest, AMachineSaveIsRefusedWithTheReasonAndTheStagingGoesOnDestroy) {
  // Without a staging directory: refused, saying so.
  auto plain = MustCreate(Spec("nosave"));
  ASSERT_NE(plain, nullptr);
  auto refused = plain->SaveMachine(root_ + "/dest");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("without a directory"), std::string::npos) << refused.status();
  ASSERT_TRUE(plain->Destroy().ok());
  // With one, the host-mode agent (a host process) has no machine to save;
  // the staging directory goes with the sandbox.
  MicrovmSpec spec = Spec("staged");
  spec.machine_staging = dir_->path() + "/staging-" + root_.substr(root_.rfind('/') + 1);
  ASSERT_EQ(::mkdir(spec.machine_staging.c_str(), 0700), 0);
  auto staged = MustCreate(spec);
  ASSERT_NE(staged, nullptr);
  auto unsupported = staged->SaveMachine(root_ + "/dest");
  EXPECT_TRUE(absl::IsUnimplemented(unsupported.status())) << unsupported.status();
  ASSERT_TRUE(staged->Destroy().ok());
  EXPECT_NE(::access(spec.machine_staging.c_str(), F_OK), 0) << "the staging directory stayed";
  // Nor can it continue from a saved machine.
  MicrovmSpec from = Spec("restored");
  from.machine = dir_->path();
  auto restored = MicrovmSandbox::Create(*launcher_, from, options_);
  EXPECT_TRUE(absl::IsUnimplemented(restored.status())) << restored.status();
}

TEST_F(MicrovmSandboxTest, DestroyLeavesNothingBehind) {
  auto sb = MustCreate(Spec("doomed"));
  ASSERT_NE(sb, nullptr);
  const pid_t pid = sb->host().pid();
  const std::string identity = container::ProcessIdentity(pid).value_or("");
  const std::string state = sb->state_dir();
  const std::string cgroups = ReadAll(state + "/cgroups");
  ASSERT_FALSE(cgroups.empty());
  // A background process the sandbox started must go too.
  agent::ExecRequest req;
  req.argv = {"sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 < /dev/null &"};
  ASSERT_TRUE(sb->Exec(req, nullptr).ok());
  ASSERT_TRUE(sb->Destroy().ok());
  EXPECT_NE(container::ProcessIdentity(pid).value_or(""), identity);
  std::istringstream in(cgroups);
  for (std::string d; std::getline(in, d);) {
    EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
  }
  EXPECT_NE(::access(state.c_str(), F_OK), 0);
  EXPECT_EQ(ReadAll("/proc/self/mountinfo").find(root_), std::string::npos);
  EXPECT_TRUE(sb->Destroy().ok()) << "idempotent";
}

TEST_F(MicrovmSandboxTest, OrphanCleanupRemovesSandboxesOfADeadDaemon) {
  auto live = MustCreate(Spec("live"));
  ASSERT_NE(live, nullptr);
  auto orphan = MustCreate(Spec("orphan"));
  ASSERT_NE(orphan, nullptr);
  const pid_t pid = orphan->host().pid();
  const std::string identity = container::ProcessIdentity(pid).value_or("");
  const std::string state = orphan->state_dir();
  const std::string cgroups = ReadAll(state + "/cgroups");
  // The daemon that owned it "died": its identity no longer matches.
  {
    std::ofstream owner(state + "/owner", std::ios::trunc);
    owner << "2147483646 1";
  }
  MicrovmSandbox::AbandonForTesting(std::move(orphan));

  auto removed = CleanupOrphans(root_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  EXPECT_NE(container::ProcessIdentity(pid).value_or(""), identity) << "the orphan's process lives";
  std::istringstream in(cgroups);
  for (std::string d; std::getline(in, d);) {
    EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
  }
  EXPECT_NE(::access(state.c_str(), F_OK), 0);
  // The live daemon's sandbox was left alone.
  agent::ExecRequest req;
  req.argv = {"true"};
  auto done = live->Exec(req, nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(live->Destroy().ok());
}

// A node network of the test's own (nftables; no uplink: nothing leaves).
std::unique_ptr<network::NodeNetwork> TestNodeNetwork(std::string* skip) {
  network::NodeNetworkOptions o;
  o.subnet = absl::StrCat("10.250.", ::getpid() % 250, ".0/24");
  auto node = network::NodeNetwork::Create(o);
  if (!node.ok()) {
    *skip = node.status().ToString();
    return nullptr;
  }
  return std::move(*node);
}

// The descriptors of `pid` that are /dev/net/tun.
int TunFds(pid_t pid) {
  int n = 0;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  if (auto d = std::unique_ptr<DIR, int (*)(DIR*)>(::opendir(dir.c_str()), ::closedir); d) {
    while (dirent* e = ::readdir(d.get())) {
      char target[64] = {};
      if (::readlink(absl::StrCat(dir, "/", e->d_name).c_str(), target, sizeof(target) - 1) > 0 &&
          std::string(target) == "/dev/net/tun") {
        ++n;
      }
    }
  }
  return n;
}

// The tier with the host-mode launcher: the network part of a create.
std::unique_ptr<MicrovmTier> HostModeTier(const std::string& root) {
  MicrovmTierOptions o;
  o.state_root = root;
  o.launcher = std::make_shared<HostAgentLauncher>(HostAgentLauncherOptions{DSEC_AGENT_BINARY_PATH});
  return std::make_unique<MicrovmTier>(std::move(o));
}

tier::CreateSpec NetworkedCreate(const std::string& id, const std::string& image, network::NodeNetwork* node) {
  tier::CreateSpec c;
  c.id = id;
  c.images = {image};
  c.memory_mib = 256;
  c.pids = 128;
  c.network = std::make_shared<const network::NetworkSpec>();
  c.node_network = node;
  return c;
}

TEST_F(MicrovmSandboxTest, ANetworkedSandboxsHostHoldsItsTapWhichGoesOnDestroy) {
  std::string skip;
  auto node = TestNodeNetwork(&skip);
  if (!node) GTEST_SKIP() << skip;
  ASSERT_TRUE(MicrovmTierTraits().network);
  auto tier = HostModeTier(root_);
  auto sb = tier->Create(NetworkedCreate("networked", *base_image_, node.get()));
  ASSERT_TRUE(sb.ok()) << sb.status();
  std::shared_ptr<network::SandboxNetwork> net = (*sb)->network();
  ASSERT_NE(net, nullptr);
  const std::string tap = net->host_interface();
  EXPECT_EQ(ReadAll(absl::StrCat(root_, "/networked/tap")), tap + "\n");
  auto host = network::NlSocket::Open();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->LinkIndex(tap).ok());
  const pid_t pid = std::stoi(ReadAll(absl::StrCat(root_, "/networked/init")));
  EXPECT_EQ(TunFds(pid), 1) << "the host process did not inherit the tap";
  EXPECT_EQ(node->leased(), 1u);
  auto counters = net->Counters();
  ASSERT_TRUE(counters.ok()) << counters.status();
  ASSERT_TRUE((*sb)->Destroy().ok());
  EXPECT_EQ(host->LinkIndex(tap).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node->leased(), 0u);
  EXPECT_EQ(net->Counters().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(MicrovmSandboxTest, OrphanCleanupRemovesATapLeftBehind) {
  std::string skip;
  auto node = TestNodeNetwork(&skip);
  if (!node) GTEST_SKIP() << skip;
  auto tier = HostModeTier(root_);
  auto sb = tier->Create(NetworkedCreate("orphan-net", *base_image_, node.get()));
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string tap = (*sb)->network()->host_interface();
  {
    std::ofstream owner(absl::StrCat(root_, "/orphan-net/owner"), std::ios::trunc);
    owner << "2147483646 1";
  }
  // Leaked with the daemon's descriptor still open (a real kill -9 closes
  // it): only the cleanup can remove the tap now.
  (void)sb->release();
  auto host = network::NlSocket::Open();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->LinkIndex(tap).ok());
  auto removed = tier->CleanupOrphans();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  EXPECT_EQ(host->LinkIndex(tap).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(MicrovmSandboxTest, RefusesACompressedLayer) {
  if (lz4_image_->empty()) {
    GTEST_SKIP() << "mkfs.erofs cannot make lz4 images here";
  }
  auto sb = MicrovmSandbox::Create(*launcher_, Spec("lz4", {*base_image_, *lz4_image_}), options_);
  ASSERT_FALSE(sb.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(sb.status())) << sb.status();
  EXPECT_NE(sb.status().message().find("DAX"), std::string::npos) << sb.status();
  EXPECT_NE(sb.status().message().find(*lz4_image_), std::string::npos) << sb.status();
  EXPECT_TRUE(Entries().empty());
}

TEST_F(MicrovmSandboxTest, AHostProcessThatDiesFailsTheCreateAtOnce) {
  HostAgentLauncher dying(HostAgentLauncherOptions{"/bin/false"});
  // A deadline past the test's own timeout: only the exit (its pidfd) can
  // end the wait, and the answer says so (the deadline's would be
  // DeadlineExceeded, "did not answer").
  options_.boot_timeout_ms = 3'600'000;
  auto sb = MicrovmSandbox::Create(dying, Spec("dies"), options_);
  ASSERT_FALSE(sb.ok());
  EXPECT_TRUE(absl::IsUnavailable(sb.status())) << sb.status();
  EXPECT_NE(sb.status().message().find("exited with status 1"), std::string::npos) << sb.status();
  EXPECT_TRUE(Entries().empty());
}

TEST_F(MicrovmSandboxTest, AnAgentThatNeverAnswersHitsTheBootDeadline) {
  const std::string script = dir_->path() + "/silent-agent";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nexec sleep 600\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  HostAgentLauncher silent(HostAgentLauncherOptions{script});
  options_.boot_timeout_ms = 500;
  auto sb = MicrovmSandbox::Create(silent, Spec("silent"), options_);
  ASSERT_FALSE(sb.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(sb.status())) << sb.status();
  EXPECT_NE(sb.status().message().find("did not answer within 500 ms"), std::string::npos) << sb.status();
  EXPECT_TRUE(Entries().empty());
}

}  // namespace
}  // namespace dsec::microvm
