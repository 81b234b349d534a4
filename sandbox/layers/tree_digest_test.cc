// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/tree_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "sandbox/layers/layers_testing.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

class TreeDigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteFile(dir_.Sub("t/a.txt"), "alpha\n").ok());
    ASSERT_TRUE(WriteFile(dir_.Sub("t/sub/b.bin"), std::string(10000, 'b'), 0755).ok());
    ASSERT_EQ(symlink("a.txt", dir_.Sub("t/link").c_str()), 0);
  }
  std::string Digest() {
    auto d = DigestTree(dir_.Sub("t"));
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? d->Name() : "";
  }
  TempDir dir_;
};

TEST_F(TreeDigestTest, IsStableAndIgnoresTimestamps) {
  std::string first = Digest();
  EXPECT_EQ(first.rfind("sha256:", 0), 0u);
  EXPECT_EQ(first.size(), 7u + 64u);
  struct timespec old[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, dir_.Sub("t/a.txt").c_str(), old, 0), 0);
  EXPECT_EQ(Digest(), first);
}

TEST_F(TreeDigestTest, SameTreeElsewhereHasSameDigest) {
  ASSERT_TRUE(WriteFile(dir_.Sub("u/a.txt"), "alpha\n").ok());
  ASSERT_TRUE(WriteFile(dir_.Sub("u/sub/b.bin"), std::string(10000, 'b'), 0755).ok());
  ASSERT_EQ(symlink("a.txt", dir_.Sub("u/link").c_str()), 0);
  auto u = DigestTree(dir_.Sub("u"));
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->Name(), Digest());
  EXPECT_EQ(u->stats.regular_files, 2u);
  EXPECT_EQ(u->stats.directories, 2u);
  EXPECT_EQ(u->stats.other_entries, 1u);
  EXPECT_EQ(u->stats.content_bytes, 6u + 10000u);
}

TEST_F(TreeDigestTest, ContentChangeChangesDigest) {
  std::string before = Digest();
  ASSERT_TRUE(WriteFile(dir_.Sub("t/a.txt"), "alphA\n").ok());
  EXPECT_NE(Digest(), before);
}

TEST_F(TreeDigestTest, AChangeLateInAFileLargerThanOneReadChangesDigest) {
  std::string big(300000, 'x');
  ASSERT_TRUE(WriteFile(dir_.Sub("t/big"), big).ok());
  const std::string before = Digest();
  big.back() = 'y';
  ASSERT_TRUE(WriteFile(dir_.Sub("t/big"), big).ok());
  const std::string after = Digest();
  EXPECT_NE(after, before);
  big.back() = 'x';
  ASSERT_TRUE(WriteFile(dir_.Sub("t/big"), big).ok());
  EXPECT_EQ(Digest(), before);
}

TEST_F(TreeDigestTest, ModeChangeChangesDigest) {
  std::string before = Digest();
  ASSERT_EQ(chmod(dir_.Sub("t/sub/b.bin").c_str(), 04755), 0);
  EXPECT_NE(Digest(), before);
}

TEST_F(TreeDigestTest, OwnerChangeChangesDigest) {
  if (geteuid() != 0) GTEST_SKIP() << "chown needs root";
  std::string before = Digest();
  ASSERT_EQ(lchown(dir_.Sub("t/a.txt").c_str(), 1000, 0), 0);
  std::string uid_changed = Digest();
  EXPECT_NE(uid_changed, before);
  ASSERT_EQ(lchown(dir_.Sub("t/a.txt").c_str(), 1000, 1000), 0);
  EXPECT_NE(Digest(), uid_changed);
}

TEST_F(TreeDigestTest, XattrChangeChangesDigest) {
  std::string before = Digest();
  if (setxattr(dir_.Sub("t/a.txt").c_str(), "user.k", "v1", 2, 0) != 0) {
    GTEST_SKIP() << "filesystem of " << dir_.path() << " has no user xattrs";
  }
  std::string with_xattr = Digest();
  EXPECT_NE(with_xattr, before);
  ASSERT_EQ(setxattr(dir_.Sub("t/a.txt").c_str(), "user.k", "v2", 2, 0), 0);
  EXPECT_NE(Digest(), with_xattr);
}

TEST_F(TreeDigestTest, SymlinkTargetRenameAndHardLinkChangeDigest) {
  std::string before = Digest();
  ASSERT_EQ(unlink(dir_.Sub("t/link").c_str()), 0);
  ASSERT_EQ(symlink("sub/b.bin", dir_.Sub("t/link").c_str()), 0);
  std::string retargeted = Digest();
  EXPECT_NE(retargeted, before);
  ASSERT_EQ(rename(dir_.Sub("t/a.txt").c_str(), dir_.Sub("t/c.txt").c_str()), 0);
  std::string renamed = Digest();
  EXPECT_NE(renamed, retargeted);
  // A copy and a hard link of the same bytes are different trees.
  ASSERT_TRUE(WriteFile(dir_.Sub("t/d.txt"), "alpha\n").ok());
  std::string copy = Digest();
  ASSERT_EQ(unlink(dir_.Sub("t/d.txt").c_str()), 0);
  ASSERT_EQ(link(dir_.Sub("t/c.txt").c_str(), dir_.Sub("t/d.txt").c_str()), 0);
  EXPECT_NE(Digest(), copy);
}

TEST_F(TreeDigestTest, ParentsAreHashed) {
  auto alone = DigestTree(dir_.Sub("t"));
  auto on_a = DigestTree(dir_.Sub("t"), {"sha256:" + std::string(64, 'a')});
  auto on_b = DigestTree(dir_.Sub("t"), {"sha256:" + std::string(64, 'b')});
  ASSERT_TRUE(alone.ok() && on_a.ok() && on_b.ok());
  EXPECT_NE(alone->Name(), on_a->Name());
  EXPECT_NE(on_a->Name(), on_b->Name());
}

TEST_F(TreeDigestTest, RejectsNonDirectory) {
  EXPECT_EQ(DigestTree(dir_.Sub("t/a.txt")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DigestTree(dir_.Sub("missing")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsec::layers
