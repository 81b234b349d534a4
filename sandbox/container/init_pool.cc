// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_pool.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/container/exec.h"
#include "sandbox/container/init_launch.h"
#include "sandbox/container/upper_store.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::container {

void ReapChild(pid_t pid) {
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED) != 0 && errno == EINTR) {
  }
}

InitSlot::~InitSlot() {
  // The init first: its cgroups can only go once it is gone; the state
  // directory goes last (member order).
  KillInit();
}

void InitSlot::KillInit() {
  config_write.Reset();
  control.Reset();
  report_read.Reset();
  if (!init_pidfd) return;
  ::syscall(SYS_pidfd_send_signal, init_pidfd.get(), SIGKILL, nullptr, 0);
  siginfo_t info{};
  while (::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(init_pidfd.get()), &info,
                  WEXITED) != 0 &&
         errno == EINTR) {
  }
  init_pidfd.Reset();
  init_pid = 0;
}

absl::StatusOr<std::unique_ptr<InitPool>> InitPool::Create(const std::string& state_root,
                                                           size_t target,
                                                           const std::string& init_binary) {
  DSEC_ASSIGN_OR_RETURN(std::string binary, FindSandboxInit(init_binary));
  std::unique_ptr<InitPool> pool(new InitPool(state_root, target, std::move(binary)));
  pool->thread_ = std::thread([p = pool.get()] { p->Run(); });
  return pool;
}

InitPool::~InitPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();  // each slot removes itself
}

std::optional<InitSlot> InitPool::Take() {
  std::optional<InitSlot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_.empty()) {
      ++stats_.misses;
      return std::nullopt;
    }
    slot.emplace(std::move(ready_.front()));
    ready_.pop_front();
    ++stats_.taken;
    if (expected_ > 0) --expected_;
  }
  wake_.notify_one();
  return slot;
}

void InitPool::Retire(StateDir state, ContainerCgroups cgroups, pid_t killed_init, std::string store_dir) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_retired_ms_ = MonotonicNowMs();
    retired_.push_back(
        Retired{std::move(state), std::move(cgroups), last_retired_ms_, killed_init, std::move(store_dir)});
  }
  wake_.notify_all();
}

void InitPool::Expect(size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    expected_ = std::min(kMaxExpected, std::max(expected_, n));
    expected_until_ms_ = MonotonicNowMs() + kExpectMs;
  }
  wake_.notify_all();
}

size_t InitPool::Wanted(int64_t now_ms) const {
  return now_ms < expected_until_ms_ ? std::max(target_, expected_) : target_;
}

bool InitPool::WaitReady(size_t n, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return made_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                        [this, n] { return ready_.size() >= n; });
}

void InitPool::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  ++flushing_;
  wake_.notify_all();
  flushed_.wait(lock, [this] { return retired_.empty() && removing_ == 0; });
  --flushing_;
}

bool InitPool::RemovalDue(int64_t now_ms, int64_t* due_ms) const {
  if (retired_.empty()) return false;
  if (stop_ || flushing_ > 0 || retired_.size() >= kRetireMaxWaiting) return true;
  *due_ms = std::min(last_retired_ms_ + kRetireQuietMs, retired_.front().at_ms + kRetireMaxWaitMs);
  return now_ms >= *due_ms;
}

template <typename Pred>
void InitPool::WaitUnlessRemovalDue(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds max,
                                    Pred pred) {
  const int64_t until_ms = MonotonicNowMs() + max.count();
  // A retirement or a Flush wakes the wait: the removal may be due then,
  // or later (a burst goes on).
  for (;;) {
    int64_t due_ms = -1;
    const int64_t now_ms = MonotonicNowMs();
    if (pred() || RemovalDue(now_ms, &due_ms) || now_ms >= until_ms) return;
    int64_t wake_ms = until_ms;
    if (due_ms >= 0) wake_ms = std::min(wake_ms, due_ms);
    const size_t retired_before = retired_.size();
    wake_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(1, wake_ms - now_ms)), [&] {
      return pred() || (flushing_ > 0 && !retired_.empty()) || retired_.size() != retired_before;
    });
  }
}

InitPoolStats InitPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  InitPoolStats s = stats_;
  s.ready = ready_.size();
  return s;
}

