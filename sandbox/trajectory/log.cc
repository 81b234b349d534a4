// SPDX-License-Identifier: Apache-2.0
#include "sandbox/trajectory/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/little_endian.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::trajectory {

namespace {

constexpr char kFileHeader[8] = {'D', 'S', 'E', 'C', 'T', 'R', 'J', 1};
constexpr uint32_t kFrameMagic = 0x4A525444;  // "DTRJ" little endian
constexpr size_t kFrameHeader = 12;
// A frame's payload is one record: bounded by two outputs at their limit
// plus the request.
constexpr uint64_t kMaxPayload = 2 * kMaxOutputBytes + kMaxArgBytes + (1u << 20);
constexpr char kSuffix[] = ".trj";

uint32_t FrameCrc(const char* len_field, std::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(len_field), 4);
  // zlib's length is uInt; payloads are far below 4 GiB (kMaxPayload).
  crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data()),
              static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

absl::StatusOr<std::string> ReadAll(int fd) {
  std::string data;
  char buf[1 << 16];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("pread trajectory log");
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return data;
}

absl::Status FsyncDir(const std::string& dir) {
  ScopedFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return ErrnoStatus(absl::StrCat("open ", dir));
  if (::fsync(d.get()) != 0) return ErrnoStatus(absl::StrCat("fsync ", dir));
  return absl::OkStatus();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

bool QuotaPool::TryTake(uint64_t n) {
  uint64_t cur = used_.load(std::memory_order_relaxed);
  do {
    if (cur > limit_ || limit_ - cur < n) return false;
  } while (!used_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
  return true;
}

void QuotaPool::Give(uint64_t n) {
  uint64_t cur = used_.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = cur >= n ? cur - n : 0;
  } while (!used_.compare_exchange_weak(cur, next, std::memory_order_relaxed));
}

TrajectoryLog::TrajectoryLog(std::string path, ScopedFd fd, uint64_t max_bytes, QuotaPool* node)
    : path_(std::move(path)), max_bytes_(max_bytes), node_(node), fd_(std::move(fd)) {}

TrajectoryLog::~TrajectoryLog() = default;

absl::StatusOr<std::unique_ptr<TrajectoryLog>> TrajectoryLog::Open(const std::string& path,
                                                                    uint64_t max_bytes,
                                                                    QuotaPool* node) {
  bool created = true;
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0) return ErrnoStatus(absl::StrCat("open trajectory log ", path));
  ScopedFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(absl::StrCat("fstat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  std::unique_ptr<TrajectoryLog> log(new TrajectoryLog(path, std::move(owned), max_bytes, node));
  if (created) {
    absl::MutexLock lock(&log->mu_);
    if (::write(fd, kFileHeader, sizeof(kFileHeader)) != sizeof(kFileHeader) ||
        ::fdatasync(fd) != 0) {
      absl::Status s = ErrnoStatus(absl::StrCat("write header of ", path));
      ::unlink(path.c_str());
      return s;
    }
    DSEC_RETURN_IF_ERROR(FsyncDir(DirOf(path)));
    log->stats_.file_bytes = sizeof(kFileHeader);
  } else {
    DSEC_RETURN_IF_ERROR(log->Recover());
  }
  if (node != nullptr) node->Add(log->stats().file_bytes);
  return log;
}

absl::Status TrajectoryLog::Recover() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> read = ReadAll(fd_.get());
  if (!read.ok()) return read.status();
  const std::string& data = *read;
  uint64_t keep = 0;
  std::string why;
  if (data.size() < sizeof(kFileHeader)) {
    // Torn at creation: a prefix of the header (or nothing) was written.
    if (memcmp(data.data(), kFileHeader, data.size()) != 0) {
      return absl::DataLossError(absl::StrCat(path_, " is not a trajectory log"));
    }
    why = "file header incomplete";
  } else if (memcmp(data.data(), kFileHeader, sizeof(kFileHeader)) != 0) {
    return absl::DataLossError(absl::StrCat(path_, " is not a trajectory log (bad header)"));
  } else {
    size_t off = sizeof(kFileHeader);
    keep = off;
    while (off < data.size()) {
      size_t rest = data.size() - off;
      if (rest < kFrameHeader) {
        why = absl::StrCat("short frame header at offset ", off);
        break;
      }
      uint32_t magic = LoadLe32(data.data() + off);
      uint32_t len = LoadLe32(data.data() + off + 4);
      uint32_t crc = LoadLe32(data.data() + off + 8);
      // The frame runs to the end of the file (a torn append, or one whose
      // data blocks never reached the disk).
      bool last = magic == kFrameMagic && len <= kMaxPayload && rest - kFrameHeader <= len;
      if (magic != kFrameMagic || len > kMaxPayload || rest - kFrameHeader < len ||
          FrameCrc(data.data() + off + 4, std::string_view(data.data() + off + kFrameHeader,
                                                           len)) != crc) {
        // A crash tears only the frame being appended: that frame must be
        // the last thing in the file. Anything after it means damage that
        // a crash does not cause.
        bool zero_tail = std::all_of(data.begin() + static_cast<long>(off), data.end(),
                                     [](char c) { return c == 0; });
        if (!last && !zero_tail) {
          return absl::DataLossError(absl::StrCat(path_, ": damaged frame at offset ", off,
                                                  " followed by more data"));
        }
        why = absl::StrCat("torn frame at offset ", off);
        break;
      }
      auto record = DecodeRecord(std::string_view(data.data() + off + kFrameHeader, len));
      if (!record.ok()) {
        return absl::DataLossError(absl::StrCat(path_, ": frame at offset ", off, ": ",
                                                record.status().message()));
      }
      absl::Status applied = absl::OkStatus();
      const Record& r = *record;
      switch (r.kind) {
        case RecordKind::kExec:
          if (r.seq != execs_.size()) {
            applied = absl::DataLossError(absl::StrCat("exec seq ", r.seq, " where ",
                                                       execs_.size(), " was expected"));
          }
          break;
        case RecordKind::kCheckpoint:
        case RecordKind::kBranch:
          if (r.seq > execs_.size()) {
            applied = absl::DataLossError(
                absl::StrCat("record refers to seq ", r.seq, " past ", execs_.size()));
          }
          break;
      }
      if (!applied.ok()) {
        return absl::DataLossError(
            absl::StrCat(path_, ": frame at offset ", off, ": ", applied.message()));
      }
      ApplyLocked(std::move(record).value());
      off += kFrameHeader + len;
      keep = off;
      recovery_.frames++;
    }
  }
  if (keep < data.size() || data.size() < sizeof(kFileHeader)) {
    recovery_.truncated_bytes = data.size() - std::min<uint64_t>(keep, data.size());
    recovery_.detail = why;
    if (::ftruncate(fd_.get(), static_cast<off_t>(keep)) != 0) {
      return ErrnoStatus(absl::StrCat("truncate torn tail of ", path_));
    }
    if (keep == 0) {
      if (::write(fd_.get(), kFileHeader, sizeof(kFileHeader)) != sizeof(kFileHeader)) {
        return ErrnoStatus(absl::StrCat("rewrite header of ", path_));
      }
      keep = sizeof(kFileHeader);
    }
    if (::fdatasync(fd_.get()) != 0) return ErrnoStatus(absl::StrCat("fdatasync ", path_));
    DSEC_LOG(warn, "trajectory: {}: {}; truncated {} bytes, {} records kept", path_, why,
             recovery_.truncated_bytes, recovery_.frames);
  }
  stats_.file_bytes = keep;
  return absl::OkStatus();
}

void TrajectoryLog::ApplyLocked(Record record) {
  switch (record.kind) {
    case RecordKind::kExec:
      execs_.push_back(std::move(record));
      break;
    case RecordKind::kCheckpoint:
      checkpoints_.push_back(std::move(record));
      break;
    case RecordKind::kBranch: {
      uint64_t from = record.seq;
      execs_.resize(from);
      checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                        [from](const Record& c) { return c.seq > from; }),
                         checkpoints_.end());
      break;
    }
  }
}

