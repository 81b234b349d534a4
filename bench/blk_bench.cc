// SPDX-License-Identifier: Apache-2.0
#include "bench/blk_bench.h"

#include <fcntl.h>
#include <unistd.h>
#include <x86intrin.h>

#include <liburing.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "devices/blk/blk_spec.h"
#include "vmm/vm/vm.h"
#include "vmm/vm/vm_config.h"

namespace dsec::bench {

namespace {

constexpr uint64_t kSector = 512;
// The test guest's blk-bench (guest-kernel/testguest/virtio_blk.c).
constexpr uint64_t kSeqBytes = 64 << 10;
constexpr uint64_t kRandBytes = 4096;
constexpr uint64_t kRandSeed = 0x9e3779b97f4a7c15ull;

struct Mode {
  const char* name;
  bool write;
  bool random;
  uint64_t request_bytes() const { return random ? kRandBytes : kSeqBytes; }
};
constexpr Mode kModes[] = {
    {"seqread", false, false},
    {"seqwrite", true, false},
    {"randread", false, true},
    {"randwrite", true, true},
};

uint64_t XorShift(uint64_t& state) {
  // Marsaglia 2003, as the guest does it.
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// The disk image: a temporary file under /tmp, filled from a PRNG, removed
// on destruction.
class TempImage {
 public:
  static absl::StatusOr<std::unique_ptr<TempImage>> Create(uint64_t bytes) {
    std::string path = "/tmp/dsec-bench-blk-XXXXXX";
    int fd = ::mkstemp(path.data());
    if (fd < 0) return ErrnoStatus("mkstemp /tmp/dsec-bench-blk-XXXXXX");
    auto image = std::unique_ptr<TempImage>(new TempImage(path, ScopedFd(fd)));
    std::vector<uint64_t> chunk((1 << 20) / sizeof(uint64_t));
    uint64_t state = 0x243f6a8885a308d3ull;
    for (uint64_t done = 0; done < bytes; done += chunk.size() * sizeof(uint64_t)) {
      for (uint64_t& word : chunk) word = XorShift(state);
      size_t n = std::min<uint64_t>(chunk.size() * sizeof(uint64_t), bytes - done);
      if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(done)) != static_cast<ssize_t>(n)) {
        return ErrnoStatus(absl::StrCat("pwrite ", path));
      }
    }
    return image;
  }
  ~TempImage() { ::unlink(path_.c_str()); }

  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

  // Writes dirty pages back and drops the file from the page cache, so that
  // every run (guest or host) starts from the same state.
  absl::Status DropCache() const {
    if (::fdatasync(fd_.get()) != 0) return ErrnoStatus("fdatasync");
    int err = ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_DONTNEED);
    if (err != 0) return ErrnoStatus("posix_fadvise(DONTNEED)", err);
    return absl::OkStatus();
  }

