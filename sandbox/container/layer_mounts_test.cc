// SPDX-License-Identifier: Apache-2.0
// Shared layer mounts (label integration: real EROFS mounts, overlays and
// sandboxes; needs root, busybox-static and erofs-utils).
#include "sandbox/container/layer_mounts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/test_image.h"
#include "base/file_io.h"

namespace dsec::container {
namespace {

using testing::TempDir;

constexpr char kNoDetachedLayers[] =
    "overlayfs here refuses layers on detached mounts (Linux 6.15+ takes them): nothing is shared";

class LayerMountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto dir = TempDir::Create("dsec-layer-mounts-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(*dir));
    absl::Status s = testing::BuildBusyboxTree(Path("tree"));
    if (absl::IsUnavailable(s)) GTEST_SKIP() << s;
    ASSERT_TRUE(s.ok()) << s;
  }
  std::string Path(const std::string& name) const { return absl::StrCat(dir_->path(), "/", name); }
  // An image of the busybox tree plus /etc/tag holding `tag`.
  std::string Image(const std::string& name, const std::string& tag) {
    EXPECT_TRUE(testing::WriteTreeFile(Path("tree"), "etc/tag", tag).ok());
    std::string image = Path(name);
    absl::Status s = testing::MakeErofs(Path("tree"), image);
    EXPECT_TRUE(s.ok()) << s;
    return image;
  }
  static std::string ReadLayerFile(const LayerMount& m, const std::string& rel) {
    auto text = dsec::ReadSmallFile(absl::StrCat(m.lower_dir(), "/", rel));
    return text.ok() ? *text : text.status().ToString();
  }

  std::unique_ptr<TempDir> dir_;
};

TEST_F(LayerMountsTest, SharesOneMountPerImageAndRemountsAChangedFile) {
  LayerMountCache cache;
  if (!cache.sharing()) GTEST_SKIP() << kNoDetachedLayers;
  const std::string image = Image("a.erofs", "one\n");
  auto first = cache.Acquire(image, Path("unused-a"));
  auto second = cache.Acquire(image, Path("unused-b"));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->get(), second->get());
  EXPECT_TRUE((*first)->shared());
  EXPECT_EQ(ReadLayerFile(**first, "etc/tag"), "one\n");
  // Detached: nothing attached, no directory made.
  EXPECT_FALSE(dsec::PathExists(Path("unused-a")));
  auto info = dsec::ReadSmallFile("/proc/self/mountinfo");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->find(dir_->path()), std::string::npos) << *info;
  LayerMountStats s = cache.stats();
  EXPECT_TRUE(s.sharing);
  EXPECT_EQ(s.mounts, 1u);
  EXPECT_EQ(s.hits, 1u);

  // Rebuilt under the same name: a new mount shows the new bytes.
  const std::string rebuilt = Image("a.erofs", "two\n");
  auto third = cache.Acquire(rebuilt, Path("unused-c"));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_NE(third->get(), first->get());
  EXPECT_EQ(ReadLayerFile(**third, "etc/tag"), "two\n");
  EXPECT_EQ(cache.stats().mounts, 2u);
}

TEST_F(LayerMountsTest, KeepsOnlyKeepUnusedMountsNobodyHolds) {
  LayerMountCache cache(/*share=*/true, /*keep_unused=*/1);
  if (!cache.sharing()) GTEST_SKIP() << kNoDetachedLayers;
  const std::string a = Image("a.erofs", "a\n");
  const std::string b = Image("b.erofs", "b\n");
  const std::string c = Image("c.erofs", "c\n");
  auto held = cache.Acquire(a, Path("x"));
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(cache.Acquire(b, Path("x")).ok());  // released at once
  ASSERT_TRUE(cache.Acquire(c, Path("x")).ok());  // released at once
  EXPECT_EQ(cache.stats().cached, 3u);
  // The next acquire trims to one unused mount, the most recent (c): b is
  // mounted anew, and then c goes for it.
  ASSERT_TRUE(cache.Acquire(b, Path("x")).ok());
  ASSERT_TRUE(cache.Acquire(a, Path("x")).ok());  // held: served from the cache
  LayerMountStats s = cache.stats();
  EXPECT_EQ(s.mounts, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.cached, 2u);  // a (held) and b
  // Forget drops only what nobody holds.
  cache.Forget(a);
  EXPECT_EQ(cache.stats().cached, 2u);
  EXPECT_EQ(ReadLayerFile(**held, "etc/tag"), "a\n");
  held->reset();
  cache.Forget(a);
  EXPECT_EQ(cache.stats().cached, 1u);
  ASSERT_TRUE(cache.Acquire(a, Path("x")).ok());
  EXPECT_EQ(cache.stats().mounts, 5u);
}

