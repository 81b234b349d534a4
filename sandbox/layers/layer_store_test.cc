// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/layer_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "gtest/gtest.h"
#include "sandbox/layers/layers_testing.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

// Stands in for mkfs.erofs: writes a small file and counts builds.
class LayerStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LayerStoreOptions options;
    options.root = dir_.Sub("store");
    options.builder = [this](const std::string& src, const std::string& image,
                             const ErofsBuildOptions& opts) -> absl::StatusOr<uint64_t> {
      ++builds_;
      last_uuid_ = opts.uuid;
      absl::Status s = WriteFile(image, "fake image of " + src);
      if (!s.ok()) return s;
      return uint64_t{4096};
    };
    auto store = LayerStore::Create(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_.emplace(*std::move(store));
  }

  std::string MakeTree(const std::string& name, const std::string& content) {
    std::string root = dir_.Sub(name);
    EXPECT_TRUE(WriteFile(JoinPath(root, "file"), content).ok());
    return root;
  }

  BuildResult Build(const std::string& tree, const std::string& name, const std::string& version,
                    std::vector<std::string> parents = {}) {
    auto r = store_->Build(tree, BuildRequest{name, version, std::move(parents), ""});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : BuildResult{};
  }

  TempDir dir_;
  std::optional<LayerStore> store_;
  int builds_ = 0;
  std::string last_uuid_;
};

