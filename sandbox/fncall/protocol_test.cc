// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/protocol.h"

#include "gtest/gtest.h"

namespace dsec::fncall {
namespace {

TEST(ProtocolTest, RoundTripsFieldsThroughTheReaderInPieces) {
  std::string a = EncodeFrame({"call", "print(1)", std::string("x\0y", 3), ""});
  std::string b = EncodeFrame({"done", "exit", "0", "1234"});
  std::string stream = a + b;
  FrameReader reader;
  std::vector<std::vector<std::string>> frames;
  for (char c : stream) {
    reader.Append(std::string_view(&c, 1));
    auto next = reader.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (*next) frames.push_back(**next);
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0], (std::vector<std::string>{"call", "print(1)", std::string("x\0y", 3), ""}));
  EXPECT_EQ(frames[1], (std::vector<std::string>{"done", "exit", "0", "1234"}));
}

TEST(ProtocolTest, RejectsAFieldThatOverrunsThePayload) {
  std::string payload("\x10\x00\x00\x00" "abc", 7);
  EXPECT_FALSE(DecodeFields(payload).ok());
  EXPECT_FALSE(DecodeFields(std::string("\x01\x00", 2)).ok());
}

TEST(ProtocolTest, RejectsAnOversizedFrameBeforeBufferingIt) {
  FrameReader reader;
  uint32_t len = kMaxFrameBytes + 1;
  char head[4] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                  static_cast<char>((len >> 16) & 0xff), static_cast<char>(len >> 24)};
  reader.Append(std::string_view(head, 4));
  EXPECT_FALSE(reader.Next().ok());
}

}  // namespace
}  // namespace dsec::fncall
