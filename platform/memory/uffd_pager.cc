// SPDX-License-Identifier: Apache-2.0
#include "platform/memory/uffd_pager.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::memory {

namespace {

constexpr uint64_t kPage = 4096;

// A userfaultfd that also takes faults KVM and the kernel raise on the
// guest's behalf (no UFFD_USER_MODE_ONLY): the syscall needs
// CAP_SYS_PTRACE unless vm.unprivileged_userfaultfd is 1; /dev/userfaultfd
// (Linux 6.1) grants the same to whoever may open it.
absl::StatusOr<ScopedFd> OpenUserfaultfd() {
  ScopedFd fd(static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK)));
  if (fd.valid()) return fd;
  const int syscall_errno = errno;
#ifdef USERFAULTFD_IOC_NEW
  ScopedFd dev(::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC));
  if (dev.valid()) {
    ScopedFd made(::ioctl(dev.get(), USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK));
    if (made.valid()) return made;
  }
#endif
  return absl::FailedPreconditionError(absl::StrCat(
      "userfaultfd is not available to this process (", std::strerror(syscall_errno),
      "; /dev/userfaultfd could not be used either): a lazy restore needs CAP_SYS_PTRACE, "
      "vm.unprivileged_userfaultfd=1 or access to /dev/userfaultfd"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UserfaultPager>> UserfaultPager::Create(std::vector<Range> ranges) {
  if (ranges.empty()) return absl::InvalidArgumentError("a pager needs at least one range");
  std::unique_ptr<UserfaultPager> p(new UserfaultPager());
  uint64_t pages = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (r.size == 0 || r.size % kPage != 0 || reinterpret_cast<uintptr_t>(r.target) % kPage != 0 ||
        reinterpret_cast<uintptr_t>(r.source) % kPage != 0 || r.offset % kPage != 0 ||
        r.source == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pager range %d: want page-aligned, non-empty target, source and offset", i));
    }
    p->first_page_.push_back(pages);
    pages += r.size / kPage;
  }
  p->ranges_ = std::move(ranges);
  p->served_.assign((pages + 63) / 64, 0);
  DSEC_ASSIGN_OR_RETURN(p->uffd_, OpenUserfaultfd());
  uffdio_api api{};
  api.api = UFFD_API;
  if (::ioctl(p->uffd_.get(), UFFDIO_API, &api) != 0) return ErrnoStatus("ioctl(UFFDIO_API)");
  for (const Range& r : p->ranges_) {
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<uintptr_t>(r.target);
    reg.range.len = r.size;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(p->uffd_.get(), UFFDIO_REGISTER, &reg) != 0) {
      return ErrnoStatus("ioctl(UFFDIO_REGISTER) of guest RAM");
    }
    const uint64_t need = (1ull << _UFFDIO_COPY) | (1ull << _UFFDIO_ZEROPAGE) | (1ull << _UFFDIO_WAKE);
    if ((reg.ioctls & need) != need) {
      return absl::FailedPreconditionError(
          "userfaultfd offers no copy, zero-page or wake for this memory");
    }
  }
  DSEC_ASSIGN_OR_RETURN(EventFd stop, EventFd::Create(EFD_NONBLOCK));
  p->stop_ = std::make_unique<EventFd>(std::move(stop));
  DSEC_ASSIGN_OR_RETURN(EventFd call, EventFd::Create(EFD_NONBLOCK));
  p->call_ = std::make_unique<EventFd>(std::move(call));
  return p;
}

UserfaultPager::~UserfaultPager() { Stop(); }

