// SPDX-License-Identifier: Apache-2.0
#include "balloon/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <charconv>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::balloon {

absl::StatusOr<std::unique_ptr<ProcSelfMemoryOps>> ProcSelfMemoryOps::Create() {
  ScopedFd fd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus("open /proc/self/pagemap");
  return std::unique_ptr<ProcSelfMemoryOps>(new ProcSelfMemoryOps(std::move(fd)));
}

absl::Status ProcSelfMemoryOps::ReadPagemap(uint64_t addr, std::span<uint64_t> out) {
  uint64_t done = 0;
  const uint64_t bytes = out.size() * sizeof(uint64_t);
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  while (done < bytes) {
    const ssize_t n = ::pread(pagemap_.get(), dst + done, bytes - done,
                              static_cast<off_t>(addr / kHostPageSize * 8 + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus("pread /proc/self/pagemap");
    if (n == 0) return absl::InternalError("pread /proc/self/pagemap: short read");
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ProcSelfMemoryOps::Residency(uint64_t addr, std::span<uint8_t> out) {
  if (::mincore(reinterpret_cast<void*>(addr), out.size() * kHostPageSize, out.data()) != 0) {
    return ErrnoToStatus("mincore(guest RAM)");
  }
  return absl::OkStatus();
}

absl::Status ProcSelfMemoryOps::Advise(uint64_t addr, uint64_t len, int advice) {
  if (::madvise(reinterpret_cast<void*>(addr), len, advice) != 0) {
    return ErrnoToStatus(absl::StrFormat("madvise(%d, guest RAM)", advice));
  }
  return absl::OkStatus();
}

absl::StatusOr<SwapSummary> ParseSwaps(std::string_view text) {
  SwapSummary s;
  std::istringstream in{std::string(text)};
  std::string line;
  std::getline(in, line);  // "Filename Type Size Used Priority"
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, type;
    uint64_t size_kb = 0, used_kb = 0;
    if (line.empty()) continue;
    if (!(fields >> name >> type >> size_kb >> used_kb)) {
      return absl::InvalidArgumentError("/proc/swaps: unexpected line \"" + line + "\"");
    }
    ++s.devices;
    s.total_bytes += size_kb * 1024;
    s.used_bytes += used_kb * 1024;
  }
  return s;
}

absl::StatusOr<SwapSummary> ReadSwaps(const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  return ParseSwaps(text);
}

absl::Status CheckSharedMappings(std::string_view maps_text, std::span<const HostRange> ranges) {
  struct Mapping {
    uint64_t start, end;
    bool shared;
  };
  std::vector<Mapping> maps;
  std::istringstream in{std::string(maps_text)};
  std::string line;
  while (std::getline(in, line)) {
    // "start-end perms offset dev inode path"
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    if (dash == std::string::npos || space == std::string::npos || space < dash ||
        space + 4 >= line.size()) {
      continue;
    }
    Mapping m{};
    auto r1 = std::from_chars(line.data(), line.data() + dash, m.start, 16);
    auto r2 = std::from_chars(line.data() + dash + 1, line.data() + space, m.end, 16);
    if (r1.ec != std::errc() || r2.ec != std::errc()) continue;
    m.shared = line[space + 4] == 's';
    maps.push_back(m);
  }
  for (const HostRange& r : ranges) {
    uint64_t at = r.addr;
    while (at < r.end()) {
      const Mapping* hit = nullptr;
      for (const Mapping& m : maps) {
        if (at >= m.start && at < m.end) hit = &m;
      }
      if (hit == nullptr || !hit->shared) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "guest RAM at 0x%x is not a shared mapping; the estimator would lose its content", at));
      }
      at = hit->end;
    }
  }
  return absl::OkStatus();
}

}  // namespace dsec::balloon
