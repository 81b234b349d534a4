// SPDX-License-Identifier: Apache-2.0
// Compression option of the layer store (unit: no mkfs.erofs, a fake image
// builder): spec parsing, metadata and store behaviour. (The superblock
// decoder is base/erofs_superblock.h, tested there.)
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "sandbox/layers/erofs_image.h"
#include "sandbox/layers/layer_metadata.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/layers_testing.h"
#include "sandbox/layers/tree_digest.h"

namespace dsec::layers {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST(CompressionSpecTest, AcceptsNoneAlgorithmsAndLevels) {
  for (const char* ok : {"", "none", "lz4", "lz4hc", "lz4hc,12", "deflate,9", "lzma"}) {
    EXPECT_TRUE(ValidateCompressionSpec(ok).ok()) << ok;
  }
  EXPECT_FALSE(IsCompressed(""));
  EXPECT_FALSE(IsCompressed("none"));
  EXPECT_TRUE(IsCompressed("lz4"));
  EXPECT_EQ(CompressionAlgorithm("lz4hc,12"), "lz4hc");
  EXPECT_EQ(CompressionAlgorithm("lz4"), "lz4");
}

TEST(CompressionSpecTest, RejectsMalformedSpecs) {
  for (const char* bad : {"LZ4", "lz4,", ",9", "lz4,1,2", "lz4,123", "lz4,x", "-zlz4", "lz4 hc",
                          "a-very-long-algorithm-name"}) {
    absl::Status s = ValidateCompressionSpec(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), absl::string_view::npos) << s;
  }
}

TEST(LayerMetadataCompressionTest, RoundTripsAndDefaultsToNone) {
  LayerMetadata m;
  m.name = "ws";
  m.version = "1";
  m.digest = "sha256:" + std::string(64, 'a');
  m.created = "2026-01-31T12:00:00Z";
  EXPECT_EQ(m.compression, "none");
  m.compression = "lz4hc";
  auto back = LayerMetadataFromJson(LayerMetadataToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->compression, "lz4hc");
  // Metadata from before the field: uncompressed.
  std::string old = R"({"name":"a","version":"1","digest":"sha256:)" + std::string(64, 'b') +
                    R"(","parents":[],"size":1,"created":"x"})";
  back = LayerMetadataFromJson(old);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->compression, "none");
  std::string empty = old.substr(0, old.size() - 1) + R"(,"compression":""})";
  EXPECT_EQ(LayerMetadataFromJson(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

class LayerStoreCompressionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LayerStoreOptions options;
    options.root = dir_.Sub("store");
    options.builder = [this](const std::string& src, const std::string& image,
                             const ErofsBuildOptions& opts) -> absl::StatusOr<uint64_t> {
      seen_compression_.push_back(opts.compression);
      absl::Status s = WriteFile(image, "fake " + opts.compression + " image of " + src);
      if (!s.ok()) return s;
      return uint64_t{4096};
    };
    auto store = LayerStore::Create(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_.emplace(*std::move(store));
    ASSERT_TRUE(WriteFile(dir_.Sub("tree/file"), "content").ok());
  }

  absl::StatusOr<BuildResult> Build(const std::string& version, const std::string& compression) {
    BuildRequest req{"ws", version, {}, ""};
    req.compression = compression;
    return store_->Build(dir_.Sub("tree"), req);
  }

  TempDir dir_;
  std::optional<LayerStore> store_;
  std::vector<std::string> seen_compression_;
};

TEST_F(LayerStoreCompressionTest, DefaultIsUncompressedWithTheTreeDigest) {
  auto r = store_->Build(dir_.Sub("tree"), BuildRequest{"ws", "1", {}, ""});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->layer.compression, "none");
  EXPECT_EQ(seen_compression_, std::vector<std::string>{"none"});
  auto tree = DigestTree(dir_.Sub("tree"));
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(r->layer.digest, tree->Name());
  // An empty spec means none too.
  auto again = Build("1b", "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->reused);
  EXPECT_EQ(again->layer.compression, "none");
}

TEST_F(LayerStoreCompressionTest, CompressedLayerIsRecordedAndAddressedApart) {
  auto plain = Build("1", "none");
  auto z = Build("z", "lz4hc");
  ASSERT_TRUE(plain.ok() && z.ok()) << plain.status() << z.status();
  EXPECT_FALSE(z->reused);
  EXPECT_NE(z->layer.digest, plain->layer.digest);
  EXPECT_EQ(seen_compression_, (std::vector<std::string>{"none", "lz4hc"}));
  auto info = store_->Inspect("ws:z");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->metadata.compression, "lz4hc");
  EXPECT_EQ(store_->Inspect("ws:1")->metadata.compression, "none");
  // Same tree, same compressor: reused; another level is another image.
  auto z2 = Build("z2", "lz4hc");
  ASSERT_TRUE(z2.ok());
  EXPECT_TRUE(z2->reused);
  EXPECT_EQ(z2->layer.digest, z->layer.digest);
  auto z12 = Build("z12", "lz4hc,12");
  ASSERT_TRUE(z12.ok());
  EXPECT_NE(z12->layer.digest, z->layer.digest);
}

TEST_F(LayerStoreCompressionTest, RejectsABadSpecBeforeBuilding) {
  auto r = Build("1", "lz4;rm");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(seen_compression_.empty());
}

}  // namespace
}  // namespace dsec::layers