absl::StatusOr<uint64_t> UserfaultPager::CopyIn(size_t range, uint64_t at, uint64_t length,
                                                 bool wake) {
  const Range& r = ranges_[range];
  uint64_t copied = 0;
  uint64_t done = 0;
  int again = 0;
  while (done < length) {
    uffdio_copy c{};
    c.dst = reinterpret_cast<uintptr_t>(r.target + at + done);
    c.src = reinterpret_cast<uintptr_t>(r.source + at + done);
    c.len = length - done;
    c.mode = wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE;
    const int rc = ::ioctl(uffd_.get(), UFFDIO_COPY, &c);
    const int err = rc == 0 ? 0 : errno;
    const uint64_t moved = c.copy > 0 ? static_cast<uint64_t>(c.copy) : 0;
    if (moved > 0) {
      const uint64_t first = first_page_[range] + (at + done) / kPage;
      for (uint64_t k = 0; k < moved / kPage; ++k) {
        served_[(first + k) / 64] |= 1ull << ((first + k) % 64);
      }
      copied += moved / kPage;
      done += moved;
      again = 0;  // progress: a partial copy reports EAGAIN too
    }
    if (err == 0) {
      if (moved == 0) done = length;  // a kernel that reports no count: all of it
      continue;
    }
    if (err == EEXIST) {
      // This page is there already (raced, or prefetched): its waiters,
      // if any, are woken; go on after it.
      if (wake) {
        uffdio_range w{reinterpret_cast<uintptr_t>(r.target + at + done), kPage};
        (void)::ioctl(uffd_.get(), UFFDIO_WAKE, &w);
      }
      done += kPage;
      continue;
    }
    if (err == EAGAIN && (moved > 0 || ++again < 1000)) continue;  // the address space changed
    errno = err;
    return ErrnoStatus(absl::StrFormat("ioctl(UFFDIO_COPY) of guest RAM at memory-file offset 0x%x",
                                       r.offset + at + done));
  }
  return copied;
}

absl::Status UserfaultPager::Prefetch(const std::vector<Run>& runs) {
  // Each run range by range (a run recorded over ranges adjacent in the
  // file is split at their border); every run checked before any copy.
  struct Piece {
    size_t range;
    uint64_t at, length;
  };
  std::vector<Piece> pieces;
  for (const Run& run : runs) {
    if (run.length == 0 || run.offset % kPage != 0 || run.length % kPage != 0 ||
        run.offset + run.length < run.offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prefetch run [0x%x, +0x%x) is not a page-aligned run", run.offset, run.length));
    }
    uint64_t off = run.offset, left = run.length;
    while (left > 0) {
      size_t i = 0;
      while (i < ranges_.size() &&
             !(off >= ranges_[i].offset && off - ranges_[i].offset < ranges_[i].size)) {
        ++i;
      }
      if (i == ranges_.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "prefetch run [0x%x, +0x%x) reaches outside guest RAM (at 0x%x)", run.offset,
            run.length, off));
      }
      const uint64_t at = off - ranges_[i].offset;
      const uint64_t n = std::min(left, ranges_[i].size - at);
      pieces.push_back({i, at, n});
      off += n;
      left -= n;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Piece& p : pieces) {
    DSEC_ASSIGN_OR_RETURN(uint64_t pages, CopyIn(p.range, p.at, p.length, /*wake=*/false));
    prefetched_ += pages;
  }
  return absl::OkStatus();
}

bool UserfaultPager::Served(size_t range, uint64_t page) const {
  if (range >= ranges_.size() || page >= ranges_[range].size / kPage) return false;
  const uint64_t p = first_page_[range] + page;
  std::lock_guard<std::mutex> lock(mu_);
  return (served_[p / 64] >> (p % 64) & 1) != 0;
}

