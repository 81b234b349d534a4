// SPDX-License-Identifier: Apache-2.0
// pack_diff through the API against a sandbox whose changes the node must
// not pack (issue 23, cases 2 and 3), in the container tier's default mode
// and with user_namespace: a sparse file over the layer size limit, one the
// store's disk cannot hold, directories nested deeper than mkfs.erofs
// takes. Each is a clear error that leaves nothing in the store, and the
// sandbox runs on.
#include <sys/mount.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;

constexpr char kJson[] = "application/json";

class DaemonPackDiffLimitsTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    auto dir = TempDir::Create("dsec-daemon-pack-");
    ASSERT_TRUE(dir.ok());
    dir_ = new TempDir(std::move(*dir));
    absl::Status s = testing::BuildBusyboxLayer(Store(), dir_->path());
    if (!s.ok()) {
      skip_ = absl::StrCat("busybox layer: ", s.ToString());
      return;
    }
    // A store on a 64 MiB file system of its own, for pack_diff only (the
    // sandboxes' layers come from the other: EROFS refuses file-backed
    // mounts of an image on tmpfs here).
    const std::string small = dir_->path() + "/small";
    if (::mkdir(small.c_str(), 0755) != 0 ||
        ::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=64m,mode=0755") != 0) {
      skip_ = absl::StrCat("tmpfs for a small store: ", strerror(errno));
      return;
    }
    small_mounted_ = true;
  }
  static void TearDownTestSuite() {
    if (small_mounted_) ::umount2((dir_->path() + "/small").c_str(), MNT_DETACH);
    delete dir_;
  }
  static std::string Store() { return dir_->path() + "/store"; }
  static std::string SmallStore() { return dir_->path() + "/small/store"; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  void TearDown() override {
    if (client_ && !id_.empty()) client_->Delete(absl::StrCat("/v1/sandboxes/", id_));
    client_.reset();
    daemon_.reset();
  }

  void Start(const std::string& store, ServiceOptions so) {
    static int n = 0;
    auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), store, std::move(so));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = testing::UnixClient(daemon_->socket());
    auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}, {"user_namespace", GetParam()}}.dump(),
                           kJson);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    id_ = testing::JsonOf(r)["id"];
  }
  json Sh(const std::string& script) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id_, "/exec"),
                           json{{"argv", {"sh", "-c", script}}}.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    return testing::JsonOf(r);
  }
  // pack_diff answered `status` with `code`, named no host path, left
  // nothing in `store`, and the sandbox runs on.
  void ExpectRefusedPack(const std::string& store, int status, const std::string& code,
                         const std::string& says) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id_, "/pack_diff"),
                           json{{"name", "refused"}, {"version", "1"}}.dump(), kJson);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    json e = testing::JsonOf(r)["error"];
    EXPECT_EQ(e["code"], code) << r->body;
    const std::string message = e.value("message", "");
    EXPECT_NE(message.find(says), std::string::npos) << message;
    EXPECT_EQ(message.find(dir_->path()), std::string::npos) << "a host path: " << message;
    EXPECT_EQ(message.find("/run/"), std::string::npos) << "a host path: " << message;
    auto tmp = ListDirectory(store + "/tmp");
    ASSERT_TRUE(tmp.ok());
    EXPECT_TRUE(tmp->empty()) << "left in the store: " << (*tmp)[0];
    auto layers = client_->Get("/v1/layers");
    ASSERT_TRUE(layers);
    EXPECT_EQ(layers->body.find("refused"), std::string::npos) << layers->body;
    EXPECT_EQ(Sh("echo alive")["stdout"], "alive\n");
  }

  static TempDir* dir_;
  static std::string skip_;
  static bool small_mounted_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
  std::string id_;
};
TempDir* DaemonPackDiffLimitsTest::dir_ = nullptr;
std::string DaemonPackDiffLimitsTest::skip_;
bool DaemonPackDiffLimitsTest::small_mounted_ = false;

// A 2 GiB file with no blocks in a 16 MiB upper: today's daemon wrote a
// 2 GiB layer.
TEST_P(DaemonPackDiffLimitsTest, ASparseFileOverTheLayerLimitIsRefused) {
  ServiceOptions so;
  so.max_layer_bytes = 256 << 20;
  Start(Store(), so);
  Sh("mkdir -p /work && truncate -s 2G /work/sparse && echo small > /work/ok");
  ExpectRefusedPack(Store(), 429, "RESOURCE_EXHAUSTED", "limit of 256 MiB");
  // Without the sparse file it packs.
  Sh("rm /work/sparse");
  auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id_, "/pack_diff"),
                         json{{"name", absl::StrCat("fits", GetParam())}, {"version", "1"}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
}

// A 1 GiB sparse file, a store with 64 MiB: today's daemon failed in
// mkfs.erofs with ENOSPC (a 500 naming host paths).
TEST_P(DaemonPackDiffLimitsTest, ALayerTheStoreDiskCannotHoldIsRefused) {
  ServiceOptions so;
  so.layer_store_reserve_bytes = 0;
  so.layer_store = SmallStore();
  Start(Store(), so);
  Sh("mkdir -p /work && truncate -s 1G /work/big");
  ExpectRefusedPack(SmallStore(), 429, "RESOURCE_EXHAUSTED", "MiB free");
}

// 1,950 nested directories: today's mkfs.erofs overflowed its stack (500).
TEST_P(DaemonPackDiffLimitsTest, DirectoriesTooDeepForALayerAreRefused) {
  Start(Store(), {});
  Sh("mkdir -p /work && cd /work && i=0; while [ $i -lt 1950 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done");
  ExpectRefusedPack(Store(), 400, "INVALID_ARGUMENT", "levels deep");
}

INSTANTIATE_TEST_SUITE_P(Modes, DaemonPackDiffLimitsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "UserNamespace" : "Default";
                         });

}  // namespace
}  // namespace dsec::daemon
