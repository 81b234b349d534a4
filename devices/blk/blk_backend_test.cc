// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_backend.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/blk/blk_test_util.h"
#include "devices/blk/io_uring_backend.h"
#include "devices/blk/sync_backend.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "base/scoped_fd.h"

namespace dsec::devices {
namespace {

using testing::RunUntil;
using testing::TempImage;

constexpr uint64_t kImageSize = 1 << 20;

class BlkBackendTest : public ::testing::TestWithParam<BlkBackendKind> {
 protected:
  void SetUp() override {
    image_ = std::make_unique<TempImage>(kImageSize, 0xaa);
    fd_ = ScopedFd(::open(image_->path().c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid());
    loop_ = EventLoop::Create().value();
    absl::StatusOr<std::unique_ptr<BlkBackend>> backend =
        CreateBlkBackend(GetParam(), fd_.get(), loop_.get(), /*depth=*/4);
    if (!backend.ok() && GetParam() == BlkBackendKind::kIoUring) {
      GTEST_SKIP() << "io_uring unavailable on this host: " << backend.status();
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  // Runs the loop until `result` is set; returns it.
  int64_t Wait(const std::optional<int64_t>& result) {
    EXPECT_TRUE(RunUntil(*loop_, [&] { return result.has_value(); }));
    return result.value_or(-ETIMEDOUT);
  }
  BlkBackend::Completion Store(std::optional<int64_t>& out) {
    return [&out](int64_t r) { out = r; };
  }

  std::unique_ptr<TempImage> image_;
  ScopedFd fd_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<BlkBackend> backend_;
};

TEST_P(BlkBackendTest, NamesItsMechanism) {
  EXPECT_STREQ(backend_->name(), GetParam() == BlkBackendKind::kSync ? "sync" : "io_uring");
}

TEST_P(BlkBackendTest, WritesVectorThenReadsItBack) {
  std::vector<uint8_t> a(1024), b(3072);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7);
  std::optional<int64_t> wrote;
  backend_->Write(4096, {{a.data(), a.size()}, {b.data(), b.size()}}, Store(wrote));
  EXPECT_FALSE(wrote.has_value()) << "completion ran inside the call";
  ASSERT_EQ(Wait(wrote), 4096);

  std::vector<uint8_t> file = image_->ReadAll();
  EXPECT_EQ(std::vector<uint8_t>(file.begin() + 4096, file.begin() + 5120), a);
  EXPECT_EQ(std::vector<uint8_t>(file.begin() + 5120, file.begin() + 8192), b);
  EXPECT_EQ(file[4095], 0xaa);
  EXPECT_EQ(file[8192], 0xaa);

  std::vector<uint8_t> back(4096);
  std::optional<int64_t> read;
  backend_->Read(4096, {{back.data(), back.size()}}, Store(read));
  ASSERT_EQ(Wait(read), 4096);
  EXPECT_EQ(std::vector<uint8_t>(back.begin(), back.begin() + 1024), a);
  EXPECT_EQ(std::vector<uint8_t>(back.begin() + 1024, back.end()), b);
}

TEST_P(BlkBackendTest, ReadPastEndOfFileFailsWithEio) {
  std::vector<uint8_t> buf(4096);
  std::optional<int64_t> read;
  backend_->Read(kImageSize - 1024, {{buf.data(), buf.size()}}, Store(read));
  EXPECT_EQ(Wait(read), -EIO);
}

TEST_P(BlkBackendTest, EmptyTransferCompletesAsynchronously) {
  std::optional<int64_t> read;
  backend_->Read(0, {}, Store(read));
  EXPECT_FALSE(read.has_value());
  EXPECT_EQ(Wait(read), 0);
}

TEST_P(BlkBackendTest, FlushSucceeds) {
  std::optional<int64_t> flushed;
  backend_->Flush(Store(flushed));
  EXPECT_EQ(Wait(flushed), 0);
}

TEST_P(BlkBackendTest, DiscardMakesRangeReadAsZeroesAndKeepsSize) {
  std::optional<int64_t> done;
  backend_->Discard(8192, 16384, Store(done));
  ASSERT_EQ(Wait(done), 0);
  std::vector<uint8_t> file = image_->ReadAll();
  ASSERT_EQ(file.size(), kImageSize);
  EXPECT_EQ(file[8191], 0xaa);
  for (size_t i = 8192; i < 8192 + 16384; ++i) ASSERT_EQ(file[i], 0) << i;
  EXPECT_EQ(file[8192 + 16384], 0xaa);
}

TEST_P(BlkBackendTest, WriteZeroesZeroesUnalignedRange) {
  for (bool unmap : {false, true}) {
    std::optional<int64_t> done;
    const uint64_t offset = unmap ? 65536 + 512 : 512;
    backend_->WriteZeroes(offset, 1536, unmap, Store(done));
    ASSERT_EQ(Wait(done), 0);
    std::vector<uint8_t> file = image_->ReadAll();
    ASSERT_EQ(file.size(), kImageSize);
    EXPECT_EQ(file[offset - 1], 0xaa);
    for (size_t i = offset; i < offset + 1536; ++i) ASSERT_EQ(file[i], 0) << i;
    EXPECT_EQ(file[offset + 1536], 0xaa);
  }
}

TEST_P(BlkBackendTest, CompletesMoreOperationsThanDepth) {
  constexpr int kOps = 20;
  std::vector<std::vector<uint8_t>> bufs(kOps, std::vector<uint8_t>(512));
  int completed = 0;
  for (int i = 0; i < kOps; ++i) {
    std::fill(bufs[i].begin(), bufs[i].end(), static_cast<uint8_t>(i));
    backend_->Write(512u * i, {{bufs[i].data(), 512}}, [&](int64_t r) {
      EXPECT_EQ(r, 512);
      ++completed;
    });
  }
  EXPECT_EQ(backend_->in_flight(), static_cast<uint32_t>(kOps));
  ASSERT_TRUE(RunUntil(*loop_, [&] { return completed == kOps; }));
  EXPECT_EQ(backend_->in_flight(), 0u);
  std::vector<uint8_t> file = image_->ReadAll();
  for (int i = 0; i < kOps; ++i) EXPECT_EQ(file[512u * i + 100], i);
}

TEST_P(BlkBackendTest, DrainRunsEveryPendingCompletion) {
  std::vector<uint8_t> buf(512);
  int completed = 0;
  for (int i = 0; i < 10; ++i) {
    backend_->Read(0, {{buf.data(), buf.size()}}, [&](int64_t r) {
      EXPECT_EQ(r, 512);
      ++completed;
    });
  }
  backend_->Drain();
  EXPECT_EQ(completed, 10);
  EXPECT_EQ(backend_->in_flight(), 0u);
}

TEST_P(BlkBackendTest, DestroyingDropsInFlightCompletions) {
  std::vector<uint8_t> buf(65536);
  bool called = false;
  backend_->Read(0, {{buf.data(), buf.size()}}, [&](int64_t) { called = true; });
  backend_.reset();
  // Let any stray wake-up run: nothing may call back into the test.
  ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_FALSE(called);
}

INSTANTIATE_TEST_SUITE_P(Kinds, BlkBackendTest,
                         ::testing::Values(BlkBackendKind::kIoUring, BlkBackendKind::kSync),
                         [](const ::testing::TestParamInfo<BlkBackendKind>& info) {
                           return info.param == BlkBackendKind::kSync ? "Sync" : "IoUring";
                         });

// A backend whose file system refuses fallocate: exercises the write-zeroes
// fallback in BlkBackend itself.
class NoFallocateBackend : public BlkBackend {
 public:
  NoFallocateBackend(int fd, EventLoop* loop)
      : inner_(SyncBlkBackend::Create(fd, loop).value()) {}
  const char* name() const override { return "no-fallocate"; }
  void Read(uint64_t offset, std::vector<iovec> iov, Completion done) override {
    inner_->Read(offset, std::move(iov), std::move(done));
  }
  void Write(uint64_t offset, std::vector<iovec> iov, Completion done) override {
    ++writes;
    inner_->Write(offset, std::move(iov), std::move(done));
  }
  void Flush(Completion done) override { inner_->Flush(std::move(done)); }
  void Fallocate(uint64_t, uint64_t, int, Completion done) override {
    ++fallocates;
    inner_->Read(0, {}, [done](int64_t) { done(-EOPNOTSUPP); });
  }
  uint32_t in_flight() const override { return inner_->in_flight(); }
  void Drain() override { inner_->Drain(); }

  int writes = 0;
  int fallocates = 0;

 private:
  std::unique_ptr<SyncBlkBackend> inner_;
};

TEST(BlkBackendFallbackTest, WriteZeroesFallsBackToWritingZeroesAndRemembers) {
  TempImage image(4 << 20, 0xaa);
  ScopedFd fd(::open(image.path().c_str(), O_RDWR | O_CLOEXEC));
  auto loop = EventLoop::Create().value();
  NoFallocateBackend backend(fd.get(), loop.get());

  // 2.5 MiB: three chunks of at most kZeroChunkBytes.
  const uint64_t len = (5u << 20) / 2;
  std::optional<int64_t> done;
  backend.WriteZeroes(512, len, /*unmap=*/false, [&](int64_t r) { done = r; });
  ASSERT_TRUE(RunUntil(*loop, [&] { return done.has_value(); }));
  EXPECT_EQ(*done, 0);
  EXPECT_EQ(backend.fallocates, 1);
  EXPECT_EQ(backend.writes, 3);
  std::vector<uint8_t> file = image.ReadAll();
  EXPECT_EQ(file[511], 0xaa);
  for (uint64_t i = 512; i < 512 + len; ++i) ASSERT_EQ(file[i], 0) << i;
  EXPECT_EQ(file[512 + len], 0xaa);

  done.reset();
  backend.WriteZeroes(0, 512, /*unmap=*/false, [&](int64_t r) { done = r; });
  ASSERT_TRUE(RunUntil(*loop, [&] { return done.has_value(); }));
  EXPECT_EQ(*done, 0);
  EXPECT_EQ(backend.fallocates, 1) << "ZERO_RANGE was retried after it failed";
}

// In a child process (seccomp filters cannot be removed), refuses
// io_uring_setup with EPERM as a container runtime's profile would, and
// checks that kAuto falls back to the synchronous backend which still works.
TEST(BlkBackendFallbackTest, AutoFallsBackToSyncWhenIoUringIsBlocked) {
  TempImage image(4096, 0x3c);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(10);
    if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) ::_exit(11);
    ScopedFd fd(::open(image.path().c_str(), O_RDWR | O_CLOEXEC));
    auto loop = EventLoop::Create();
    if (!fd.valid() || !loop.ok()) ::_exit(12);
    if (CreateBlkBackend(BlkBackendKind::kIoUring, fd.get(), loop->get(), 4).ok()) ::_exit(13);
    auto backend = CreateBlkBackend(BlkBackendKind::kAuto, fd.get(), loop->get(), 4);
    if (!backend.ok() || std::string((*backend)->name()) != "sync") ::_exit(14);
    uint8_t byte = 0;
    std::optional<int64_t> done;
    (*backend)->Read(100, {{&byte, 1}}, [&](int64_t r) { done = r; });
    if (!RunUntil(**loop, [&] { return done.has_value(); }) || *done != 1 || byte != 0x3c) {
      ::_exit(15);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(BlkBackendHelpersTest, AdvanceIovecsDropsWholeAndPartialEntries) {
  uint8_t buf[100];
  std::vector<iovec> iov = {{buf, 10}, {buf + 10, 20}, {buf + 30, 30}};
  blk_backend_internal::AdvanceIovecs(iov, 15);
  ASSERT_EQ(iov.size(), 2u);
  EXPECT_EQ(iov[0].iov_base, buf + 15);
  EXPECT_EQ(iov[0].iov_len, 15u);
  EXPECT_EQ(blk_backend_internal::IovecBytes(iov), 45u);
  blk_backend_internal::AdvanceIovecs(iov, 45);
  EXPECT_TRUE(iov.empty());
}

TEST(BlkBackendHelpersTest, ZeroIovecsCoverAtMostOneChunk) {
  EXPECT_EQ(blk_backend_internal::IovecBytes(blk_backend_internal::ZeroIovecs(1000)), 1000u);
  EXPECT_EQ(blk_backend_internal::IovecBytes(blk_backend_internal::ZeroIovecs(100 << 20)),
            blk_backend_internal::kZeroChunkBytes);
}

}  // namespace
}  // namespace dsec::devices
