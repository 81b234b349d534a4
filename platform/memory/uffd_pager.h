// SPDX-License-Identifier: Apache-2.0
// Guest RAM filled on first touch (userfaultfd, missing mode): a lazy
// restore's memory. The guest's pages are anonymous private memory, empty
// at first; a page the guest (or a device, or KVM on its behalf) touches
// faults, and the pager's thread copies it in from the source (a snapshot
// file mapped read-only) before the toucher goes on. Pages named ahead are
// copied in before the VM runs (Prefetch). The pages served are recorded,
// so that the next restore of the same snapshot can prefetch them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace dsec::memory {

class UserfaultPager {
 public:
  // One range of guest RAM: `size` bytes at `target` (anonymous private
  // memory of the caller's, page-aligned) filled from the same bytes at
  // `source` (readable for the pager's life), named in Prefetch and
  // Touched by `offset` (the snapshot's memory-file offset of its first
  // byte).
  struct Range {
    uint8_t* target = nullptr;
    const uint8_t* source = nullptr;
    uint64_t size = 0;
    uint64_t offset = 0;
  };
  // A run of pages, by memory-file offset and length in bytes.
  struct Run {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  struct Stats {
    uint64_t faults = 0;            // pages copied in on a fault
    uint64_t zero_faults = 0;       // pages served before and dropped since: zeros
    uint64_t prefetched_pages = 0;  // pages copied in by Prefetch
  };

  // Opens a userfaultfd (the syscall; /dev/userfaultfd where the syscall
  // is refused) and registers every target range for missing-page faults.
  // Nothing in a target may be mapped in yet (a page already present never
  // faults and is never served). FailedPrecondition naming the cause where
  // the host has no userfaultfd for this process.
  static absl::StatusOr<std::unique_ptr<UserfaultPager>> Create(std::vector<Range> ranges);
  ~UserfaultPager();
  UserfaultPager(const UserfaultPager&) = delete;
  UserfaultPager& operator=(const UserfaultPager&) = delete;

  // Copies the pages of `runs` in now (before anything touches them). A
  // run may span ranges that are adjacent in the file; one that reaches
  // outside every range is refused (InvalidArgument). A page that is there
  // already is skipped.
  absl::Status Prefetch(const std::vector<Run>& runs);

  // Starts the thread that serves faults. Once; before anything touches
  // the ranges. If the thread ends on an error (a copy the kernel refused,
  // or a RunOnThread call that failed), it closes the userfaultfd first,
  // so that nothing waits on a fault forever (every page not yet served
  // then reads as zeros), and calls `on_error` with the error: the owner
  // must stop whatever runs on the memory.
  absl::Status Start(std::function<void(const absl::Status&)> on_error = {});
  // Has `fn` run on the pager's thread between two faults, and returns at
  // once: how the owner puts the running thread in a jail once the jail is
  // known (a jail's gate may hold the thread until other threads arrive;
  // faults wait meanwhile). An error from `fn` ends the thread as a failed
  // copy does (Start's on_error). One call at a time; a later call
  // replaces one not yet run.
  void PostToThread(std::function<absl::Status()> fn);
  // Ends the thread and closes the userfaultfd: call once nothing should
  // touch the ranges any more (a late touch gets an empty page, never a
  // wait). Idempotent; the destructor calls it.
  void Stop();

  // Whether page `page` (0-based) of range `range` was served (faulted or
  // prefetched): what a snapshot of the memory reads from the target
  // rather than the source. Any thread.
  bool Served(size_t range, uint64_t page) const;

  // Pages served so far (faulted or prefetched), as sorted runs: what the
  // next restore of the same snapshot may prefetch.
  std::vector<Run> Touched() const;
  Stats stats() const;
  // The thread's error, if it ended on one (OK while it runs or after Stop).
  absl::Status thread_status() const;

 private:
  UserfaultPager() = default;
  // Copies [at, at + length) of range `range` in, skipping pages that are
  // there already; returns the pages it copied. Under mu_.
  absl::StatusOr<uint64_t> CopyIn(size_t range, uint64_t at, uint64_t length, bool wake);
  absl::Status Serve(uint64_t address);
  void Loop(std::function<void(const absl::Status&)> on_error);

  ScopedFd uffd_;
  std::vector<Range> ranges_;
  std::vector<uint64_t> first_page_;  // index of each range's first page
  // One bit per page: served once (a later fault there means the page was
  // dropped, MADV_DONTNEED, and reads as zeros like any anonymous page).
  mutable std::mutex mu_;
  std::vector<uint64_t> served_;
  std::atomic<uint64_t> faults_{0}, zero_faults_{0}, prefetched_{0};
  std::unique_ptr<EventFd> stop_, call_;
  std::function<absl::Status()> call_fn_;  // under mu_
  std::thread thread_;
  absl::Status thread_status_;
  bool ended_ = false;  // the thread left its loop
};

}  // namespace dsec::memory
