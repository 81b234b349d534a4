// SPDX-License-Identifier: Apache-2.0
#include "sandbox/trajectory/record.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dsec::trajectory {
namespace {

Record SampleExec() {
  Record r;
  r.kind = RecordKind::kExec;
  r.seq = 7;
  r.request.argv = {"sh", "-c", "printf '\\0\\377'; echo err >&2; exit 3"};
  r.request.cwd = "/work";
  r.request.env_digest = DigestEnv({"B=2", "A=1"});
  r.request.stdin_digest = DigestBytes("input");
  r.request.idempotent = true;
  r.result.stdout_data = std::string("\0\377 not utf-8", 13);
  r.result.stderr_data = "err\n";
  r.result.stdout_dropped = 5;
  r.result.stderr_dropped = 6;
  r.result.exit_code = 3;
  r.result.timed_out = false;
  r.result.start_unix_ns = 1'700'000'000'000'000'000;
  r.result.duration_ns = 12345;
  r.quota_dropped = 99;
  return r;
}

TEST(RecordTest, ExecRoundTripKeepsBinaryOutput) {
  Record r = SampleExec();
  ASSERT_TRUE(ValidateRecord(r).ok());
  auto back = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, RecordKind::kExec);
  EXPECT_EQ(back->seq, 7u);
  EXPECT_EQ(back->request.argv, r.request.argv);
  EXPECT_EQ(back->request.cwd, "/work");
  EXPECT_EQ(back->request.env_digest, r.request.env_digest);
  EXPECT_EQ(back->request.stdin_digest, r.request.stdin_digest);
  EXPECT_TRUE(back->request.idempotent);
  EXPECT_EQ(back->result.stdout_data, r.result.stdout_data);
  EXPECT_EQ(back->result.stderr_data, "err\n");
  EXPECT_EQ(back->result.stdout_dropped, 5u);
  EXPECT_EQ(back->result.stderr_dropped, 6u);
  EXPECT_EQ(back->result.exit_code, 3);
  EXPECT_EQ(back->result.start_unix_ns, r.result.start_unix_ns);
  EXPECT_EQ(back->result.duration_ns, 12345);
  EXPECT_EQ(back->quota_dropped, 99u);
}

TEST(RecordTest, CheckpointAndBranchRoundTrip) {
  Record c;
  c.kind = RecordKind::kCheckpoint;
  c.seq = 4;
  c.layer = "task-1-ckpt:4";
  auto back = DecodeRecord(EncodeRecord(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, RecordKind::kCheckpoint);
  EXPECT_EQ(back->seq, 4u);
  EXPECT_EQ(back->layer, "task-1-ckpt:4");

  Record b;
  b.kind = RecordKind::kBranch;
  b.seq = 2;
  back = DecodeRecord(EncodeRecord(b));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, RecordKind::kBranch);
  EXPECT_EQ(back->seq, 2u);
}

TEST(RecordTest, EnvDigestIgnoresOrderButNotContent) {
  EXPECT_EQ(DigestEnv({"A=1", "B=2"}), DigestEnv({"B=2", "A=1"}));
  EXPECT_NE(DigestEnv({"A=1", "B=2"}), DigestEnv({"A=1", "B=3"}));
  // Entries are length-prefixed: splitting differently changes the digest.
  EXPECT_NE(DigestEnv({"A=1B=2"}), DigestEnv({"A=1", "B=2"}));
  EXPECT_EQ(DigestBytes("x").rfind("sha256:", 0), 0u);
  EXPECT_NE(DigestBytes(""), DigestBytes(std::string(1, '\0')));
}

TEST(RecordTest, DecodeRejectsMalformedInput) {
  EXPECT_FALSE(DecodeRecord("").ok());
  EXPECT_FALSE(DecodeRecord("\xff\xff garbage").ok());
  using Json = nlohmann::json;
  auto cbor = [](const Json& j) {
    auto v = Json::to_cbor(j);
    return std::string(v.begin(), v.end());
  };
  EXPECT_FALSE(DecodeRecord(cbor(Json::array({1, 2}))).ok());
  // Nested arrays declaring 2^60 elements: nlohmann-json throws here even
  // with exceptions off (found by trajectory_log_fuzzer).
  EXPECT_FALSE(DecodeRecord(std::string("\x9b\x11\x00\x00\x00\x00\x00\x00\x00", 9)).ok());
  EXPECT_FALSE(DecodeRecord(std::string("\x93\x9b\x11\x00\x00\x00\x00\x00\x00\x00", 10)).ok());
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 2}, {"kind", 1}, {"seq", 0}})).ok());
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 1}, {"kind", 9}, {"seq", 0}})).ok());
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", -1}})).ok());
  // An exec without argv, with an empty argv, with a non-string argument.
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", 0}})).ok());
  EXPECT_FALSE(
      DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", 0}, {"argv", Json::array()}})).ok());
  EXPECT_FALSE(
      DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", 0}, {"argv", Json::array({1})}})).ok());
  // Output as text instead of a byte string; exit code out of range.
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", 0},
                                  {"argv", Json::array({"ls"})}, {"out", "text"}}))
                   .ok());
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", 0},
                                  {"argv", Json::array({"ls"})}, {"exit", 300}}))
                   .ok());
  // A checkpoint must name its layer.
  EXPECT_FALSE(DecodeRecord(cbor({{"v", 1}, {"kind", 2}, {"seq", 0}})).ok());
  // The minimal valid exec.
  EXPECT_TRUE(DecodeRecord(cbor({{"v", 1}, {"kind", 1}, {"seq", 0},
                                 {"argv", Json::array({"ls"})}}))
                  .ok());
}

TEST(RecordTest, ValidateEnforcesLimits) {
  Record r = SampleExec();
  r.request.argv.clear();
  EXPECT_FALSE(ValidateRecord(r).ok());
  r = SampleExec();
  r.request.argv.assign(kMaxArgv + 1, "x");
  EXPECT_FALSE(ValidateRecord(r).ok());
  r = SampleExec();
  r.request.argv = {std::string(kMaxArgBytes + 1, 'a')};
  EXPECT_FALSE(ValidateRecord(r).ok());
  r = SampleExec();
  r.request.cwd = std::string(kMaxTextField + 1, '/');
  EXPECT_FALSE(ValidateRecord(r).ok());
  r = SampleExec();
  r.result.signal = 99;
  EXPECT_FALSE(ValidateRecord(r).ok());
  Record c;
  c.kind = RecordKind::kCheckpoint;
  EXPECT_FALSE(ValidateRecord(c).ok());
}

}  // namespace
}  // namespace dsec::trajectory