absl::Status UserfaultPager::Serve(uint64_t address) {
  const uint64_t page_addr = address & ~(kPage - 1);
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const Range& r = ranges_[i];
    const uint64_t start = reinterpret_cast<uintptr_t>(r.target);
    if (page_addr < start || page_addr - start >= r.size) continue;
    const uint64_t at = page_addr - start;
    const uint64_t page = first_page_[i] + at / kPage;
    std::lock_guard<std::mutex> lock(mu_);
    if ((served_[page / 64] >> (page % 64) & 1) == 0) {
      // Counted before the copy wakes the toucher, who may read the count.
      ++faults_;
      absl::StatusOr<uint64_t> copied = CopyIn(i, at, kPage, /*wake=*/true);
      if (!copied.ok() || *copied == 0) --faults_;
      return copied.status();
    }
    // Served already: either a second message for the same fault (each
    // thread that touched the page queued one), the page being there, or
    // a page served once and dropped since (the balloon, reclaim,
    // MADV_DONTNEED), which reads as zeros again like any anonymous page.
    ++zero_faults_;  // counted before the wake, as above
    for (int again = 0;; ++again) {
      uffdio_zeropage z{};
      z.range.start = page_addr;
      z.range.len = kPage;
      if (::ioctl(uffd_.get(), UFFDIO_ZEROPAGE, &z) == 0) break;
      if (errno == EEXIST) {
        --zero_faults_;  // it was there: nothing was dropped
        uffdio_range w{page_addr, kPage};
        (void)::ioctl(uffd_.get(), UFFDIO_WAKE, &w);
        break;
      }
      if (errno != EAGAIN || again >= 1000) {
        return ErrnoStatus(absl::StrFormat("ioctl(UFFDIO_ZEROPAGE) of guest RAM at 0x%x", page_addr));
      }
    }
    return absl::OkStatus();
  }
  return absl::InternalError(
      absl::StrFormat("a userfault at 0x%x, outside the guest RAM the pager serves", address));
}

void UserfaultPager::Loop(std::function<void(const absl::Status&)> on_error) {
  absl::Status status;
  uffd_msg msgs[16];
  while (status.ok()) {
    pollfd fds[3] = {{uffd_.get(), POLLIN, 0}, {stop_->fd(), POLLIN, 0}, {call_->fd(), POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      status = ErrnoStatus("poll(userfaultfd)");
      break;
    }
    if (fds[1].revents != 0) break;
    if (fds[2].revents != 0) {
      (void)call_->Consume();
      std::function<absl::Status()> fn;
      {
        std::lock_guard<std::mutex> lock(mu_);
        fn = std::move(call_fn_);
        call_fn_ = nullptr;
      }
      if (fn) status = fn();
      continue;
    }
    const ssize_t n = ::read(uffd_.get(), msgs, sizeof(msgs));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      status = ErrnoStatus("read(userfaultfd)");
      break;
    }
    for (ssize_t k = 0; k < n / static_cast<ssize_t>(sizeof(uffd_msg)) && status.ok(); ++k) {
      if (msgs[k].event != UFFD_EVENT_PAGEFAULT) continue;  // none other was asked for
      status = Serve(msgs[k].arg.pagefault.address);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    thread_status_ = status;
    ended_ = true;
    call_fn_ = nullptr;  // posted as the thread ended: never run
  }
  if (!status.ok()) {
    // The owner stops the memory's users first (a stop request, vCPUs
    // kicked out of the guest); then, as nobody serves faults any more,
    // the userfaultfd goes: its release wakes every waiter, and later
    // touches get empty pages rather than waiting forever.
    if (on_error) on_error(status);
    uffd_.Reset();
  }
}

absl::Status UserfaultPager::Start(std::function<void(const absl::Status&)> on_error) {
  if (thread_.joinable()) return absl::FailedPreconditionError("the pager runs already");
  thread_ = std::thread([this, cb = std::move(on_error)]() mutable { Loop(std::move(cb)); });
  return absl::OkStatus();
}

void UserfaultPager::PostToThread(std::function<absl::Status()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    call_fn_ = std::move(fn);
  }
  (void)call_->Signal();
}

void UserfaultPager::Stop() {
  if (thread_.joinable()) {
    (void)stop_->Signal();
    thread_.join();
  }
  uffd_.Reset();
}

std::vector<UserfaultPager::Run> UserfaultPager::Touched() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Run> runs;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const uint64_t n = ranges_[i].size / kPage;
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t page = first_page_[i] + k;
      if ((served_[page / 64] >> (page % 64) & 1) == 0) continue;
      const uint64_t off = ranges_[i].offset + k * kPage;
      if (!runs.empty() && runs.back().offset + runs.back().length == off) {
        runs.back().length += kPage;
      } else {
        runs.push_back({off, kPage});
      }
    }
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.offset < b.offset; });
  return runs;
}

UserfaultPager::Stats UserfaultPager::stats() const {
  return Stats{faults_.load(), zero_faults_.load(), prefetched_.load()};
}

absl::Status UserfaultPager::thread_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_status_;
}

}  // namespace dsec::memory
