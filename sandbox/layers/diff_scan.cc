// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/diff_scan.h"

#include <sys/stat.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "sandbox/layers/fs_util.h"

namespace dsec::layers {
namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kPerEntry = 256;

// The first bytes of a path too long to show whole.
std::string Shown(const std::string& rel) {
  return rel.size() <= 96 ? rel : absl::StrCat(rel.substr(0, 96), "...");
}

class Scanner {
 public:
  Scanner(const std::string& upper, const DiffLimits& limits) : upper_(upper), limits_(limits) {}

  // `rel` is "" for the root, else "/a/b"; `depth` its level (root 0).
  absl::Status Walk(const std::string& rel, int depth) {
    if (rel.size() > limits_.max_path_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the sandbox's changes hold a path of ", rel.size(), " bytes or more (", Shown(rel),
          "), over the layer limit of ", limits_.max_path_bytes));
    }
    if (depth > limits_.max_depth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the sandbox's changes hold directories ", depth, " or more levels deep (", Shown(rel),
          "), over the layer limit of ", limits_.max_depth));
    }
    if (++size_.entries > limits_.max_entries) {
      return absl::InvalidArgumentError(absl::StrCat("the sandbox's changes hold more than ",
                                                     limits_.max_entries, " entries, the layer limit"));
    }
    const std::string path = rel.empty() ? upper_ : upper_ + rel;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("lstat ", rel.empty() ? "/" : rel));
    size_.image_bytes_estimate += kPerEntry;
    if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1 && !inodes_.insert({st.st_dev, st.st_ino}).second) return absl::OkStatus();
      const uint64_t bytes = static_cast<uint64_t>(st.st_size);
      size_.content_bytes += bytes;
      size_.allocated_bytes += std::min<uint64_t>(bytes, static_cast<uint64_t>(st.st_blocks) * 512);
      size_.image_bytes_estimate += (bytes + kBlock - 1) / kBlock * kBlock;
    } else if (S_ISLNK(st.st_mode)) {
      size_.image_bytes_estimate += static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      ++size_.directories;
      size_.image_bytes_estimate += kBlock;
      DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(path));
      for (const std::string& n : names) DSEC_RETURN_IF_ERROR(Walk(absl::StrCat(rel, "/", n), depth + 1));
    }
    return absl::OkStatus();
  }

  const DiffSize& size() const { return size_; }

 private:
  const std::string& upper_;
  const DiffLimits& limits_;
  DiffSize size_;
  std::set<std::pair<dev_t, ino_t>> inodes_;
};

}  // namespace

absl::StatusOr<DiffSize> ScanDiff(const std::string& upper, const DiffLimits& limits) {
  Scanner scanner(upper, limits);
  DSEC_RETURN_IF_ERROR(scanner.Walk("", 0));
  return scanner.size();
}

}  // namespace dsec::layers
