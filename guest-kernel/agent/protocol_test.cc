// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/protocol.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "guest-kernel/agent/messages.h"

namespace dsec::agent {
namespace {

Frame Json(MsgType type, std::string payload) {
  Frame f;
  f.type = type;
  f.payload = std::move(payload);
  return f;
}

std::vector<Frame> SampleFrames() {
  Hello hello;
  hello.software = "dsec-host";
  ExecRequest exec;
  exec.argv = {"sh", "-c", std::string("echo \xff\xfe", 7)};
  exec.env = {{"A", "1"}, {"BIN", std::string("\x80\x00z", 3)}};
  OutputChunk out;
  out.stream = 2;
  out.data = std::string("err\0\n", 5);
  return {ToFrame(hello),
          ToFrame(exec),
          DataFrame(MsgType::kData, std::string(3000, '\xab')),
          ToFrame(out),
          EmptyFrame(MsgType::kStdinClose),
          DataFrame(MsgType::kStdin, "")};
}

TEST(FrameTest, HeaderIsLittleEndianLengthThenType) {
  std::string enc = EncodeFrame(DataFrame(MsgType::kData, std::string(0x0102, 'x')));
  ASSERT_EQ(enc.size(), kFrameHeaderBytes + 0x0102);
  EXPECT_EQ(enc.substr(0, 5), std::string("\x02\x01\x00\x00\x03", 5));
}

TEST(FrameTest, ReaderYieldsTheSameFramesSplitAtEveryByteBoundary) {
  std::vector<Frame> frames = SampleFrames();
  std::string stream;
  for (const Frame& f : frames) AppendFrame(f, &stream);
  for (size_t split = 0; split <= stream.size(); ++split) {
    FrameReader reader;
    std::vector<Frame> got;
    auto drain = [&] {
      for (;;) {
        auto next = reader.Next();
        ASSERT_TRUE(next.ok()) << next.status();
        if (!next->has_value()) break;
        got.push_back(**next);
      }
    };
    reader.Append(std::string_view(stream).substr(0, split));
    drain();
    reader.Append(std::string_view(stream).substr(split));
    drain();
    ASSERT_EQ(got.size(), frames.size()) << "split at " << split;
    for (size_t i = 0; i < frames.size(); ++i) {
      EXPECT_EQ(got[i].type, frames[i].type);
      EXPECT_EQ(got[i].payload, frames[i].payload);
    }
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(FrameTest, ReaderTakesAStreamOneByteAtATime) {
  std::vector<Frame> frames = SampleFrames();
  std::string stream;
  for (const Frame& f : frames) AppendFrame(f, &stream);
  FrameReader reader;
  size_t count = 0;
  for (char c : stream) {
    reader.Append(std::string_view(&c, 1));
    auto next = reader.Next();
    ASSERT_TRUE(next.ok());
    if (next->has_value()) ++count;
  }
  EXPECT_EQ(count, frames.size());
}

TEST(FrameTest, RejectsAnOversizedFrameFromItsHeaderAlone) {
  FrameReader reader;
  uint32_t len = kMaxFramePayload + 1;
  std::string header = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                        static_cast<char>((len >> 16) & 0xff), static_cast<char>(len >> 24),
                        static_cast<char>(MsgType::kData)};
  reader.Append(header);
  auto next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(next.status()));
  EXPECT_NE(next.status().message().find("exceeds"), absl::string_view::npos);
  // The error sticks: the stream is out of step for good.
  reader.Append(EncodeFrame(EmptyFrame(MsgType::kShutdown)));
  EXPECT_FALSE(reader.Next().ok());
}

TEST(FrameTest, AcceptsAFrameOfExactlyTheLimit) {
  FrameReader reader;
  reader.Append(EncodeFrame(DataFrame(MsgType::kData, std::string(kMaxFramePayload, 'a'))));
  auto next = reader.Next();
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->payload.size(), kMaxFramePayload);
}

TEST(FrameTest, RejectsUnknownTypes) {
  for (int t : {0x00, 0x04, 0x17, 0x7f, 0xff}) {
    FrameReader reader;
    reader.Append(std::string("\x00\x00\x00\x00", 4) + static_cast<char>(t));
    auto next = reader.Next();
    EXPECT_FALSE(next.ok()) << t;
    EXPECT_NE(next.status().message().find("unknown frame type"), absl::string_view::npos);
  }
}

TEST(MessagesTest, RoundTripsEveryMessage) {
  Hello hello;
  hello.software = "dsec-agent";
  hello.capabilities = {"exec", "files"};
  auto h = Decode<Hello>(ToFrame(hello));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, kProtocolVersion);
  EXPECT_EQ(h->capabilities, hello.capabilities);