absl::Status TrajectoryLog::WriteFrameLocked(const std::string& payload) {
  if (!fd_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": log unusable after an earlier write failure; reopen it"));
  }
  if (payload.size() > kMaxPayload) {
    return absl::InvalidArgumentError("trajectory record larger than a frame may be");
  }
  std::string frame;
  frame.reserve(kFrameHeader + payload.size());
  AppendLe32(&frame, kFrameMagic);
  AppendLe32(&frame, static_cast<uint32_t>(payload.size()));
  AppendLe32(&frame, FrameCrc(frame.data() + 4, payload));
  frame.append(payload);
  const uint64_t size = frame.size();
  if (stats_.file_bytes + size > max_bytes_) {
    stats_.refused_appends++;
    return absl::ResourceExhaustedError(absl::StrCat(
        "trajectory log ", path_, " is full (", stats_.file_bytes, " of ", max_bytes_, " bytes)"));
  }
  if (node_ != nullptr && !node_->TryTake(size)) {
    stats_.refused_appends++;
    return absl::ResourceExhaustedError(absl::StrCat("node trajectory quota is full (",
                                                     node_->used(), " of ", node_->limit(),
                                                     " bytes)"));
  }
  // One write of the whole frame; a short write (ENOSPC) is cut back off so
  // the file ends on a frame boundary again.
  size_t done = 0;
  absl::Status failed = absl::OkStatus();
  while (done < size) {
    ssize_t n = ::write(fd_.get(), frame.data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      failed = ErrnoStatus(absl::StrCat("append to ", path_));
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (failed.ok() && ::fdatasync(fd_.get()) != 0) {
    failed = ErrnoStatus(absl::StrCat("fdatasync ", path_));
  }
  if (!failed.ok()) {
    if (node_ != nullptr) node_->Give(size);
    if (::ftruncate(fd_.get(), static_cast<off_t>(stats_.file_bytes)) != 0 ||
        ::fdatasync(fd_.get()) != 0) {
      // The tail is in an unknown state: stop appending; Open repairs it.
      fd_.Reset();
    }
    return failed;
  }
  stats_.file_bytes += size;
  stats_.appends++;
  return absl::OkStatus();
}

absl::StatusOr<Record> TrajectoryLog::AppendExec(const ExecRequest& request,
                                                 const ExecResult& result) {
  absl::MutexLock lock(&mu_);
  Record r;
  r.kind = RecordKind::kExec;
  r.seq = execs_.size();
  r.request = request;
  r.result = result;
  r.result.stdout_data.clear();
  r.result.stderr_data.clear();
  DSEC_RETURN_IF_ERROR(ValidateRecord(r));
  // Room left under both quotas, less the record without its output and
  // the frame header. 18 bytes: the CBOR length prefixes of two outputs
  // and the quota_dropped value at their largest.
  uint64_t room = max_bytes_ > stats_.file_bytes ? max_bytes_ - stats_.file_bytes : 0;
  if (node_ != nullptr) room = std::min(room, node_->available());
  const uint64_t meta = EncodeRecord(r).size() + kFrameHeader + 18 + 9;
  if (meta > room) {
    stats_.refused_appends++;
    return absl::ResourceExhaustedError(
        absl::StrCat("trajectory quota exhausted for ", path_, ": ", room,
                     " bytes left, the record needs ", meta));
  }
  uint64_t avail = std::min<uint64_t>(room - meta, kMaxOutputBytes);
  const std::string& out = result.stdout_data;
  const std::string& err = result.stderr_data;
  // stderr keeps up to half of the room when both overflow; either gets
  // what the other leaves.
  uint64_t err_keep = std::min<uint64_t>(err.size(), avail / 2);
  uint64_t out_keep = std::min<uint64_t>(out.size(), avail - err_keep);
  err_keep = std::min<uint64_t>(err.size(), avail - out_keep);
  out_keep = std::min<uint64_t>(out_keep, kMaxOutputBytes);
  err_keep = std::min<uint64_t>(err_keep, kMaxOutputBytes);
  r.result.stdout_data.assign(out, 0, out_keep);
  r.result.stderr_data.assign(err, 0, err_keep);
  r.quota_dropped = (out.size() - out_keep) + (err.size() - err_keep);
  DSEC_RETURN_IF_ERROR(WriteFrameLocked(EncodeRecord(r)));
  stats_.quota_dropped_bytes += r.quota_dropped;
  execs_.push_back(r);
  return r;
}

absl::Status TrajectoryLog::AppendCheckpoint(uint64_t prefix, const std::string& layer) {
  absl::MutexLock lock(&mu_);
  if (prefix > execs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint after ", prefix, " execs, but the log has ", execs_.size()));
  }
  Record r;
  r.kind = RecordKind::kCheckpoint;
  r.seq = prefix;
  r.layer = layer;
  DSEC_RETURN_IF_ERROR(ValidateRecord(r));
  DSEC_RETURN_IF_ERROR(WriteFrameLocked(EncodeRecord(r)));
  ApplyLocked(std::move(r));
  return absl::OkStatus();
}

absl::Status TrajectoryLog::AppendBranch(uint64_t from_seq) {
  absl::MutexLock lock(&mu_);
  if (from_seq > execs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch from seq ", from_seq, ", but the log has ", execs_.size()));
  }
  Record r;
  r.kind = RecordKind::kBranch;
  r.seq = from_seq;
  DSEC_RETURN_IF_ERROR(WriteFrameLocked(EncodeRecord(r)));
  ApplyLocked(std::move(r));
  return absl::OkStatus();
}

std::vector<Record> TrajectoryLog::Execs() const {
  absl::MutexLock lock(&mu_);
  return execs_;
}

std::vector<Record> TrajectoryLog::Checkpoints() const {
  absl::MutexLock lock(&mu_);
  return checkpoints_;
}

uint64_t TrajectoryLog::next_seq() const {
  absl::MutexLock lock(&mu_);
  return execs_.size();
}

LogStats TrajectoryLog::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status ValidateTaskId(const std::string& id) {
  if (id.empty() || id.size() > 128) {
    return absl::InvalidArgumentError("task id must be 1 to 128 characters");
  }
  if (id[0] == '.') return absl::InvalidArgumentError("task id must not start with '.'");
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("task id \"", absl::CEscape(id), "\" has a character outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

TrajectoryStore::TrajectoryStore(std::string dir, StoreOptions options)
    : dir_(std::move(dir)), options_(options), node_(options.max_node_bytes) {}

absl::StatusOr<std::unique_ptr<TrajectoryStore>> TrajectoryStore::Open(const std::string& dir,
                                                                        StoreOptions options) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("mkdir ", dir));
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat("stat ", dir));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }
  std::unique_ptr<TrajectoryStore> store(new TrajectoryStore(dir, options));
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(absl::StrCat("opendir ", dir));
  std::vector<std::string> tasks;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!absl::EndsWith(name, kSuffix)) continue;
    std::string task = name.substr(0, name.size() - strlen(kSuffix));
    if (ValidateTaskId(task).ok()) tasks.push_back(task);
  }
  ::closedir(d);
  absl::MutexLock lock(&store->mu_);
  for (const auto& task : tasks) {
    std::string path = absl::StrCat(dir, "/", task, kSuffix);
    auto log = TrajectoryLog::Open(path, options.max_task_bytes, &store->node_);
    if (!log.ok()) {
      store->recovered_[task] = absl::StrCat("refused: ", log.status().message());
      DSEC_LOG(err, "trajectory: {}: {}", path, log.status().ToString());
      continue;
    }
    if ((*log)->recovery().truncated_bytes > 0) {
      store->recovered_[task] =
          absl::StrCat("repaired: ", (*log)->recovery().detail, ", ",
                       (*log)->recovery().truncated_bytes, " bytes truncated");
    }
    store->logs_[task] = std::move(log).value();
  }
  return store;
}

