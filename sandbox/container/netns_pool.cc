// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/netns_pool.h"

#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/netns.h"
#include "base/status.h"

namespace dsec::container {

NetnsPool::NetnsPool(size_t target) : target_(target) {
  if (target_ > 0) thread_ = std::thread([this] { Refill(); });
}

NetnsPool::~NetnsPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {
std::atomic<size_t> default_target{4};
}  // namespace

void NetnsPool::SetDefaultTarget(size_t target) { default_target = target; }

NetnsPool& NetnsPool::Default() {
  static NetnsPool* pool = [] {
    size_t target = default_target.load();
    if (const char* v = std::getenv("DSEC_NETNS_POOL"); v != nullptr) {
      size_t n = 0;
      if (absl::SimpleAtoi(v, &n) && n <= 64) target = n;
    }
    return new NetnsPool(target);
  }();
  return *pool;
}

ScopedFd NetnsPool::Take() {
  ScopedFd fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_.empty()) {
      if (target_ > 0) ++stats_.misses;
      return fd;
    }
    fd = std::move(ready_.front());
    ready_.pop_front();
    ++stats_.taken;
  }
  wake_.notify_one();
  return fd;
}

NetnsPoolStats NetnsPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

absl::Status NetnsPool::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void NetnsPool::Refill() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || ready_.size() < target_; });
    if (stop_) return;
    lock.unlock();
    absl::StatusOr<ScopedFd> fd = MakeNetns();
    lock.lock();
    if (!fd.ok()) {
      // A host without the permission or the feature: sandboxes clone
      // their own namespace as before; say why once.
      ++stats_.failures;
      error_ = fd.status();
      DSEC_LOG(warn, "container: netns pool stopped: {}", fd.status().ToString());
      return;
    }
    ++stats_.made;
    ready_.push_back(std::move(*fd));
  }
}

}  // namespace dsec::container
