// SPDX-License-Identifier: Apache-2.0
// Layer arguments and the default layer of `sandbox run --tier container`,
// against temporary layer stores holding busybox layers (no network). Label
// integration: needs root, busybox-static and erofs-utils, and skips naming
// what is missing.
#include "sandbox/layers/layer_refs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/layers/layer_store.h"

namespace dsec::layers {
namespace {

using container::testing::TempDir;

class ContainerLayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    if (auto m = container::testing::FindMkfsErofs(); !m.ok()) GTEST_SKIP() << m.status();
    if (auto b = container::testing::FindStaticBusybox(); !b.ok()) GTEST_SKIP() << b.status();
    auto dir = TempDir::Create("dsec-layers-cmd-test-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(*dir));
    tree_ = dir_->path() + "/tree";
    ASSERT_TRUE(container::testing::BuildBusyboxTree(tree_).ok());
    store_root_ = dir_->path() + "/store";
  }

  // Builds `tree` into the test store as name:version.
  std::string BuildLayer(const std::string& tree, const std::string& name,
                         const std::string& version, std::vector<std::string> parents = {}) {
    auto store = layers::LayerStore::Create(store_root_);
    EXPECT_TRUE(store.ok()) << store.status();
    layers::BuildRequest req{name, version, std::move(parents), ""};
    auto r = store->Build(tree, req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? store->ImagePath(r->layer.digest) : "";
  }

  std::string WriteScript(const std::string& body) {
    std::string path = dir_->path() + "/build-base-layer.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
    return path;
  }

  LayerRefOptions Options(const std::string& script) {
    LayerRefOptions o;
    o.store_root = store_root_;
    o.build_script = script;
    o.dsec_vmm = DSEC_VMM_BINARY_PATH;
    progress_path_ = dir_->path() + "/progress.txt";
    progress_ = std::fopen(progress_path_.c_str(), "w+");
    o.progress = progress_;
    return o;
  }
  std::string Progress() {
    std::fflush(progress_);
    std::ifstream in(progress_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void TearDown() override {
    if (progress_) std::fclose(progress_);
  }

  std::unique_ptr<TempDir> dir_;
  std::string tree_, store_root_, progress_path_;
  FILE* progress_ = nullptr;
};

TEST_F(ContainerLayersTest, DefaultLayerComesFromTheStoreWithoutBuilding) {
  std::string image = BuildLayer(tree_, "base", "bookworm");
  // A script that would fail proves it is not run.
  auto r = ResolveLayerRefs({}, Options(WriteScript("exit 1\n")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<std::string>{image});
  EXPECT_EQ(Progress(), "");
}

TEST_F(ContainerLayersTest, DefaultLayerIsBuiltOnFirstUseWithProgress) {
  // Stands in for tools/build-base-layer.sh (which debootstraps): same
  // interface (--store DIR, DSEC_VMM), a busybox tree instead of Debian.
  std::string script = WriteScript(absl::StrCat(
      "[ \"$1\" = --store ] || exit 9\n", "echo fake-build: into $2\n",
      "exec \"$DSEC_VMM\" layer --store \"$2\" build --name base --version bookworm ", tree_,
      "\n"));
  auto r = ResolveLayerRefs({}, Options(script));
  if (::access("/usr/sbin/debootstrap", X_OK) != 0 && ::access("/usr/bin/debootstrap", X_OK) != 0) {
    ASSERT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("debootstrap"), absl::string_view::npos) << r.status();
    return;
  }
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << Progress();
  ASSERT_EQ(r->size(), 1u);
  auto store = layers::LayerStore::Create(store_root_);
  ASSERT_TRUE(store.ok());
  auto digest = store->Resolve("base:bookworm");
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ((*r)[0], store->ImagePath(*digest));
  std::string progress = Progress();
  EXPECT_NE(progress.find("building base layer base:bookworm (first use"), std::string::npos)
      << progress;
  EXPECT_NE(progress.find("fake-build: into " + store_root_), std::string::npos) << progress;
}

TEST_F(ContainerLayersTest, FncallLayersAreTheBaseAndForPythonTheToolkitBuiltOnFirstUse) {
  std::string base = BuildLayer(tree_, "base", "bookworm");
  // Stands in for `build-base-layer.sh --store DIR --toolkit python 1
  // python3`: a layer python:1 over base:bookworm.
  ASSERT_TRUE(container::testing::WriteTreeFile(dir_->path() + "/py", "usr/bin/python3", "x\n").ok());
  std::string script = WriteScript(absl::StrCat(
      "[ \"$1 $3 $4 $5 $6\" = \"--store --toolkit python 1 python3\" ] || exit 9\n",
      "exec \"$DSEC_VMM\" layer --store \"$2\" build --name python --version 1 --parent base:bookworm ",
      dir_->path(), "/py\n"));
  auto bash = ResolveFncallLayers("bash", {}, Options(script));
  ASSERT_TRUE(bash.ok()) << bash.status();
  EXPECT_EQ(*bash, std::vector<std::string>{base});
  EXPECT_EQ(Progress(), "");
  auto python = ResolveFncallLayers("python", {}, Options(script));
  ASSERT_TRUE(python.ok()) << python.status() << "\n" << Progress();
  ASSERT_EQ(python->size(), 2u);
  EXPECT_EQ((*python)[0], base);
  EXPECT_NE(Progress().find("building the python:1 toolkit layer"), std::string::npos) << Progress();
  // Named layers are taken as given.
  auto named = ResolveFncallLayers("python", {"base:bookworm"}, Options(""));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(*named, std::vector<std::string>{base});
}

TEST_F(ContainerLayersTest, MissingDefaultLayerWithoutScriptIsAClearError) {
  auto r = ResolveLayerRefs({}, Options(""));
  ASSERT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("build-base-layer.sh"), absl::string_view::npos);
  EXPECT_NE(r.status().message().find("base:bookworm"), absl::string_view::npos);
}

TEST_F(ContainerLayersTest, FailingBuildIsAClearError) {
  if (::access("/usr/sbin/debootstrap", X_OK) != 0) GTEST_SKIP() << "debootstrap missing";
  auto r = ResolveLayerRefs(
      {}, Options(WriteScript("echo 'E: Failed getting release file' >&2\nexit 3\n")));
  ASSERT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("exited 3"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("network"), absl::string_view::npos) << r.status();
  EXPECT_NE(Progress().find("Failed getting release file"), std::string::npos);
}

TEST_F(ContainerLayersTest, ReferencesExpandToChainsAndImageFilesPassThrough) {
  std::string base = BuildLayer(tree_, "base", "1");
  ASSERT_TRUE(container::testing::WriteTreeFile(dir_->path() + "/tk", "opt/tool", "x\n").ok());
  std::string toolkit = BuildLayer(dir_->path() + "/tk", "tool", "1", {"base:1"});
  std::string file = dir_->path() + "/extra.erofs";
  ASSERT_TRUE(container::testing::MakeErofs(dir_->path() + "/tk", file).ok());
  auto r = ResolveLayerRefs({"tool:1", "base:1", file}, Options(""));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<std::string>{base, toolkit, file}));

