// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/node_capacity.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/file_io.h"

namespace dsec::daemon {

namespace {

constexpr std::array<const char*, kResourceCount> kNames = {"memory", "pids",    "fds",    "mounts",
                                                            "cgroups", "netns", "inotify"};
// The kernel's memory cgroup ids are 16 bits (MEM_CGROUP_ID_MAX); offline
// cgroups still waiting for their pages to go count too.
constexpr int64_t kMemoryCgroupIds = 65535;

int64_t Amount(const tier::Footprint& f, Resource r) {
  switch (r) {
    case Resource::kMemory: return f.memory_bytes;
    case Resource::kPids: return f.pids;
    case Resource::kFds: return f.fds;
    case Resource::kMounts: return f.mounts;
    case Resource::kCgroups: return f.cgroups;
    case Resource::kNetns: return f.netns;
    case Resource::kInotify: return f.inotify;
  }
  return 0;
}

std::optional<int64_t> ReadInt(const std::string& path) {
  absl::StatusOr<std::string> s = ReadSmallFile(path);
  int64_t v = 0;
  if (!s.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*s), &v)) return std::nullopt;
  return v;
}

// "MemTotal:  24584192 kB" -> bytes.
std::optional<int64_t> MeminfoBytes(const std::string& meminfo, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(line, &kib)) return kib * 1024;
  }
  return std::nullopt;
}

std::string ResourceDisplay(Resource r, int64_t v) {
  if (r == Resource::kMemory) return absl::StrCat(v >> 20, " MiB");
  return absl::StrCat(v);
}

}  // namespace

const char* ResourceName(Resource r) { return kNames[static_cast<int>(r)]; }

std::optional<Resource> ResourceByName(const std::string& name) {
  for (int i = 0; i < kResourceCount; ++i) {
    if (name == kNames[i]) return static_cast<Resource>(i);
  }
  return std::nullopt;
}

HostReadings ReadHost() {
  HostReadings h;
  if (absl::StatusOr<std::string> mi = ReadSmallFile("/proc/meminfo"); mi.ok()) {
    std::optional<int64_t> total = MeminfoBytes(*mi, "MemTotal");
    std::optional<int64_t> avail = MeminfoBytes(*mi, "MemAvailable");
    if (total && avail) {
      h[Resource::kMemory] = {*total - *avail, *total, "MemTotal - MemAvailable of MemTotal (/proc/meminfo)"};
    }
  }
  h[Resource::kMemory].source = h[Resource::kMemory].source.empty() ? "no MemAvailable in /proc/meminfo"
                                                                     : h[Resource::kMemory].source;
  {
    // "0.12 0.10 0.05 2/84 12345": runnable/total tasks.
    HostReadings::Reading& p = h[Resource::kPids];
    p.source = "tasks (/proc/loadavg) of min(kernel.threads-max, kernel.pid_max)";
    if (absl::StatusOr<std::string> la = ReadSmallFile("/proc/loadavg"); la.ok()) {
      std::vector<absl::string_view> f = absl::StrSplit(*la, ' ', absl::SkipEmpty());
      if (f.size() >= 4) {
        std::vector<absl::string_view> rt = absl::StrSplit(f[3], '/');
        int64_t v = 0;
        if (rt.size() == 2 && absl::SimpleAtoi(rt[1], &v)) p.used = v;
      }
    }
    std::optional<int64_t> tmax = ReadInt("/proc/sys/kernel/threads-max");
    std::optional<int64_t> pmax = ReadInt("/proc/sys/kernel/pid_max");
    if (tmax && pmax) p.limit = std::min(*tmax, *pmax);
  }
  {
    HostReadings::Reading& f = h[Resource::kFds];
    f.source = "this daemon's descriptors (/proc/self/fd) of RLIMIT_NOFILE";
    // Since Linux 6.2 the directory's size is the number of open
    // descriptors: counted without listing them.
    struct stat st {};
    if (::stat("/proc/self/fd", &st) == 0 && st.st_size > 0) f.used = st.st_size;
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      f.limit = static_cast<int64_t>(rl.rlim_cur);
    }
    if (!f.used) f.source = "this kernel does not count open descriptors cheaply (Linux 6.2+ does)";
  }
  {
    HostReadings::Reading& m = h[Resource::kMounts];
    m.source = "this mount namespace's table (/proc/self/mountinfo) of fs.mount-max";
    if (absl::StatusOr<std::string> t = ReadSmallFile("/proc/self/mountinfo"); t.ok()) {
      m.used = static_cast<int64_t>(std::count(t->begin(), t->end(), '\n'));
    }
    m.limit = ReadInt("/proc/sys/fs/mount-max");
  }
  {
    HostReadings::Reading& c = h[Resource::kCgroups];
    c.source = "memory cgroups (/proc/cgroups) of the kernel's 65535 memory cgroup ids";
    if (absl::StatusOr<std::string> t = ReadSmallFile("/proc/cgroups"); t.ok()) {
      for (absl::string_view line : absl::StrSplit(*t, '\n')) {
        std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
        int64_t v = 0;
        if (f.size() >= 4 && f[0] == "memory" && absl::SimpleAtoi(f[2], &v)) c.used = v;
      }
    }
    if (c.used) {
      c.limit = kMemoryCgroupIds;
    } else {
      c.source = "no memory controller in /proc/cgroups";
    }
  }
  h[Resource::kNetns] = {std::nullopt, ReadInt("/proc/sys/user/max_net_namespaces"),
                         "held by this daemon's sandboxes, of user.max_net_namespaces"};
  h[Resource::kInotify] = {std::nullopt, ReadInt("/proc/sys/fs/inotify/max_user_instances"),
                           "held by this daemon's sandboxes, of fs.inotify.max_user_instances"};
  return h;
}

