// SPDX-License-Identifier: Apache-2.0
#include "devices/serial/console_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "base/clock.h"

namespace dsec::devices {
namespace {

constexpr int64_t kMs = 1'000'000;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A pipe whose read end the test drains.
struct Pipe {
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    read_end.Reset(fds[0]);
    write_end.Reset(fds[1]);
  }
  std::string ReadAll() {
    std::string out;
    char buf[65536];
    ssize_t n;
    while ((n = read(read_end.get(), buf, sizeof(buf))) > 0) out.append(buf, n);
    return out;
  }
  ScopedFd read_end;
  ScopedFd write_end;
};

uint64_t Accounted(const ConsoleOutput::Metrics& m) {
  return m.bytes_written + m.dropped_rate_limited + m.dropped_cap + m.dropped_overflow +
         m.dropped_write_error;
}

std::unique_ptr<ConsoleOutput> MakeConsole(ScopedFd fd, ConsoleOutputOptions options,
                                           const Clock* clock) {
  auto console = ConsoleOutput::Create(std::move(fd), options, clock);
  EXPECT_TRUE(console.ok()) << console.status();
  return std::move(console).value();
}

TEST(ConsoleOutputTest, WritesEverythingWhenUnlimited) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end), {}, &clock);
  console->Put(Bytes("hello "));
  console->Put(uint8_t{'w'});
  auto result = console->Drain();
  EXPECT_EQ(result.retry_after_ns, 0);
  EXPECT_FALSE(result.wait_writable);
  EXPECT_EQ(pipe.ReadAll(), "hello w");
  EXPECT_EQ(console->metrics().bytes_in, 7u);
  EXPECT_EQ(console->metrics().bytes_written, 7u);
}

TEST(ConsoleOutputTest, SignalsWakeFdOnlyWhenBufferBecomesNonEmpty) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end), {}, &clock);
  console->Put(Bytes("a"));
  console->Put(Bytes("b"));
  console->Put(Bytes("c"));
  uint64_t value = 0;
  ASSERT_EQ(read(console->wake_fd(), &value, sizeof(value)), 8);
  EXPECT_EQ(value, 1u);
  console->Drain();
  console->Put(Bytes("d"));
  ASSERT_EQ(read(console->wake_fd(), &value, sizeof(value)), 8);
  EXPECT_EQ(value, 1u);
}

TEST(ConsoleOutputTest, RateLimitDefersOutputAndSaysWhenToRetry) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end),
                             {.rate_bytes_per_sec = 100, .burst_bytes = 10}, &clock);
  console->Put(Bytes(std::string(25, 'r')));
  auto result = console->Drain();
  EXPECT_EQ(pipe.ReadAll().size(), 10u);
  EXPECT_EQ(result.retry_after_ns, 100 * kMs);  // 10 tokens at 100/s
  clock.AdvanceNs(result.retry_after_ns);
  result = console->Drain();
  EXPECT_EQ(pipe.ReadAll().size(), 10u);
  EXPECT_EQ(result.retry_after_ns, 50 * kMs);  // only 5 bytes left to send
  clock.AdvanceNs(result.retry_after_ns);
  result = console->Drain();
  EXPECT_EQ(result.retry_after_ns, 0);
  EXPECT_EQ(pipe.ReadAll().size(), 5u);
  EXPECT_EQ(console->metrics().bytes_written, 25u);
}

TEST(ConsoleOutputTest, OverflowWhileThrottledCountsAsRateLimited) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end),
                             {.buffer_bytes = 16, .rate_bytes_per_sec = 1, .burst_bytes = 1},
                             &clock);
  console->Put(Bytes(std::string(16, 'x')));
  EXPECT_GT(console->Drain().retry_after_ns, 0);  // wrote 1, throttled
  console->Put(Bytes(std::string(10, 'y')));      // 1 byte of room left
  auto m = console->metrics();
  EXPECT_EQ(m.dropped_rate_limited, 9u);
  EXPECT_EQ(m.dropped_overflow, 0u);
  EXPECT_EQ(console->buffered_bytes(), 16u);
}

TEST(ConsoleOutputTest, OverflowWithoutThrottleCountsAsOverflow) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end), {.buffer_bytes = 8}, &clock);
  console->Put(Bytes("0123456789"));
  EXPECT_EQ(console->metrics().dropped_overflow, 2u);
  console->Drain();
  EXPECT_EQ(pipe.ReadAll(), "01234567");
}

TEST(ConsoleOutputTest, CapWritesMarkerOnceAndDropsTheRest) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end), {.max_total_bytes = 10}, &clock);
  console->Put(Bytes("0123456"));
  console->Drain();
  console->Put(Bytes("789abcdef"));
  console->Drain();
  console->Put(Bytes("more"));
  console->Drain();
  EXPECT_EQ(pipe.ReadAll(),
            "0123456789\n[dsec-vmm: console output capped at 10 bytes; further output "
            "dropped]\n");
  auto m = console->metrics();
  EXPECT_EQ(m.bytes_written, 10u);
  EXPECT_EQ(m.dropped_cap, 10u);
  EXPECT_EQ(Accounted(m), m.bytes_in);
}

