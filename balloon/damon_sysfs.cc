// SPDX-License-Identifier: Apache-2.0
#include "balloon/damon_sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::balloon {

namespace {

absl::StatusOr<std::string> ReadAttr(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(fd.get(), buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoToStatus(absl::StrCat("read ", path));
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// One write(2), as sysfs takes a value per write. O_TRUNC is ignored by
// sysfs and keeps plain files of a fake tree exact.
absl::Status WriteAttr(const std::string& path, const std::string& value) {
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoToStatus(absl::StrCat("write \"", value, "\" to ", path));
  if (static_cast<size_t>(n) != value.size()) {
    return absl::InternalError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReadNumber(const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(std::string s, ReadAttr(path));
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a number: \"", s, "\""));
  }
  return v;
}

absl::Status WriteNumber(const std::string& path, uint64_t v) {
  return WriteAttr(path, absl::StrCat(v));
}

}  // namespace

absl::Status CheckDamonSlotsFree(const std::string& root, int* nr_kdamonds) {
  const std::string dir = root + "/kdamonds";
  absl::StatusOr<uint64_t> n = ReadNumber(dir + "/nr_kdamonds");
  if (!n.ok()) {
    return absl::UnavailableError(absl::StrCat("DAMON sysfs absent: ", n.status().message()));
  }
  for (uint64_t i = 0; i < *n; ++i) {
    const std::string k = absl::StrCat(dir, "/", i);
    absl::StatusOr<std::string> state = ReadAttr(k + "/state");
    absl::StatusOr<uint64_t> contexts = ReadNumber(k + "/contexts/nr_contexts");
    if (!state.ok() || !contexts.ok()) {
      return absl::UnavailableError(absl::StrCat("kdamond ", i, " unreadable; not touching it"));
    }
    if (*state != "off") {
      return absl::UnavailableError(absl::StrCat(
          "kdamond ", i, " is running and not ours: the kernel adds no kdamond while one runs, "
          "and we never stop one we did not create"));
    }
    if (*contexts != 0) {
      return absl::UnavailableError(absl::StrCat(
          "kdamond ", i, " is configured and not ours: resizing nr_kdamonds would wipe it"));
    }
  }
  *nr_kdamonds = static_cast<int>(*n);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DamonSysfsSource>> DamonSysfsSource::Create(DamonOptions options) {
  int n = 0;
  DSEC_RETURN_IF_ERROR(CheckDamonSlotsFree(options.root, &n));
  const std::string nr_path = options.root + "/kdamonds/nr_kdamonds";
  if (absl::Status s = WriteNumber(nr_path, static_cast<uint64_t>(n) + 1); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot add a kdamond: ", s.message()));
  }
  // From here on slot n is ours; the destructor gives it back.
  std::unique_ptr<DamonSysfsSource> source(new DamonSysfsSource(std::move(options), n));
  absl::StatusOr<uint64_t> now = ReadNumber(nr_path);
  absl::StatusOr<std::string> state = ReadAttr(source->KdamondPath("state"));
  if (!now.ok() || *now != static_cast<uint64_t>(n) + 1 || !state.ok()) {
    return absl::UnavailableError("kdamond slot did not appear after raising nr_kdamonds");
  }
  DSEC_RETURN_IF_ERROR(WriteNumber(source->KdamondPath("contexts/nr_contexts"), 1));
  absl::StatusOr<std::string> ops = ReadAttr(source->KdamondPath("contexts/0/avail_operations"));
  if (!ops.ok() || ops->find("vaddr") == std::string::npos) {
    return absl::UnavailableError("DAMON lacks the vaddr operations set on this kernel");
  }
  DSEC_LOG(info, "component=balloon damon=kdamond{} created", n);
  return source;
}

DamonSysfsSource::~DamonSysfsSource() { Teardown(); }

std::string DamonSysfsSource::KdamondPath(const std::string& rel) const {
  return absl::StrCat(options_.root, "/kdamonds/", index_, "/", rel);
}

absl::Status DamonSysfsSource::Stop() {
  if (!running_) return absl::OkStatus();
  DSEC_RETURN_IF_ERROR(WriteAttr(KdamondPath("state"), "off"));
  running_ = false;
  return absl::OkStatus();
}

void DamonSysfsSource::Teardown() {
  if (absl::Status s = Stop(); !s.ok()) {
    DSEC_LOG(warn, "component=balloon damon stop failed: {}", s.ToString());
    return;  // a running kdamond keeps its configuration; leave it be
  }
  (void)WriteNumber(KdamondPath("contexts/nr_contexts"), 0);
  // Give the slot back only if it is the last one and lowering the count
  // cannot wipe anyone else's kdamond.
  int n = 0;
  absl::StatusOr<uint64_t> nr = ReadNumber(options_.root + "/kdamonds/nr_kdamonds");
  if (nr.ok() && *nr == static_cast<uint64_t>(index_) + 1 &&
      CheckDamonSlotsFree(options_.root, &n).ok()) {
    (void)WriteNumber(options_.root + "/kdamonds/nr_kdamonds", static_cast<uint64_t>(index_));
  }
}

absl::Status DamonSysfsSource::Track(uint64_t vm_id, pid_t pid, std::span<const HostRange> ram) {
  for (const auto& [id, t] : targets_) {
    if (t.pid != pid) {
      return absl::FailedPreconditionError(
          "damon source: tracked VMs must share one process (regions are matched by address)");
    }
  }
  targets_[vm_id] = Target{pid, std::vector<HostRange>(ram.begin(), ram.end())};
  return Apply();
}

void DamonSysfsSource::Untrack(uint64_t vm_id) {
  if (targets_.erase(vm_id) == 0) return;
  if (absl::Status s = Apply(); !s.ok()) {
    DSEC_LOG(warn, "component=balloon damon reconfigure failed: {}", s.ToString());
  }
}

absl::Status DamonSysfsSource::Apply() {
  DSEC_RETURN_IF_ERROR(Stop());
  if (targets_.empty()) return absl::OkStatus();
  const std::string ctx = "contexts/0/";
  DSEC_RETURN_IF_ERROR(WriteAttr(KdamondPath(ctx + "operations"), "vaddr"));
  const std::string attrs = ctx + "monitoring_attrs/";
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(attrs + "intervals/sample_us"), options_.sample_us));
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(attrs + "intervals/aggr_us"), options_.aggr_us));
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(attrs + "intervals/update_us"), options_.update_us));
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(attrs + "nr_regions/min"), options_.min_regions));
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(attrs + "nr_regions/max"), options_.max_regions));
  // One target per process; its initial regions are every VM's guest RAM.
  std::vector<HostRange> ranges;
  for (const auto& [id, t] : targets_) ranges.insert(ranges.end(), t.ram.begin(), t.ram.end());
  std::sort(ranges.begin(), ranges.end(),
            [](const HostRange& a, const HostRange& b) { return a.addr < b.addr; });
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(ctx + "targets/nr_targets"), 1));
  const std::string target = ctx + "targets/0/";
  DSEC_RETURN_IF_ERROR(
      WriteNumber(KdamondPath(target + "pid_target"), static_cast<uint64_t>(targets_.begin()->second.pid)));
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(target + "regions/nr_regions"), ranges.size()));
  for (size_t i = 0; i < ranges.size(); ++i) {
    const std::string r = absl::StrCat(target, "regions/", i, "/");
    DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(r + "start"), ranges[i].addr));
    DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(r + "end"), ranges[i].end()));
  }
  // A "stat" scheme matching every region: it does nothing but makes the
  // kernel list regions under tried_regions on request.
  DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(ctx + "schemes/nr_schemes"), 1));
  const std::string scheme = ctx + "schemes/0/";
  DSEC_RETURN_IF_ERROR(WriteAttr(KdamondPath(scheme + "action"), "stat"));
  for (const char* field : {"sz", "nr_accesses", "age"}) {
    const std::string p = absl::StrCat(scheme, "access_pattern/", field, "/");
    DSEC_RETURN_IF_ERROR(WriteNumber(KdamondPath(p + "min"), 0));
    DSEC_RETURN_IF_ERROR(WriteNumber(
        KdamondPath(p + "max"), std::string_view(field) == "sz" ? UINT64_MAX : UINT32_MAX));
  }
  DSEC_RETURN_IF_ERROR(WriteAttr(KdamondPath("state"), "on"));
  running_ = true;
  return absl::OkStatus();
}

