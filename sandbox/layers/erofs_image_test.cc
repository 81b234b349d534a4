// SPDX-License-Identifier: Apache-2.0
// Integration: real mkfs.erofs and real file-backed EROFS mounts (root).
#include "sandbox/layers/erofs_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/layers_testing.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

// A small tree with every kind of entry a layer must keep.
void MakeRichTree(const std::string& root) {
  ASSERT_TRUE(WriteFile(JoinPath(root, "etc/hostname"), "sandbox\n").ok());
  ASSERT_TRUE(WriteFile(JoinPath(root, "usr/bin/tool"), std::string(70000, 'x'), 04755).ok());
  ASSERT_TRUE(WriteFile(JoinPath(root, "home/u/notes"), "n\n", 0600).ok());
  ASSERT_EQ(chown(JoinPath(root, "home/u").c_str(), 1000, 1000), 0);
  ASSERT_EQ(chown(JoinPath(root, "home/u/notes").c_str(), 1000, 1001), 0);
  ASSERT_EQ(chmod(JoinPath(root, "home").c_str(), 01777), 0);
  ASSERT_EQ(link(JoinPath(root, "usr/bin/tool").c_str(), JoinPath(root, "usr/bin/tool2").c_str()), 0);
  ASSERT_EQ(symlink("../etc/hostname", JoinPath(root, "usr/hn").c_str()), 0);
  ASSERT_EQ(mknod(JoinPath(root, "etc/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(mkfifo(JoinPath(root, "etc/fifo").c_str(), 0640), 0);
  ASSERT_EQ(setxattr(JoinPath(root, "etc/hostname").c_str(), "user.note", "v", 1, 0), 0);
  ASSERT_EQ(setxattr(JoinPath(root, "usr/bin/tool").c_str(), "trusted.t", "1", 1, 0), 0);
  struct timespec t[2] = {{1600000000, 123456789}, {1600000000, 987654321}};
  ASSERT_EQ(utimensat(AT_FDCWD, JoinPath(root, "etc/hostname").c_str(), t, 0), 0);
}

class ErofsImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = testing::IntegrationSkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  TempDir dir_;
};

TEST_F(ErofsImageTest, SameTreeGivesSameImageBytes) {
  MakeRichTree(dir_.Sub("src"));
  ErofsBuildOptions opts;
  opts.uuid = "01234567-89ab-cdef-0123-456789abcdef";
  opts.build_time = 1700000000;
  ASSERT_TRUE(BuildErofsImage(dir_.Sub("src"), dir_.Sub("a.erofs"), opts).ok());
  ASSERT_TRUE(BuildErofsImage(dir_.Sub("src"), dir_.Sub("b.erofs"), opts).ok());
  auto a = ReadFile(dir_.Sub("a.erofs"));
  auto b = ReadFile(dir_.Sub("b.erofs"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(BuildErofsImage(dir_.Sub("src"), dir_.Sub("a.erofs"), opts).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(CheckErofsImage(dir_.Sub("src/etc/hostname")).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ErofsImageTest, MountedLayerShowsTheSourceTree) {
  MakeRichTree(dir_.Sub("src"));
  auto store = LayerStore::Create(dir_.Sub("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto built = store->Build(dir_.Sub("src"), {"rich", "1", {}, ""});
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_GT(built->write_bytes, 0u);
  std::string image = store->ImagePath(built->layer.digest);
  ASSERT_EQ(mkdir(dir_.Sub("mnt").c_str(), 0755), 0);
  absl::Status s = testing::RunInPrivateMountNamespace([&]() -> absl::Status {
    auto m = MountErofsFile(image, dir_.Sub("mnt"));
    if (!m.ok()) return m.status();
    auto want = testing::SnapshotTree(dir_.Sub("src"));
    auto got = testing::SnapshotTree(dir_.Sub("mnt"));
    if (!want.ok()) return want.status();
    if (!got.ok()) return got.status();
    // The mount point's root mode/owner come from the image root, which
    // mirrors src's root, so every entry compares, mtimes included.
    std::vector<std::string> diffs = testing::DiffSnapshots(*want, *got, /*compare_mtime=*/true);
    if (!diffs.empty()) return absl::InternalError(absl::StrJoin(diffs, "\n"));
    return m->Unmount();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace dsec::layers