CapacityLease::CapacityLease(CapacityLease&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)), need_(o.need_), committed_(o.committed_) {}

CapacityLease& CapacityLease::operator=(CapacityLease&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = std::exchange(o.owner_, nullptr);
    need_ = o.need_;
    committed_ = o.committed_;
  }
  return *this;
}

void CapacityLease::Commit() {
  if (owner_ == nullptr || committed_) return;
  owner_->Unreserve(need_, /*committed=*/false, /*release_committed=*/false);
  committed_ = true;
}

void CapacityLease::Release() {
  if (owner_ == nullptr) return;
  owner_->Unreserve(need_, committed_, /*release_committed=*/true);
  owner_ = nullptr;
}

NodeCapacity::NodeCapacity(CapacityOptions options) : options_(std::move(options)) {}

void NodeCapacity::Sample() {
  const int64_t now = options_.now_ms ? options_.now_ms() : MonotonicNowMs();
  if (sampled_ms_ >= 0 && now - sampled_ms_ < options_.sample_interval_ms) return;
  sample_ = options_.read ? options_.read() : ReadHost();
  sampled_ms_ = now;
}

NodeCapacity::View NodeCapacity::ViewOf(Resource r) const {
  const int i = static_cast<int>(r);
  const HostReadings::Reading& h = sample_[r];
  View v;
  v.source = h.source;
  v.reserve = options_.reserve[i];
  v.limit = h.limit;
  if (auto it = options_.limits.find(r); it != options_.limits.end()) {
    v.limit = v.limit ? std::min(*v.limit, it->second) : it->second;
    v.source += "; lowered by --capacity-limit";
  }
  // The host's count shows committed sandboxes; what it does not count
  // comes from the leases. Creates in flight are reserved on top.
  v.used = (h.used ? *h.used : held_[i]) + in_flight_[i];
  return v;
}

absl::StatusOr<CapacityLease> NodeCapacity::Reserve(const tier::Footprint& need, const std::string& tier) {
  std::lock_guard<std::mutex> lock(mu_);
  Sample();
  for (int i = 0; i < kResourceCount; ++i) {
    const Resource r = static_cast<Resource>(i);
    const int64_t n = Amount(need, r);
    if (n <= 0) continue;
    const View v = ViewOf(r);
    if (!v.limit || !v.used) continue;  // the host does not say: not checked (health shows it)
    if (*v.used + n > *v.limit - v.reserve) {
      refused_[i]++;
      return absl::ResourceExhaustedError(absl::StrCat(
          "node full: ", ResourceName(r), ": ", ResourceDisplay(r, *v.used), " in use + ",
          ResourceDisplay(r, n), " for this ", tier, " sandbox > limit ", ResourceDisplay(r, *v.limit),
          " - ", ResourceDisplay(r, v.reserve), " kept free (", v.source, ")"));
    }
  }
  for (int i = 0; i < kResourceCount; ++i) in_flight_[i] += Amount(need, static_cast<Resource>(i));
  return CapacityLease(this, need);
}

