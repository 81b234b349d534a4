// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/protocol.h"

#include <array>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/little_endian.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

struct TypeInfo {
  MsgType type;
  const char* name;
  bool json;
};

constexpr TypeInfo kTypes[] = {
    {MsgType::kHello, "HELLO", true},
    {MsgType::kError, "ERROR", true},
    {MsgType::kData, "DATA", false},
    {MsgType::kExec, "EXEC", true},
    {MsgType::kExecStarted, "EXEC_STARTED", true},
    {MsgType::kStdin, "STDIN", false},
    {MsgType::kStdinClose, "STDIN_CLOSE", true},
    {MsgType::kOutput, "OUTPUT", false},
    {MsgType::kExecDone, "EXEC_DONE", true},
    {MsgType::kSignal, "SIGNAL", true},
    {MsgType::kFileRead, "FILE_READ", true},
    {MsgType::kFileReadDone, "FILE_READ_DONE", true},
    {MsgType::kFileWrite, "FILE_WRITE", true},
    {MsgType::kFileWriteDone, "FILE_WRITE_DONE", true},
    {MsgType::kListDir, "LIST_DIR", true},
    {MsgType::kDirEntries, "DIR_ENTRIES", true},
    {MsgType::kWatch, "WATCH", true},
    {MsgType::kWatchStarted, "WATCH_STARTED", true},
    {MsgType::kWatchEvents, "WATCH_EVENTS", true},
    {MsgType::kPackDiff, "PACK_DIFF", true},
    {MsgType::kDiffEntry, "DIFF_ENTRY", true},
    {MsgType::kDiffEnd, "DIFF_END", true},
    {MsgType::kNetwork, "NETWORK", true},
    {MsgType::kNetworkDone, "NETWORK_DONE", true},
    {MsgType::kClock, "CLOCK", true},
    {MsgType::kClockDone, "CLOCK_DONE", true},
    {MsgType::kEntropy, "ENTROPY", true},
    {MsgType::kEntropyDone, "ENTROPY_DONE", true},
    {MsgType::kShutdown, "SHUTDOWN", true},
    {MsgType::kShutdownAck, "SHUTDOWN_ACK", true},
};

const TypeInfo* FindType(uint8_t type) {
  for (const TypeInfo& t : kTypes) {
    if (static_cast<uint8_t>(t.type) == type) return &t;
  }
  return nullptr;
}

}  // namespace

bool IsKnownType(uint8_t type) { return FindType(type) != nullptr; }

bool IsJsonType(MsgType type) {
  const TypeInfo* t = FindType(static_cast<uint8_t>(type));
  return t != nullptr && t->json;
}

std::string TypeName(uint8_t type) {
  const TypeInfo* t = FindType(type);
  if (t != nullptr) return t->name;
  char buf[24];
  std::snprintf(buf, sizeof(buf), "UNKNOWN(0x%02x)", type);
  return buf;
}

void AppendFrame(const Frame& frame, std::string* out) {
  DSEC_CHECK(frame.payload.size() <= kMaxFramePayload);
  AppendLe32(out, static_cast<uint32_t>(frame.payload.size()));
  out->push_back(static_cast<char>(frame.type));
  out->append(frame.payload);
}

std::string EncodeFrame(const Frame& frame) {
  std::string out;
  out.reserve(kFrameHeaderBytes + frame.payload.size());
  AppendFrame(frame, &out);
  return out;
}

void FrameReader::Append(std::string_view bytes) {
  if (!error_.ok()) return;
  // Compact once the consumed prefix dominates, so a long stream of small
  // frames costs linear time.
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<Frame>> FrameReader::Next() {
  if (!error_.ok()) return error_;
  size_t avail = buffer_.size() - offset_;
  if (avail < kFrameHeaderBytes) return std::nullopt;
  const char* p = buffer_.data() + offset_;
  // Peer-controlled: length and type are checked before the body is awaited.
  uint32_t len = LoadLe32(p);
  uint8_t type = static_cast<uint8_t>(p[4]);
  if (len > max_payload_) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("protocol: frame of ", len, " bytes exceeds the limit of ", max_payload_));
    return error_;
  }
  if (!IsKnownType(type)) {
    error_ =
        absl::InvalidArgumentError(absl::StrCat("protocol: unknown frame type ", TypeName(type)));
    return error_;
  }
  if (avail - kFrameHeaderBytes < len) return std::nullopt;
  Frame frame;
  frame.type = static_cast<MsgType>(type);
  frame.payload.assign(p + kFrameHeaderBytes, len);
  offset_ += kFrameHeaderBytes + len;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return frame;
}

std::string Base64Encode(std::string_view bytes) {
  return absl::Base64Escape(absl::string_view(bytes.data(), bytes.size()));
}

absl::StatusOr<std::string> Base64Decode(std::string_view text) {
  // Abseil's decoders skip whitespace and take either alphabet only by
  // name: allow exactly the two alphabets and padding, then pick one.
  bool web_safe = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=') continue;
    if (c == '-' || c == '_') {
      web_safe = true;
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat("base64: invalid character at offset ", i));
  }
  std::string out;
  const absl::string_view in(text.data(), text.size());
  // A mix of both alphabets decodes with the web-safe one once '+' and
  // '/' are mapped to it.
  std::string mapped;
  if (web_safe) {
    mapped = std::string(text);
    for (char& c : mapped) c = c == '+' ? '-' : c == '/' ? '_' : c;
  }
  const bool ok = web_safe ? absl::WebSafeBase64Unescape(mapped, &out) : absl::Base64Unescape(in, &out);
  if (!ok) return absl::InvalidArgumentError("base64: malformed input");
  return out;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr std::array<uint32_t, 5> kMin = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace dsec::agent
