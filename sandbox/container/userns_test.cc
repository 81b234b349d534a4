// SPDX-License-Identifier: Apache-2.0
// Container sandboxes in a user namespace (label integration: real user
// namespaces, idmapped mounts, overlays; needs root, busybox-static and
// erofs-utils, and skips naming what is missing).
#include "sandbox/container/userns.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/container/test_image.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/pack_diff.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"

namespace dsec::container {
namespace {

using testing::TempDir;

// Far above the ids anything on a host uses, different per test process.
uint32_t HostBase() { return 0x40000000u + static_cast<uint32_t>(::getpid() % 4096) * 0x10000u; }

class UserNamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto dir = TempDir::Create("dsec-userns-test-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(*dir));
    const std::string tree = dir_->path() + "/tree";
    absl::Status s = testing::BuildBusyboxTree(tree);
    if (absl::IsUnavailable(s)) GTEST_SKIP() << s;
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(testing::WriteTreeFile(tree, "etc/motd", "from the layer\n").ok());
    image_ = dir_->path() + "/base.erofs";
    s = testing::MakeErofs(tree, image_);
    if (absl::IsUnavailable(s)) GTEST_SKIP() << s;
    ASSERT_TRUE(s.ok()) << s;
    // Probe: a kernel without idmapped mounts of these file systems or
    // overlayfs in a user namespace says so at the first create.
    auto probe = Sandbox::Create(Config("probe"));
    if (!probe.ok() && (absl::IsInvalidArgument(probe.status()) ||
                        absl::IsPermissionDenied(probe.status()) ||
                        absl::IsUnavailable(probe.status()))) {
      GTEST_SKIP() << "user namespace sandboxes unavailable here: " << probe.status();
    }
    ASSERT_TRUE(probe.ok()) << probe.status();
  }
  void TearDown() override {
    if (dir_ == nullptr) return;
    auto info = dsec::ReadSmallFile("/proc/self/mountinfo");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->find(dir_->path()), std::string::npos) << "mounts left behind";
  }

