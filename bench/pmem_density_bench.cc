// SPDX-License-Identifier: Apache-2.0
#include "bench/pmem_density_bench.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "base/file_io.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::bench {

namespace {

constexpr char kMemcgRoot[] = "/sys/fs/cgroup/memory";

// The test guest's layer checksum (guest-kernel/testguest/virtio.h,
// tg_wsum64): sum of w[i] * (2i + 1) over little-endian 64-bit words.
uint64_t WordSum(uint64_t sum, uint64_t first, const uint64_t* p, size_t n) {
  uint64_t k = 2 * first + 1;
  for (size_t i = 0; i < n; ++i, k += 2) sum += p[i] * k;
  return sum;
}

// A file of `mib` MiB of xorshift64 words (incompressible, no zero pages).
// Removed on destruction.
class ImageFile {
 public:
  static absl::StatusOr<ImageFile> Create(const std::string& dir, int mib) {
    std::string path = absl::StrCat(dir, "/dsec-pmem-bench-XXXXXX");
    ScopedFd fd(::mkstemp(path.data()));
    if (!fd.valid()) return ErrnoStatus(absl::StrCat("mkstemp in ", dir));
    ImageFile image(path);
    std::vector<uint64_t> chunk((1 << 20) / 8);
    uint64_t x = 0x9e3779b97f4a7c15ull, sum = 0, index = 0;
    for (int m = 0; m < mib; ++m) {
      for (uint64_t& w : chunk) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w = x;
      }
      sum = WordSum(sum, index, chunk.data(), chunk.size());
      index += chunk.size();
      const char* p = reinterpret_cast<const char*>(chunk.data());
      size_t left = chunk.size() * 8;
      while (left > 0) {
        ssize_t n = ::write(fd.get(), p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ErrnoStatus("write(image)");
        p += n;
        left -= static_cast<size_t>(n);
      }
    }
    if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync(image)");
    image.checksum_ = sum;
    image.bytes_ = static_cast<uint64_t>(mib) << 20;
    return image;
  }
  ImageFile(ImageFile&& o) noexcept
      : path_(std::exchange(o.path_, "")), checksum_(o.checksum_), bytes_(o.bytes_) {}
  ImageFile& operator=(ImageFile&&) = delete;
  ~ImageFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  uint64_t checksum() const { return checksum_; }

  // Drops the file's clean page cache; returns the bytes still resident.
  absl::StatusOr<uint64_t> DropCache() const {
    ScopedFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus("open(image)");
    if (int err = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED); err != 0) {
      return ErrnoStatus("posix_fadvise(DONTNEED)", err);
    }
    DSEC_ASSIGN_OR_RETURN(Mmap map, Mmap::File(fd.get(), bytes_, PROT_READ, MAP_SHARED));
    std::vector<unsigned char> vec(bytes_ / 4096);
    if (::mincore(map.data(), bytes_, vec.data()) != 0) return ErrnoStatus("mincore");
    uint64_t resident = 0;
    for (unsigned char c : vec) resident += (c & 1) ? 4096 : 0;
    return resident;
  }

 private:
  explicit ImageFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
  uint64_t checksum_ = 0;
  uint64_t bytes_ = 0;
};

// A v1 memory cgroup of our own; removed on destruction (its tasks have
// exited by then; charged page cache moves to the parent).
class MemoryCgroup {
 public:
  static absl::StatusOr<MemoryCgroup> Create(const std::string& name) {
    std::string path = absl::StrCat(kMemcgRoot, "/", name);
    if (::mkdir(path.c_str(), 0755) != 0) return ErrnoStatus(absl::StrCat("mkdir ", path));
    return MemoryCgroup(path);
  }
  MemoryCgroup(MemoryCgroup&& o) noexcept : path_(std::exchange(o.path_, "")) {}
  MemoryCgroup& operator=(MemoryCgroup&&) = delete;
  ~MemoryCgroup() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  std::string procs_path() const { return path_ + "/cgroup.procs"; }
  uint64_t ReadU64(const char* file) const {
    const std::string path = path_ + "/" + file;
    auto text = ReadSmallFile(path);
    absl::StatusOr<long long> v = text.ok() ? ParseIntFile(path, *text) : text.status();
    return v.ok() && *v > 0 ? static_cast<uint64_t>(*v) : 0;
  }

