// SPDX-License-Identifier: Apache-2.0
// Made-ahead sandbox inits (label integration: real cgroups, namespaces,
// mounts; needs root, busybox-static and erofs-utils).
#include "sandbox/container/init_pool.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/container/test_image.h"
#include "sandbox/container/upper_store.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"

namespace dsec::container {
namespace {

using testing::TempDir;

constexpr int64_t kReadyMs = 20000;

class InitPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto dir = TempDir::Create("dsec-init-pool-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(*dir));
    absl::StatusOr<std::string> image = testing::BuildBusyboxImage(dir_->path());
    if (absl::IsUnavailable(image.status())) GTEST_SKIP() << image.status();
    ASSERT_TRUE(image.ok()) << image.status();
    image_ = *image;
    state_root_ = dir_->path() + "/state";
  }
  void TearDown() override {
    if (dir_ == nullptr) return;
    // Nothing of the pool outlives it: no state entry, mount or cgroup.
    auto entries = dsec::ListDirectory(state_root_);
    if (entries.ok()) {
      EXPECT_TRUE(entries->empty()) << entries->size() << " entries left, first " << entries->front();
    }
    auto info = dsec::ReadSmallFile("/proc/self/mountinfo");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->find(dir_->path()), std::string::npos);
    for (const std::string& d : cgroup_dirs_) EXPECT_FALSE(dsec::PathExists(d)) << d;
  }
  SandboxConfig Config(const std::string& id, InitPool* pool) const {
    SandboxConfig c;
    c.id = absl::StrCat("pool-", id, "-", ::getpid());
    c.layers = {image_};
    c.state_root = state_root_;
    c.limits.memory_bytes = 96 << 20;
    c.limits.pids_max = 48;
    c.upper_size_bytes = 16 << 20;
    c.hostname = "pooled";
    c.init_pool = pool;
    return c;
  }
  static std::string Sh(Sandbox& sb, const std::string& script) {
    ExecOptions o;
    o.argv = {"sh", "-c", script};
    auto r = sb.Exec(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->stdout_data : "";
  }
  // The slot inits' host pids, from their state records.
  std::vector<pid_t> SlotInits() const {
    std::vector<pid_t> pids;
    auto entries = dsec::ListDirectory(state_root_);
    if (!entries.ok()) return pids;
    for (const std::string& e : *entries) {
      if (e.rfind(".slot-", 0) != 0) continue;
      auto rec = dsec::ReadSmallFile(absl::StrCat(state_root_, "/", e, "/init"));
      int pid = 0;
      if (rec.ok() && absl::SimpleAtoi(rec->substr(0, rec->find(' ')), &pid)) pids.push_back(pid);
    }
    return pids;
  }

  std::unique_ptr<TempDir> dir_;
  std::string image_, state_root_;
  std::vector<std::string> cgroup_dirs_;
};

TEST_F(InitPoolTest, SandboxesTakeReadySlotsAndBehaveAsFromScratch) {
  auto pool = InitPool::Create(state_root_, 2);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitReady(2, kReadyMs)) << (*pool)->last_error();
  EXPECT_EQ(SlotInits().size(), 2u);
  auto sb = Sandbox::Create(Config("a", pool->get()));
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ((*pool)->stats().taken, 1u);
  // Named by its id now, with its own limits, hostname, namespaces.
  EXPECT_EQ((*sb)->state_dir(), absl::StrCat(state_root_, "/", Config("a", nullptr).id));
  for (const std::string& d : (*sb)->cgroups().dirs()) {
    cgroup_dirs_.push_back(d);
    if (d.find("/memory/") != std::string::npos) {
      auto limit = dsec::ReadSmallFile(d + "/memory.limit_in_bytes");
      ASSERT_TRUE(limit.ok());
      EXPECT_EQ(absl::StripAsciiWhitespace(*limit), absl::StrCat(96 << 20));
    }
    if (d.find("/pids/") != std::string::npos) {
      auto max = dsec::ReadSmallFile(d + "/pids.max");
      ASSERT_TRUE(max.ok());
      EXPECT_EQ(absl::StripAsciiWhitespace(*max), "48");
    }
  }
  EXPECT_EQ(Sh(**sb, "hostname; set -- /proc/[0-9]*; echo $#; echo x > /tmp/f; cat /tmp/f"),
            "pooled\n2\nx\n");
  char host_ns[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/net", host_ns, sizeof(host_ns) - 1), 0);
  EXPECT_NE(Sh(**sb, "readlink /proc/self/ns/net"), absl::StrCat(host_ns, "\n"));
  ASSERT_TRUE((*sb)->Reset().ok());
  EXPECT_EQ(Sh(**sb, "cat /tmp/f 2>/dev/null || echo clean"), "clean\n");
  ASSERT_TRUE((*sb)->Destroy().ok());
  (*pool)->Flush();
  EXPECT_GE((*pool)->stats().retired, 1u);
  for (const std::string& d : cgroup_dirs_) EXPECT_FALSE(dsec::PathExists(d)) << d;
  pool->reset();
}

TEST_F(InitPoolTest, RetiredCgroupsGoAfterABurstOfDestroysNotDuringIt) {
  auto pool = InitPool::Create(state_root_, 0);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // Three destroys in a row, then none: the cgroups of all three wait for
  // the lull after the last one (kRetireQuietMs), then go.
  std::vector<std::string> first_dirs;
  int64_t last_destroy_ms = 0;
  for (const char* id : {"burst1", "burst2", "burst3"}) {
    auto sb = Sandbox::Create(Config(id, pool->get()));
    ASSERT_TRUE(sb.ok()) << sb.status();
    for (const std::string& d : (*sb)->cgroups().dirs()) {
      cgroup_dirs_.push_back(d);
      if (first_dirs.size() < (*sb)->cgroups().dirs().size()) first_dirs.push_back(d);
    }
    last_destroy_ms = MonotonicNowMs();  // at or before its retirement
    ASSERT_TRUE((*sb)->Destroy().ok());
  }
  ASSERT_FALSE(first_dirs.empty());
  // The first sandbox's cgroups go no earlier than the lull after the
  // third destroy (nothing else can remove them sooner).
  const int64_t deadline_ms = MonotonicNowMs() + 20'000;
  auto any_left = [&] {
    for (const std::string& d : cgroup_dirs_) {
      if (dsec::PathExists(d)) return true;
    }
    return false;
  };
  bool first_gone = false;
  int64_t first_gone_ms = 0;
  while (MonotonicNowMs() < deadline_ms && any_left()) {
    if (!first_gone && !dsec::PathExists(first_dirs.front())) {
      first_gone = true;
      first_gone_ms = MonotonicNowMs();
    }
    ::usleep(2'000);
  }
  if (!first_gone && !dsec::PathExists(first_dirs.front())) first_gone_ms = MonotonicNowMs();
  EXPECT_FALSE(any_left()) << "retired cgroups still there 20 s after the destroys";
  EXPECT_GE(first_gone_ms - last_destroy_ms, InitPool::kRetireQuietMs);
  (*pool)->Flush();  // its count comes after the state directory
  EXPECT_EQ((*pool)->stats().retired, 3u);
  pool->reset();
}

TEST_F(InitPoolTest, FlushRemovesRetiredCgroupsWithoutWaitingForALull) {
  auto pool = InitPool::Create(state_root_, 0);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto sb = Sandbox::Create(Config("flushed", pool->get()));
  ASSERT_TRUE(sb.ok()) << sb.status();
  for (const std::string& d : (*sb)->cgroups().dirs()) cgroup_dirs_.push_back(d);
  const pid_t init = (*sb)->init_pid();
  ASSERT_GT(init, 0);
  ASSERT_TRUE((*sb)->Destroy().ok());
  (*pool)->Flush();
  for (const std::string& d : cgroup_dirs_) EXPECT_FALSE(dsec::PathExists(d)) << d;
  // The destroy killed the init; the pool reaped it (no child left to wait for).
  EXPECT_EQ(::waitpid(init, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  pool->reset();
}

// A writable layer in the shared store (upper_store.h) goes after the
// destroyed sandbox's init is reaped, by the pool's thread.
TEST_F(InitPoolTest, ARetiredSandboxsLayerInTheSharedStoreGoesAfterItsInitIsReaped) {
  UpperStore* store = UpperStore::Default();
  if (store == nullptr) GTEST_SKIP() << "no shared store for writable layers here (log says why)";
  auto pool = InitPool::Create(state_root_, 0);
  ASSERT_TRUE(pool.ok()) << pool.status();
  SandboxConfig c = Config("stored", pool->get());
  c.upper_size_bytes = c.limits.memory_bytes;  // the memory limit bounds the layer
  auto sb = Sandbox::Create(c);
  ASSERT_TRUE(sb.ok()) << sb.status();
  for (const std::string& d : (*sb)->cgroups().dirs()) cgroup_dirs_.push_back(d);
  ASSERT_TRUE((*sb)->upper_in_store());
  const std::string upper = (*sb)->upper_dir();
  ASSERT_TRUE(dsec::PathExists(upper)) << upper;
  ASSERT_TRUE((*sb)->Destroy().ok());
  (*pool)->Flush();
  EXPECT_FALSE(dsec::PathExists(upper)) << upper;
  pool->reset();
}

// Expect(n): n slots beyond the target are made for creates that come
// soon; each create that comes takes one and the pool goes back to its
// target; those that do not come are removed once kExpectMs passed.
TEST_F(InitPoolTest, ExpectedCreatesFindSlotsAndUnusedOnesGo) {
  auto pool = InitPool::Create(state_root_, 1);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitReady(1, kReadyMs)) << (*pool)->last_error();
  (*pool)->Expect(3);
  ASSERT_TRUE((*pool)->WaitReady(3, kReadyMs)) << (*pool)->last_error();
  EXPECT_EQ(SlotInits().size(), 3u);
  std::vector<std::unique_ptr<Sandbox>> made;
  for (int i = 0; i < 3; ++i) {
    auto sb = Sandbox::Create(Config(absl::StrCat("x", i), pool->get()));
    ASSERT_TRUE(sb.ok()) << sb.status();
    for (const std::string& d : (*sb)->cgroups().dirs()) cgroup_dirs_.push_back(d);
    made.push_back(std::move(*sb));
  }
  EXPECT_EQ((*pool)->stats().taken, 3u);
  EXPECT_EQ((*pool)->stats().misses, 0u);
  // Back to the target (1), not to 3: the expected creates came.
  ASSERT_TRUE((*pool)->WaitReady(1, kReadyMs)) << (*pool)->last_error();
  ::usleep(300'000);
  EXPECT_EQ((*pool)->stats().ready, 1u);
  made.clear();

  // Expected and not coming: made, then removed after kExpectMs.
  (*pool)->Expect(4);
  ASSERT_TRUE((*pool)->WaitReady(4, kReadyMs)) << (*pool)->last_error();
  const uint64_t made_before = (*pool)->stats().made;
  const int64_t deadline = MonotonicNowMs() + InitPool::kExpectMs + kReadyMs;
  while ((*pool)->stats().ready > 1 && MonotonicNowMs() < deadline) ::usleep(50'000);
  EXPECT_EQ((*pool)->stats().ready, 1u);
  EXPECT_EQ(SlotInits().size(), 1u);
  EXPECT_EQ((*pool)->stats().made, made_before) << "removed slots were made again";
  pool->reset();
}

TEST_F(InitPoolTest, ASlotWhoseInitDiedIsReplacedByAFreshOne) {
  auto pool = InitPool::Create(state_root_, 1);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitReady(1, kReadyMs)) << (*pool)->last_error();
  std::vector<pid_t> inits = SlotInits();
  ASSERT_EQ(inits.size(), 1u);
  ASSERT_EQ(::kill(inits[0], SIGKILL), 0);
  auto sb = Sandbox::Create(Config("b", pool->get()));
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(Sh(**sb, "echo fine"), "fine\n");
  EXPECT_NE((*sb)->init_pid(), inits[0]);
  sb->reset();
  pool->reset();
}

TEST_F(InitPoolTest, SandboxesThatCannotUseASlotDoNotTakeOne) {
  auto pool = InitPool::Create(state_root_, 1);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitReady(1, kReadyMs)) << (*pool)->last_error();
  SandboxConfig userns = Config("userns", pool->get());
  userns.user_namespace = UserNamespaceMap{0x38000000u, 0x38000000u, 65536};
  auto a = Sandbox::Create(userns);
  ASSERT_TRUE(a.ok()) << a.status();
  SandboxConfig elsewhere = Config("elsewhere", pool->get());
  elsewhere.state_root = dir_->path() + "/other-state";
  auto b = Sandbox::Create(elsewhere);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*pool)->stats().taken, 0u);
  a->reset();
  b->reset();
  pool->reset();
}

TEST_F(InitPoolTest, ARuntimeKilledWithReadySlotsLeavesThemToOrphanCleanup) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  ScopedFd ready_r(ready[0]), ready_w(ready[1]);
  pid_t runtime = ::fork();
  if (runtime == 0) {
    ready_r.Reset();
    auto pool = InitPool::Create(state_root_, 2);
    char ok = pool.ok() && (*pool)->WaitReady(2, kReadyMs) ? 1 : 0;
    (void)!::write(ready_w.get(), &ok, 1);
    while (true) ::pause();
  }
  ready_w.Reset();
  char ok = 0;
  ASSERT_EQ(::read(ready_r.get(), &ok, 1), 1);
  ready_r.Reset();
  ASSERT_EQ(ok, 1);
  std::vector<pid_t> inits = SlotInits();
  ASSERT_EQ(inits.size(), 2u);
  ASSERT_EQ(::kill(runtime, SIGKILL), 0);
  ASSERT_EQ(::waitpid(runtime, nullptr, 0), runtime);
  auto removed = CleanupOrphans(state_root_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 0);  // slots are not sandboxes; TearDown checks they are gone
  // Gone, or a zombie its new parent has not reaped yet.
  for (pid_t p : inits) EXPECT_FALSE(ProcessIdentity(p).has_value()) << "slot init " << p << " survived";
}

}  // namespace
}  // namespace dsec::container