TEST_F(LayerMountsTest, WithoutSharingEachCallerMountsAtItsOwnDirectory) {
  LayerMountCache cache(/*share=*/false);
  EXPECT_FALSE(cache.sharing());
  const std::string image = Image("a.erofs", "own\n");
  const std::string target = Path("own");
  auto m = cache.Acquire(image, target);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->shared());
  EXPECT_EQ((*m)->lower_dir(), target);
  EXPECT_EQ(ReadLayerFile(**m, "etc/tag"), "own\n");
  auto other = cache.Acquire(image, Path("own2"));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->get(), m->get());
  m->reset();  // the last reference unmounts
  auto info = dsec::ReadSmallFile("/proc/self/mountinfo");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->find(absl::StrCat(target, " ")), std::string::npos);
  EXPECT_NE(info->find(Path("own2")), std::string::npos);
}

TEST_F(LayerMountsTest, RejectsMissingDirectoriesAndNonErofsFiles) {
  LayerMountCache cache;
  EXPECT_TRUE(absl::IsNotFound(cache.Acquire(Path("missing.erofs"), Path("x")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(cache.Acquire(Path("tree"), Path("x")).status()));
  ASSERT_TRUE(testing::WriteTreeFile(dir_->path(), "junk.erofs", std::string(8192, 'x')).ok());
  absl::Status junk = cache.Acquire(Path("junk.erofs"), Path("x")).status();
  EXPECT_TRUE(absl::IsInvalidArgument(junk)) << junk;
  EXPECT_EQ(cache.stats().cached, 0u);
}

// The point of sharing: a second sandbox on the same image reads the first
// one's page cache instead of filling its own. Page cache is charged to the
// memory cgroup of the sandbox that faults it in, so the second sandbox's
// own cgroup shows the difference without looking at the rest of the host.
TEST_F(LayerMountsTest, SecondSandboxOfAnImageReusesTheFirstOnesPageCache) {
  constexpr uint64_t kDataBytes = 8 << 20;
  std::string data(kDataBytes, '\0');
  ScopedFd urandom(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(urandom.valid());
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::read(urandom.get(), data.data() + off, data.size() - off);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
  ASSERT_TRUE(testing::WriteTreeFile(Path("tree"), "data", data).ok());
  for (bool share : {true, false}) {
    SCOPED_TRACE(share ? "shared mounts" : "a mount per sandbox");
    LayerMountCache cache(share);
    if (share && !cache.sharing()) GTEST_SKIP() << kNoDetachedLayers;
    // A new image file each round: its page cache starts cold.
    const std::string image = Image(absl::StrCat("data-", share, ".erofs"), "data\n");
    auto config = [&](const std::string& id) {
      SandboxConfig c;
      c.id = absl::StrCat("lm-", id, "-", share, "-", ::getpid());
      c.layers = {image};
      c.state_root = Path("state");
      c.limits.memory_bytes = 256 << 20;
      c.upper_size_bytes = 16 << 20;
      c.layer_cache = &cache;
      return c;
    };
    ExecOptions read_data;
    read_data.argv = {"sh", "-c", "cat /data > /dev/null"};
    auto first = Sandbox::Create(config("a"));
    ASSERT_TRUE(first.ok()) << first.status();
    auto r = (*first)->Exec(read_data);
    ASSERT_TRUE(r.ok() && r->status() == 0) << r.status();
    auto second = Sandbox::Create(config("b"));
    ASSERT_TRUE(second.ok()) << second.status();
    std::optional<uint64_t> before = (*second)->cgroups().MemoryUsageBytes();
    if (!before) GTEST_SKIP() << "no memory cgroup to read the sandbox's charge from";
    r = (*second)->Exec(read_data);
    ASSERT_TRUE(r.ok() && r->status() == 0) << r.status();
    std::optional<uint64_t> after = (*second)->cgroups().MemoryUsageBytes();
    ASSERT_TRUE(after.has_value());
    const int64_t growth = static_cast<int64_t>(*after) - static_cast<int64_t>(*before);
    std::printf("%s: reading 8 MiB charged the second sandbox %lld KiB\n",
                share ? "shared" : "own mounts", static_cast<long long>(growth / 1024));
    if (share) {
      EXPECT_LT(growth, static_cast<int64_t>(kDataBytes / 4)) << "second sandbox charged " << growth;
      EXPECT_EQ(cache.stats().mounts, 1u);
    } else {
      EXPECT_GT(growth, static_cast<int64_t>(kDataBytes * 3 / 4))
          << "second sandbox charged only " << growth;
    }
  }
}

}  // namespace
}  // namespace dsec::container
