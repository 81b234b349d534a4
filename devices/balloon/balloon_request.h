// SPDX-License-Identifier: Apache-2.0
// Pure parsing of virtio-balloon requests (virtio 1.2 section 5.5.6): PFN
// arrays on the inflate and deflate queues, the statistics buffer on the
// stats queue, and page ranges on the free page reporting queue. No I/O, no
// ring access, fuzzable (fuzz/balloon_request_fuzzer.cc).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/guest_memory.h"

namespace dsec::devices {

// Feature bits (virtio 1.2 section 5.5.3).
inline constexpr uint64_t kBalloonFeatureMustTellHost = 1ull << 0;   // VIRTIO_BALLOON_F_MUST_TELL_HOST
inline constexpr uint64_t kBalloonFeatureStatsVq = 1ull << 1;        // VIRTIO_BALLOON_F_STATS_VQ
inline constexpr uint64_t kBalloonFeatureDeflateOnOom = 1ull << 2;   // VIRTIO_BALLOON_F_DEFLATE_ON_OOM
inline constexpr uint64_t kBalloonFeatureFreePageHint = 1ull << 3;   // VIRTIO_BALLOON_F_FREE_PAGE_HINT
inline constexpr uint64_t kBalloonFeaturePagePoison = 1ull << 4;     // VIRTIO_BALLOON_F_PAGE_POISON
inline constexpr uint64_t kBalloonFeatureReporting = 1ull << 5;      // VIRTIO_BALLOON_F_REPORTING

// Section 5.5.6: PFNs are in units of 4096 bytes whatever the guest's page
// size (VIRTIO_BALLOON_PFN_SHIFT).
inline constexpr uint64_t kBalloonPageShift = 12;
inline constexpr uint64_t kBalloonPageSize = 1ull << kBalloonPageShift;

// Statistic tags (section 5.5.6.3). Memory amounts are bytes, faults counts.
enum class BalloonStatTag : uint16_t {
  kSwapIn = 0,           // bytes swapped in
  kSwapOut = 1,          // bytes swapped out
  kMajorFaults = 2,      // major page faults
  kMinorFaults = 3,      // minor page faults
  kFreeMemory = 4,       // bytes not in use at all
  kTotalMemory = 5,      // bytes of memory the guest can use
  kAvailableMemory = 6,  // bytes available for new allocations without swapping
  kDiskCaches = 7,       // bytes of reclaimable file cache
  kHugetlbAllocations = 8,
  kHugetlbFailures = 9,
};
inline constexpr size_t kBalloonStatTagCount = 10;

// One struct virtio_balloon_stat as it lies in guest memory (packed, 10 bytes).
struct __attribute__((packed)) BalloonStatEntry {
  uint16_t tag;
  uint64_t val;
};
static_assert(sizeof(BalloonStatEntry) == 10);

// The guest's statistics, by tag. A tag the guest did not send is absent.
struct BalloonStats {
  std::array<uint64_t, kBalloonStatTagCount> values{};
  uint32_t present = 0;       // bit i: tag i was reported
  uint32_t unknown_tags = 0;  // entries with a tag we do not know (ignored, section 5.5.6.3.1)

  bool Has(BalloonStatTag tag) const { return (present >> static_cast<unsigned>(tag)) & 1u; }
  uint64_t Get(BalloonStatTag tag) const { return values[static_cast<size_t>(tag)]; }
  void Set(BalloonStatTag tag, uint64_t value) {
    values[static_cast<size_t>(tag)] = value;
    present |= 1u << static_cast<unsigned>(tag);
  }
};

// Parses an inflate or deflate buffer (section 5.5.6): the chain's
// driver-readable bytes are an array of le32 PFNs. InvalidArgument for a
// chain with writable buffers, a length that is not a multiple of 4, no
// PFNs, or more than `max_pfns` of them (a request the device refuses whole).
absl::StatusOr<std::vector<uint32_t>> ParsePfnRequest(const virtio::DescriptorChain& chain,
                                                      const memory::GuestMemory& memory,
                                                      uint32_t max_pfns);

// Parses a statistics buffer (section 5.5.6.3): driver-readable entries of
// {le16 tag; le64 val}. Later entries for the same tag win; unknown tags are
// counted and ignored. InvalidArgument for writable buffers, a length that is
// not a multiple of 10 or more than `max_entries` entries.
absl::StatusOr<BalloonStats> ParseStatsRequest(const virtio::DescriptorChain& chain,
                                               const memory::GuestMemory& memory,
                                               uint32_t max_entries);

// A guest-physical range. Guest-controlled until checked by the device.
struct BalloonGuestRange {
  uint64_t gpa = 0;
  uint64_t len = 0;
};

// Parses a free page reporting buffer (section 5.5.6.6): every buffer of the
// chain (the Linux driver makes them device-writable; readable ones are
// accepted too) is one reported range of free guest memory; the device reads
// nothing from them. InvalidArgument for an empty chain or more than
// `max_ranges` buffers.
absl::StatusOr<std::vector<BalloonGuestRange>> ParseReportRequest(
    const virtio::DescriptorChain& chain, uint32_t max_ranges);

// Runs of consecutive PFNs, sorted, with duplicates removed and counted.
struct PageRun {
  uint64_t first_pfn = 0;
  uint64_t count = 0;
};
struct CoalescedPfns {
  std::vector<PageRun> runs;
  uint64_t duplicates = 0;  // PFNs that appeared more than once in the request
};
CoalescedPfns CoalescePfns(std::vector<uint32_t> pfns);

// Sorts ranges (each page-aligned), merges overlaps, and counts the pages
// that appeared in more than one range.
struct CoalescedRanges {
  std::vector<PageRun> runs;
  uint64_t duplicate_pages = 0;
};
CoalescedRanges CoalesceRanges(const std::vector<BalloonGuestRange>& ranges);

}  // namespace dsec::devices
