// SPDX-License-Identifier: Apache-2.0
// Integration: compressed layers with the real mkfs.erofs and real
// file-backed EROFS mounts (root), the way the container tier mounts them.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/layers/erofs_image.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/layers_testing.h"
#include "sandbox/layers/pack_diff.h"
#include "sandbox/layers/tree_digest.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

// Compressible text, incompressible bytes, a file spanning many clusters,
// and the entry kinds a layer must keep.
void MakeTree(const std::string& root) {
  std::string text;
  for (int i = 0; text.size() < 300000; ++i) absl::StrAppend(&text, "def f", i, "(self): return ", i * 7, "\n");
  ASSERT_TRUE(WriteFile(JoinPath(root, "lib/mod.py"), text).ok());
  std::string noise(150000, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& c : noise) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  ASSERT_TRUE(WriteFile(JoinPath(root, "lib/mod.so"), noise, 0755).ok());
  ASSERT_TRUE(WriteFile(JoinPath(root, "etc/small"), "x\n", 0600).ok());
  ASSERT_TRUE(WriteFile(JoinPath(root, "big/zeros"), std::string(3 << 20, 'z')).ok());
  ASSERT_EQ(chown(JoinPath(root, "etc/small").c_str(), 1000, 1001), 0);
  ASSERT_EQ(link(JoinPath(root, "lib/mod.py").c_str(), JoinPath(root, "lib/mod2.py").c_str()), 0);
  ASSERT_EQ(symlink("../lib/mod.py", JoinPath(root, "etc/link").c_str()), 0);
  ASSERT_EQ(mknod(JoinPath(root, "etc/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(setxattr(JoinPath(root, "lib/mod.so").c_str(), "user.note", "v", 1, 0), 0);
}

class ErofsCompressionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = testing::IntegrationSkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto algs = AvailableErofsCompressors();
    if (!algs.ok()) GTEST_SKIP() << "mkfs.erofs lists no compressor: " << algs.status();
    if (std::find(algs->begin(), algs->end(), "lz4") == algs->end()) {
      GTEST_SKIP() << "mkfs.erofs lacks lz4 (has " << absl::StrJoin(*algs, ", ") << ")";
    }
    algs_ = *algs;
  }

  // Mounts `image` in a private mount namespace and compares what it shows
  // with `src`: every entry (mtimes included) and the tree digest.
  absl::Status MountAndCompare(const std::string& image, const std::string& src) {
    std::string mnt = dir_.Sub("mnt");
    if (mkdir(mnt.c_str(), 0755) != 0 && errno != EEXIST) return absl::InternalError("mkdir mnt");
    return testing::RunInPrivateMountNamespace([&]() -> absl::Status {
      auto m = MountErofsFile(image, mnt);
      if (!m.ok()) return m.status();
      auto want = testing::SnapshotTree(src);
      auto got = testing::SnapshotTree(mnt);
      if (!want.ok()) return want.status();
      if (!got.ok()) return got.status();
      std::vector<std::string> diffs = testing::DiffSnapshots(*want, *got, /*compare_mtime=*/true);
      if (!diffs.empty()) return absl::InternalError(absl::StrJoin(diffs, "\n"));
      auto d_src = DigestTree(src);
      auto d_mnt = DigestTree(mnt);
      if (!d_src.ok()) return d_src.status();
      if (!d_mnt.ok()) return d_mnt.status();
      if (d_src->Name() != d_mnt->Name()) {
        return absl::InternalError(absl::StrCat("tree digest ", d_mnt->Name(), " != ", d_src->Name()));
      }
      return m->Unmount();
    });
  }

  TempDir dir_;
  std::vector<std::string> algs_;
};

TEST_F(ErofsCompressionTest, CompressedLayerMountsAndReadsLikeTheSource) {
  MakeTree(dir_.Sub("src"));
  auto store = LayerStore::Create(dir_.Sub("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  BuildRequest plain_req{"ws", "plain", {}, ""};
  auto plain = store->Build(dir_.Sub("src"), plain_req);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const std::string& alg : algs_) {
    SCOPED_TRACE(alg);
    BuildRequest req{"ws", alg, {}, ""};
    req.compression = alg;
    auto z = store->Build(dir_.Sub("src"), req);
    ASSERT_TRUE(z.ok()) << z.status();
    EXPECT_EQ(z->layer.compression, alg);
    std::string image = store->ImagePath(z->layer.digest);
    // What pmem-dax looks at: the superblock says compressed; the plain
    // image's does not. The compressed image is the smaller one.
    auto sb = ReadErofsSuperblock(image);
    ASSERT_TRUE(sb.ok()) << sb.status();
    EXPECT_TRUE(sb->compressed) << "feature_incompat " << sb->feature_incompat;
    EXPECT_LT(z->layer.size, plain->layer.size / 2);
    absl::Status s = MountAndCompare(image, dir_.Sub("src"));
    EXPECT_TRUE(s.ok()) << s;
  }
  auto sb_plain = ReadErofsSuperblock(store->ImagePath(plain->layer.digest));
  ASSERT_TRUE(sb_plain.ok()) << sb_plain.status();
  EXPECT_FALSE(sb_plain->compressed) << "feature_incompat " << sb_plain->feature_incompat;
}

TEST_F(ErofsCompressionTest, UnknownCompressorIsInvalidArgumentAndLeavesNoImage) {
  ASSERT_TRUE(WriteFile(dir_.Sub("src/f"), "f").ok());
  ErofsBuildOptions opts;
  opts.compression = "nosuchalg";
  auto r = BuildErofsImage(dir_.Sub("src"), dir_.Sub("x.erofs"), opts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("available: none, "), absl::string_view::npos) << r.status();
  struct stat st;
  EXPECT_NE(stat(dir_.Sub("x.erofs").c_str(), &st), 0);
  EXPECT_TRUE(CheckCompressionAvailable("lz4").ok());
  EXPECT_TRUE(CheckCompressionAvailable("none", "/nonexistent/mkfs").ok());
}

TEST_F(ErofsCompressionTest, PackDiffBuildsACompressedDiffLayer) {
  MakeTree(dir_.Sub("base"));
  auto store = LayerStore::Create(dir_.Sub("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto base = store->Build(dir_.Sub("base"), BuildRequest{"base", "1", {}, ""});
  ASSERT_TRUE(base.ok()) << base.status();
  // An upper directory as overlayfs leaves it: a new file, a changed file,
  // a whiteout (0/0 character device) for a deleted one.
  std::string upper = dir_.Sub("upper");
  ASSERT_TRUE(WriteFile(JoinPath(upper, "etc/new"), std::string(100000, 'n')).ok());
  ASSERT_TRUE(WriteFile(JoinPath(upper, "lib/mod.py"), "changed\n").ok());
  ASSERT_EQ(mknod(JoinPath(upper, "etc/small").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
  BuildRequest req{"diff", "1", {base->layer.digest}, ""};
  req.compression = "lz4";
  auto diff = PackDiff(*store, upper, req);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->layer.compression, "lz4");
  auto sb = ReadErofsSuperblock(store->ImagePath(diff->layer.digest));
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_TRUE(sb->compressed);
  auto chain = store->Chain("diff:1");
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->size(), 2u);
  for (const char* d : {"l0", "l1", "root"}) ASSERT_EQ(mkdir(dir_.Sub(d).c_str(), 0755), 0);
  absl::Status s = testing::RunInPrivateMountNamespace([&]() -> absl::Status {
    auto l0 = MountErofsFile((*chain)[0].image_path, dir_.Sub("l0"));
    if (!l0.ok()) return l0.status();
    auto l1 = MountErofsFile((*chain)[1].image_path, dir_.Sub("l1"));
    if (!l1.ok()) return l1.status();
    auto root = MountOverlay({dir_.Sub("l1"), dir_.Sub("l0")}, "", "", dir_.Sub("root"));
    if (!root.ok()) return root.status();
    auto changed = ReadFile(dir_.Sub("root/lib/mod.py"));
    auto added = ReadFile(dir_.Sub("root/etc/new"));
    auto kept = ReadFile(dir_.Sub("root/big/zeros"));
    if (!changed.ok() || *changed != "changed\n") return absl::InternalError("lib/mod.py not the diff's");
    if (!added.ok() || *added != std::string(100000, 'n')) return absl::InternalError("etc/new wrong");
    if (!kept.ok() || kept->size() != (3u << 20)) return absl::InternalError("big/zeros from base wrong");
    struct stat st;
    if (lstat(dir_.Sub("root/etc/small").c_str(), &st) == 0) return absl::InternalError("whiteout ignored");
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  // A bad spec fails before anything is staged.
  BuildRequest bad{"diff", "2", {base->layer.digest}, ""};
  bad.compression = "LZ4!";
  EXPECT_EQ(PackDiff(*store, upper, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::layers