  SandboxConfig Config(const std::string& id) const {
    SandboxConfig c;
    c.id = absl::StrCat("userns-", id, "-", ::getpid());
    c.layers = {image_};
    c.state_root = dir_->path() + "/state";
    c.limits.memory_bytes = 128 << 20;
    c.limits.pids_max = 64;
    c.upper_size_bytes = 16 << 20;
    c.user_namespace = UserNamespaceMap{HostBase(), HostBase(), 65536};
    return c;
  }
  static ExecResult Sh(Sandbox& sb, const std::string& script, uid_t uid = 0) {
    ExecOptions o;
    o.argv = {"sh", "-c", script};
    o.uid = uid;
    o.gid = uid;
    o.timeout_ms = 20000;
    auto r = sb.Exec(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ExecResult{};
  }
  // Uid line of /proc/<pid>/status as the host sees it ("real effective ...").
  static std::string HostUids(pid_t pid) {
    auto status = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
    if (!status.ok()) return status.status().ToString();
    for (absl::string_view line : absl::StrSplit(*status, '\n')) {
      if (absl::ConsumePrefix(&line, "Uid:")) return std::string(absl::StripAsciiWhitespace(line));
    }
    return "";
  }

  std::unique_ptr<TempDir> dir_;
  std::string image_;
};

TEST(UserNamespaceMapTest, RefusesRootOutsideAndRangesThatDoNotFit) {
  EXPECT_TRUE(ValidateUserNamespaceMap({100000, 100000, 65536}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateUserNamespaceMap({0, 100000, 65536})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateUserNamespaceMap({100000, 0, 65536})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateUserNamespaceMap({100000, 100000, 0})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateUserNamespaceMap({0xffff0000u, 100000, 65536})));
  EXPECT_EQ(IdMapLine(100000, 65536), "0 100000 65536\n");
}

// Root inside is the range's first id outside: the host sees the sandbox's
// processes, and the files they create, as that unprivileged uid.
TEST_F(UserNamespaceTest, RootInsideIsAnUnprivilegedHostUid) {
  auto sb = Sandbox::Create(Config("root"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecResult r = Sh(**sb, "id -u; id -g; cat /proc/self/uid_map");
  EXPECT_EQ(r.stdout_data, absl::StrCat("0\n0\n         0 ", HostBase(), "      65536\n"));
  EXPECT_EQ(HostUids((*sb)->init_pid()),
            absl::StrCat(HostBase(), "\t", HostBase(), "\t", HostBase(), "\t", HostBase()));
  // A file root makes inside is owned by the range's uid on the host view
  // of the sandbox's root, by 0 in the writable layer (as the sandbox sees
  // it: pack_diff takes it as is).
  EXPECT_EQ(Sh(**sb, "echo made > /etc/made; echo ok").stdout_data, "ok\n");
  struct stat st;
  ASSERT_EQ(::stat(((*sb)->rootfs_dir() + "/etc/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, HostBase());
  ASSERT_EQ(::stat(((*sb)->upper_dir() + "/etc/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

// The layers look as they would without the namespace (owned by root),
// root can change them (copy-up), and other ids work too.
TEST_F(UserNamespaceTest, LayersLookOwnedByRootAndOtherIdsWork) {
  auto sb = Sandbox::Create(Config("ids"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(Sh(**sb, "stat -c '%u %g' /bin/busybox /etc/motd").stdout_data, "0 0\n0 0\n");
  ExecResult r = Sh(**sb,
                    "echo changed >> /etc/motd && chmod 600 /etc/motd && mkdir -p /home/u && "
                    "chown 1000:1000 /home/u && stat -c '%u %a' /etc/motd /home/u");
  EXPECT_EQ(r.stdout_data, "0 600\n1000 755\n") << r.stderr_data;
  // An exec as uid 1000 inside is uid HostBase()+1000 on the host, and owns
  // what it makes.
  r = Sh(**sb, "id -u; touch /home/u/mine; stat -c %u /home/u/mine; cat /etc/motd 2>&1 | head -c 17",
         1000);
  EXPECT_EQ(r.stdout_data, "1000\n1000\ncat: can't open '");
  struct stat st;
  ASSERT_EQ(::stat(((*sb)->upper_dir() + "/home/u/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  ASSERT_EQ(::stat(((*sb)->rootfs_dir() + "/home/u/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, HostBase() + 1000);
  ASSERT_TRUE((*sb)->Reset().ok());
  EXPECT_EQ(Sh(**sb, "cat /etc/motd; ls /home").stdout_data, "from the layer\n");
}

// Capabilities are the namespace's: what needs the host's still fails.
TEST_F(UserNamespaceTest, PrivilegedOperationsStillFail) {
  auto sb = Sandbox::Create(Config("priv"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  for (const char* op : {"mknod /tmp/n c 1 3", "mount -t tmpfs none /mnt", "echo 1 > /proc/sys/vm/drop_caches",
                         "hostname other", "cat /proc/kpagecgroup | head -c 1 | wc -c | grep -q 1"}) {
    ExecResult r = Sh(**sb, absl::StrCat("(", op, ") >/dev/null 2>&1 && echo allowed || echo refused"));
    EXPECT_EQ(r.stdout_data, "refused\n") << op;
  }
}

// What a user-namespace sandbox builds packs into a layer that a sandbox
// without the option sees with the same ids.
TEST_F(UserNamespaceTest, PackedDiffIsTheSameLayerWithoutTheNamespace) {
  auto sb = Sandbox::Create(Config("pack"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecResult r = Sh(**sb, "mkdir -p /opt/tool && echo v1 > /opt/tool/bin && chown -R 1000:1001 /opt/tool "
                          "&& rm /etc/motd && echo ok");
  ASSERT_EQ(r.stdout_data, "ok\n") << r.stderr_data;
  auto store = layers::LayerStore::Create(dir_->path() + "/store");
  ASSERT_TRUE(store.ok()) << store.status();
  layers::PackDiffOptions o;
  o.upper_xattr_prefix = "user.overlay.";
  auto built = layers::PackDiff(*store, (*sb)->upper_dir(), layers::BuildRequest{"tool", "1", {}, ""}, o);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_TRUE((*sb)->Destroy().ok());
  SandboxConfig plain = Config("plain");
  plain.user_namespace.reset();
  plain.layers = {image_, store->ImagePath(built->layer.digest)};
  auto next = Sandbox::Create(plain);
  ASSERT_TRUE(next.ok()) << next.status();
  r = Sh(**next, "stat -c '%u %g' /opt/tool /opt/tool/bin; cat /opt/tool/bin; ls /etc/motd 2>&1");
  EXPECT_EQ(r.stdout_data, "1000 1001\n1000 1001\nv1\nls: /etc/motd: No such file or directory\n");
}

// A runtime killed with a user-namespace sandbox leaves nothing after
// CleanupOrphans: the idmapped mounts are below the state directory.
TEST_F(UserNamespaceTest, OrphanCleanupRemovesEverything) {
  SandboxConfig config = Config("orphan");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  ScopedFd ready_r(ready[0]), ready_w(ready[1]);
  pid_t runtime = ::fork();
  if (runtime == 0) {
    ready_r.Reset();
    auto sb = Sandbox::Create(config);
    char ok = sb.ok() ? 1 : 0;
    (void)!::write(ready_w.get(), &ok, 1);
    while (true) ::pause();
  }
  ready_w.Reset();
  char ok = 0;
  ASSERT_EQ(::read(ready_r.get(), &ok, 1), 1);
  ready_r.Reset();
  ASSERT_EQ(ok, 1);
  ASSERT_EQ(::kill(runtime, SIGKILL), 0);
  ASSERT_EQ(::waitpid(runtime, nullptr, 0), runtime);
  auto removed = CleanupOrphans(config.state_root);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(dsec::PathExists(absl::StrCat(config.state_root, "/", config.id)));
}

}  // namespace
}  // namespace dsec::container
