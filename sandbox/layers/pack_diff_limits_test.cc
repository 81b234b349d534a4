// SPDX-License-Identifier: Apache-2.0
// pack_diff's bounds (issue 23, cases 2 and 3): a tree mkfs.erofs cannot
// take, a layer over the size limit or over the store's free space is
// refused before anything is staged, and leaves nothing in the store; a
// sparse file is staged with its holes.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "sandbox/layers/diff_scan.h"
#include "sandbox/layers/layers_testing.h"
#include "sandbox/layers/pack_diff.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

// `levels` nested directories named `name` under `root`, made with
// relative paths (the whole path may exceed PATH_MAX).
void MakeNested(const std::string& root, int levels, const std::string& name) {
  ScopedFd dir(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  for (int i = 0; i < levels; ++i) {
    ASSERT_EQ(mkdirat(dir.get(), name.c_str(), 0755), 0) << i;
    dir = ScopedFd(openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir.valid());
  }
}

void MakeSparse(const std::string& path, off_t size) {
  ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(pwrite(fd.get(), "end", 3, size - 3), 3);
}

// The store holds no layer, tag, build or staging directory.
void ExpectEmptyStore(const std::string& root) {
  auto tmp = ListDirectory(JoinPath(root, "tmp"));
  ASSERT_TRUE(tmp.ok());
  EXPECT_TRUE(tmp->empty()) << (*tmp)[0];
  auto layers = ListDirectory(JoinPath(root, "layers"));
  ASSERT_TRUE(layers.ok());
  EXPECT_TRUE(layers->empty()) << (*layers)[0];
}

class PackDiffLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = testing::IntegrationSkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ASSERT_EQ(mkdir(dir_.Sub("upper").c_str(), 0755), 0);
    auto store = LayerStore::Create(dir_.Sub("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_.emplace(std::move(*store));
  }
  absl::StatusOr<BuildResult> Pack(const PackDiffOptions& options = {}) {
    return PackDiff(*store_, dir_.Sub("upper"), {"d", "1", {}, ""}, options);
  }
  TempDir dir_;
  std::optional<LayerStore> store_;
};

// 1,950 levels crashed mkfs.erofs (SIGSEGV, a 500 from the daemon).
TEST_F(PackDiffLimitsTest, RefusesTreesTooDeepForMkfs) {
  MakeNested(dir_.Sub("upper"), 1950, "a");
  auto r = Pack();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("levels deep"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().message().find(dir_.path()), std::string::npos) << "a host path: " << r.status();
  ExpectEmptyStore(store_->root());
  PackDiffOptions shallow;
  shallow.limits.max_depth = 8;
  RemoveTree(dir_.Sub("upper/a")).IgnoreError();
  MakeNested(dir_.Sub("upper"), 9, "b");
  EXPECT_EQ(Pack(shallow).status().code(), absl::StatusCode::kInvalidArgument);
  // At the limit it packs.
  RemoveTree(dir_.Sub("upper/b")).IgnoreError();
  MakeNested(dir_.Sub("upper"), 8, "c");
  auto ok = Pack(shallow);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// 20 names of 200 bytes: a 4,020-byte path, beyond what the staged copy's
// and mkfs.erofs's full paths can hold.
TEST_F(PackDiffLimitsTest, RefusesPathsTooLongForMkfs) {
  MakeNested(dir_.Sub("upper"), 20, std::string(200, 'n'));
  auto r = Pack();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("path of"), std::string::npos) << r.status();
  ExpectEmptyStore(store_->root());
}

// A 2 GiB sparse file: no blocks in the upper, 2 GiB in the layer.
TEST_F(PackDiffLimitsTest, RefusesLayersOverTheSizeLimitCountingSparseFilesWhole) {
  MakeSparse(dir_.Sub("upper/sparse"), 2ll << 30);
  PackDiffOptions options;
  options.max_layer_bytes = 64 << 20;
  auto r = Pack(options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("limit of 64 MiB"), std::string::npos) << r.status();
  ExpectEmptyStore(store_->root());
  auto size = ScanDiff(dir_.Sub("upper"));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->content_bytes, 2ull << 30);
  EXPECT_LT(size->allocated_bytes, 1u << 20);
}

// The store's file system: a 32 MiB tmpfs, a 1 GiB sparse file.
TEST_F(PackDiffLimitsTest, RefusesLayersTheStoreDiskCannotHold) {
  MakeSparse(dir_.Sub("upper/big"), 1ll << 30);
  ASSERT_EQ(mkdir(dir_.Sub("small").c_str(), 0755), 0);
  absl::Status s = testing::RunInPrivateMountNamespace([&]() -> absl::Status {
    if (mount("tmpfs", dir_.Sub("small").c_str(), "tmpfs", 0, "size=32m,mode=0755") != 0) {
      return ErrnoStatus("mount tmpfs");
    }
    DSEC_ASSIGN_OR_RETURN(LayerStore small, LayerStore::Create(dir_.Sub("small/store")));
    auto r = PackDiff(small, dir_.Sub("upper"), {"d", "1", {}, ""}, {});
    if (r.status().code() != absl::StatusCode::kResourceExhausted ||
        r.status().message().find("MiB free") == std::string::npos) {
      return absl::InternalError(absl::StrCat("want ResourceExhausted (free space), got ", r.status().ToString()));
    }
    DSEC_ASSIGN_OR_RETURN(std::vector<std::string> tmp, ListDirectory(dir_.Sub("small/store/tmp")));
    DSEC_ASSIGN_OR_RETURN(std::vector<std::string> layers, ListDirectory(dir_.Sub("small/store/layers")));
    if (!tmp.empty() || !layers.empty()) return absl::InternalError("the refused pack left files in the store");
    // What fits does pack: the reserve is what is kept free beside it.
    if (unlink(dir_.Sub("upper/big").c_str()) != 0) return ErrnoStatus("unlink");
    DSEC_RETURN_IF_ERROR(WriteFile(dir_.Sub("upper/small"), std::string(1 << 20, 'x')));
    PackDiffOptions reserve;
    reserve.reserve_free_bytes = 30 << 20;
    auto refused = PackDiff(small, dir_.Sub("upper"), {"d", "1", {}, ""}, reserve);
    if (refused.status().code() != absl::StatusCode::kResourceExhausted) {
      return absl::InternalError(absl::StrCat("the reserve was not kept: ", refused.status().ToString()));
    }
    return PackDiff(small, dir_.Sub("upper"), {"d", "1", {}, ""}, {}).status();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(PackDiffLimitsTest, StagingKeepsHoles) {
  MakeSparse(dir_.Sub("upper/sparse"), 256 << 20);
  ASSERT_TRUE(StageDiff(dir_.Sub("upper"), dir_.Sub("staged")).ok());
  struct stat st;
  ASSERT_EQ(stat(dir_.Sub("staged/sparse").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 256 << 20);
  EXPECT_LT(st.st_blocks * 512, 1 << 20);
  ScopedFd fd(open(dir_.Sub("staged/sparse").c_str(), O_RDONLY | O_CLOEXEC));
  char tail[3] = {};
  ASSERT_EQ(pread(fd.get(), tail, 3, (256 << 20) - 3), 3);
  EXPECT_EQ(std::string(tail, 3), "end");
}

}  // namespace
}  // namespace dsec::layers