void NodeCapacity::Unreserve(const tier::Footprint& need, bool committed, bool release_committed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < kResourceCount; ++i) {
    const int64_t n = Amount(need, static_cast<Resource>(i));
    if (!committed) {
      in_flight_[i] -= n;
      // Committing: what the host does not count stays held by the lease.
      if (!release_committed && !sample_.r[i].used) held_[i] += n;
    } else if (release_committed && !sample_.r[i].used) {
      held_[i] -= n;
    }
  }
}

nlohmann::json NodeCapacity::Headroom(const std::map<std::string, tier::Footprint>& tiers) {
  std::lock_guard<std::mutex> lock(mu_);
  sampled_ms_ = -1;  // health is rare: always fresh
  Sample();
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json resources = nlohmann::json::object();
  std::array<std::optional<int64_t>, kResourceCount> free{};
  for (int i = 0; i < kResourceCount; ++i) {
    const Resource r = static_cast<Resource>(i);
    const View v = ViewOf(r);
    nlohmann::json j = {{"reserve", v.reserve}, {"source", v.source}, {"refused", refused_[i]}};
    j["used"] = v.used ? nlohmann::json(*v.used) : nlohmann::json(nullptr);
    j["limit"] = v.limit ? nlohmann::json(*v.limit) : nlohmann::json(nullptr);
    if (v.limit && v.used) {
      free[i] = std::max<int64_t>(0, *v.limit - v.reserve - *v.used);
      j["free"] = *free[i];
    } else {
      j["free"] = nullptr;
      j["checked"] = false;
    }
    resources[ResourceName(r)] = std::move(j);
  }
  out["resources"] = std::move(resources);
  nlohmann::json more = nlohmann::json::object();
  for (const auto& [name, f] : tiers) {
    std::optional<int64_t> fit;
    std::string by = "nothing counted";
    for (int i = 0; i < kResourceCount; ++i) {
      const int64_t n = Amount(f, static_cast<Resource>(i));
      if (n <= 0 || !free[i]) continue;
      const int64_t k = *free[i] / n;
      if (!fit || k < *fit) {
        fit = k;
        by = kNames[i];
      }
    }
    more[name] = {{"sandboxes", fit ? nlohmann::json(*fit) : nlohmann::json(nullptr)}, {"limited_by", by}};
  }
  out["sandboxes_more"] = std::move(more);
  return out;
}

std::array<uint64_t, kResourceCount> NodeCapacity::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

std::string RaiseOpenFileLimit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return "open-file limit: getrlimit failed";
  const rlim_t before = rl.rlim_cur;
  std::string why;
  // With CAP_SYS_RESOURCE the hard limit may rise to fs.nr_open.
  if (std::optional<int64_t> nr_open = ReadInt("/proc/sys/fs/nr_open");
      nr_open && rl.rlim_max != RLIM_INFINITY && static_cast<rlim_t>(*nr_open) > rl.rlim_max) {
    struct rlimit up = {static_cast<rlim_t>(*nr_open), static_cast<rlim_t>(*nr_open)};
    if (::setrlimit(RLIMIT_NOFILE, &up) == 0) {
      return absl::StrCat("open-file limit ", before, " -> ", *nr_open, " (fs.nr_open)");
    }
    why = absl::StrCat("; the hard limit stays at ", rl.rlim_max, ": raising it to fs.nr_open (", *nr_open,
                       ") needs CAP_SYS_RESOURCE");
  }
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) {
      return absl::StrCat("open-file limit ", before, " -> ", rl.rlim_max, why);
    }
  }
  return absl::StrCat("open-file limit ", before, why);
}

}  // namespace dsec::daemon