absl::Status InitPool::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void InitPool::Run() {
  int failures_in_a_row = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Remains of destroyed sandboxes first, once due; they also go at
    // shutdown.
    int64_t due_ms = -1;
    if (RemovalDue(MonotonicNowMs(), &due_ms)) {
      Retired r = std::move(retired_.front());
      retired_.pop_front();
      ++removing_;
      lock.unlock();
      if (r.killed_init > 0) {
        // SIGKILLed by Sandbox::Destroy; reaped only here (until then its
        // pid names no other process).
        ReapChild(r.killed_init);
      }
      if (!r.store_dir.empty()) {
        // Its processes are gone with the init: nothing writes there now.
        if (absl::Status s = UpperStore::Default()->Remove(r.store_dir); !s.ok()) {
          DSEC_LOG(warn, "container: removing a destroyed sandbox's writable layer: {}", s.ToString());
        }
      }
      // A killed task keeps its cgroup busy until it has finished exiting:
      // retry with a growing pause, for up to ~0.8 s (as Sandbox::Destroy).
      std::vector<std::string> dirs = r.cgroups.dirs();
      absl::Status removed = r.cgroups.Remove();
      for (int64_t pause_us = 200; !removed.ok() && pause_us <= 204'800; pause_us *= 2) {
        std::unique_lock<std::mutex> wait_lock(mu_);
        wake_.wait_for(wait_lock, std::chrono::microseconds(pause_us), [] { return false; });
        wait_lock.unlock();
        removed = absl::OkStatus();
        for (const std::string& d : dirs) {
          absl::Status s = KillAndRemoveCgroup(d);
          if (!s.ok() && removed.ok()) removed = s;
        }
      }
      if (removed.ok()) removed = r.state.Remove();
      if (!removed.ok()) {
        // The records stay: the next start's CleanupOrphans removes the rest.
        DSEC_LOG(warn, "container: removing a destroyed sandbox ({}, left for cleanup): {}",
                 r.state.Abandon(), removed.ToString());
      }
      lock.lock();
      --removing_;
      ++stats_.retired;
      if (retired_.empty() && removing_ == 0) flushed_.notify_all();
      continue;
    }
    if (stop_) break;
    const int64_t now_ms = MonotonicNowMs();
    if (ready_.size() > Wanted(now_ms) && now_ms >= expected_until_ms_) {
      // Made for creates that did not come: the newest goes (its init is
      // killed, its cgroups and directory removed).
      expected_ = 0;
      std::optional<InitSlot> extra(std::move(ready_.back()));
      ready_.pop_back();
      lock.unlock();
      extra.reset();
      lock.lock();
      continue;
    }
    if (ready_.size() >= Wanted(now_ms)) {
      // Until a slot is taken, creates are expected, or those expected are
      // past due (then the extra slots go).
      const auto until_due = std::chrono::milliseconds(
          ready_.size() > target_ ? std::max<int64_t>(1, expected_until_ms_ - now_ms) : int64_t{24} * 3'600'000);
      WaitUnlessRemovalDue(lock, until_due, [this] { return stop_ || ready_.size() < Wanted(MonotonicNowMs()); });
      continue;
    }
    if (creating_ > 0) {
      // Behind the creates and destroys in flight (OpInFlight), or 100 ms.
      WaitUnlessRemovalDue(lock, std::chrono::milliseconds(100), [this] { return stop_ || creating_ == 0; });
      if (stop_) break;
      int64_t ignored = -1;
      if (RemovalDue(MonotonicNowMs(), &ignored)) continue;
    }
    lock.unlock();
    auto slot = MakeSlot(NextSlotSeq());
    lock.lock();
    if (slot.ok()) {
      failures_in_a_row = 0;
      ++stats_.made;
      ready_.push_back(std::move(*slot));
      made_.notify_all();
      continue;
    }
    ++stats_.failures;
    error_ = slot.status();
    DSEC_LOG(warn, "container: init pool under {}: {}", state_root_, slot.status().ToString());
    // A host that cannot make slots now (cgroups, pids) gets a growing
    // pause, not a busy loop; creates work without slots meanwhile.
    const auto pause = std::chrono::milliseconds(100 << std::min(failures_in_a_row++, 7));
    WaitUnlessRemovalDue(lock, pause, [this] { return stop_; });
  }
  flushed_.notify_all();
}

// Slot names (state dirs, cgroup names) are unique in the process, not only
// in one pool: two pools of one process (a benchmark's and a tier's) would
// otherwise make the same cgroup names in the shared hierarchies.
uint64_t InitPool::NextSlotSeq() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1);
}

InitPool::OpInFlight::OpInFlight(InitPool* pool) : pool_(pool) {
  if (pool_ == nullptr) return;
  std::lock_guard<std::mutex> lock(pool_->mu_);
  ++pool_->creating_;
}

InitPool::OpInFlight::~OpInFlight() {
  if (pool_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(pool_->mu_);
    --pool_->creating_;
  }
  pool_->wake_.notify_all();
}

absl::StatusOr<InitSlot> InitPool::MakeSlot(uint64_t seq) {
  InitSlot slot;
  const std::string name = absl::StrCat("slot-", ::getpid(), "-", seq);
  DSEC_ASSIGN_OR_RETURN(slot.state, StateDir::Create(state_root_, absl::StrCat(".", name)));
  for (const char* sub : {"/merged", "/upper"}) {
    std::string dir = absl::StrCat(slot.state.path(), sub);
    if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", dir));
  }
  // No limits yet: the sandbox's are written when it takes the slot.
  ResourceLimits none;
  none.memory_bytes = 0;
  none.pids_max = 0;
  const StateDir& st = slot.state;
  DSEC_ASSIGN_OR_RETURN(slot.cgroups,
                        ContainerCgroups::Create(name, none, false, [&st](const std::string& d) {
                          return st.RecordCgroup(d);
                        }));
  DSEC_ASSIGN_OR_RETURN(InitChannels ch, InitChannels::Create());
  InitFds fds = ch.fds();
  DSEC_ASSIGN_OR_RETURN(
      LaunchedInit init,
      LaunchInit(init_binary_, nullptr, fds,
                 CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET));
  slot.init_pid = init.pid;
  slot.init_pidfd = std::move(init.pidfd);
  slot.config_write = std::move(init.config_write);
  ch.CloseInitEnds();
  slot.control = std::move(ch.control_ours);
  slot.report_read = std::move(ch.report_read);
  // The slow part, while nobody waits.
  DSEC_RETURN_IF_ERROR(slot.cgroups.AddProcess(slot.init_pid));
  if (absl::Status s = ShieldInitFromOom(slot.init_pid); !s.ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "container: init pool: {}", s.ToString());
  }
  char one = 1;
  if (WriteNoSigpipe(ch.go_write.get(), &one, 1) != 1) return ErrnoToStatus("start slot init");
  DSEC_RETURN_IF_ERROR(slot.state.RecordInit(slot.init_pid));
  return slot;
}

}  // namespace dsec::container
