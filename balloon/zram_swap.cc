// SPDX-License-Identifier: Apache-2.0
#include "balloon/zram_swap.h"

#include <fcntl.h>
#include <sys/swap.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::balloon {

namespace {

constexpr char kControl[] = "/sys/class/zram-control";

// `modprobe zram num_devices=0`: loads the module without creating zram0 (a
// device nobody would remove). Its failure shows as the missing control
// directory.
void TryModprobe() {
  SpawnOptions o;
  o.argv = {"modprobe", "zram", "num_devices=0"};
  (void)RunSubprocess(o);
}

}  // namespace

absl::StatusOr<ZramMmStat> ParseZramMmStat(std::string_view text_in) {
  // Debian's Abseil has its own string_view.
  const absl::string_view text(text_in.data(), text_in.size());
  std::vector<absl::string_view> f = absl::StrSplit(text, ' ', absl::SkipWhitespace());
  ZramMmStat s;
  if (f.size() < 3 || !absl::SimpleAtoi(f[0], &s.orig_data_size) ||
      !absl::SimpleAtoi(f[1], &s.compr_data_size) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(f[2]), &s.mem_used_total)) {
    return absl::InvalidArgumentError(absl::StrCat("zram mm_stat: cannot parse '", text, "'"));
  }
  return s;
}

absl::StatusOr<std::unique_ptr<ZramSwap>> ZramSwap::Create(uint64_t size_bytes, int priority) {
  if (::geteuid() != 0) return absl::PermissionDeniedError("zram swap needs root");
  if (size_bytes < (1 << 20) || size_bytes % 4096 != 0) {
    return absl::InvalidArgumentError("zram swap: size must be >= 1 MiB, page-aligned");
  }
  if (!PathExists(kControl)) TryModprobe();
  if (!PathExists(kControl)) {
    return absl::UnavailableError(
        "zram: /sys/class/zram-control missing (no zram module, modprobe zram failed)");
  }
  std::unique_ptr<ZramSwap> z(new ZramSwap());
  {
    // Reading hot_add creates a device and says its number.
    const std::string hot_add = absl::StrCat(kControl, "/hot_add");
    auto text = ReadSmallFile(hot_add);
    absl::StatusOr<long long> id = text.ok() ? ParseIntFile(hot_add, *text) : text.status();
    if (!id.ok() || *id < 0 || *id > INT32_MAX) {
      return absl::UnavailableError(absl::StrCat("zram: hot_add gave no device: ", id.status().message()));
    }
    z->id_ = static_cast<int>(*id);
  }
  z->dev_ = absl::StrCat("/dev/zram", z->id_);
  if (absl::Status s = WriteSmallFile(absl::StrCat("/sys/block/zram", z->id_, "/disksize"), absl::StrCat(size_bytes));
      !s.ok()) {
    return absl::UnavailableError(absl::StrCat("zram: cannot set disksize of ", z->dev_, ": ", s.message()));
  }
  // mkswap by hand: the v1 swap header (include/linux/swap.h union
  // swap_header: version at 1024, last_page at 1028, magic at the page end).
  std::vector<uint8_t> page(4096, 0);
  const uint32_t version = 1;
  const uint32_t last_page = static_cast<uint32_t>(size_bytes / 4096 - 1);
  std::memcpy(&page[1024], &version, 4);
  std::memcpy(&page[1028], &last_page, 4);
  std::memcpy(&page[4096 - 10], "SWAPSPACE2", 10);
  {
    ScopedFd fd(::open(z->dev_.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", z->dev_));
    if (::pwrite(fd.get(), page.data(), page.size(), 0) != 4096) {
      return ErrnoStatus(absl::StrCat("write swap header to ", z->dev_));
    }
    ::fsync(fd.get());
  }
  int flags = 0;
  if (priority >= 0) {
    flags = SWAP_FLAG_PREFER | ((priority << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK);
  }
  if (::swapon(z->dev_.c_str(), flags) != 0) {
    return absl::UnavailableError(
        absl::StrCat("zram: swapon ", z->dev_, ": ", std::strerror(errno)));
  }
  z->on_ = true;
  return z;
}

ZramSwap::~ZramSwap() {
  if (on_) ::swapoff(dev_.c_str());
  if (id_ >= 0) {
    (void)WriteSmallFile(absl::StrCat("/sys/block/zram", id_, "/reset"), "1");
    (void)WriteSmallFile(absl::StrCat(kControl, "/hot_remove"), absl::StrCat(id_));
  }
}

absl::StatusOr<ZramMmStat> ZramSwap::MmStat() const {
  DSEC_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(absl::StrCat("/sys/block/zram", id_, "/mm_stat")));
  return ParseZramMmStat(text);
}

}  // namespace dsec::balloon