absl::StatusOr<WorkingSetSample> DamonSysfsSource::Sample(uint64_t vm_id) {
  auto it = targets_.find(vm_id);
  if (it == targets_.end()) return absl::NotFoundError("damon source: VM not tracked");
  if (!running_) return absl::FailedPreconditionError("damon source: kdamond not running");
  DSEC_RETURN_IF_ERROR(WriteAttr(KdamondPath("state"), "update_schemes_tried_regions"));
  const std::string dir = KdamondPath("contexts/0/schemes/0/tried_regions");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(absl::StrCat("opendir ", dir));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) names.push_back(name);
  }
  ::closedir(d);
  WorkingSetSample out;
  for (const HostRange& r : it->second.ram) out.tracked_bytes += r.size;
  const uint64_t cold_age = std::max<uint64_t>(1, options_.cold_after_us / options_.aggr_us);
  for (const std::string& name : names) {
    const std::string base = dir + "/" + name + "/";
    DSEC_ASSIGN_OR_RETURN(uint64_t start, ReadNumber(base + "start"));
    DSEC_ASSIGN_OR_RETURN(uint64_t end, ReadNumber(base + "end"));
    DSEC_ASSIGN_OR_RETURN(uint64_t accesses, ReadNumber(base + "nr_accesses"));
    DSEC_ASSIGN_OR_RETURN(uint64_t age, ReadNumber(base + "age"));
    // Clip the region to this VM's guest RAM.
    for (const HostRange& r : it->second.ram) {
      const uint64_t lo = std::max(start, r.addr);
      const uint64_t hi = std::min(end, r.end());
      if (lo >= hi) continue;
      if (accesses > 0) {
        out.hot_bytes += hi - lo;
      } else if (age >= cold_age) {
        out.cold.push_back({{lo, hi - lo}, static_cast<uint32_t>(std::min<uint64_t>(age, UINT32_MAX))});
      }
    }
  }
  std::stable_sort(out.cold.begin(), out.cold.end(), [](const ColdRange& a, const ColdRange& b) {
    return a.idle_intervals > b.idle_intervals;
  });
  return out;
}

}  // namespace dsec::balloon
