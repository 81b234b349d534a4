// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_request.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::devices {

absl::StatusOr<std::vector<uint32_t>> ParsePfnRequest(const virtio::DescriptorChain& chain,
                                                      const memory::GuestMemory& memory,
                                                      uint32_t max_pfns) {
  // Guest-controlled: the chain's shape and every PFN; the queue checked the
  // buffers lie in guest memory, the device checks each PFN against RAM.
  if (!chain.writable.empty()) {
    return absl::InvalidArgumentError("virtio-balloon: PFN buffer has device-writable parts");
  }
  const uint64_t bytes = chain.ReadableBytes();
  if (bytes == 0 || bytes % sizeof(uint32_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("virtio-balloon: PFN buffer of %d bytes is not a le32 array", bytes));
  }
  if (bytes / sizeof(uint32_t) > max_pfns) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "virtio-balloon: %d PFNs in one buffer (at most %d)", bytes / sizeof(uint32_t), max_pfns));
  }
  std::vector<uint32_t> pfns(bytes / sizeof(uint32_t));
  virtio::ChainReader reader(memory, chain);
  DSEC_RETURN_IF_ERROR(reader.Read(
      std::span<uint8_t>(reinterpret_cast<uint8_t*>(pfns.data()), pfns.size() * sizeof(uint32_t))));
  return pfns;  // little-endian on x86: the array is usable as read
}

absl::StatusOr<BalloonStats> ParseStatsRequest(const virtio::DescriptorChain& chain,
                                               const memory::GuestMemory& memory,
                                               uint32_t max_entries) {
  // Guest-controlled: the chain's shape and every tag/value.
  if (!chain.writable.empty()) {
    return absl::InvalidArgumentError("virtio-balloon: stats buffer has device-writable parts");
  }
  const uint64_t bytes = chain.ReadableBytes();
  if (bytes % sizeof(BalloonStatEntry) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "virtio-balloon: stats buffer of %d bytes is not a whole number of entries", bytes));
  }
  if (bytes / sizeof(BalloonStatEntry) > max_entries) {
    return absl::InvalidArgumentError(
        absl::StrFormat("virtio-balloon: %d stats entries (at most %d)",
                        bytes / sizeof(BalloonStatEntry), max_entries));
  }
  BalloonStats stats;
  virtio::ChainReader reader(memory, chain);
  for (uint64_t i = 0; i < bytes / sizeof(BalloonStatEntry); ++i) {
    DSEC_ASSIGN_OR_RETURN(BalloonStatEntry entry, reader.ReadObj<BalloonStatEntry>());
    if (entry.tag >= kBalloonStatTagCount) {
      ++stats.unknown_tags;
      continue;
    }
    stats.Set(static_cast<BalloonStatTag>(entry.tag), entry.val);
  }
  return stats;
}

absl::StatusOr<std::vector<BalloonGuestRange>> ParseReportRequest(
    const virtio::DescriptorChain& chain, uint32_t max_ranges) {
  // Guest-controlled: every range (the queue checked each lies in guest
  // memory; the device checks alignment and releasability).
  const size_t n = chain.readable.size() + chain.writable.size();
  if (n == 0) return absl::InvalidArgumentError("virtio-balloon: empty report");
  if (n > max_ranges) {
    return absl::InvalidArgumentError(
        absl::StrFormat("virtio-balloon: %d reported ranges in one buffer (at most %d)", n,
                        max_ranges));
  }
  std::vector<BalloonGuestRange> ranges;
  ranges.reserve(n);
  for (const virtio::GuestBuffer& b : chain.readable) ranges.push_back({b.gpa, b.len});
  for (const virtio::GuestBuffer& b : chain.writable) ranges.push_back({b.gpa, b.len});
  return ranges;
}

CoalescedPfns CoalescePfns(std::vector<uint32_t> pfns) {
  CoalescedPfns out;
  std::sort(pfns.begin(), pfns.end());
  for (size_t i = 0; i < pfns.size(); ++i) {
    if (i > 0 && pfns[i] == pfns[i - 1]) {
      ++out.duplicates;
      continue;
    }
    if (!out.runs.empty() && out.runs.back().first_pfn + out.runs.back().count == pfns[i]) {
      ++out.runs.back().count;
    } else {
      out.runs.push_back({pfns[i], 1});
    }
  }
  return out;
}

CoalescedRanges CoalesceRanges(const std::vector<BalloonGuestRange>& ranges) {
  std::vector<PageRun> runs;
  runs.reserve(ranges.size());
  for (const BalloonGuestRange& r : ranges) {
    if (r.len < kBalloonPageSize) continue;  // no whole page
    runs.push_back({r.gpa >> kBalloonPageShift, r.len >> kBalloonPageShift});
  }
  std::sort(runs.begin(), runs.end(),
            [](const PageRun& a, const PageRun& b) { return a.first_pfn < b.first_pfn; });
  CoalescedRanges out;
  for (const PageRun& run : runs) {
    if (!out.runs.empty()) {
      PageRun& last = out.runs.back();
      const uint64_t last_end = last.first_pfn + last.count;
      if (run.first_pfn <= last_end) {
        const uint64_t run_end = run.first_pfn + run.count;
        out.duplicate_pages += std::min(run_end, last_end) - run.first_pfn;
        if (run_end > last_end) last.count = run_end - last.first_pfn;
        continue;
      }
    }
    out.runs.push_back(run);
  }
  return out;
}

}  // namespace dsec::devices
