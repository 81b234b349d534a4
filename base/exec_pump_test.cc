// SPDX-License-Identifier: Apache-2.0
// The pump against a fake command: the test holds the other ends of the
// pipes, an eventfd stands for the exit, and a FakeClock moved by an
// always-ready "ticker" descriptor drives every deadline without sleeping.
#include "base/exec_pump.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <string>

#include "base/eventfd.h"
#include "gtest/gtest.h"

namespace dsec {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

Pipe MakePipe() {
  auto p = Pipe::Create();
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : Pipe{};
}

void WriteAll(const ScopedFd& fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd.get(), data.data(), data.size());
    ASSERT_GT(n, 0);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

EventFd MakeEvent() {
  auto e = EventFd::Create(EFD_CLOEXEC);
  EXPECT_TRUE(e.ok()) << e.status();
  return *std::move(e);
}

// A command faked by the test: its ends of the three pipes, and an eventfd
// that its "exit" signals. The pump gets the runtime's ends.
class FakeCommand {
 public:
  FakeCommand() : in_(MakePipe()), out_(MakePipe()), err_(MakePipe()), exit_(MakeEvent()) {}

  // A pump over this command; `kill_exits` makes the kill end the command.
  std::unique_ptr<ExecPump> Pump(const ExecPumpOptions& options, ExecOutputSink* sink,
                                 bool kill_exits = true) {
    auto pump = std::make_unique<ExecPump>(
        options, std::move(in_.write), std::move(out_.read), std::move(err_.read), sink,
        [this, kill_exits] {
          ++kills;
          if (kill_exits) Die();
        });
    ExecPump* p = pump.get();
    pump->Watch(
        [this, p](int64_t) { return ExecPump::Interest{p->exited() ? -1 : exit_.fd(), POLLIN}; },
        [p](short, int64_t) {
          p->MarkExited();
          return absl::OkStatus();
        });
    return pump;
  }
  // Exits, closing its ends of the output pipes.
  void Die() {
    ClosePipes();
    Exit();
  }
  void ClosePipes() {
    out_.write.Reset();
    err_.write.Reset();
  }
  // Exits, leaving its pipes to whoever else holds them.
  void Exit() { ASSERT_TRUE(exit_.Signal().ok()); }

  const ScopedFd& stdin_read() const { return in_.read; }
  const ScopedFd& stdout_write() const { return out_.write; }
  const ScopedFd& stderr_write() const { return err_.write; }
  void CloseStdinRead() { in_.read.Reset(); }
  int kills = 0;

 private:
  Pipe in_, out_, err_;
  EventFd exit_;
};

// Moves the clock by `step` every round: an eventfd that stays readable.
void AddTicker(ExecPump& pump, FakeClock& clock, const EventFd& tick, int64_t step) {
  EXPECT_TRUE(tick.Signal().ok());
  pump.Watch([&tick](int64_t) { return ExecPump::Interest{tick.fd(), POLLIN}; },
             [&clock, step](short, int64_t) {
               clock.AdvanceNs(step);
               return absl::OkStatus();
             });
}

class ExecPumpTest : public ::testing::Test {
 protected:
  ExecPumpOptions Options() {
    ExecPumpOptions o;
    o.clock = &clock_;
    return o;
  }
  FakeClock clock_{100 * kSecond};
  std::string out_, err_;
  StringOutputSink sink_{&out_, &err_};
  FakeCommand cmd_;
};

TEST_F(ExecPumpTest, CopiesBothStreamsAndEndsAtTheExitOnceThePipesAreAtEof) {
  std::vector<std::pair<int, std::string>> pieces;
  StringOutputSink sink(&out_, &err_, [&](int stream, std::string_view bytes) {
    pieces.emplace_back(stream, std::string(bytes));
  });
  auto pump = cmd_.Pump(Options(), &sink);
  WriteAll(cmd_.stdout_write(), "hello\n");
  WriteAll(cmd_.stderr_write(), "oops\n");
  cmd_.Die();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_EQ(out_, "hello\n");
  EXPECT_EQ(err_, "oops\n");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], std::make_pair(1, std::string("hello\n")));
  EXPECT_EQ(pieces[1], std::make_pair(2, std::string("oops\n")));
  EXPECT_TRUE(pump->exited());
  EXPECT_FALSE(pump->killed());
  EXPECT_EQ(pump->kept_bytes(1), 6u);
  EXPECT_EQ(pump->kept_bytes(2), 5u);
  EXPECT_EQ(pump->dropped_bytes(), 0u);
  EXPECT_EQ(cmd_.kills, 0);
}

