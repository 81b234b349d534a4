// SPDX-License-Identifier: Apache-2.0
// The host <-> dsec-agent wire protocol: frames on a stream socket (vsock in
// the guest, unix sockets in host tests). README.md in this folder is the
// specification; this header holds the frame layer:
//
//   +----------------+---------+----------------------+
//   | length: le u32 | type: u8 | payload: length bytes |
//   +----------------+---------+----------------------+
//
// `length` counts the payload only (not the 5-byte header). The payload is a
// JSON object for control messages and raw bytes for data-carrying ones
// (DATA, STDIN, OUTPUT). A frame over kMaxFramePayload, an unknown type or
// a malformed payload is a protocol error: the receiver sends ERROR (if it
// can) and closes the connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dsec::agent {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 5;
// Largest payload either side accepts.
inline constexpr uint32_t kMaxFramePayload = 1u << 20;
// Size of the DATA / OUTPUT chunks a sender produces (well under the limit).
inline constexpr size_t kDataChunkBytes = 256u << 10;

enum class MsgType : uint8_t {
  kHello = 0x01,          // both ways, JSON: the version handshake
  kError = 0x02,          // agent -> host, JSON {code, message}
  kData = 0x03,           // both ways, raw: a chunk of file data
  kExec = 0x10,           // host -> agent, JSON: ExecRequest
  kExecStarted = 0x11,    // agent -> host, JSON {pid}
  kStdin = 0x12,          // host -> agent, raw: bytes for the command's stdin
  kStdinClose = 0x13,     // host -> agent, JSON {}
  kOutput = 0x14,         // agent -> host, raw: u8 stream (1|2) + bytes
  kExecDone = 0x15,       // agent -> host, JSON: ExecDone
  kSignal = 0x16,         // host -> agent, JSON {signal}: to the running command's process group
  kFileRead = 0x20,       // host -> agent, JSON {path, max_bytes}
  kFileReadDone = 0x21,   // agent -> host, JSON {size, bytes, truncated}
  kFileWrite = 0x22,      // host -> agent, JSON {path, mode, size} + DATA...
  kFileWriteDone = 0x23,  // agent -> host, JSON {bytes}
  kListDir = 0x24,        // host -> agent, JSON {path}
  kDirEntries = 0x25,     // agent -> host, JSON {entries, last}
  kWatch = 0x26,          // host -> agent, JSON {path, recursive, max_dirs}: the connection becomes a watch
  kWatchStarted = 0x27,   // agent -> host, JSON {dirs}
  kWatchEvents = 0x28,    // agent -> host, JSON {events: [{name, type}]}
  kPackDiff = 0x30,       // host -> agent, JSON {}
  kDiffEntry = 0x31,      // agent -> host, JSON: DiffEntry (+ DATA... for files)
  kDiffEnd = 0x32,        // agent -> host, JSON {entries, data_bytes}
  kNetwork = 0x38,        // host -> agent, JSON {net}: re-address eth0 (a restored fork's child)
  kNetworkDone = 0x39,    // agent -> host, JSON {}
  kClock = 0x3a,          // host -> agent, JSON {unix_ns}: set the wall clock (a restored machine)
  kClockDone = 0x3b,      // agent -> host, JSON {}
  kEntropy = 0x3c,        // host -> agent, JSON {seed}: reseed the guest's CRNG (a restored machine)
  kEntropyDone = 0x3d,    // agent -> host, JSON {}
  kShutdown = 0x40,       // host -> agent, JSON {}
  kShutdownAck = 0x41,    // agent -> host, JSON {}
};

bool IsKnownType(uint8_t type);
// True for the types whose payload is a JSON object.
bool IsJsonType(MsgType type);
// "HELLO", "EXEC_DONE", ...; "UNKNOWN(0x..)" for anything else.
std::string TypeName(uint8_t type);
inline std::string TypeName(MsgType type) { return TypeName(static_cast<uint8_t>(type)); }

struct Frame {
  MsgType type = MsgType::kHello;
  std::string payload;
};

// Appends the encoded frame (header + payload) to *out. The payload must not
// exceed kMaxFramePayload (a broken invariant of the caller: DSEC_CHECK).
void AppendFrame(const Frame& frame, std::string* out);
std::string EncodeFrame(const Frame& frame);

// Accumulates stream bytes and yields complete frames. Checks the header as
// soon as it is complete, so an oversized length is refused before its body
// arrives. After the first error every Next() returns that error.
// Threads: one owner thread.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_payload = kMaxFramePayload) : max_payload_(max_payload) {}

  void Append(std::string_view bytes);
  // The next complete frame; nullopt if more bytes are needed;
  // InvalidArgument for an oversized frame or an unknown type.
  absl::StatusOr<std::optional<Frame>> Next();
  // Bytes held that do not form a complete frame yet (or frames not taken).
  size_t buffered() const { return buffer_.size() - offset_; }

 private:
  const uint32_t max_payload_;
  std::string buffer_;
  size_t offset_ = 0;
  absl::Status error_;
};

// --- Encodings used inside payloads --------------------------------------

// Standard base64 (RFC 4648 section 4) with padding.
std::string Base64Encode(std::string_view bytes);
// Accepts the standard and the URL-safe alphabet, with or without padding;
// rejects anything else (whitespace included).
absl::StatusOr<std::string> Base64Decode(std::string_view text);

// True if `bytes` is well-formed UTF-8 (no overlongs, surrogates or code
// points above U+10FFFF). JSON strings must be; other byte strings travel
// base64-encoded (see messages.h).
bool IsValidUtf8(std::string_view bytes);

}  // namespace dsec::agent
