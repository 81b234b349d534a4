// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/protocol.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/little_endian.h"

namespace dsec::fncall {

std::string EncodeFrame(const std::vector<std::string>& fields) {
  std::string payload;
  for (const std::string& f : fields) {
    AppendLe32(&payload, static_cast<uint32_t>(f.size()));
    payload += f;
  }
  std::string frame;
  frame.reserve(payload.size() + 4);
  AppendLe32(&frame, static_cast<uint32_t>(payload.size()));
  frame += payload;
  return frame;
}

absl::StatusOr<std::vector<std::string>> DecodeFields(std::string_view payload) {
  std::vector<std::string> fields;
  size_t off = 0;
  while (off < payload.size()) {
    // Guest-controlled: the field length is checked against what is left.
    if (payload.size() - off < 4) return absl::InvalidArgumentError("frame: truncated field length");
    uint32_t len = LoadLe32(payload.data() + off);
    off += 4;
    if (len > payload.size() - off) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame: field of ", len, " bytes overruns the payload"));
    }
    fields.emplace_back(payload.substr(off, len));
    off += len;
  }
  return fields;
}

absl::StatusOr<std::optional<std::vector<std::string>>> FrameReader::Next() {
  if (buffer_.size() < 4) return std::nullopt;
  uint32_t len = LoadLe32(buffer_.data());
  // Guest-controlled: a frame larger than any legitimate one is an error.
  if (len > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame of ", len, " bytes is too large"));
  }
  if (buffer_.size() - 4 < len) return std::nullopt;
  auto fields = DecodeFields(std::string_view(buffer_).substr(4, len));
  buffer_.erase(0, 4 + static_cast<size_t>(len));
  if (!fields.ok()) return fields.status();
  return std::optional<std::vector<std::string>>(std::move(*fields));
}

}  // namespace dsec::fncall