 private:
  TempImage(std::string path, ScopedFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  ScopedFd fd_;
};

struct GuestResult {
  uint64_t bytes = 0, requests = 0, request_bytes = 0, depth = 0, cycles = 0, tsc_khz = 0;
  double host_tsc_hz = 0;   // TSC rate measured by the host during this boot
  double loop_s = 0;        // guest I/O loop: cycles / host_tsc_hz
  double window_s = 0;      // host wall time between the two report lines around the loop
};

struct Line {
  int64_t ns;
  uint64_t tsc;
  std::string text;
};

std::map<std::string, std::string> KeyValues(std::string_view line) {
  std::map<std::string, std::string> kv;
  for (absl::string_view word : absl::StrSplit(absl::string_view(line.data(), line.size()), ' ')) {
    size_t eq = word.find('=');
    if (eq != absl::string_view::npos) {
      kv[std::string(word.substr(0, eq))] = std::string(word.substr(eq + 1));
    }
  }
  return kv;
}

uint64_t U64(const std::map<std::string, std::string>& kv, const std::string& key) {
  uint64_t v = 0;
  auto it = kv.find(key);
  if (it == kv.end() || !absl::SimpleAtoi(it->second, &v)) return 0;
  return v;
}

// Boots the test guest with blk-bench:MODE,MiB on `image`. The guest times
// its I/O loop in TSC cycles; its own tsc_khz comes from PIT ticks, which a
// loaded host delays, so the cycles are converted with the TSC rate the host
// measures (rdtsc against CLOCK_MONOTONIC between the guest's first and last
// report lines: the guest's rdtsc reads the host TSC, at the same rate).
absl::StatusOr<GuestResult> RunGuest(const BlkBenchOptions& o, const Mode& mode,
                                     const std::string& image) {
  vm::VmConfig config;
  config.kernel_path = o.kernel;
  config.cmdline = absl::StrCat("testguest.run=blk-bench:", mode.name, ",", o.mib);
  config.mem_mib = 64;
  config.console.kind = vm::ConsoleConfig::Kind::kNone;
  config.devices = {devices::BlkSpec::Make(image)};
  config.timeout_ms = 300000;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<vm::Vm> machine, vm::Vm::Create(config));
  absl::Mutex mu;
  std::vector<Line> lines;
  machine->SetTestMessageCallback([&](std::string_view text) {
    Line line{MonotonicNowNs(), __rdtsc(), std::string(text)};
    absl::MutexLock lock(&mu);
    lines.push_back(std::move(line));
  });
  DSEC_RETURN_IF_ERROR(machine->Start());
  vm::VmStats stats = machine->Wait();
  absl::MutexLock lock(&mu);
  size_t result = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].text.rfind("result workload=blk-bench", 0) == 0) result = i;
  }
  if (stats.stop.reason != vm::StopReason::kGuestShutdown || stats.stop.guest_exit_code != 0 ||
      result == lines.size() || result == 0) {
    std::string last;
    for (const Line& l : lines) {
      if (l.text.rfind("error", 0) == 0) last = l.text;
    }
    return absl::InternalError(absl::StrCat(
        "guest blk-bench:", mode.name, " failed: ",
        std::string(vm::StopReasonName(stats.stop.reason)),
        " code ", stats.stop.guest_exit_code, " ", stats.stop.detail, " ", last));
  }
  auto kv = KeyValues(lines[result].text);
  GuestResult r;
  r.bytes = U64(kv, "bytes");
  r.requests = U64(kv, "requests");
  r.request_bytes = U64(kv, "request_bytes");
  r.depth = U64(kv, "depth");
  r.cycles = U64(kv, "cycles");
  r.tsc_khz = U64(kv, "tsc_khz");
  const Line& first = lines.front();
  const Line& last = lines[result];
  if (last.ns <= first.ns || r.cycles == 0 || r.requests == 0) {
    return absl::InternalError(absl::StrCat("guest report unusable: ", last.text));
  }
  r.host_tsc_hz = static_cast<double>(last.tsc - first.tsc) * 1e9 /
                  static_cast<double>(last.ns - first.ns);
  r.loop_s = static_cast<double>(r.cycles) / r.host_tsc_hz;
  r.window_s = static_cast<double>(last.ns - lines[result - 1].ns) / 1e9;
  return r;
}

// The same requests from this process: buffered pread/pwrite, one at a time.
absl::StatusOr<double> RunHost(const TempImage& image, uint64_t capacity_bytes, const Mode& mode,
                               uint64_t count) {
  const uint64_t size = mode.request_bytes();
  const uint64_t blocks = capacity_bytes / size;
  std::vector<uint64_t> buffer(size / sizeof(uint64_t));
  uint64_t fill = 0x13198a2e03707344ull;
  for (uint64_t& word : buffer) word = XorShift(fill);
  uint64_t rng = kRandSeed;
  const int fd = image.fd();
  int64_t t0 = MonotonicNowNs();
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t block = mode.random ? XorShift(rng) % blocks : i % blocks;
    off_t offset = static_cast<off_t>(block * size);
    ssize_t n = mode.write ? ::pwrite(fd, buffer.data(), size, offset)
                           : ::pread(fd, buffer.data(), size, offset);
    if (n != static_cast<ssize_t>(size)) {
      return ErrnoStatus(mode.write ? "pwrite" : "pread");
    }
  }
  return static_cast<double>(MonotonicNowNs() - t0) / 1e9;
}