  ExecRequest req;
  req.argv = {"/bin/echo", std::string("\xc3\x28", 2), "ok"};
  req.env = {{"K", std::string("v\xff", 2)}};
  req.cwd = "/tmp";
  req.timeout_ms = 1500;
  req.output_cap_bytes = 0;
  req.output_rate_bytes_per_s = 4096;
  req.kill_after_dropped_bytes = 7;
  req.stdin = true;
  auto r = Decode<ExecRequest>(ToFrame(req));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->argv, req.argv);
  EXPECT_EQ(r->env, req.env);
  EXPECT_EQ(r->cwd, req.cwd);
  EXPECT_EQ(r->timeout_ms, 1500u);
  EXPECT_EQ(r->output_cap_bytes, 0u);
  EXPECT_EQ(r->output_rate_bytes_per_s, 4096u);
  EXPECT_EQ(r->kill_after_dropped_bytes, 7u);
  EXPECT_TRUE(r->stdin);

  ExecDone done;
  done.signal = 9;
  done.timed_out = true;
  done.killed_by = "timeout";
  done.stdout_dropped = 5;
  done.duration_ms = 1234;
  done.peak_rss_kib = 2048;
  auto d = Decode<ExecDone>(ToFrame(done));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->exit_code.has_value());
  EXPECT_EQ(d->signal, 9);
  EXPECT_TRUE(d->timed_out);
  EXPECT_EQ(d->killed_by, "timeout");
  EXPECT_EQ(d->stdout_dropped, 5u);
  EXPECT_EQ(d->duration_ms, 1234);
  EXPECT_EQ(d->peak_rss_kib, 2048);

  DiffEntry e;
  e.path = std::string("dir/\xfe name", 10);
  e.type = DiffType::kDir;
  e.mode = 04755;
  e.uid = 1000;
  e.gid = 100;
  e.mtime_ns = -5;  // before the epoch
  e.atime_ns = 1'700'000'000'123'456'789;
  e.opaque = true;
  e.xattrs = {{"trusted.overlay.opaque", "y"}, {"user.bin", std::string("\x00\x01\xff", 3)}};
  auto de = Decode<DiffEntry>(ToFrame(e));
  ASSERT_TRUE(de.ok()) << de.status();
  EXPECT_EQ(de->path, e.path);
  EXPECT_EQ(de->type, DiffType::kDir);
  EXPECT_EQ(de->mode, 04755u);
  EXPECT_EQ(de->mtime_ns, -5);
  EXPECT_EQ(de->atime_ns, e.atime_ns);
  EXPECT_TRUE(de->opaque);
  ASSERT_EQ(de->xattrs.size(), 2u);
  EXPECT_EQ(de->xattrs[1].value, e.xattrs[1].value);

  DirEntries entries;
  entries.entries = {{"a", EntryType::kFile, 3, 0644},
                     {std::string("\xff", 1), EntryType::kSymlink, 1, 0777}};
  entries.last = false;
  auto en = Decode<DirEntries>(ToFrame(entries));
  ASSERT_TRUE(en.ok()) << en.status();
  ASSERT_EQ(en->entries.size(), 2u);
  EXPECT_EQ(en->entries[1].name, "\xff");
  EXPECT_EQ(en->entries[1].type, EntryType::kSymlink);
  EXPECT_FALSE(en->last);

  ErrorMsg err = ErrorFromStatus(absl::NotFoundError("no such file"));
  auto er = Decode<ErrorMsg>(ToFrame(err));
  ASSERT_TRUE(er.ok());
  absl::Status st = StatusFromError(*er);
  EXPECT_TRUE(absl::IsNotFound(st));
  EXPECT_NE(st.message().find("no such file"), absl::string_view::npos);
}