// An image over BuildRequest::max_image_bytes is dropped before commit.
TEST_F(LayerStoreTest, RefusesAnImageOverTheSizeLimit) {
  const std::string tree = MakeTree("big", "b");
  BuildRequest req{"big", "1", {}, ""};
  req.max_image_bytes = 8;  // the fake image is longer
  auto r = store_->Build(tree, req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  auto all = store_->List();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  auto tmp = ListDirectory(dir_.Sub("store/tmp"));
  ASSERT_TRUE(tmp.ok());
  EXPECT_TRUE(tmp->empty());
  req.max_image_bytes = 1 << 20;
  EXPECT_TRUE(store_->Build(tree, req).ok());
}

TEST_F(LayerStoreTest, BuildsAndInspectsALayer) {
  BuildResult r = Build(MakeTree("base", "b"), "base", "1");
  EXPECT_FALSE(r.reused);
  EXPECT_EQ(builds_, 1);
  EXPECT_EQ(last_uuid_.size(), 36u);
  EXPECT_EQ(last_uuid_.substr(0, 8), r.layer.Hex().substr(0, 8));
  auto info = store_->Inspect("base:1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->metadata.digest, r.layer.digest);
  EXPECT_EQ(info->tags, std::vector<std::string>{"base:1"});
  EXPECT_EQ(info->metadata.source, "dir:" + dir_.Sub("base"));
  struct stat st;
  ASSERT_EQ(stat(info->image_path.c_str(), &st), 0);
  EXPECT_EQ(info->metadata.size, static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  // Every accepted reference form resolves to the same layer.
  for (const std::string& ref : {std::string("base"), r.layer.digest, r.layer.Hex().substr(0, 12)}) {
    auto d = store_->Resolve(ref);
    ASSERT_TRUE(d.ok()) << ref << ": " << d.status();
    EXPECT_EQ(*d, r.layer.digest);
  }
  EXPECT_EQ(store_->Resolve("nope:1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Resolve("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LayerStoreTest, IdenticalTreesDedupe) {
  BuildResult a = Build(MakeTree("a", "same"), "a", "1");
  BuildResult b = Build(MakeTree("b", "same"), "b", "1");
  EXPECT_TRUE(b.reused);
  EXPECT_EQ(b.write_bytes, 0u);
  EXPECT_EQ(builds_, 1);
  EXPECT_EQ(a.layer.digest, b.layer.digest);
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].tags, (std::vector<std::string>{"a:1", "b:1"}));
}

TEST_F(LayerStoreTest, UntagRemovesOneTagAndKeepsTheLayer) {
  BuildResult a = Build(MakeTree("a", "same"), "a", "1");
  Build(MakeTree("b", "same"), "b", "1");
  ASSERT_TRUE(store_->Untag("b:1").ok());
  EXPECT_EQ(store_->Resolve("b:1").status().code(), absl::StatusCode::kNotFound);
  auto info = store_->Inspect("a:1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tags, std::vector<std::string>{"a:1"});
  EXPECT_EQ(access(store_->ImagePath(a.layer.digest).c_str(), F_OK), 0);
  EXPECT_EQ(store_->Untag("b:1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Untag("nothing:1").code(), absl::StatusCode::kNotFound);
}

TEST_F(LayerStoreTest, ATagAddedToALayerKeepsItFromGcUntilUntagged) {
  BuildResult a = Build(MakeTree("a", "pinned"), "a", "1");
  ASSERT_TRUE(store_->Tag(a.layer.digest, "pin", "0").ok());
  ASSERT_TRUE(store_->Untag("a:1").ok());
  auto removed = store_->Gc();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  auto info = store_->Inspect("pin:0");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->metadata.digest, a.layer.digest);
  // Refused: a malformed tag, an unknown layer; nothing changes.
  EXPECT_EQ(store_->Tag("pin:0", "bad/name", "1").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Tag("pin:0", "ok", "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Tag("nothing:1", "ok", "1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Inspect("pin:0")->tags, std::vector<std::string>{"pin:0"});
  // An image path and its digest, both ways; other paths have none.
  EXPECT_EQ(store_->DigestOfImage(store_->ImagePath(a.layer.digest)), a.layer.digest);
  EXPECT_EQ(store_->DigestOfImage("/elsewhere/" + a.layer.digest.substr(7) + ".erofs"), "");
  EXPECT_EQ(store_->DigestOfImage(store_->root() + "/layers/.erofs"), "");
  EXPECT_EQ(store_->DigestOfImage(store_->root() + "/layers/x.json"), "");
  ASSERT_TRUE(store_->Untag("pin:0").ok());
  removed = store_->Gc();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, std::vector<std::string>{a.layer.digest});
}

TEST_F(LayerStoreTest, RejectsBadNamesAndMissingParents) {
  std::string tree = MakeTree("t", "x");
  EXPECT_EQ(store_->Build(tree, {"bad/name", "1", {}, ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Build(tree, {"ok", "1", {"missing:1"}, ""}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(builds_, 0);
}

TEST_F(LayerStoreTest, AmbiguousNameNeedsVersion) {
  Build(MakeTree("v1", "1"), "tool", "1");
  Build(MakeTree("v2", "2"), "tool", "2");
  EXPECT_EQ(store_->Resolve("tool").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->Resolve("tool:2").ok());
}

TEST_F(LayerStoreTest, RefusesToRemoveAParent) {
  BuildResult base = Build(MakeTree("base", "b"), "base", "1");
  BuildResult tool = Build(MakeTree("tool", "t"), "tool", "1", {"base:1"});
  EXPECT_EQ(tool.layer.parents, std::vector<std::string>{base.layer.digest});
  absl::Status s = store_->Remove("base:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("tool:1"), std::string::npos) << s;
  EXPECT_TRUE(store_->Inspect("base:1").ok());

  auto chain = store_->Chain("tool:1");
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->size(), 2u);
  EXPECT_EQ((*chain)[0].metadata.digest, base.layer.digest);
  EXPECT_EQ((*chain)[1].metadata.digest, tool.layer.digest);

  ASSERT_TRUE(store_->Remove("tool:1").ok());
  EXPECT_EQ(access(store_->ImagePath(tool.layer.digest).c_str(), F_OK), -1);
  EXPECT_TRUE(store_->Remove("base:1").ok());
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST_F(LayerStoreTest, RefusesToRemoveAPinnedLayer) {
  BuildResult a = Build(MakeTree("a", "held"), "a", "1");
  ASSERT_TRUE(store_->Tag("a:1", "pin-snap-0123456789abcdef", "image-0").ok());
  ASSERT_TRUE(store_->Tag("a:1", "pinned-by-no-one", "1").ok());  // not a pin: "pin-" is the prefix
  for (const std::string& ref : std::vector<std::string>{"a:1", a.layer.digest, "pin-snap-0123456789abcdef:image-0"}) {
    absl::Status s = store_->Remove(ref);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << ref << ": " << s;
    EXPECT_NE(std::string(s.message()).find("pin-snap-0123456789abcdef:image-0"), std::string::npos) << s;
  }
  // Nothing was lost: the image, the metadata and every tag stay.
  auto info = store_->Inspect("a:1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tags.size(), 3u);
  EXPECT_EQ(access(store_->ImagePath(a.layer.digest).c_str(), F_OK), 0);
  // Once the pin goes, so can the layer.
  ASSERT_TRUE(store_->Untag("pin-snap-0123456789abcdef:image-0").ok());
  ASSERT_TRUE(store_->Remove("a:1").ok());
  EXPECT_EQ(access(store_->ImagePath(a.layer.digest).c_str(), F_OK), -1);
}

TEST_F(LayerStoreTest, SameTreeOnDifferentParentsIsADifferentLayer) {
  Build(MakeTree("b1", "1"), "base", "1");
  Build(MakeTree("b2", "2"), "base", "2");
  std::string diff = MakeTree("diff", "d");
  BuildResult on1 = Build(diff, "diff", "on1", {"base:1"});
  BuildResult on2 = Build(diff, "diff", "on2", {"base:2"});
  EXPECT_NE(on1.layer.digest, on2.layer.digest);
}

TEST_F(LayerStoreTest, GcRemovesOnlyUnreferencedLayers) {
  BuildResult base = Build(MakeTree("base", "b"), "base", "1");
  BuildResult tool_v1 = Build(MakeTree("tool1", "t1"), "tool", "1", {"base:1"});
  // Rebuilding tool:1 from another tree moves the tag; the old layer is
  // now unreferenced, and so is its parent chain only if nothing else tags it.
  BuildResult tool_v1b = Build(MakeTree("tool1b", "t1b"), "tool", "1", {"base:1"});
  ASSERT_NE(tool_v1.layer.digest, tool_v1b.layer.digest);
  // An untagged child of the old tool layer keeps nothing alive: it is
  // unreferenced too, so gc removes both (child first).
  BuildResult orphan_child = Build(MakeTree("child", "c"), "child", "1", {tool_v1.layer.digest});
  ASSERT_TRUE(store_->Remove("child:1").ok());
  BuildResult kept_child = Build(MakeTree("kept", "k"), "kept", "1", {tool_v1.layer.digest});
  (void)orphan_child;

  auto removed = store_->Gc();
  ASSERT_TRUE(removed.ok()) << removed.status();
  // tool_v1 is untagged but still the parent of kept:1.
  EXPECT_TRUE(removed->empty());
  ASSERT_TRUE(store_->Remove("kept:1").ok());
  removed = store_->Gc();
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, std::vector<std::string>{tool_v1.layer.digest});
  EXPECT_EQ(access(store_->ImagePath(tool_v1.layer.digest).c_str(), F_OK), -1);
  EXPECT_TRUE(store_->Inspect("base:1").ok());
  EXPECT_TRUE(store_->Inspect("tool:1").ok());
  EXPECT_EQ(access(store_->ImagePath(base.layer.digest).c_str(), F_OK), 0);
}

TEST_F(LayerStoreTest, GcRemovesAbandonedBuildsAndStrayImages) {
  std::string stale_build = JoinPath(store_->root(), "tmp/build-dead");
  ASSERT_TRUE(WriteFile(JoinPath(stale_build, "lock"), "").ok());
  std::string stray = store_->ImagePath("sha256:" + std::string(64, 'e'));
  ASSERT_TRUE(WriteFile(stray, "x").ok());
  ASSERT_TRUE(store_->Gc().ok());
  EXPECT_EQ(access(stale_build.c_str(), F_OK), -1);
  EXPECT_EQ(access(stray.c_str(), F_OK), -1);
}

TEST_F(LayerStoreTest, FailedBuildLeavesNothingBehind) {
  LayerStoreOptions options;
  options.root = dir_.Sub("store2");
  options.builder = [](const std::string&, const std::string&,
                       const ErofsBuildOptions&) -> absl::StatusOr<uint64_t> {
    return absl::InternalError("mkfs failed");
  };
  auto store = LayerStore::Create(options);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->Build(MakeTree("t", "x"), {"t", "1", {}, ""}).status().code(),
            absl::StatusCode::kInternal);
  auto tmp = ListDirectory(JoinPath(options.root, "tmp"));
  ASSERT_TRUE(tmp.ok());
  EXPECT_TRUE(tmp->empty());
  EXPECT_EQ(store->Resolve("t:1").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsec::layers
