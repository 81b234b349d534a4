// SPDX-License-Identifier: Apache-2.0
#include "sandbox/trajectory/log.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"

namespace dsec::trajectory {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dsec-trj-test-XXXXXX";
    char* d = ::mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path_ = d;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

ExecRequest Req(const std::string& cmd) {
  ExecRequest q;
  q.argv = {"sh", "-c", cmd};
  q.cwd = "/";
  q.env_digest = DigestEnv({});
  q.stdin_digest = DigestBytes("");
  return q;
}

ExecResult Res(const std::string& out, int code = 0) {
  ExecResult r;
  r.stdout_data = out;
  r.exit_code = code;
  return r;
}

uint64_t FileSize(const std::string& path) { return std::filesystem::file_size(path); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

TEST(TrajectoryLogTest, AppendsSurviveReopen) {
  TempDir dir;
  std::string path = dir.path() + "/t.trj";
  {
    auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
    ASSERT_TRUE(log.ok()) << log.status();
    for (int i = 0; i < 3; ++i) {
      auto r = (*log)->AppendExec(Req(absl::StrCat("echo ", i)), Res(absl::StrCat(i, "\n")));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->seq, static_cast<uint64_t>(i));
    }
    ASSERT_TRUE((*log)->AppendCheckpoint(3, "ckpt:3").ok());
    EXPECT_EQ((*log)->stats().file_bytes, FileSize(path));
  }
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->recovery().frames, 4u);
  EXPECT_EQ((*log)->recovery().truncated_bytes, 0u);
  auto execs = (*log)->Execs();
  ASSERT_EQ(execs.size(), 3u);
  EXPECT_EQ(execs[2].result.stdout_data, "2\n");
  EXPECT_EQ(execs[2].request.argv[2], "echo 2");
  ASSERT_EQ((*log)->Checkpoints().size(), 1u);
  EXPECT_EQ((*log)->Checkpoints()[0].layer, "ckpt:3");
  EXPECT_EQ((*log)->next_seq(), 3u);
}

TEST(TrajectoryLogTest, EveryTornTailIsTruncatedToTheLastWholeRecord) {
  TempDir dir;
  std::string path = dir.path() + "/t.trj";
  uint64_t two_records = 0;
  {
    auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->AppendExec(Req("a"), Res("A")).ok());
    ASSERT_TRUE((*log)->AppendExec(Req("b"), Res("B")).ok());
    two_records = FileSize(path);
    ASSERT_TRUE((*log)->AppendExec(Req("c"), Res(std::string(300, 'C'))).ok());
  }
  const std::string full = ReadFile(path);
  // A crash during the third append leaves any prefix of its frame.
  for (uint64_t cut = two_records + 1; cut < full.size(); ++cut) {
    WriteFile(path, full.substr(0, cut));
    auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
    ASSERT_TRUE(log.ok()) << "cut " << cut << ": " << log.status();
    EXPECT_EQ((*log)->Execs().size(), 2u) << cut;
    EXPECT_EQ((*log)->recovery().truncated_bytes, cut - two_records) << cut;
    EXPECT_EQ(FileSize(path), two_records) << cut;
    // The repaired log takes appends again at the right seq.
    auto r = (*log)->AppendExec(Req("c2"), Res(""));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->seq, 2u);
  }
  // The whole frame written but its data never reached the disk (zeros).
  WriteFile(path, full.substr(0, two_records) + std::string(full.size() - two_records, '\0'));
  auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->Execs().size(), 2u);
  // The last frame complete in size but with a flipped payload byte.
  std::string flipped = full;
  flipped[full.size() - 2] ^= 0x40;
  WriteFile(path, flipped);
  log = TrajectoryLog::Open(path, 1 << 20, nullptr);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->Execs().size(), 2u);
  EXPECT_EQ(FileSize(path), two_records);
}

TEST(TrajectoryLogTest, DamageBeforeTheTailIsRefusedAndLeftAlone) {
  TempDir dir;
  std::string path = dir.path() + "/t.trj";
  uint64_t first = 0;
  {
    auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->AppendExec(Req("a"), Res("A")).ok());
    first = FileSize(path);
    ASSERT_TRUE((*log)->AppendExec(Req("b"), Res("B")).ok());
    ASSERT_TRUE((*log)->AppendExec(Req("c"), Res("C")).ok());
  }
  std::string damaged = ReadFile(path);
  damaged[first + 20] ^= 0x01;  // inside the second record
  WriteFile(path, damaged);
  auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
  EXPECT_EQ(ReadFile(path), damaged);  // untouched for inspection
  // Not a log at all.
  WriteFile(path, "#!/bin/sh\necho hi\n");
  log = TrajectoryLog::Open(path, 1 << 20, nullptr);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
}