TEST(ConsoleOutputTest, FullPipeAsksToWaitForWritableAndKeepsBytes) {
  FakeClock clock;
  Pipe pipe;
  ASSERT_GE(fcntl(pipe.write_end.get(), F_SETPIPE_SZ, 4096), 4096);
  const int pipe_size = fcntl(pipe.write_end.get(), F_GETPIPE_SZ);
  auto console = MakeConsole(std::move(pipe.write_end), {}, &clock);
  std::string data;
  for (int i = 0; i < 30000; ++i) data.push_back(static_cast<char>('a' + i % 26));
  console->Put(Bytes(data));
  std::string received;
  for (int i = 0; i < 1000 && received.size() < data.size(); ++i) {
    auto result = console->Drain();
    if (received.size() + pipe_size < data.size()) {
      EXPECT_TRUE(result.wait_writable);
    }
    received += pipe.ReadAll();
  }
  EXPECT_EQ(received, data);
  EXPECT_EQ(console->metrics().bytes_written, data.size());
}

TEST(ConsoleOutputTest, ClosedReaderStopsOutputAndCountsWriteErrors) {
  FakeClock clock;
  Pipe pipe;
  auto console = MakeConsole(std::move(pipe.write_end), {}, &clock);
  pipe.read_end.Reset();
  // A closed pipe raises SIGPIPE unless ignored; the monitor ignores it.
  signal(SIGPIPE, SIG_IGN);
  console->Put(Bytes("lost"));
  console->Drain();
  console->Put(Bytes("too"));
  auto m = console->metrics();
  EXPECT_EQ(m.dropped_write_error, 7u);
  EXPECT_EQ(Accounted(m), m.bytes_in);
}

TEST(ConsoleOutputTest, FloodKeepsMemoryBoundedAndCountersExact) {
  FakeClock clock;
  char path[] = "/tmp/dsec_console_flood_XXXXXX";
  ScopedFd tmp(mkstemp(path));
  ASSERT_TRUE(tmp.valid());
  unlink(path);
  const int tmp_fd = tmp.get();
  auto console = MakeConsole(std::move(tmp),
                             {.buffer_bytes = 64 * 1024, .max_total_bytes = 1 << 20}, &clock);
  const std::string chunk(4096, 'f');
  uint64_t put = 0;
  std::vector<std::thread> vcpus;
  for (int t = 0; t < 2; ++t) {
    vcpus.emplace_back([&console, &chunk] {
      for (int i = 0; i < 1000; ++i) console->Put(Bytes(chunk));
    });
  }
  put += 2ull * 1000 * chunk.size();
  // The event loop's role, concurrently with the writers.
  for (int i = 0; i < 200; ++i) console->Drain();
  for (auto& th : vcpus) th.join();
  console->Drain();
  console->Drain();
  EXPECT_LE(console->buffered_bytes(), 64u * 1024);
  auto m = console->metrics();
  EXPECT_EQ(m.bytes_in, put);
  EXPECT_EQ(Accounted(m) + console->buffered_bytes(), put);
  EXPECT_LE(m.bytes_written, 1u << 20);
  const off_t size = lseek(tmp_fd, 0, SEEK_END);
  EXPECT_EQ(static_cast<uint64_t>(size) >= m.bytes_written, true);
}

TEST(ConsoleOutputTest, RejectsInvalidFdAndZeroBuffer) {
  FakeClock clock;
  EXPECT_EQ(ConsoleOutput::Create(ScopedFd(), {}, &clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  Pipe pipe;
  EXPECT_EQ(ConsoleOutput::Create(std::move(pipe.write_end), {.buffer_bytes = 0}, &clock)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConsoleOutputTest, OpenFileTruncatesAndOpenStdoutIsNonBlocking) {
  char dir[] = "/tmp/dsec_console_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/console.log";
  {
    auto fd = ConsoleOutput::OpenFile(path);
    ASSERT_TRUE(fd.ok()) << fd.status();
    ASSERT_EQ(write(fd->get(), "old contents", 12), 12);
  }
  {
    auto fd = ConsoleOutput::OpenFile(path);
    ASSERT_TRUE(fd.ok());
    EXPECT_EQ(lseek(fd->get(), 0, SEEK_END), 0);
  }
  unlink(path.c_str());
  rmdir(dir);
  EXPECT_EQ(ConsoleOutput::OpenFile("/nonexistent-dir/x").status().code(),
            absl::StatusCode::kNotFound);

  auto out = ConsoleOutput::OpenStdout();
  ASSERT_TRUE(out.ok()) << out.status();
  const int flags = fcntl(out->get(), F_GETFL);
  EXPECT_TRUE((flags & O_NONBLOCK) != 0);
}

}  // namespace
}  // namespace dsec::devices
