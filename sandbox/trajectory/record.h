// SPDX-License-Identifier: Apache-2.0
// One entry of a task's trajectory log, and its binary encoding.
//
// A log is the ordered list of what a task did in its sandbox: the commands
// it executed with their results (kExec), the pack_diff checkpoints that
// capture its files (kCheckpoint), and the points where a resumed task went
// its own way (kBranch). Records are encoded as CBOR (nlohmann-json's
// binary format: stdout/stderr are byte strings, not UTF-8 text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::trajectory {

enum class RecordKind : uint8_t {
  kExec = 1,        // a command and its recorded result
  kCheckpoint = 2,  // a pack_diff layer holding the files after exec after_seq
  kBranch = 3,      // records from from_seq on are superseded by what follows
};

// What identifies a command for replay: a resumed task's command matches a
// recorded one when all four are equal.
struct ExecRequest {
  std::vector<std::string> argv;
  std::string cwd;
  std::string env_digest;    // DigestEnv(env)
  std::string stdin_digest;  // DigestBytes(stdin)
  // The client says re-running it has no effect beyond its own output (e.g.
  // `ls`, `cat`, a compiler into a fresh directory). Not part of matching.
  bool idempotent = false;
};

struct ExecResult {
  std::string stdout_data;  // bytes, up to the exec's output cap
  std::string stderr_data;
  uint64_t stdout_dropped = 0;  // dropped by the exec's cap/rate limit
  uint64_t stderr_dropped = 0;
  int32_t exit_code = -1;  // -1 when killed by a signal
  int32_t signal = 0;
  bool timed_out = false;
  int64_t start_unix_ns = 0;
  int64_t duration_ns = 0;
};

struct Record {
  RecordKind kind = RecordKind::kExec;
  // Position in the task's logical sequence: the n-th exec of the task has
  // seq n (0-based). Checkpoint and branch records carry the seq they refer
  // to (after_seq / from_seq) here.
  uint64_t seq = 0;
  // kExec
  ExecRequest request;
  ExecResult result;
  // Output bytes the log itself dropped to stay within its quotas (on top of
  // the exec's own drops): what the record holds is a prefix of what ran.
  uint64_t quota_dropped = 0;
  // kCheckpoint: the layer reference (name:version or digest) of the
  // pack_diff that holds the sandbox's files after exec `seq`.
  std::string layer;
};

// Digest of an environment (order-independent: sorted NAME=VALUE entries).
std::string DigestEnv(std::vector<std::string> env);
// Digest of a byte string (stdin).
std::string DigestBytes(std::string_view bytes);

// Checks the limits below and the field ranges DecodeRecord enforces, so
// that nothing is written that could not be read back.
absl::Status ValidateRecord(const Record& record);

// CBOR encoding of one record, and its inverse. Decode rejects anything
// that is not a well-formed record (wrong types, unknown kind, oversized
// fields) with InvalidArgument: a log's contents are untrusted input.
std::string EncodeRecord(const Record& record);
absl::StatusOr<Record> DecodeRecord(std::string_view bytes);

// Size limits applied to every record (Append and Decode).
inline constexpr size_t kMaxArgv = 4096;
inline constexpr size_t kMaxArgBytes = 256 * 1024;  // all of argv together
inline constexpr size_t kMaxTextField = 4096;       // cwd, digests, layer
inline constexpr size_t kMaxOutputBytes = 64u << 20;

}  // namespace dsec::trajectory