TEST(TrajectoryLogTest, AcknowledgedRecordsSurviveKill9) {
  TempDir dir;
  std::string path = dir.path() + "/t.trj";
  int acks[2];
  ASSERT_EQ(::pipe(acks), 0);
  ScopedFd acks_r(acks[0]), acks_w(acks[1]);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    acks_r.Reset();
    auto log = TrajectoryLog::Open(path, 64 << 20, nullptr);
    if (!log.ok()) ::_exit(2);
    for (uint64_t i = 0;; ++i) {
      auto r = (*log)->AppendExec(Req(absl::StrCat("step ", i)), Res(std::string(i % 500, 'x')));
      if (!r.ok()) ::_exit(3);
      // Acknowledge only after Append returned.
      if (::write(acks_w.get(), &i, sizeof(i)) != sizeof(i)) ::_exit(4);
    }
  }
  acks_w.Reset();
  uint64_t last = 0, n = 0;
  while (n < 200 && ::read(acks_r.get(), &last, sizeof(last)) == sizeof(last)) ++n;
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
  // Acks still in the pipe were sent too.
  while (::read(acks_r.get(), &last, sizeof(last)) == sizeof(last)) ++n;
  acks_r.Reset();
  ASSERT_GE(n, 200u);
  auto log = TrajectoryLog::Open(path, 64 << 20, nullptr);
  ASSERT_TRUE(log.ok()) << log.status();
  auto execs = (*log)->Execs();
  ASSERT_GE(execs.size(), last + 1);
  for (uint64_t i = 0; i <= last; ++i) {
    EXPECT_EQ(execs[i].request.argv[2], absl::StrCat("step ", i));
    EXPECT_EQ(execs[i].result.stdout_data, std::string(i % 500, 'x'));
  }
}

TEST(TrajectoryLogTest, TaskQuotaCutsOutputAndRecordsTheCut) {
  TempDir dir;
  std::string path = dir.path() + "/t.trj";
  auto log = TrajectoryLog::Open(path, 4096, nullptr);
  ASSERT_TRUE(log.ok());
  ExecResult big = Res(std::string(10000, 'o'));
  big.stderr_data = std::string(10000, 'e');
  auto r = (*log)->AppendExec(Req("yes"), big);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->result.stdout_data.size() + r->result.stderr_data.size(), 4096u);
  EXPECT_GT(r->result.stderr_data.size(), 1000u);  // stderr keeps its share
  EXPECT_EQ(r->quota_dropped,
            20000u - r->result.stdout_data.size() - r->result.stderr_data.size());
  EXPECT_LE(FileSize(path), 4096u);
  // Full: the next record (metadata alone does not fit) is refused, nothing
  // written.
  uint64_t before = FileSize(path);
  auto refused = (*log)->AppendExec(Req("yes"), big);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FileSize(path), before);
  EXPECT_EQ((*log)->stats().refused_appends, 1u);
  EXPECT_EQ((*log)->stats().quota_dropped_bytes, r->quota_dropped);
  // What was kept reads back.
  log->reset();
  auto reopened = TrajectoryLog::Open(path, 4096, nullptr);
  ASSERT_TRUE(reopened.ok());
  ASSERT_EQ((*reopened)->Execs().size(), 1u);
  EXPECT_EQ((*reopened)->Execs()[0].quota_dropped, r->quota_dropped);
}

