// SPDX-License-Identifier: Apache-2.0
// The append-only, crash-safe trajectory log of one task, and the store that
// holds every task's log under one directory with per-task and per-node
// quotas.
//
// File format (little endian): an 8-byte file header "DSECTRJ\x01", then
// frames of {u32 magic 'DTRJ', u32 payload length, u32 CRC-32 (zlib) of the
// length field and the payload, payload = EncodeRecord(record)}.
//
// Durability: Append writes a whole frame with one write(2) to an O_APPEND
// fd and returns only after fdatasync(2); a record whose Append returned
// (acknowledged) survives kill -9 of the process and a host crash. A crash
// during Append can leave a torn frame at the end of the file: Open detects
// it (short frame, zero fill, or a bad CRC in the last frame) and truncates
// the file back to the end of the last whole record. Damage anywhere else
// (a bad frame followed by more data) is not a crash artefact: Open refuses
// the log with DataLoss and leaves the file untouched for inspection.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/trajectory/record.h"
#include "base/scoped_fd.h"

namespace dsec::trajectory {

// Bytes a set of logs may use together (a node's quota). Thread-safe.
class QuotaPool {
 public:
  explicit QuotaPool(uint64_t limit_bytes) : limit_(limit_bytes) {}
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t available() const {
    uint64_t u = used();
    return u >= limit_ ? 0 : limit_ - u;
  }
  // Takes n bytes if they fit; false otherwise.
  bool TryTake(uint64_t n);
  void Give(uint64_t n);
  // Accounts bytes found on disk (may exceed the limit: an existing log is
  // never truncated to fit a smaller quota, it just cannot grow).
  void Add(uint64_t n) { used_.fetch_add(n, std::memory_order_relaxed); }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// What Open found.
struct Recovery {
  uint64_t frames = 0;           // whole records read
  uint64_t truncated_bytes = 0;  // torn tail removed
  std::string detail;            // why, when truncated_bytes > 0
};

// Counters of one log (for metrics).
struct LogStats {
  uint64_t file_bytes = 0;
  uint64_t appends = 0;
  uint64_t quota_dropped_bytes = 0;  // output bytes dropped by the quotas
  uint64_t refused_appends = 0;      // not even the record's metadata fitted
};

class TrajectoryLog {
 public:
  // Opens (creating if needed) the log at path; recovers a torn tail.
  // max_bytes bounds this file; node (may be null) is shared by all logs of
  // a node.
  static absl::StatusOr<std::unique_ptr<TrajectoryLog>> Open(const std::string& path,
                                                              uint64_t max_bytes,
                                                              QuotaPool* node);
  ~TrajectoryLog();

  // Appends an exec at the next sequence number, durably. Output that does
  // not fit the quotas is cut (the cut is recorded in quota_dropped); if
  // not even the request fits, ResourceExhausted and nothing is written.
  // Returns the record as stored.
  absl::StatusOr<Record> AppendExec(const ExecRequest& request, const ExecResult& result);
  // Records that pack_diff layer `layer` holds the files after the first
  // `prefix` execs (prefix <= next_seq()).
  absl::Status AppendCheckpoint(uint64_t prefix, const std::string& layer);
  // Supersedes the execs from from_seq on (a resumed task diverged there);
  // the next exec gets seq from_seq. from_seq <= next_seq().
  absl::Status AppendBranch(uint64_t from_seq);

  // The logical trajectory: execs [0, next_seq()) in order, and the
  // checkpoints still valid (their prefix <= next_seq()), after applying
  // every branch.
  std::vector<Record> Execs() const;
  std::vector<Record> Checkpoints() const;
  uint64_t next_seq() const;
  const Recovery& recovery() const { return recovery_; }
  LogStats stats() const;
  const std::string& path() const { return path_; }

 private:
  TrajectoryLog(std::string path, ScopedFd fd, uint64_t max_bytes, QuotaPool* node);
  absl::Status Recover();
  void ApplyLocked(Record record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteFrameLocked(const std::string& payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const uint64_t max_bytes_;
  QuotaPool* const node_;
  Recovery recovery_;
  mutable absl::Mutex mu_;
  ScopedFd fd_ ABSL_GUARDED_BY(mu_);
  std::vector<Record> execs_ ABSL_GUARDED_BY(mu_);
  std::vector<Record> checkpoints_ ABSL_GUARDED_BY(mu_);
  LogStats stats_ ABSL_GUARDED_BY(mu_);
};

// Task ids name files: 1-128 characters of [A-Za-z0-9._-], not starting
// with '.'.
absl::Status ValidateTaskId(const std::string& task_id);

struct StoreOptions {
  uint64_t max_task_bytes = 64ull << 20;
  uint64_t max_node_bytes = 4ull << 30;
};

// Every task's log under one directory (<dir>/<task>.trj, mode 0600, the
// directory 0700). Thread-safe.
class TrajectoryStore {
 public:
  // Creates dir if needed and recovers every log in it (torn tails
  // truncated, reported by Recovered()). A log refused with DataLoss is
  // reported and left alone; its task cannot be opened until removed.
  static absl::StatusOr<std::unique_ptr<TrajectoryStore>> Open(const std::string& dir,
                                                                StoreOptions options);

  // The task's log, created on first use.
  absl::StatusOr<TrajectoryLog*> Get(const std::string& task_id);
  // Deletes a task's log and returns its bytes to the node quota.
  absl::Status Remove(const std::string& task_id);
  std::vector<std::string> Tasks() const;
  // task id -> what recovery found (only logs that needed repair or were
  // refused).
  std::map<std::string, std::string> Recovered() const;
  const QuotaPool& node_quota() const { return node_; }

 private:
  TrajectoryStore(std::string dir, StoreOptions options);

  const std::string dir_;
  const StoreOptions options_;
  QuotaPool node_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<TrajectoryLog>> logs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> recovered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::trajectory
