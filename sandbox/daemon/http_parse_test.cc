// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/http_parse.h"

#include "gtest/gtest.h"

namespace dsec::daemon {
namespace {

std::string Head(const std::string& fields, const std::string& line = "POST /v1/sandboxes?x=1 HTTP/1.1") {
  return line + "\r\n" + fields + "\r\n";
}

TEST(HttpParseTest, FindsTheHeadEnd) {
  EXPECT_EQ(FindHeadEnd("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), 27u);
  EXPECT_EQ(FindHeadEnd("GET / HTTP/1.1\r\nHost: x\r\n"), absl::string_view::npos);
}

TEST(HttpParseTest, ReadsMethodPathAndFraming) {
  auto h = ParseRequestHead(Head("Host: x\r\ncontent-length:  12 \r\n"));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->method, "POST");
  EXPECT_EQ(h->path, "/v1/sandboxes");
  EXPECT_TRUE(h->has_length);
  EXPECT_EQ(h->content_length, 12u);
  auto c = ParseRequestHead(Head("Transfer-Encoding: Chunked\r\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->chunked);
  auto same = ParseRequestHead(Head("Content-Length: 3\r\nContent-Length: 3\r\n"));
  EXPECT_TRUE(same.ok()) << same.status();
}

TEST(HttpParseTest, RefusesWhatIsNoLength) {
  for (const char* bad : {"Content-Length: -5\r\n", "Content-Length: 147573952589676412928\r\n",
                          "Content-Length: 9007199254740992\r\n", "Content-Length: 0x10\r\n",
                          "Content-Length: 1 2\r\n", "Content-Length:\r\n", "Content-Length: 5, 5\r\n",
                          "Content-Length: 5\r\nContent-Length: 6\r\n",
                          "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                          "Transfer-Encoding: gzip, chunked\r\n",
                          "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", " folded: x\r\n",
                          "Bad Name: x\r\n", "no colon\r\n"}) {
    auto h = ParseRequestHead(Head(bad));
    EXPECT_TRUE(absl::IsInvalidArgument(h.status())) << bad << h.status();
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ParseRequestHead(Head("", "GET /")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseRequestHead("GET / HTTP/1.1\r\n").status()));
  std::string many;
  for (int i = 0; i < 129; ++i) many += "X-A: b\r\n";
  EXPECT_TRUE(absl::IsResourceExhausted(ParseRequestHead(Head(many)).status()));
}

TEST(HttpParseTest, FileUploadsAloneTakeTheFileLimit) {
  const BodyLimits l{100, 5000};
  auto limit = [&](const char* method, const char* path) {
    RequestHead h;
    h.method = method;
    h.path = path;
    return BodyLimitFor(h, l);
  };
  EXPECT_EQ(limit("PUT", "/v1/sandboxes/sb-1/files"), 5000u);
  EXPECT_EQ(limit("POST", "/v1/sandboxes/sb-1/files"), 100u);
  EXPECT_EQ(limit("PUT", "/v1/sandboxes/a/b/files"), 100u);
  EXPECT_EQ(limit("PUT", "/v1/sandboxes//files"), 100u);
  EXPECT_EQ(limit("POST", "/v1/sandboxes"), 100u);
}

TEST(HttpParseTest, RangesAreMergedAndBounded) {
  auto r = ResolveRanges("bytes=50-149, 0-99,150-199", 1000);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].offset, 0u);
  EXPECT_EQ((*r)[0].length, 200u);
  auto two = ResolveRanges("bytes=-5,10-19,990-", 1000);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].offset, 990u);
  EXPECT_EQ((*two)[1].length, 10u);
  auto clipped = ResolveRanges("bytes=0-99999,-5000", 1000);
  ASSERT_TRUE(clipped.ok());
  EXPECT_EQ((*clipped)[0].length, 1000u);
  std::string forty = "bytes=0-";
  for (int i = 1; i < 40; ++i) forty += ",0-";
  EXPECT_TRUE(absl::IsInvalidArgument(ResolveRanges(forty, 1000).status()));
  std::string sixteen = "bytes=0-";
  for (int i = 1; i < 16; ++i) sixteen += ",0-";
  EXPECT_TRUE(ResolveRanges(sixteen, 1000).ok());
  EXPECT_TRUE(absl::IsOutOfRange(ResolveRanges("bytes=1000-", 1000).status()));
  EXPECT_TRUE(absl::IsOutOfRange(ResolveRanges("bytes=-5", 0).status()));
  for (const char* bad : {"items=0-1", "bytes=", "bytes=5-1", "bytes=a-b", "bytes=-0", "bytes=1", "bytes=-1-2"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ResolveRanges(bad, 1000).status())) << bad;
  }
}

TEST(HttpParseTest, RangedBodies) {
  const std::string data = "0123456789";
  RangedBody one = MakeRangedBody(data, {{2, 3}}, "text/plain", "B");
  EXPECT_EQ(one.body, "234");
  EXPECT_EQ(one.content_range, "bytes 2-4/10");
  RangedBody two = MakeRangedBody(data, {{0, 1}, {9, 1}}, "text/plain", "B");
  EXPECT_EQ(two.content_type, "multipart/byteranges; boundary=B");
  EXPECT_EQ(two.body,
            "--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-0/10\r\n\r\n0\r\n"
            "--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 9-9/10\r\n\r\n9\r\n--B--\r\n");
}

TEST(HttpParseTest, JsonDepthFollowsStrings) {
  EXPECT_FALSE(JsonNestsDeeperThan("[[[]]]", 3));
  EXPECT_TRUE(JsonNestsDeeperThan("[[[[]]]]", 3));
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"a": "[[[[[[", "b": "\"[[[["})", 1));
  EXPECT_TRUE(JsonNestsDeeperThan(R"({"a\\": [[1]]})", 2));
  auto deep = ParseJsonBody(std::string(100000, '[') + std::string(100000, ']'), 1 << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(deep.status()));
  EXPECT_NE(deep.status().message().find("deeper than 64"), std::string::npos);
  EXPECT_TRUE(ParseJsonBody(std::string(64, '[') + std::string(64, ']'), 1 << 20).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(ParseJsonBody("{}   ", 3).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseJsonBody("{x", 10).status()));
  auto empty = ParseJsonBody("", 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->is_object());
}

}  // namespace
}  // namespace dsec::daemon