absl::StatusOr<TrajectoryLog*> TrajectoryStore::Get(const std::string& task_id) {
  DSEC_RETURN_IF_ERROR(ValidateTaskId(task_id));
  absl::MutexLock lock(&mu_);
  if (auto it = logs_.find(task_id); it != logs_.end()) return it->second.get();
  if (auto it = recovered_.find(task_id);
      it != recovered_.end() && absl::StartsWith(it->second, "refused")) {
    return absl::FailedPreconditionError(
        absl::StrCat("trajectory log of task ", task_id, " was ", it->second));
  }
  DSEC_ASSIGN_OR_RETURN(auto log, TrajectoryLog::Open(absl::StrCat(dir_, "/", task_id, kSuffix),
                                                      options_.max_task_bytes, &node_));
  TrajectoryLog* raw = log.get();
  logs_[task_id] = std::move(log);
  return raw;
}

absl::Status TrajectoryStore::Remove(const std::string& task_id) {
  DSEC_RETURN_IF_ERROR(ValidateTaskId(task_id));
  absl::MutexLock lock(&mu_);
  std::string path = absl::StrCat(dir_, "/", task_id, kSuffix);
  uint64_t bytes = 0;
  if (auto it = logs_.find(task_id); it != logs_.end()) {
    bytes = it->second->stats().file_bytes;
    logs_.erase(it);
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(absl::StrCat("unlink ", path));
  }
  recovered_.erase(task_id);
  node_.Give(bytes);
  return FsyncDir(dir_);
}

std::vector<std::string> TrajectoryStore::Tasks() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [task, log] : logs_) out.push_back(task);
  return out;
}

std::map<std::string, std::string> TrajectoryStore::Recovered() const {
  absl::MutexLock lock(&mu_);
  return recovered_;
}

}  // namespace dsec::trajectory
