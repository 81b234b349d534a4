// SPDX-License-Identifier: Apache-2.0
// Typed messages of the agent protocol (README.md) and their JSON payloads.
//
// Byte strings that need not be UTF-8 (paths, argv, environment values,
// symlink targets, directory entry names, xattr names) are a JSON string when
// they are valid UTF-8 and {"b64": "<base64>"} otherwise; decoders accept
// both forms. Xattr values are always base64. Environment keys must be UTF-8.
//
// Decoding is strict: a field of the wrong JSON type, a number out of range or
// a missing required field is InvalidArgument naming the message and field.
// Unknown fields are ignored (forward compatibility within one version).
// Nothing here throws: nlohmann-json exceptions are caught at this boundary.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dir_watch.h"
#include "guest-kernel/agent/protocol.h"

namespace dsec::agent {

// Capabilities an agent of this version announces in its HELLO.
inline constexpr const char* kCapabilities[] = {"exec", "stdin", "files", "watch", "pack_diff", "shutdown"};
// Listed besides when the agent can set the guest's clock (a guest's PID 1).
inline constexpr char kClockCapability[] = "clock";
// Listed besides when the agent can reseed the guest's CRNG (a guest's PID 1).
inline constexpr char kEntropyCapability[] = "entropy";

struct Hello {
  uint32_t version = kProtocolVersion;
  std::string software;                   // "dsec-agent" / "dsec-host"
  std::vector<std::string> capabilities;  // agent -> host only
  uint32_t max_frame_bytes = kMaxFramePayload;
};

struct ErrorMsg {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
};
ErrorMsg ErrorFromStatus(const absl::Status& status);
absl::Status StatusFromError(const ErrorMsg& error);

inline constexpr uint64_t kDefaultOutputCapBytes = 16u << 20;
inline constexpr uint64_t kDefaultKillAfterDroppedBytes = 64u << 20;

struct ExecRequest {
  std::vector<std::string> argv;                       // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;              // added to / overrides the agent's base env
  std::string cwd;                                     // empty: the agent's root
  uint64_t timeout_ms = 0;                             // 0: none
  uint64_t output_cap_bytes = kDefaultOutputCapBytes;  // stdout + stderr; 0: no cap
  uint64_t output_rate_bytes_per_s = 0;                // 0: no rate limit
  // The command is killed (killed_by "output") once this many output bytes
  // were dropped; 0: never.
  uint64_t kill_after_dropped_bytes = kDefaultKillAfterDroppedBytes;
  bool stdin = false;  // STDIN frames follow EXEC_STARTED (else stdin is /dev/null)
};

struct ExecStarted {
  int64_t pid = 0;
};

struct OutputChunk {
  int stream = 1;  // 1 stdout, 2 stderr
  std::string data;
};

struct ExecDone {
  std::optional<int> exit_code;  // set iff the command exited
  std::optional<int> signal;     // set iff it was killed by a signal
  bool timed_out = false;
  std::string killed_by;      // "", "timeout", "output" or "disconnect"
  uint64_t stdout_bytes = 0;  // bytes sent
  uint64_t stderr_bytes = 0;
  uint64_t stdout_dropped = 0;  // bytes over the cap or the rate limit
  uint64_t stderr_dropped = 0;
  int64_t duration_ms = 0;
  int64_t peak_rss_kib = 0;
};

struct FileReadRequest {
  std::string path;
  uint64_t max_bytes = 0;
};
struct FileReadDone {
  uint64_t size = 0;   // the file's size when opened
  uint64_t bytes = 0;  // bytes sent in DATA frames
  bool truncated = false;
};

struct FileWriteRequest {
  std::string path;
  uint32_t mode = 0644;
  uint64_t size = 0;  // bytes that follow in DATA frames
};
struct FileWriteDone {
  uint64_t bytes = 0;
};

struct ListDirRequest {
  std::string path;
};
enum class EntryType { kFile, kDir, kSymlink, kOther };
struct DirEntry {
  std::string name;
  EntryType type = EntryType::kOther;
  uint64_t size = 0;
  uint32_t mode = 0;  // st_mode & 07777
};
struct DirEntries {
  std::vector<DirEntry> entries;
  bool last = true;
};
// Entries per DIR_ENTRIES frame (keeps each frame far below the limit).
inline constexpr size_t kDirEntriesPerFrame = 512;

// WATCH: the directory `path` (inside the agent's root; with `recursive`
// every directory below it, links not followed, kernel file systems left
// out), at most max_dirs directories (1..kMaxWatchDirs). Answered with
// WATCH_STARTED or an ERROR; from then on the connection carries only
// WATCH_EVENTS until an ERROR ends the watch (NOT_FOUND: the directory was
// removed or moved; RESOURCE_EXHAUSTED: events lost, or too many
// directories) or the host closes the connection.
struct WatchRequest {
  std::string path;
  bool recursive = false;
  uint32_t max_dirs = 1024;
};
inline constexpr uint32_t kMaxWatchDirs = 65536;
struct WatchStarted {
  uint64_t dirs = 0;  // directories watched at the start
};
// Changes as base/dir_watch.h's FileEvent (names relative to the watched
// directory); type one of create write remove rename chmod.
struct WatchEvents {
  std::vector<FileEvent> events;
};
// Bytes of names per WATCH_EVENTS frame (an event's JSON is at most about
// 6x its name: escapes): far below the frame limit.
inline constexpr size_t kWatchEventNameBytesPerFrame = 64 << 10;

// --- pack_diff ------------------------------------------------------------

enum class DiffType {
  kFile,
  kDir,
  kSymlink,
  kHardlink,  // another name of an inode sent earlier (`link`)
  kCharDev,
  kBlockDev,
  kFifo,
  kSocket,
  kWhiteout,  // overlayfs whiteout: character device 0:0
};
struct Xattr {
  std::string name;
  std::string value;
};
struct DiffEntry {
  std::string path;  // relative to the upper dir; "." is the upper dir itself
  DiffType type = DiffType::kFile;
  uint32_t mode = 0;  // permission, set-id and sticky bits (st_mode & 07777)
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 0;
  int64_t atime_ns = 0;
  uint64_t size = 0;  // kFile: data bytes that follow in DATA frames
  uint32_t rdev_major = 0;
  uint32_t rdev_minor = 0;
  std::string target;  // kSymlink
  std::string link;    // kHardlink: path of the first name of the inode
  std::vector<Xattr> xattrs;
  bool opaque = false;  // kDir with trusted.overlay.opaque = "y" (also in xattrs)
};
struct DiffEnd {
  uint64_t entries = 0;
  uint64_t data_bytes = 0;
};

// --- network ---------------------------------------------------------------

// NETWORK: the guest's eth0 anew, in dsec.net's form
// ("<address>/<prefix>,<gateway>", boot_plan.h), for a guest restored from
// another sandbox's saved machine (it still holds that one's address).
// Answered with NETWORK_DONE ({}) or an ERROR.
struct NetworkRequest {
  std::string net;
};

// CLOCK: the host's wall clock (CLOCK_REALTIME, ns since the epoch) for a
// guest restored from a saved machine: its clocks went on from the save
// (kvmclock as saved), so its wall time lags by however long the machine
// stood saved. The agent sets CLOCK_REALTIME (the monotonic clock stays
// continuous). Answered with CLOCK_DONE ({}) or an ERROR.
struct ClockRequest {
  int64_t unix_ns = 0;
};

// ENTROPY: fresh randomness from the host for a guest restored from a
// saved machine: every clone of one save starts with the same CRNG state
// and would draw the same "random" bytes (keys, tokens, ASLR of new
// processes) until the kernel reseeds on its own. PID 1 credits `seed`
// (kMinEntropySeedBytes..kMaxEntropySeedBytes, base64 on the wire) to the
// input pool and reseeds the CRNG at once. Answered with ENTROPY_DONE
// ({}) or an ERROR.
struct EntropyRequest {
  std::string seed;
};
inline constexpr size_t kMinEntropySeedBytes = 32;
inline constexpr size_t kMaxEntropySeedBytes = 512;

// A signal for the running command (1..64; SIGKILL ends it as its timeout
// would, without counting as one).
struct SignalRequest {
  int signal = 0;
};

struct Empty {};  // STDIN_CLOSE, PACK_DIFF, SHUTDOWN, SHUTDOWN_ACK, NETWORK_DONE, CLOCK_DONE, ENTROPY_DONE

const char* EntryTypeName(EntryType type);
const char* DiffTypeName(DiffType type);

// Encoders. Byte strings are encoded as described above, so these never fail;
// environment keys that are not UTF-8 are replaced lossily (Client refuses
// them before encoding).
Frame ToFrame(const Hello& m);
Frame ToFrame(const ErrorMsg& m);
Frame ToFrame(const ExecRequest& m);
Frame ToFrame(const ExecStarted& m);
Frame ToFrame(const OutputChunk& m);
Frame ToFrame(const ExecDone& m);
Frame ToFrame(const FileReadRequest& m);
Frame ToFrame(const FileReadDone& m);
Frame ToFrame(const FileWriteRequest& m);
Frame ToFrame(const FileWriteDone& m);
Frame ToFrame(const ListDirRequest& m);
Frame ToFrame(const DirEntries& m);
Frame ToFrame(const WatchRequest& m);
Frame ToFrame(const WatchStarted& m);
Frame ToFrame(const WatchEvents& m);
Frame ToFrame(const DiffEntry& m);
Frame ToFrame(const DiffEnd& m);
Frame ToFrame(const NetworkRequest& m);
Frame ToFrame(const ClockRequest& m);
Frame ToFrame(const EntropyRequest& m);
Frame ToFrame(const SignalRequest& m);
Frame EmptyFrame(MsgType type);
Frame DataFrame(MsgType type, std::string_view bytes);  // kData / kStdin

// Decoders: InvalidArgument if the frame's type is not the message's or the
// payload is malformed.
absl::Status FromFrame(const Frame& f, Hello* m);
absl::Status FromFrame(const Frame& f, ErrorMsg* m);
absl::Status FromFrame(const Frame& f, ExecRequest* m);
absl::Status FromFrame(const Frame& f, ExecStarted* m);
absl::Status FromFrame(const Frame& f, OutputChunk* m);
absl::Status FromFrame(const Frame& f, ExecDone* m);
absl::Status FromFrame(const Frame& f, FileReadRequest* m);
absl::Status FromFrame(const Frame& f, FileReadDone* m);
absl::Status FromFrame(const Frame& f, FileWriteRequest* m);
absl::Status FromFrame(const Frame& f, FileWriteDone* m);
absl::Status FromFrame(const Frame& f, ListDirRequest* m);
absl::Status FromFrame(const Frame& f, DirEntries* m);
absl::Status FromFrame(const Frame& f, WatchRequest* m);
absl::Status FromFrame(const Frame& f, WatchStarted* m);
absl::Status FromFrame(const Frame& f, WatchEvents* m);
absl::Status FromFrame(const Frame& f, DiffEntry* m);
absl::Status FromFrame(const Frame& f, DiffEnd* m);
absl::Status FromFrame(const Frame& f, NetworkRequest* m);
absl::Status FromFrame(const Frame& f, ClockRequest* m);
absl::Status FromFrame(const Frame& f, EntropyRequest* m);
absl::Status FromFrame(const Frame& f, SignalRequest* m);
// Checks that a JSON-typed frame holds an object (STDIN_CLOSE, PACK_DIFF, ...).
absl::Status CheckEmptyObject(const Frame& f);

template <typename T>
absl::StatusOr<T> Decode(const Frame& f) {
  T m;
  absl::Status s = FromFrame(f, &m);
  if (!s.ok()) return s;
  return m;
}

// Decodes any frame by its type into the matching message and discards it
// (the fuzzer's entry point; also a validity check).
absl::Status ValidateFrame(const Frame& f);

}  // namespace dsec::agent
