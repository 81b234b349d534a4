// SPDX-License-Identifier: Apache-2.0
// The runtime <-> zygote protocol: length-prefixed frames on a stream
// socketpair. A frame is a u32 (little endian) payload length and the
// payload; a payload is a list of fields, each a u32 length and its bytes.
//
//   runtime -> zygote   ["call", code, cwd, argc, argv..., envc, env...]
//                       with SCM_RIGHTS: stdin (read end), stdout, stderr
//   zygote -> runtime   ["ready", pid]         once, after setup
//                       ["done", "exit"|"signal", value, maxrss_kib]
//
// The zygote side is implemented twice: in C (zygote.cc, bash) and in
// Python (the embedded zygote script); both follow this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::fncall {

// Largest payload either side accepts (code + args + env of one call).
inline constexpr uint32_t kMaxFrameBytes = 4u << 20;

// Encodes `fields` as one frame (length prefix included).
std::string EncodeFrame(const std::vector<std::string>& fields);

// Parses a payload (without its length prefix) into fields. Guest-controlled
// input (a zygote may be compromised): every length is bounds-checked.
absl::StatusOr<std::vector<std::string>> DecodeFields(std::string_view payload);

// Accumulates bytes read from a stream and yields complete frames.
// Threads: one owner thread.
class FrameReader {
 public:
  void Append(std::string_view bytes) { buffer_.append(bytes.data(), bytes.size()); }
  // The next complete frame's fields; nullopt if more bytes are needed;
  // InvalidArgument for an oversized or malformed frame.
  absl::StatusOr<std::optional<std::vector<std::string>>> Next();

 private:
  std::string buffer_;
};

}  // namespace dsec::fncall