  auto missing = ResolveLayerRefs({"nope:1"}, Options(""));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  auto no_file = ResolveLayerRefs({dir_->path() + "/no-such.erofs"}, Options(""));
  EXPECT_TRUE(absl::IsNotFound(no_file.status())) << no_file.status();
}

// The real binary: `sandbox run --tier container` with no --layers runs on
// base:bookworm from --store; `--layer name:version` works too.
TEST_F(ContainerLayersTest, SandboxRunUsesTheDefaultLayerAndReferences) {
  BuildLayer(tree_, "base", "bookworm");
  ASSERT_TRUE(container::testing::WriteTreeFile(dir_->path() + "/tk", "etc/motd", "toolkit\n").ok());
  BuildLayer(dir_->path() + "/tk", "motd", "1", {"base:bookworm"});
  const std::string state = dir_->path() + "/state";
  auto out = container::testing::RunHostCommand({DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier",
                                                 "container", "--store", store_root_,
                                                 "--state-dir", state, "--", "echo", "hi"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hi\n");
  out = container::testing::RunHostCommand({DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier",
                                            "container", "--store", store_root_, "--state-dir",
                                            state, "--layer", "motd:1", "--", "cat", "/etc/motd"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "toolkit\n");
  auto bad = container::testing::RunHostCommand({DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier",
                                                 "container", "--store", store_root_,
                                                 "--state-dir", state, "--layer", "nope:1", "--",
                                                 "true"});
  EXPECT_FALSE(bad.ok());
}

// The README's form: the command's own options after `--` belong to it,
// also right after a list option (CLI11 once took that `--` as the end of
// the --layers list and then refused `-c`).
TEST_F(ContainerLayersTest, CommandOptionsAfterALayerListReachTheCommand) {
  std::string base = BuildLayer(tree_, "base", "bookworm");
  ASSERT_TRUE(container::testing::WriteTreeFile(dir_->path() + "/tk", "etc/motd", "toolkit\n").ok());
  std::string tk = BuildLayer(dir_->path() + "/tk", "motd", "1", {"base:bookworm"});
  const std::string state = dir_->path() + "/state";
  auto out = container::testing::RunHostCommand(
      {DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "container", "--state-dir", state,
       "--layers", absl::StrCat(base, ",", tk), "--", "/bin/sh", "-c", "cat /etc/motd; echo $X"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "toolkit\n\n");
  out = container::testing::RunHostCommand(
      {DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "container", "--state-dir", state,
       "--layer", base, "--layer", tk, "--env", "X=1", "--env", "Y=2", "--", "sh", "-c",
       "cat /etc/motd; echo $X$Y"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "toolkit\n12\n");
}

TEST_F(ContainerLayersTest, SandboxRunUserNamespaceOption) {
  std::string base = BuildLayer(tree_, "base", "bookworm");
  const std::string state = dir_->path() + "/state";
  auto out = container::testing::RunHostCommand(
      {DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "container", "--state-dir", state,
       "--layer", base, "--userns", "--userns-base", "2000000", "--", "sh", "-c",
       "id -u; cat /proc/self/uid_map"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "0\n         0    2000000      65536\n");
  auto bad = container::testing::RunHostCommand(
      {DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "container", "--state-dir", state,
       "--layer", base, "--userns", "--userns-base", "0", "--", "true"});
  EXPECT_FALSE(bad.ok());
}

// --allow gives the sandbox a network with that policy: a listener of the
// test's on the node's gateway address is reachable on the allowed port and
// refused (EPERM) on another; a bad rule is a usage error; nothing stays.
TEST_F(ContainerLayersTest, SandboxRunAllowGivesANetworkWithThatPolicy) {
  std::string base = BuildLayer(tree_, "base", "bookworm");
  const std::string state = dir_->path() + "/state";
  const int x = getpid() % 250;
  const std::string gw = absl::StrCat("10.247.", x, ".1");
  // Listeners bound before the address exists (it appears with the
  // sandbox's link).
  int ports[2] = {0, 0};
  int fds[2];
  for (int i = 0; i < 2; ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ASSERT_EQ(setsockopt(fds[i], IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)), 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, gw.c_str(), &a.sin_addr);
    socklen_t len = sizeof(a);
    ASSERT_EQ(bind(fds[i], reinterpret_cast<sockaddr*>(&a), len), 0) << strerror(errno);
    ASSERT_EQ(listen(fds[i], 4), 0);
    ASSERT_EQ(getsockname(fds[i], reinterpret_cast<sockaddr*>(&a), &len), 0);
    ports[i] = ntohs(a.sin_port);
  }
  // The allowed listener answers and closes each connection (nc ends when
  // the peer does).
  std::thread closer([fd = fds[0]] {
    for (;;) {
      const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      close(c);
    }
  });
  auto out = container::testing::RunHostCommand(
      {DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "container", "--state-dir", state, "--layer", base,
       "--allow", absl::StrCat(gw, ":", ports[0]), "--net-subnet", absl::StrCat("10.247.", x, ".0/24"),
       "--net-uplink", "none", "--", "sh", "-c",
       absl::StrCat("cat /etc/resolv.conf; nc -w 2 ", gw, " ", ports[0], " </dev/null && echo reached; nc -w 2 ",
                    gw, " ", ports[1], " </dev/null 2>&1 | grep -c 'not permitted'")});
  shutdown(fds[0], SHUT_RDWR);
  closer.join();
  for (int fd : fds) close(fd);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, absl::StrCat("nameserver ", gw, "\nreached\n1\n"));
  // Nothing of it stays on the host.
  char host_if[16];
  snprintf(host_if, sizeof(host_if), "ds%08x", (10u << 24) | (247u << 16) | (static_cast<unsigned>(x) << 8) | 2u);
  EXPECT_NE(access(absl::StrCat("/sys/class/net/", host_if).c_str(), F_OK), 0);
  auto bad = container::testing::RunHostCommand({DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "container",
                                                 "--state-dir", state, "--layer", base, "--allow", "bad..rule",
                                                 "--", "true"});
  EXPECT_FALSE(bad.ok());
  auto fncall = container::testing::RunHostCommand(
      {DSEC_VMM_BINARY_PATH, "sandbox", "run", "--tier", "fncall", "--allow", "10.0.0.0/8", "--", "print(1)"});
  EXPECT_FALSE(fncall.ok());
}

}  // namespace
}  // namespace dsec::layers
