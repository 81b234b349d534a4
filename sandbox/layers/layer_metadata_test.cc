// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/layer_metadata.h"

#include "gtest/gtest.h"

namespace dsec::layers {
namespace {

TEST(LayerMetadataTest, RoundTripsThroughJson) {
  LayerMetadata m;
  m.name = "toolkit-python";
  m.version = "3.11";
  m.digest = "sha256:" + std::string(64, 'c');
  m.parents = {"sha256:" + std::string(64, 'a'), "sha256:" + std::string(64, 'b')};
  m.size = 123456;
  m.content_bytes = 100000;
  m.entries = 42;
  m.created = "2026-01-31T12:00:00Z";
  m.source = "pack_diff:/run/upper";
  auto back = LayerMetadataFromJson(LayerMetadataToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, m.name);
  EXPECT_EQ(back->version, m.version);
  EXPECT_EQ(back->digest, m.digest);
  EXPECT_EQ(back->parents, m.parents);
  EXPECT_EQ(back->size, m.size);
  EXPECT_EQ(back->content_bytes, m.content_bytes);
  EXPECT_EQ(back->entries, m.entries);
  EXPECT_EQ(back->created, m.created);
  EXPECT_EQ(back->source, m.source);
  EXPECT_EQ(back->Tag(), "toolkit-python:3.11");
  EXPECT_EQ(back->Hex(), std::string(64, 'c'));
}

TEST(LayerMetadataTest, RejectsMalformedJson) {
  EXPECT_EQ(LayerMetadataFromJson("{").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerMetadataFromJson("{\"name\": 1}").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string bad_digest =
      R"({"name":"a","version":"1","digest":"md5:x","parents":[],"size":1,"created":"x"})";
  EXPECT_EQ(LayerMetadataFromJson(bad_digest).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LayerMetadataTest, ValidatesNamesAndDigests) {
  EXPECT_TRUE(IsValidNameComponent("base"));
  EXPECT_TRUE(IsValidNameComponent("python3.11+git_2"));
  EXPECT_FALSE(IsValidNameComponent(""));
  EXPECT_FALSE(IsValidNameComponent("-x"));
  EXPECT_FALSE(IsValidNameComponent("a/b"));
  EXPECT_FALSE(IsValidNameComponent("a:b"));
  EXPECT_TRUE(IsDigest("sha256:" + std::string(64, '0')));
  EXPECT_FALSE(IsDigest("sha256:" + std::string(63, '0')));
  EXPECT_FALSE(IsDigest("sha256:" + std::string(64, 'A')));
}

}  // namespace
}  // namespace dsec::layers