// The same requests through io_uring with the guest's queue depth, buffered,
// as the monitor issues them: separates the virtio path's cost from the
// submission mechanism's.
absl::StatusOr<double> RunHostUring(const TempImage& image, uint64_t capacity_bytes,
                                    const Mode& mode, uint64_t count, uint32_t depth) {
  const uint64_t size = mode.request_bytes();
  const uint64_t blocks = capacity_bytes / size;
  io_uring ring;
  int err = io_uring_queue_init(depth, &ring, 0);
  if (err < 0) return ErrnoStatus("io_uring_queue_init", -err);
  std::vector<std::vector<uint8_t>> buffers(depth, std::vector<uint8_t>(size, 0x5a));
  std::vector<uint32_t> free_slots;
  for (uint32_t i = 0; i < depth; ++i) free_slots.push_back(i);
  uint64_t rng = kRandSeed, issued = 0, done = 0;
  absl::Status status;
  int64_t t0 = MonotonicNowNs();
  while (done < count && status.ok()) {
    while (issued < count && !free_slots.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) break;
      uint32_t slot = free_slots.back();
      free_slots.pop_back();
      uint64_t block = mode.random ? XorShift(rng) % blocks : issued % blocks;
      if (mode.write) {
        io_uring_prep_write(sqe, image.fd(), buffers[slot].data(), size, block * size);
      } else {
        io_uring_prep_read(sqe, image.fd(), buffers[slot].data(), size, block * size);
      }
      io_uring_sqe_set_data64(sqe, slot);
      ++issued;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    err = io_uring_wait_cqe(&ring, &cqe);
    if (err == -EINTR) continue;
    if (err < 0) {
      status = ErrnoStatus("io_uring_wait_cqe", -err);
      break;
    }
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      if (cqe->res != static_cast<int>(size) && status.ok()) {
        status = ErrnoStatus(mode.write ? "io_uring write" : "io_uring read",
                             cqe->res < 0 ? -cqe->res : EIO);
      }
      free_slots.push_back(static_cast<uint32_t>(io_uring_cqe_get_data64(cqe)));
      ++done;
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
  }
  double s = static_cast<double>(MonotonicNowNs() - t0) / 1e9;
  io_uring_queue_exit(&ring);
  if (!status.ok()) return status;
  return s;
}

struct ModeRun {
  GuestResult guest;
  double host_s = 0;
  double uring_s = 0;
};

// One guest run and both host runs of `mode`, each from a cold page cache.
absl::StatusOr<ModeRun> MeasureMode(const BlkBenchOptions& o, const TempImage& image,
                                    uint64_t capacity, const Mode& mode) {
  ModeRun run;
  DSEC_RETURN_IF_ERROR(image.DropCache());
  DSEC_ASSIGN_OR_RETURN(run.guest, RunGuest(o, mode, image.path()));
  if (run.guest.request_bytes != mode.request_bytes()) {
    return absl::InternalError(absl::StrCat("guest used ", run.guest.request_bytes,
                                            "-byte requests, expected ", mode.request_bytes()));
  }
  DSEC_RETURN_IF_ERROR(image.DropCache());
  DSEC_ASSIGN_OR_RETURN(run.host_s, RunHost(image, capacity, mode, run.guest.requests));
  DSEC_RETURN_IF_ERROR(image.DropCache());
  DSEC_ASSIGN_OR_RETURN(
      run.uring_s, RunHostUring(image, capacity, mode, run.guest.requests,
                                static_cast<uint32_t>(std::max<uint64_t>(run.guest.depth, 1))));
  if (run.guest.loop_s > run.guest.window_s * 1.01) {
    return absl::InternalError(absl::StrCat(
        mode.name, ": the guest's loop by TSC (", run.guest.loop_s * 1e3,
        " ms) exceeds the host's window around it (", run.guest.window_s * 1e3,
        " ms): guest and host TSC rates differ"));
  }
  return run;
}

}  // namespace