TEST_F(ExecPumpTest, DeadlineKillsOnceAndIsReportedAsATimeout) {
  ExecPumpOptions o = Options();
  o.deadline_ns = clock_.NowNs() + 10 * kSecond;
  auto pump = cmd_.Pump(o, &sink_);
  EventFd tick = MakeEvent();
  AddTicker(*pump, clock_, tick, kSecond);
  WriteAll(cmd_.stdout_write(), "before\n");
  const int64_t start = clock_.NowNs();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_EQ(cmd_.kills, 1);
  EXPECT_TRUE(pump->timed_out());
  EXPECT_EQ(pump->kill_reason(), ExecKill::kTimeout);
  EXPECT_TRUE(pump->exited());
  EXPECT_EQ(out_, "before\n");
  EXPECT_GE(clock_.NowNs() - start, 10 * kSecond);
  EXPECT_LT(clock_.NowNs() - start, 12 * kSecond);
}

TEST_F(ExecPumpTest, NoExitWithinTheGraceAfterAKillIsAnError) {
  ExecPumpOptions o = Options();
  o.deadline_ns = clock_.NowNs() + kSecond;
  o.exit_grace_ns = 5 * kSecond;
  auto pump = cmd_.Pump(o, &sink_, /*kill_exits=*/false);
  EventFd tick = MakeEvent();
  AddTicker(*pump, clock_, tick, kSecond);
  const int64_t start = clock_.NowNs();
  absl::Status s = pump->Run();
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_EQ(cmd_.kills, 1);
  EXPECT_FALSE(pump->exited());
  EXPECT_GE(clock_.NowNs() - start, 6 * kSecond);
  EXPECT_LT(clock_.NowNs() - start, 8 * kSecond);
}

TEST_F(ExecPumpTest, DrainAfterTheExitIsBoundedAndLeavesStraysAlone) {
  ExecPumpOptions o = Options();
  o.drain_after_exit_ns = 2 * kSecond;
  auto pump = cmd_.Pump(o, &sink_);
  EventFd tick = MakeEvent();
  AddTicker(*pump, clock_, tick, kSecond / 2);
  // A background process still holds stdout: the exit alone ends nothing.
  WriteAll(cmd_.stdout_write(), "last words\n");
  cmd_.Exit();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_TRUE(pump->exited());
  EXPECT_EQ(cmd_.kills, 0);
  EXPECT_EQ(out_, "last words\n");
  EXPECT_GE(clock_.NowNs() - pump->exit_ns(), 2 * kSecond);
  EXPECT_LT(clock_.NowNs() - pump->exit_ns(), 3 * kSecond);
}

TEST_F(ExecPumpTest, DrainAfterAKillIsBoundedFromTheKill) {
  ExecPumpOptions o = Options();
  o.deadline_ns = clock_.NowNs() + kSecond;
  o.drain_after_exit_ns = 100 * kSecond;
  o.drain_after_kill_ns = 3 * kSecond;
  // The kill ends the command but not a stray that keeps stdout open.
  auto pump = cmd_.Pump(o, &sink_, /*kill_exits=*/false);
  EventFd tick = MakeEvent();
  AddTicker(*pump, clock_, tick, kSecond);
  pump->Watch(
      [&](int64_t now) {
        return ExecPump::Interest{-1, 0, pump->killed() && !pump->exited() ? now : kExecNoDeadline};
      },
      [&](short, int64_t) {
        if (!pump->exited()) cmd_.Exit();
        return absl::OkStatus();
      });
  const int64_t start = clock_.NowNs();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_TRUE(pump->timed_out());
  EXPECT_TRUE(pump->exited());
  EXPECT_GE(clock_.NowNs() - start, 4 * kSecond);
  EXPECT_LT(clock_.NowNs() - start, 7 * kSecond);
}

