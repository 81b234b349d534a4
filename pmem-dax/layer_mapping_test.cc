// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/layer_mapping.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "pmem-dax/readonly_write_sink.h"

namespace dsec::pmem {
namespace {

class TempFile {
 public:
  explicit TempFile(size_t size, uint8_t fill = 0x5a) {
    char tmpl[] = "/tmp/dsec-layer-XXXXXX";
    ScopedFd fd(::mkstemp(tmpl));
    EXPECT_TRUE(fd.valid());
    path_ = tmpl;
    std::vector<uint8_t> data(size, fill);
    if (size > 0) {
      EXPECT_EQ(::write(fd.get(), data.data(), size), static_cast<ssize_t>(size));
    }
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(PmemRegionSizeTest, RoundsUpToTwoMiB) {
  EXPECT_EQ(PmemRegionSize(1).value(), 2u << 20);
  EXPECT_EQ(PmemRegionSize(2u << 20).value(), 2u << 20);
  EXPECT_EQ(PmemRegionSize((2u << 20) + 1).value(), 4u << 20);
  EXPECT_EQ(PmemRegionSize(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PmemRegionSize(UINT64_MAX).ok());
}

TEST(LayerMappingTest, MissingFileIsNotFound) {
  auto m = LayerMapping::Create("/nonexistent/dsec-layer.erofs", true);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("/nonexistent/dsec-layer.erofs"), absl::string_view::npos);
}

TEST(LayerMappingTest, EmptyFileIsRefused) {
  TempFile f(0);
  auto m = LayerMapping::Create(f.path(), true);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("empty"), absl::string_view::npos);
}

TEST(LayerMappingTest, DirectoryIsRefused) {
  EXPECT_EQ(LayerMapping::Create("/tmp", true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LayerMappingTest, MapsFileAndZeroFillsTheTail) {
  TempFile f(5000, 0xab);  // not even a page multiple
  auto m = LayerMapping::Create(f.path(), true);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->file_size(), 5000u);
  EXPECT_EQ(m->region_size(), 2u << 20);
  EXPECT_EQ(m->host_addr()[0], 0xab);
  EXPECT_EQ(m->host_addr()[4999], 0xab);
  EXPECT_EQ(m->host_addr()[5000], 0);  // rest of the file's last page
  // Past the file's last page: the anonymous tail, readable without SIGBUS.
  EXPECT_EQ(m->host_addr()[m->region_size() - 1], 0);
  EXPECT_TRUE(m->CheckSize().ok());
}

TEST(LayerMappingTest, WritableMappingReachesTheFile) {
  TempFile f(8192, 0);
  {
    auto m = LayerMapping::Create(f.path(), false);
    ASSERT_TRUE(m.ok()) << m.status();
    std::memcpy(m->host_addr() + 4096, "dsec", 4);
  }
  ScopedFd fd(::open(f.path().c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  char buf[4];
  ASSERT_EQ(::pread(fd.get(), buf, 4, 4096), 4);
  EXPECT_EQ(std::string(buf, 4), "dsec");
}

TEST(LayerMappingTest, NoticesSizeChangeWhileMapped) {
  TempFile f(8192);
  auto m = LayerMapping::Create(f.path(), true);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(::truncate(f.path().c_str(), 4096), 0);
  absl::Status s = m->CheckSize();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("changed size"), absl::string_view::npos);
}

TEST(ReadOnlyWriteSinkTest, CountsAndDropsWrites) {
  std::vector<uint8_t> backing(4096, 7);
  ReadOnlyWriteSink sink("pmem0", backing.data(), backing.size());
  uint64_t v = ~0ull;
  sink.Write(8, std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&v), 8));
  sink.Write(16, std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&v), 4));
  EXPECT_EQ(sink.refused_writes(), 2u);
  EXPECT_EQ(sink.refused_bytes(), 12u);
  EXPECT_EQ(backing[8], 7);
  uint8_t out[4];
  sink.Read(8, out);
  EXPECT_EQ(out[0], 7);
}

}  // namespace
}  // namespace dsec::pmem