int RunBlkBench(const BlkBenchOptions& o) {
  if (o.kernel.empty() || ::access(o.kernel.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "bench blk: test guest not found (%s); build it first\n",
                 o.kernel.c_str());
    return 2;
  }
  if (o.mib == 0 || o.image_mib == 0) {
    std::fprintf(stderr, "bench blk: --mib and --image-mib must be at least 1\n");
    return 2;
  }
  auto image = TempImage::Create(o.image_mib << 20);
  if (!image.ok()) {
    std::fprintf(stderr, "bench blk: %s\n", image.status().ToString().c_str());
    return 1;
  }
  const uint64_t capacity = (o.image_mib << 20) / kSector * kSector;

  nlohmann::json modes = nlohmann::json::array();
  std::vector<std::string> rows;
  double tsc_mhz = 0;
  uint64_t guest_tsc_khz = 0;
  uint64_t depth = 0;
  // Runs interleave modes and, within a mode, guest and host, so drift on a
  // shared machine hits all of them; each figure is the median over runs.
  std::vector<std::vector<ModeRun>> runs(std::size(kModes));
  for (int r = 0; r < o.runs; ++r) {
    for (size_t m = 0; m < std::size(kModes); ++m) {
      auto run = MeasureMode(o, **image, capacity, kModes[m]);
      if (!run.ok()) {
        std::fprintf(stderr, "bench blk: %s\n", run.status().ToString().c_str());
        return 1;
      }
      runs[m].push_back(*run);
    }
  }
  for (size_t m = 0; m < std::size(kModes); ++m) {
    const Mode& mode = kModes[m];
    auto median = [&](auto field) {
      std::vector<double> v;
      for (const ModeRun& run : runs[m]) v.push_back(field(run));
      return Percentile(v, 50);
    };
    const GuestResult* guest = &runs[m].front().guest;
    auto guest_loop = median([](const ModeRun& run) { return run.guest.loop_s; });
    auto host_s = median([](const ModeRun& run) { return run.host_s; });
    auto uring_s = median([](const ModeRun& run) { return run.uring_s; });
    auto window_s = median([](const ModeRun& run) { return run.guest.window_s; });
    const double mib = static_cast<double>(guest->requests * guest->request_bytes) / (1 << 20);
    const double n = static_cast<double>(guest->requests);
    const double guest_mib_s = mib / guest_loop, guest_iops = n / guest_loop;
    const double host_mib_s = mib / host_s, host_iops = n / host_s;
    const double uring_mib_s = mib / uring_s, uring_iops = n / uring_s;
    tsc_mhz = guest->host_tsc_hz / 1e6;
    guest_tsc_khz = guest->tsc_khz;
    depth = guest->depth;
    modes.push_back({{"mode", mode.name},
                     {"guest_mib_s", guest_mib_s},
                     {"guest_iops", guest_iops},
                     {"host_mib_s", host_mib_s},
                     {"host_iops", host_iops},
                     {"ratio", guest_mib_s / host_mib_s},
                     {"host_uring_mib_s", uring_mib_s},
                     {"host_uring_iops", uring_iops},
                     {"uring_ratio", guest_mib_s / uring_mib_s},
                     {"requests", guest->requests},
                     {"request_bytes", guest->request_bytes},
                     {"guest_depth", guest->depth},
                     {"guest_ms", guest_loop * 1e3},
                     {"guest_window_ms", window_s * 1e3},
                     {"host_ms", host_s * 1e3},
                     {"host_uring_ms", uring_s * 1e3}});
    char row[256];
    std::snprintf(row, sizeof(row),
                  "  %-9s %3lluK x %-6llu | %7.0f %7.0f | %7.0f %7.0f %5.2f | %7.0f %7.0f %5.2f\n",
                  mode.name, static_cast<unsigned long long>(guest->request_bytes >> 10),
                  static_cast<unsigned long long>(guest->requests), guest_mib_s, guest_iops / 1e3,
                  host_mib_s, host_iops / 1e3, guest_mib_s / host_mib_s, uring_mib_s,
                  uring_iops / 1e3, guest_mib_s / uring_mib_s);
    rows.push_back(row);
  }
  if (o.json) {
    nlohmann::json out = {
        {"mib", o.mib},
        {"image_mib", o.image_mib},
        {"runs", o.runs},
        {"guest_timing", "guest TSC cycles of its I/O loop / TSC rate measured by the host"},
        {"host_tsc_mhz", tsc_mhz},
        {"guest_tsc_khz", guest_tsc_khz},
        {"host_peer", "buffered pread/pwrite, one request at a time"},
        {"host_uring_peer", "buffered io_uring reads/writes at the guest's depth"},
        {"modes", modes},
    };
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("bench blk: test guest blk-bench, %llu MiB per mode on a %llu MiB raw image in /tmp,"
              " median of %d runs;\n  buffered I/O; the file is written back and dropped from the"
              " page cache before every run\n  (passes after the first over the image hit the host"
              " page cache)\n",
              static_cast<unsigned long long>(o.mib), static_cast<unsigned long long>(o.image_mib),
              o.runs);
  std::printf("  guest: virtio-blk -> io_uring in the monitor, depth %llu; timed by the guest's TSC"
              " cycles of its\n  I/O loop at the host-measured TSC rate (%.1f MHz; the guest's own"
              " estimate %.1f MHz)\n",
              static_cast<unsigned long long>(depth), tsc_mhz,
              static_cast<double>(guest_tsc_khz) / 1e3);
  std::printf("  host: this process, same request sizes, offsets and count: pread/pwrite one at a"
              " time,\n  and io_uring at depth %llu; ratio = guest MiB/s / host MiB/s\n",
              static_cast<unsigned long long>(depth));
  std::printf("  %-9s %-13s | %-15s | %-21s | %s\n", "", "", "guest", "host pread/pwrite",
              "host io_uring");
  std::printf("  %-9s %-13s | %7s %7s | %7s %7s %5s | %7s %7s %5s\n", "mode", "requests",
              "MiB/s", "kIOPS", "MiB/s", "kIOPS", "ratio", "MiB/s", "kIOPS", "ratio");
  for (const std::string& row : rows) std::printf("%s", row.c_str());
  return 0;
}

}  // namespace dsec::bench