TEST(MessagesTest, SignalCarriesOneSignalNumberInRange) {
  auto sig = Decode<SignalRequest>(ToFrame(SignalRequest{15}));
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(sig->signal, 15);
  EXPECT_TRUE(ValidateFrame(ToFrame(SignalRequest{9})).ok());
  for (const char* bad : {R"({})", R"({"signal": 0})", R"({"signal": 65})", R"({"signal": -1})",
                          R"({"signal": "TERM"})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateFrame(Json(MsgType::kSignal, bad)))) << bad;
  }
}

TEST(MessagesTest, ClockCarriesAPlausibleWallClock) {
  constexpr int64_t kWhen = 1'796'000'000'000'000'000;
  auto c = Decode<ClockRequest>(ToFrame(ClockRequest{kWhen}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->unix_ns, kWhen);
  EXPECT_TRUE(ValidateFrame(ToFrame(ClockRequest{kWhen})).ok());
  EXPECT_EQ(TypeName(MsgType::kClock), "CLOCK");
  EXPECT_TRUE(ValidateFrame(EmptyFrame(MsgType::kClockDone)).ok());
  for (const char* bad : {R"({})", R"({"unix_ns": 0})", R"({"unix_ns": -1})", R"({"unix_ns": "now"})",
                          R"({"unix_ns": 9000000000000000000})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateFrame(Json(MsgType::kClock, bad)))) << bad;
  }
}

TEST(MessagesTest, EntropyCarriesASeedOfBoundedSize) {
  const std::string seed(64, '\x9c');
  auto e = Decode<EntropyRequest>(ToFrame(EntropyRequest{seed}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->seed, seed);
  EXPECT_EQ(TypeName(MsgType::kEntropy), "ENTROPY");
  EXPECT_TRUE(ValidateFrame(EmptyFrame(MsgType::kEntropyDone)).ok());
  for (size_t bad : {size_t{0}, kMinEntropySeedBytes - 1, kMaxEntropySeedBytes + 1}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateFrame(ToFrame(EntropyRequest{std::string(bad, 'x')})))) << bad;
  }
  for (const char* bad : {R"({})", R"({"seed": 5})", R"({"seed": "not base64!"})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateFrame(Json(MsgType::kEntropy, bad)))) << bad;
  }
}

TEST(MessagesTest, WatchFramesRoundTripAndRefuseBadFields) {
  WatchRequest req;
  req.path = std::string("/w\xff", 3);
  req.recursive = true;
  req.max_dirs = 7;
  auto r = Decode<WatchRequest>(ToFrame(req));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, req.path);
  EXPECT_TRUE(r->recursive);
  EXPECT_EQ(r->max_dirs, 7u);
  EXPECT_EQ(TypeName(MsgType::kWatch), "WATCH");
  auto started = Decode<WatchStarted>(ToFrame(WatchStarted{12}));
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(started->dirs, 12u);
  WatchEvents evs;
  evs.events = {{"a/b", FileEvent::Type::kCreate}, {std::string("\x80", 1), FileEvent::Type::kRemove},
                {"c", FileEvent::Type::kChmod}, {"d", FileEvent::Type::kRename}, {"e", FileEvent::Type::kWrite}};
  auto back = Decode<WatchEvents>(ToFrame(evs));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->events.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(back->events[i].name, evs.events[i].name);
    EXPECT_EQ(back->events[i].type, evs.events[i].type);
  }
  for (const char* bad : {R"({})", R"({"path": 3})", R"({"path": "/w", "max_dirs": 0})",
                          R"({"path": "/w", "max_dirs": 65537})", R"({"path": "/w", "recursive": "yes"})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateFrame(Json(MsgType::kWatch, bad)))) << bad;
  }
  for (const char* bad : {R"({})", R"({"events": [1]})", R"({"events": [{"name": "a"}]})",
                          R"({"events": [{"name": "a", "type": "explode"}]})", R"({"events": {}})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateFrame(Json(MsgType::kWatchEvents, bad)))) << bad;
  }
}

TEST(MessagesTest, EveryEncodedFrameValidates) {
  for (const Frame& f : SampleFrames()) EXPECT_TRUE(ValidateFrame(f).ok()) << TypeName(f.type);
  EXPECT_TRUE(ValidateFrame(ToFrame(DiffEnd{})).ok());
  EXPECT_TRUE(ValidateFrame(ToFrame(FileReadDone{})).ok());
}

TEST(MessagesTest, RejectsMalformedJson) {
  for (std::string bad : std::vector<std::string>{
           "", "{", "[]", "null", "42", "{\"argv\":[\"a\"]} trailing", "{\"argv\":[\"\xff\"]}"}) {
    absl::Status s = ValidateFrame(Json(MsgType::kExec, bad));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad << ": " << s;
  }
}

TEST(MessagesTest, RejectsFieldsOfTheWrongJsonType) {
  const char* bad_exec[] = {
      R"({})",                                    // argv missing
      R"({"argv": "ls"})",                        // not an array
      R"({"argv": [1]})",                         // element not a string
      R"({"argv": [{"b64": "!!"}]})",             // bad base64
      R"({"argv": [{"b64": "YQ==", "x": 1}]})",   // extra key in a byte string
      R"({"argv": ["ls"], "timeout_ms": -1})",    // negative
      R"({"argv": ["ls"], "timeout_ms": 1.5})",   // not an integer
      R"({"argv": ["ls"], "timeout_ms": "10"})",  // string
      R"({"argv": ["ls"], "stdin": "yes"})",      // not a boolean
      R"({"argv": ["ls"], "env": ["A=1"]})",      // not an object
      R"({"argv": ["ls"], "env": {"A": 1}})",     // value not a string
      R"({"argv": ["ls"], "output_cap_bytes": 18446744073709551616})",  // overflows u64
  };
  for (const char* j : bad_exec) {
    absl::Status s = Decode<ExecRequest>(Json(MsgType::kExec, j)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << j << ": " << s;
  }
  EXPECT_FALSE(
      Decode<FileWriteRequest>(Json(MsgType::kFileWrite, R"({"path":"a","mode":4096,"size":0})"))
          .ok());
  EXPECT_FALSE(Decode<ExecDone>(Json(MsgType::kExecDone, R"({"exit_code":0,"signal":9})")).ok());
  EXPECT_FALSE(Decode<ExecDone>(Json(MsgType::kExecDone, R"({})")).ok());
  EXPECT_FALSE(
      Decode<ExecDone>(Json(MsgType::kExecDone, R"({"exit_code":0,"killed_by":"x"})")).ok());
  EXPECT_FALSE(Decode<ExecDone>(Json(MsgType::kExecDone, R"({"exit_code":4294967296})")).ok());
  EXPECT_FALSE(
      Decode<DiffEntry>(Json(MsgType::kDiffEntry, R"({"path":"a","type":"door","mode":0})")).ok());
  EXPECT_FALSE(
      Decode<DiffEntry>(Json(MsgType::kDiffEntry, R"({"path":"a","type":"dir","mode":0,"size":5})"))
          .ok());
  EXPECT_FALSE(
      Decode<DiffEntry>(Json(MsgType::kDiffEntry, R"({"path":"a","type":"symlink","mode":0})"))
          .ok());
  EXPECT_FALSE(
      Decode<DiffEntry>(
          Json(MsgType::kDiffEntry,
               R"({"path":"a","type":"file","mode":0,"xattrs":[{"name":"user.x","value":"%%"}]})"))
          .ok());
  EXPECT_FALSE(Decode<Hello>(Json(MsgType::kHello, R"({"version":"1"})")).ok());
  EXPECT_FALSE(CheckEmptyObject(Json(MsgType::kShutdown, "[]")).ok());
}

TEST(MessagesTest, DecoderChecksTheFrameType) {
  absl::Status s = Decode<ExecRequest>(ToFrame(Hello{})).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("expected a EXEC frame, got HELLO"), absl::string_view::npos) << s;
}

TEST(MessagesTest, OutputNeedsAStreamByte) {
  EXPECT_FALSE(Decode<OutputChunk>(DataFrame(MsgType::kOutput, "")).ok());
  EXPECT_FALSE(Decode<OutputChunk>(DataFrame(MsgType::kOutput, "\x03zz")).ok());
  auto ok = Decode<OutputChunk>(DataFrame(MsgType::kOutput, "\x01hi"));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->stream, 1);
  EXPECT_EQ(ok->data, "hi");
}

TEST(MessagesTest, UnknownFieldsAreIgnored) {
  auto r = Decode<ExecRequest>(Json(MsgType::kExec, R"({"argv":["ls"],"future":{"x":[1]}})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output_cap_bytes, kDefaultOutputCapBytes);
  EXPECT_EQ(r->kill_after_dropped_bytes, kDefaultKillAfterDroppedBytes);
}

TEST(Base64Test, RoundTripsAllLengths) {
  std::string data;
  for (int i = 0; i < 40; ++i) {
    std::string enc = Base64Encode(data);
    EXPECT_EQ(enc.size() % 4, 0u);
    auto dec = Base64Decode(enc);
    ASSERT_TRUE(dec.ok()) << enc;
    EXPECT_EQ(*dec, data);
    data.push_back(static_cast<char>(i * 37 + 200));
  }
  EXPECT_EQ(Base64Encode("echo hi"), "ZWNobyBoaQ==");
}

TEST(Base64Test, AcceptsUnpaddedAndUrlSafeInput) {
  EXPECT_EQ(*Base64Decode("ZWNobyBoaQ"), "echo hi");
  EXPECT_EQ(*Base64Decode("_--_"), "\xff\xef\xbf");
  EXPECT_EQ(*Base64Decode("/++/"), "\xff\xef\xbf");
  EXPECT_EQ(*Base64Decode(""), "");
}

TEST(Base64Test, RejectsMalformedInput) {
  // (Non-canonical trailing bits, "ZR==", are accepted: Abseil's decoder.)
  for (const char* bad : {"Z", "ZW=", "ZW===", "ZW N", "ZWNo\n", "Zm9v!", "=", "ZQ=a"}) {
    EXPECT_FALSE(Base64Decode(bad).ok()) << bad;
  }
}

TEST(Utf8Test, ValidatesLikeJsonNeeds) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xff"));
}

}  // namespace
}  // namespace dsec::agent
