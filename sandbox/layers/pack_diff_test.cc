// SPDX-License-Identifier: Apache-2.0
// Integration: a sandbox-like overlay (EROFS base + tmpfs upper) is changed
// in every way pack_diff must capture; the upper is packed into a layer, and
// a fresh overlay of base + diff must show exactly the same tree.
#include "sandbox/layers/pack_diff.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/layers/layers_testing.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

absl::Status Check(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : ErrnoStatus(what);
}

void MakeBase(const std::string& b) {
  for (const char* f : {"mod.txt", "rm.txt", "ren.txt", "chm", "hl_src", "keep/file", "keep/owned",
                        "olddir/x", "olddir/deep/y", "replaced/f", "opq/old1", "opq/old2"}) {
    ASSERT_TRUE(WriteFile(JoinPath(b, f), absl::StrCat("base ", f, "\n")).ok());
  }
  ASSERT_EQ(symlink("mod.txt", JoinPath(b, "oldlink").c_str()), 0);
}

// Applies the changes an agent might make, through the merged view.
absl::Status ChangeTree(const std::string& m) {
  auto p = [&](const char* rel) { return JoinPath(m, rel); };
  DSEC_RETURN_IF_ERROR(WriteFile(p("new.txt"), "created\n", 0640));
  DSEC_RETURN_IF_ERROR(WriteFile(p("newdir/sub/f"), "nested\n"));
  {
    ScopedFd fd(open(p("mod.txt").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    DSEC_RETURN_IF_ERROR(Check(fd.valid() && write(fd.get(), "more\n", 5) == 5, "append mod.txt"));
  }
  DSEC_RETURN_IF_ERROR(Check(unlink(p("rm.txt").c_str()) == 0, "unlink rm.txt"));
  DSEC_RETURN_IF_ERROR(RemoveTree(p("olddir")));
  DSEC_RETURN_IF_ERROR(Check(rename(p("ren.txt").c_str(), p("renamed.txt").c_str()) == 0, "rename"));
  DSEC_RETURN_IF_ERROR(RemoveTree(p("replaced")));
  DSEC_RETURN_IF_ERROR(WriteFile(p("replaced"), "now a file\n"));
  DSEC_RETURN_IF_ERROR(Check(chmod(p("chm").c_str(), 04755) == 0, "chmod 4755"));
  DSEC_RETURN_IF_ERROR(Check(link(p("hl_src").c_str(), p("hl_dst").c_str()) == 0, "link lower file"));
  DSEC_RETURN_IF_ERROR(WriteFile(p("pair1"), "pair\n"));
  DSEC_RETURN_IF_ERROR(Check(link(p("pair1").c_str(), p("pair2").c_str()) == 0, "link upper file"));
  DSEC_RETURN_IF_ERROR(Check(setxattr(p("keep/file").c_str(), "user.agent", "was-here", 8, 0) == 0, "setxattr"));
  DSEC_RETURN_IF_ERROR(Check(setxattr(p("new.txt").c_str(), "trusted.k", "v", 1, 0) == 0, "setxattr trusted"));
  DSEC_RETURN_IF_ERROR(Check(symlink("new.txt", p("newlink").c_str()) == 0, "symlink"));
  DSEC_RETURN_IF_ERROR(Check(lchown(p("keep/owned").c_str(), 1234, 5678) == 0, "lchown"));
  // Delete a directory and make a new one in its place: an opaque directory.
  DSEC_RETURN_IF_ERROR(RemoveTree(p("opq")));
  DSEC_RETURN_IF_ERROR(WriteFile(p("opq/fresh"), "fresh\n"));
  // A file larger than one copy chunk, with a hole between its runs of
  // data: every byte must survive the staging copy (done in the kernel
  // across file systems), the hole read back as zeros.
  {
    ScopedFd fd(open(p("big.bin").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    DSEC_RETURN_IF_ERROR(Check(fd.valid(), "create big.bin"));
    std::string data(2 * 1024 * 1024 + 12345, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
    DSEC_RETURN_IF_ERROR(Check(pwrite(fd.get(), data.data(), data.size(), 0) ==
                                   static_cast<ssize_t>(data.size()), "write big.bin"));
    DSEC_RETURN_IF_ERROR(Check(pwrite(fd.get(), data.data(), 100000, 8 << 20) == 100000,
                               "write big.bin past its hole"));
  }
  struct timespec t[2] = {{1500000000, 5}, {1500000000, 42}};
  DSEC_RETURN_IF_ERROR(Check(utimensat(AT_FDCWD, p("new.txt").c_str(), t, 0) == 0, "utimensat"));
  return absl::OkStatus();
}

class PackDiffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = testing::IntegrationSkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  TempDir dir_;
};

TEST_F(PackDiffTest, BasePlusDiffReproducesTheSandboxView) {
  MakeBase(dir_.Sub("src"));
  auto store = LayerStore::Create(dir_.Sub("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto base = store->Build(dir_.Sub("src"), {"base", "1", {}, ""});
  ASSERT_TRUE(base.ok()) << base.status();
  for (const char* d : {"base", "rw", "merged", "diff", "merged2"}) {
    ASSERT_EQ(mkdir(dir_.Sub(d).c_str(), 0755), 0);
  }
  absl::Status s = testing::RunInPrivateMountNamespace([&]() -> absl::Status {
    DSEC_ASSIGN_OR_RETURN(Mount base_mnt,
                          MountErofsFile(store->ImagePath(base->layer.digest), dir_.Sub("base")));
    if (mount("tmpfs", dir_.Sub("rw").c_str(), "tmpfs", 0, "size=64m,mode=0755") != 0) {
      return ErrnoStatus("mount tmpfs");
    }
    Mount rw = Mount::Adopt(dir_.Sub("rw"));
    std::string upper = dir_.Sub("rw/upper");
    std::string work = dir_.Sub("rw/work");
    DSEC_RETURN_IF_ERROR(Check(mkdir(upper.c_str(), 0755) == 0 && mkdir(work.c_str(), 0755) == 0,
                               "mkdir upper/work"));
    std::map<std::string, testing::EntrySummary> first;
    {
      DSEC_ASSIGN_OR_RETURN(Mount merged,
                            MountOverlay({dir_.Sub("base")}, upper, work, dir_.Sub("merged")));
      DSEC_RETURN_IF_ERROR(ChangeTree(dir_.Sub("merged")));
      DSEC_ASSIGN_OR_RETURN(first, testing::SnapshotTree(dir_.Sub("merged")));
      DSEC_RETURN_IF_ERROR(merged.Unmount());  // the sandbox stops
    }
    DSEC_ASSIGN_OR_RETURN(BuildResult diff,
                          PackDiff(*store, upper, {"diff", "1", {base->layer.digest}, ""}));
    DSEC_ASSIGN_OR_RETURN(Mount diff_mnt,
                          MountErofsFile(store->ImagePath(diff.layer.digest), dir_.Sub("diff")));
    // The layer itself carries overlay's markers.
    struct stat st;
    DSEC_RETURN_IF_ERROR(Check(lstat(dir_.Sub("diff/rm.txt").c_str(), &st) == 0, "lstat whiteout"));
    if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(0, 0)) {
      return absl::InternalError("rm.txt is not a 0/0 whiteout in the diff layer");
    }
    char v[4] = {};
    if (lgetxattr(dir_.Sub("diff/opq").c_str(), "trusted.overlay.opaque", v, sizeof(v)) != 1 ||
        v[0] != 'y') {
      return absl::InternalError("opq is not opaque in the diff layer");
    }
    if (lgetxattr(dir_.Sub("diff/keep/file").c_str(), "trusted.overlay.origin", nullptr, 0) >= 0) {
      return absl::InternalError("overlay bookkeeping xattr origin leaked into the layer");
    }
    DSEC_ASSIGN_OR_RETURN(Mount merged2,
                          MountOverlay({dir_.Sub("diff"), dir_.Sub("base")}, "", "",
                                       dir_.Sub("merged2")));
    DSEC_ASSIGN_OR_RETURN(auto second, testing::SnapshotTree(dir_.Sub("merged2")));
    std::vector<std::string> diffs = testing::DiffSnapshots(first, second, /*compare_mtime=*/true);
    if (!diffs.empty()) return absl::InternalError(absl::StrJoin(diffs, "\n"));
    // Spot checks that the changes are really there (not two equal wrong trees).
    auto f = first.find("chm");
    if (f == first.end() || f->second.mode != 04755) return absl::InternalError("chm mode lost");
    for (const char* gone : {"rm.txt", "olddir", "ren.txt", "opq/old1"}) {
      if (second.count(gone)) return absl::InternalError(absl::StrCat(gone, " still visible"));
    }
    if (second.at("replaced").type != 'f' || second.at("hl_dst").nlink != 2 ||
        second.at("pair2").nlink != 2 || second.at("keep/owned").uid != 1234 ||
        second.at("new.txt").mtime_nsec != 42 ||
        second.at("big.bin").size != (8u << 20) + 100000) {
      return absl::InternalError("a change did not survive pack_diff");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(PackDiffTest, RefusesRedirectDirUppers) {
  ASSERT_TRUE(WriteFile(dir_.Sub("upper/moved/f"), "x").ok());
  ASSERT_EQ(setxattr(dir_.Sub("upper/moved").c_str(), "trusted.overlay.redirect", "/orig", 5, 0), 0);
  absl::Status s = StageDiff(dir_.Sub("upper"), dir_.Sub("staged"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST_F(PackDiffTest, TranslatesUserxattrUppers) {
  ASSERT_TRUE(WriteFile(dir_.Sub("upper/d/f"), "x").ok());
  ASSERT_EQ(setxattr(dir_.Sub("upper/d").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  ASSERT_EQ(setxattr(dir_.Sub("upper/d/f").c_str(), "user.overlay.origin", "zz", 2, 0), 0);
  ASSERT_TRUE(WriteFile(dir_.Sub("upper/gone"), "").ok());
  ASSERT_EQ(setxattr(dir_.Sub("upper/gone").c_str(), "user.overlay.whiteout", "", 0, 0), 0);
  PackDiffOptions options;
  options.upper_xattr_prefix = "user.overlay.";
  ASSERT_TRUE(StageDiff(dir_.Sub("upper"), dir_.Sub("staged"), options).ok());
  char v[4] = {};
  EXPECT_EQ(lgetxattr(dir_.Sub("staged/d").c_str(), "trusted.overlay.opaque", v, sizeof(v)), 1);
  EXPECT_LT(lgetxattr(dir_.Sub("staged/d").c_str(), "user.overlay.opaque", v, sizeof(v)), 0);
  EXPECT_LT(lgetxattr(dir_.Sub("staged/d/f").c_str(), "user.overlay.origin", v, sizeof(v)), 0);
  struct stat st;
  ASSERT_EQ(lstat(dir_.Sub("staged/gone").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
}

}  // namespace
}  // namespace dsec::layers