TEST_F(ExecPumpTest, CapIsSharedByBothStreamsAndDropsAreCountedPerStream) {
  ExecPumpOptions o = Options();
  o.output_cap_bytes = 10;
  auto pump = cmd_.Pump(o, &sink_);
  WriteAll(cmd_.stdout_write(), "12345678");
  WriteAll(cmd_.stderr_write(), "abcdefgh");
  cmd_.Die();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_EQ(out_, "12345678");
  EXPECT_EQ(err_, "ab");
  EXPECT_EQ(pump->dropped_bytes(1), 0u);
  EXPECT_EQ(pump->dropped_bytes(2), 6u);
  EXPECT_EQ(pump->dropped_bytes(), 6u);
  EXPECT_FALSE(pump->killed()) << "dropping alone kills nothing";
}

TEST_F(ExecPumpTest, RateLimitKeepsTheBurstAndDropsTheRest) {
  ExecPumpOptions o = Options();
  o.output_rate_bytes_per_s = 1;  // burst 64 KiB; the fake clock never refills it
  auto pump = cmd_.Pump(o, &sink_);
  ASSERT_GE(::fcntl(cmd_.stdout_write().get(), F_SETPIPE_SZ, 1 << 20), 1 << 20);
  WriteAll(cmd_.stdout_write(), std::string(200'000, 'y'));
  cmd_.Die();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_EQ(out_.size(), 64u << 10);
  EXPECT_EQ(pump->dropped_bytes(1), 200'000u - (64u << 10));
}

TEST_F(ExecPumpTest, OutputLimitsKillWhenAsked) {
  {
    ExecPumpOptions o = Options();
    o.output_cap_bytes = 10;
    o.kill_at_cap = true;
    auto pump = cmd_.Pump(o, &sink_);
    WriteAll(cmd_.stdout_write(), std::string(11, 'x'));
    ASSERT_TRUE(pump->Run().ok());
    EXPECT_EQ(pump->kill_reason(), ExecKill::kOutput);
    EXPECT_FALSE(pump->timed_out());
    EXPECT_EQ(cmd_.kills, 1);
  }
  FakeCommand cmd;
  ExecPumpOptions o = Options();
  o.output_cap_bytes = 10;
  o.kill_after_dropped_bytes = 100;
  auto pump = cmd.Pump(o, &sink_);
  WriteAll(cmd.stdout_write(), std::string(109, 'x'));  // 99 dropped: goes on
  EventFd tick = MakeEvent();
  int rounds = 0;
  pump->Watch([&](int64_t) { return ExecPump::Interest{rounds < 3 ? tick.fd() : -1, POLLIN}; },
              [&](short, int64_t) {
                if (++rounds == 3) {
                  EXPECT_FALSE(pump->killed());
                  WriteAll(cmd.stdout_write(), "x");  // the 100th
                }
                return absl::OkStatus();
              });
  ASSERT_TRUE(tick.Signal().ok());
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_EQ(pump->kill_reason(), ExecKill::kOutput);
  EXPECT_EQ(pump->dropped_bytes(), 100u);
}

// A sink that is full stops the reading (the command blocks on its pipe)
// until a watcher of the caller's makes room.
TEST_F(ExecPumpTest, FullSinkPausesReadingUntilItHasRoom) {
  class SlowSink : public ExecOutputSink {
   public:
    absl::Status Write(int, std::string_view bytes) override {
      data.append(bytes);
      return absl::OkStatus();
    }
    bool HasRoom() const override { return room; }
    std::string data;
    bool room = false;
  } sink;
  auto pump = cmd_.Pump(Options(), &sink);
  int waiting = -1;
  pump->Watch(
      [&](int64_t now) { return ExecPump::Interest{-1, 0, sink.room ? kExecNoDeadline : now}; },
      [&](short, int64_t) {
        // Still in the pipe after a round: the pump did not read it.
        EXPECT_EQ(::ioctl(cmd_.stdout_write().get(), FIONREAD, &waiting), 0);
        sink.room = true;
        cmd_.Die();
        return absl::OkStatus();
      });
  WriteAll(cmd_.stdout_write(), "held back");
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_EQ(waiting, 9) << "read while the sink was full";
  EXPECT_EQ(sink.data, "held back");
}

// Stdin larger than a pipe reaches the command in order, then EOF; the
// "command" here is a watcher that echoes it to stdout.
TEST_F(ExecPumpTest, StdinIsWrittenAsThePipeTakesItThenClosed) {
  auto pump = cmd_.Pump(Options(), &sink_);
  ASSERT_EQ(::fcntl(cmd_.stdin_read().get(), F_SETFL, O_NONBLOCK), 0);
  std::string data;
  for (int i = 0; data.size() < (1u << 20); ++i) data += std::to_string(i) + "\n";
  std::string seen;
  pump->Watch(
      [&](int64_t) { return ExecPump::Interest{cmd_.stdin_read().get(), POLLIN}; },
      [&](short, int64_t) {
        char buf[4096];
        ssize_t n = ::read(cmd_.stdin_read().get(), buf, sizeof(buf));
        if (n > 0) seen.append(buf, static_cast<size_t>(n));
        if (n == 0) {
          cmd_.CloseStdinRead();
          cmd_.Die();
        }
        return absl::OkStatus();
      });
  pump->AppendStdin(data);
  pump->CloseStdin();
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_TRUE(seen == data) << seen.size() << " of " << data.size();
}

TEST_F(ExecPumpTest, StdinBeyondItsBoundIsFullAndAClosedReaderDropsIt) {
  ExecPumpOptions o = Options();
  o.stdin_buffer_bytes = 100;
  auto pump = cmd_.Pump(o, &sink_);
  pump->AppendStdin(std::string(1 << 20, 's'));  // more than the pipe holds
  EXPECT_TRUE(pump->stdin_full());
  // The command closes its stdin: the write fails (EPIPE, no SIGPIPE for
  // this process), and what waits is dropped, as is what comes later.
  cmd_.CloseStdinRead();
  pump->AppendStdin("more");
  EXPECT_FALSE(pump->stdin_full());
  pump->AppendStdin(std::string(1 << 20, 't'));
  EXPECT_FALSE(pump->stdin_full());
  cmd_.Die();
  ASSERT_TRUE(pump->Run().ok());
}

TEST_F(ExecPumpTest, TheExitClosesStdin) {
  auto pump = cmd_.Pump(Options(), &sink_);
  pump->AppendStdin(std::string(1 << 20, 's'));  // more than the pipe holds
  cmd_.Die();
  ASSERT_TRUE(pump->Run().ok());
  char buf[65536];
  ssize_t n;
  size_t got = 0;
  while ((n = ::read(cmd_.stdin_read().get(), buf, sizeof(buf))) > 0) got += static_cast<size_t>(n);
  EXPECT_EQ(n, 0) << "the pump's end is closed";
  EXPECT_LT(got, 1u << 20);
}

TEST_F(ExecPumpTest, StopFdCancelsAndKillsTheCommand) {
  EventFd stop = MakeEvent();
  ExecPumpOptions o = Options();
  o.stop_fd = stop.fd();
  auto pump = cmd_.Pump(o, &sink_, /*kill_exits=*/false);
  ASSERT_TRUE(stop.Signal().ok());
  absl::Status s = pump->Run();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_EQ(cmd_.kills, 1);
  EXPECT_EQ(pump->kill_reason(), ExecKill::kCaller);
}

TEST_F(ExecPumpTest, AWatchersErrorEndsTheRunAndKillsTheCommand) {
  auto pump = cmd_.Pump(Options(), &sink_, /*kill_exits=*/false);
  pump->Watch([](int64_t now) { return ExecPump::Interest{-1, 0, now}; },
              [](short, int64_t) { return absl::UnavailableError("connection gone"); });
  absl::Status s = pump->Run();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(cmd_.kills, 1);
}

TEST_F(ExecPumpTest, AnExitThatCannotBeLearntEndsAtEof) {
  auto pump = cmd_.Pump(Options(), &sink_);
  bool told = false;
  pump->Watch([&](int64_t now) { return ExecPump::Interest{-1, 0, told ? kExecNoDeadline : now}; },
              [&](short, int64_t) {
                told = true;
                pump->MarkExitUnknown();
                return absl::OkStatus();
              });
  WriteAll(cmd_.stdout_write(), "partial");
  cmd_.ClosePipes();  // and no exit is ever reported
  ASSERT_TRUE(pump->Run().ok());
  EXPECT_FALSE(pump->exited());
  EXPECT_EQ(out_, "partial");
}

}  // namespace
}  // namespace dsec