 private:
  explicit MemoryCgroup(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

struct Round {
  std::string name;
  uint64_t peak_bytes = 0;
  uint64_t cache_after_bytes = 0;
  uint64_t resident_before_bytes = 0;
  std::vector<double> read_ms;
  int failures = 0;
  std::string first_error;
};

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

// Runs `vms` copies of argv at once inside a fresh memory cgroup; each
// child joins the cgroup itself (before exec) so that everything it
// allocates or reads is charged there.
absl::StatusOr<Round> RunRound(const PmemDensityOptions& o, const std::string& name,
                               const std::string& tmp, const std::vector<std::string>& device_args,
                               const std::string& workload, std::optional<uint64_t> checksum) {
  Round round;
  round.name = name;
  DSEC_ASSIGN_OR_RETURN(MemoryCgroup cg, MemoryCgroup::Create(absl::StrCat(
                                             "dsec-pmem-bench-", ::getpid(), "-", name)));
  std::vector<Subprocess> vms;
  std::vector<std::string> outs, stats;
  for (int i = 0; i < o.vms; ++i) {
    outs.push_back(absl::StrCat(tmp, "/", name, "-", i, ".out"));
    stats.push_back(absl::StrCat(tmp, "/", name, "-", i, ".json"));
    SpawnOptions spawn;
    spawn.argv = {o.monitor, "--kernel", o.kernel,
                  "--mem-mib", absl::StrCat(o.image_mib + 64),
                  "--console", "none", "--timeout-ms",
                  absl::StrCat(o.timeout_ms), "--stats-json", stats.back(),
                  "--cmdline", absl::StrCat("testguest.run=", workload)};
    spawn.argv.insert(spawn.argv.end(), device_args.begin(), device_args.end());
    spawn.out = Stdio::File(outs.back());
    // Each child joins the cgroup itself before exec, so that everything it
    // allocates or reads is charged there.
    spawn.join_cgroup_procs = {cg.procs_path()};
    DSEC_ASSIGN_OR_RETURN(Subprocess vm, Subprocess::Spawn(spawn));
    vms.push_back(std::move(vm));
  }
  for (size_t i = 0; i < vms.size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(SubprocessResult ended, vms[i].Wait());
    const int status = ended.wait_status;
    std::ifstream out(outs[i]);
    std::string line, result;
    while (std::getline(out, line)) {
      if (line.find("result workload=") != std::string::npos) result = line;
    }
    std::string error;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      error = absl::StrFormat("vm %d exited with status %d", i, status);
    } else if (checksum) {
      const std::string want = absl::StrFormat("checksum=0x%x", *checksum);
      if (result.find(want + " ") == std::string::npos) {
        error = absl::StrCat("vm ", i, ": checksum mismatch: ", result);
      }
    }
    if (!error.empty()) {
      if (round.failures++ == 0) round.first_error = error;
      continue;
    }
    std::ifstream in(stats[i]);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.contains("monotonic_ns")) {
      const int64_t user = j["monotonic_ns"].value("first_user", int64_t{0});
      const int64_t done = j["monotonic_ns"].value("workload_done", int64_t{0});
      if (user > 0 && done > user) round.read_ms.push_back(static_cast<double>(done - user) / 1e6);
    }
  }
  round.peak_bytes = cg.ReadU64("memory.max_usage_in_bytes");
  round.cache_after_bytes = cg.ReadU64("memory.usage_in_bytes");
  return round;
}