TEST(TrajectoryLogTest, BranchSupersedesTheTail) {
  TempDir dir;
  std::string path = dir.path() + "/t.trj";
  {
    auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
    ASSERT_TRUE(log.ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*log)->AppendExec(Req(absl::StrCat(i)), Res("")).ok());
    ASSERT_TRUE((*log)->AppendCheckpoint(1, "c1").ok());
    ASSERT_TRUE((*log)->AppendCheckpoint(3, "c3").ok());
    EXPECT_FALSE((*log)->AppendBranch(5).ok());
    EXPECT_FALSE((*log)->AppendCheckpoint(5, "c5").ok());
    ASSERT_TRUE((*log)->AppendBranch(2).ok());
    auto r = (*log)->AppendExec(Req("new"), Res("N"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->seq, 2u);
  }
  auto log = TrajectoryLog::Open(path, 1 << 20, nullptr);
  ASSERT_TRUE(log.ok()) << log.status();
  auto execs = (*log)->Execs();
  ASSERT_EQ(execs.size(), 3u);
  EXPECT_EQ(execs[1].request.argv[2], "1");
  EXPECT_EQ(execs[2].request.argv[2], "new");
  auto cps = (*log)->Checkpoints();
  ASSERT_EQ(cps.size(), 1u);  // c3 described files of the superseded tail
  EXPECT_EQ(cps[0].layer, "c1");
}

TEST(TrajectoryStoreTest, TaskIdsCannotEscapeTheDirectory) {
  TempDir dir;
  auto store = TrajectoryStore::Open(dir.path() + "/logs", {});
  ASSERT_TRUE(store.ok()) << store.status();
  for (const char* bad : {"", "../x", "a/b", ".hidden", "x y", "a\nb"}) {
    auto log = (*store)->Get(bad);
    EXPECT_FALSE(log.ok()) << bad;
    EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE((*store)->Get(std::string(129, 'a')).ok());
  EXPECT_TRUE((*store)->Get("task-1.a_B").ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/x.trj"));
  struct stat st;
  ASSERT_EQ(::stat((dir.path() + "/logs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(TrajectoryStoreTest, NodeQuotaIsSharedAndRecoveryIsReported) {
  TempDir dir;
  StoreOptions opts;
  opts.max_task_bytes = 1 << 20;
  opts.max_node_bytes = 6000;
  std::string logs = dir.path() + "/logs";
  {
    auto store = TrajectoryStore::Open(logs, opts);
    ASSERT_TRUE(store.ok());
    auto a = (*store)->Get("a");
    auto b = (*store)->Get("b");
    ASSERT_TRUE(a.ok() && b.ok());
    auto ra = (*a)->AppendExec(Req("flood"), Res(std::string(4000, 'a')));
    ASSERT_TRUE(ra.ok());
    EXPECT_EQ(ra->quota_dropped, 0u);
    // b gets only what a left of the node's bytes.
    auto rb = (*b)->AppendExec(Req("flood"), Res(std::string(4000, 'b')));
    ASSERT_TRUE(rb.ok()) << rb.status();
    EXPECT_GT(rb->quota_dropped, 2000u);
    EXPECT_LE((*store)->node_quota().used(), 6000u);
    EXPECT_FALSE((*b)->AppendExec(Req("more"), Res("x")).ok());
    // Removing a returns its bytes.
    ASSERT_TRUE((*store)->Remove("a").ok());
    EXPECT_FALSE(std::filesystem::exists(logs + "/a.trj"));
    EXPECT_TRUE((*b)->AppendExec(Req("more"), Res("x")).ok());
  }
  // A torn tail on b is repaired and reported when the store reopens.
  std::string b_path = logs + "/b.trj";
  std::string data = ReadFile(b_path);
  WriteFile(b_path, data.substr(0, data.size() - 3));
  auto store = TrajectoryStore::Open(logs, opts);
  ASSERT_TRUE(store.ok());
  auto rec = (*store)->Recovered();
  ASSERT_EQ(rec.count("b"), 1u);
  EXPECT_NE(rec["b"].find("repaired"), std::string::npos) << rec["b"];
  auto b = (*store)->Get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->Execs().size(), 1u);
  EXPECT_EQ((*store)->node_quota().used(), FileSize(b_path));
}

TEST(TrajectoryStoreTest, RefusedLogIsReportedAndNotReused) {
  TempDir dir;
  std::string logs = dir.path() + "/logs";
  ASSERT_EQ(::mkdir(logs.c_str(), 0700), 0);
  WriteFile(logs + "/bad.trj", "garbage that is not a log");
  auto store = TrajectoryStore::Open(logs, {});
  ASSERT_TRUE(store.ok());
  auto rec = (*store)->Recovered();
  ASSERT_EQ(rec.count("bad"), 1u);
  EXPECT_NE(rec["bad"].find("refused"), std::string::npos);
  auto bad = (*store)->Get("bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFile(logs + "/bad.trj"), "garbage that is not a log");
}

}  // namespace
}  // namespace dsec::trajectory
