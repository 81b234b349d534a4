// SPDX-License-Identifier: Apache-2.0
// Integration: a sandbox root of base + toolkit + workspace layers; changing
// the toolkit rebuilds that layer only, and the stacked root shows the change.
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/layers_testing.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

struct ImageIdentity {
  ino_t ino = 0;
  struct timespec mtime {};
  bool operator==(const ImageIdentity& o) const {
    return ino == o.ino && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
  }
};

ImageIdentity Identify(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return {st.st_ino, st.st_mtim};
}

class LayerRebuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = testing::IntegrationSkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    ASSERT_TRUE(WriteFile(dir_.Sub("base/etc/os-release"), "ID=debian\n").ok());
    ASSERT_TRUE(WriteFile(dir_.Sub("base/usr/bin/sh"), std::string(5000, 's'), 0755).ok());
    ASSERT_TRUE(WriteFile(dir_.Sub("toolkit/usr/bin/python3"), "python v1\n", 0755).ok());
    ASSERT_TRUE(WriteFile(dir_.Sub("workspace/work/repo/main.py"), "print(1)\n").ok());
  }

  // Builds (or reuses) all three layers, as a build system would.
  absl::Status BuildAll(std::vector<BuildResult>* out) {
    out->clear();
    struct Spec {
      const char* dir;
      const char* name;
      std::vector<std::string> parents;
    };
    for (const Spec& s : {Spec{"base", "base", {}}, Spec{"toolkit", "python", {"base:1"}},
                          Spec{"workspace", "ws", {}}}) {
      DSEC_ASSIGN_OR_RETURN(BuildResult r, store_->Build(dir_.Sub(s.dir), {s.name, "1", s.parents, ""}));
      out->push_back(r);
    }
    return absl::OkStatus();
  }

  TempDir dir_;
  std::optional<LayerStore> store_;
};

TEST_F(LayerRebuildTest, ChangingTheToolkitRebuildsOnlyThatLayer) {
  auto store = LayerStore::Create(dir_.Sub("store"));
  ASSERT_TRUE(store.ok());
  store_.emplace(*std::move(store));
  std::vector<BuildResult> first;
  ASSERT_TRUE(BuildAll(&first).ok());
  ImageIdentity base_img = Identify(store_->ImagePath(first[0].layer.digest));
  ImageIdentity ws_img = Identify(store_->ImagePath(first[2].layer.digest));

  ASSERT_TRUE(WriteFile(dir_.Sub("toolkit/usr/bin/python3"), "python v2\n", 0755).ok());
  std::vector<BuildResult> second;
  ASSERT_TRUE(BuildAll(&second).ok());
  EXPECT_TRUE(second[0].reused);
  EXPECT_TRUE(second[2].reused);
  EXPECT_FALSE(second[1].reused);
  EXPECT_EQ(second[0].write_bytes + second[2].write_bytes, 0u);
  EXPECT_EQ(second[0].layer.digest, first[0].layer.digest);
  EXPECT_EQ(second[2].layer.digest, first[2].layer.digest);
  EXPECT_NE(second[1].layer.digest, first[1].layer.digest);
  EXPECT_TRUE(Identify(store_->ImagePath(first[0].layer.digest)) == base_img);
  EXPECT_TRUE(Identify(store_->ImagePath(first[2].layer.digest)) == ws_img);

  // The stacked root shows the new toolkit over the untouched base.
  for (const char* d : {"l0", "l1", "l2", "root"}) ASSERT_EQ(mkdir(dir_.Sub(d).c_str(), 0755), 0);
  absl::Status s = testing::RunInPrivateMountNamespace([&]() -> absl::Status {
    auto chain = store_->Chain("python:1");
    if (!chain.ok()) return chain.status();
    auto ws = store_->Inspect("ws:1");
    if (!ws.ok()) return ws.status();
    std::vector<std::string> images = {(*chain)[0].image_path, (*chain)[1].image_path, ws->image_path};
    std::vector<Mount> mounts;
    std::vector<std::string> lowers;  // top first
    for (size_t i = 0; i < images.size(); ++i) {
      std::string target = dir_.Sub(absl::StrCat("l", i));
      DSEC_ASSIGN_OR_RETURN(Mount m, MountErofsFile(images[i], target));
      mounts.push_back(std::move(m));
      lowers.insert(lowers.begin(), target);
    }
    DSEC_ASSIGN_OR_RETURN(Mount root, MountOverlay(lowers, "", "", dir_.Sub("root")));
    DSEC_ASSIGN_OR_RETURN(std::string py, ReadFile(dir_.Sub("root/usr/bin/python3")));
    DSEC_ASSIGN_OR_RETURN(std::string os, ReadFile(dir_.Sub("root/etc/os-release")));
    DSEC_ASSIGN_OR_RETURN(std::string ws_file, ReadFile(dir_.Sub("root/work/repo/main.py")));
    if (py != "python v2\n" || os != "ID=debian\n" || ws_file != "print(1)\n") {
      return absl::InternalError("stacked root does not show base + new toolkit + workspace");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;

  auto removed = store_->Gc();
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, std::vector<std::string>{first[1].layer.digest});
}

}  // namespace
}  // namespace dsec::layers