double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int RunPmemDensityBench(const PmemDensityOptions& o) {
  if (o.vms < 1 || o.image_mib < 2 || o.image_mib % 2 != 0) {
    std::fprintf(stderr, "bench pmem-density: --vms >= 1 and an even --image-mib >= 2 needed\n");
    return 2;
  }
  if (o.kernel.empty() || ::access(o.kernel.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "bench pmem-density: test guest not found (%s); build it first\n",
                 o.kernel.c_str());
    return 2;
  }
  if (::access(absl::StrCat(kMemcgRoot, "/cgroup.procs").c_str(), W_OK) != 0) {
    std::fprintf(stderr,
                 "bench pmem-density: needs the cgroup v1 memory controller at %s (as root)\n",
                 kMemcgRoot);
    return 2;
  }
  char tmpl[] = "/tmp/dsec-pmem-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("bench pmem-density: mkdtemp");
    return 5;
  }
  const std::string tmp = tmpl;
  int rc = 0;
  {
    auto image = ImageFile::Create(o.dir, o.image_mib);
    if (!image.ok()) {
      std::fprintf(stderr, "bench pmem-density: %s\n", image.status().ToString().c_str());
      ::rmdir(tmp.c_str());
      return 5;
    }
    struct Plan {
      const char* name;
      std::vector<std::string> args;
      const char* workload;
      bool check;
    };
    const std::vector<Plan> plans = {
        {"baseline", {}, "boot", false},
        {"pmem", {"--pmem", image->path() + ",ro"}, "pmem-read", true},
        {"blk", {"--disk", image->path() + ",ro"}, "blk-read", true},
    };
    std::vector<Round> rounds;
    for (const Plan& plan : plans) {
      auto resident = image->DropCache();
      if (!resident.ok()) {
        std::fprintf(stderr, "bench pmem-density: %s\n", resident.status().ToString().c_str());
        rc = 5;
        break;
      }
      auto round = RunRound(o, plan.name, tmp, plan.args, plan.workload,
                            plan.check ? std::optional<uint64_t>(image->checksum()) : std::nullopt);
      if (!round.ok()) {
        std::fprintf(stderr, "bench pmem-density: %s\n", round.status().ToString().c_str());
        rc = 5;
        break;
      }
      round->resident_before_bytes = *resident;
      if (round->failures > 0) {
        std::fprintf(stderr, "bench pmem-density: %s round: %d of %d VMs failed (%s)\n",
                     plan.name, round->failures, o.vms, round->first_error.c_str());
        rc = 1;
      }
      rounds.push_back(std::move(*round));
    }
    if (rounds.size() == plans.size()) {
      const Round& base = rounds[0];
      const Round& pm = rounds[1];
      const Round& blk = rounds[2];
      const double reduction =
          blk.peak_bytes > 0 ? 1.0 - static_cast<double>(pm.peak_bytes) / blk.peak_bytes : 0;
      // Target: one copy of the image + the VMs' private memory + 5%.
      const double bound_mib = (o.image_mib + Mib(base.peak_bytes)) * 1.05;
      const double pmem_read = Median(pm.read_ms), blk_read = Median(blk.read_ms);
      nlohmann::json out = {
          {"vms", o.vms},
          {"image_mib", o.image_mib},
          {"pmem_peak_mib", Mib(pm.peak_bytes)},
          {"blk_peak_mib", Mib(blk.peak_bytes)},
          {"reduction", reduction},
          {"baseline_peak_mib", Mib(base.peak_bytes)},
          {"pmem_bound_mib", bound_mib},
          {"pmem_within_bound", Mib(pm.peak_bytes) <= bound_mib},
          {"pmem_read_ms_p50", pmem_read},
          {"blk_read_ms_p50", blk_read},
          {"image_resident_before_mib",
           {Mib(base.resident_before_bytes), Mib(pm.resident_before_bytes),
            Mib(blk.resident_before_bytes)}},
          {"measure", "memory cgroup v1 memory.max_usage_in_bytes per round"},
      };
      if (o.json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        std::printf("bench pmem-density: %d VMs at once, image %d MiB (guest RAM %d MiB each)\n",
                    o.vms, o.image_mib, o.image_mib + 64);
        std::printf("  host memory = peak of one memory cgroup (v1) holding all %d monitors:\n"
                    "  anonymous + memfd guest RAM + page cache they read (charged once, to the\n"
                    "  first reader), so shared layer pages count once, private copies N times.\n"
                    "  The image's page cache is dropped (fadvise DONTNEED) before each round.\n",
                    o.vms);
        std::printf("  baseline (boot, no image)   peak %8.1f MiB\n", Mib(base.peak_bytes));
        std::printf("  pmem-DAX (pmem-read)        peak %8.1f MiB   read p50 %8.1f ms/VM\n",
                    Mib(pm.peak_bytes), pmem_read);
        std::printf("  virtio-blk (blk-read)       peak %8.1f MiB   read p50 %8.1f ms/VM\n",
                    Mib(blk.peak_bytes), blk_read);
        std::printf("  reduction %.1f%% (target >= 50%%); pmem peak %s one image + baseline + 5%% "
                    "(%.1f MiB)\n",
                    reduction * 100, Mib(pm.peak_bytes) <= bound_mib ? "within" : "ABOVE",
                    bound_mib);
        std::printf("  read time: guest CPL3 start -> workload done (monitor timestamps); pmem "
                    "%.2fx of blk\n",
                    blk_read > 0 ? pmem_read / blk_read : 0);
      }
    }
  }
  for (const char* prefix : {"baseline", "pmem", "blk"}) {
    for (int i = 0; i < o.vms; ++i) {
      ::unlink(absl::StrCat(tmp, "/", prefix, "-", i, ".out").c_str());
      ::unlink(absl::StrCat(tmp, "/", prefix, "-", i, ".json").c_str());
    }
  }
  ::rmdir(tmp.c_str());
  return rc;
}

}  // namespace dsec::bench
