// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/snapshot_store.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::daemon {

namespace {
constexpr size_t kMaxRecordBytes = 1 << 20;
}  // namespace

absl::StatusOr<SnapshotStore> SnapshotStore::Open(const std::string& dir) {
  DSEC_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  return SnapshotStore(dir);
}

bool SnapshotStore::ValidId(const std::string& id) {
  if (id.size() != 21 || id.compare(0, 5, "snap-") != 0) return false;
  return std::all_of(id.begin() + 5, id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string SnapshotStore::NewId() {
  uint8_t b[8];
  if (::getrandom(b, sizeof(b), 0) != sizeof(b)) {
    // getrandom of 8 bytes does not fail once the pool is ready; the clock
    // keeps ids distinct if it ever does.
    const uint64_t t = static_cast<uint64_t>(::time(nullptr)) ^ static_cast<uint64_t>(::getpid());
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(t >> (8 * i));
  }
  std::string id = "snap-";
  for (uint8_t x : b) absl::StrAppend(&id, absl::StrFormat("%02x", x));
  return id;
}

absl::Status SnapshotStore::Put(const nlohmann::json& record) {
  const std::string id = record.value("id", "");
  if (!ValidId(id)) return absl::InvalidArgumentError(absl::StrCat("bad snapshot id ", id));
  const std::string path = Path(id);
  if (PathExists(path)) return absl::AlreadyExistsError(absl::StrCat("snapshot ", id, " exists"));
  const std::string tmp = absl::StrCat(path, ".tmp");
  const std::string text = record.dump() + "\n";
  {
    ScopedFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoStatus(absl::StrCat("open ", tmp));
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        (void)::unlink(tmp.c_str());
        return ErrnoStatus(absl::StrCat("write ", tmp));
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd.get()) != 0) {
      (void)::unlink(tmp.c_str());
      return ErrnoStatus(absl::StrCat("fsync ", tmp));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    (void)::unlink(tmp.c_str());
    return ErrnoStatus(absl::StrCat("rename ", tmp));
  }
  ScopedFd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.valid()) (void)::fsync(d.get());
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> SnapshotStore::Get(const std::string& id) const {
  if (!ValidId(id)) return absl::NotFoundError(absl::StrCat("no snapshot ", id));
  const std::string path = Path(id);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("no snapshot ", id));
  if (!S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxRecordBytes) {
    return absl::DataLossError(absl::StrCat("snapshot ", id, ": its record is not a file of at most 1 MiB"));
  }
  DSEC_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("id", "") != id || !j.contains("create") ||
      !j["create"].is_object()) {
    return absl::DataLossError(absl::StrCat("snapshot ", id, ": its record is damaged"));
  }
  return j;
}

std::vector<nlohmann::json> SnapshotStore::List() const {
  std::vector<nlohmann::json> out;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir_);
  if (!names.ok()) return out;
  for (const std::string& name : *names) {
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    absl::StatusOr<nlohmann::json> r = Get(name.substr(0, name.size() - 5));
    if (r.ok()) out.push_back(*std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("created_unix_ms", int64_t{0}) < b.value("created_unix_ms", int64_t{0});
  });
  return out;
}

absl::Status SnapshotStore::Remove(const std::string& id) {
  if (!ValidId(id)) return absl::NotFoundError(absl::StrCat("no snapshot ", id));
  if (::unlink(Path(id).c_str()) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no snapshot ", id));
    return ErrnoStatus(absl::StrCat("unlink ", Path(id)));
  }
  return absl::OkStatus();
}

}  // namespace dsec::daemon
