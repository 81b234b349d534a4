// SPDX-License-Identifier: Apache-2.0
// A PmemBackend for tests: counts flushes, can hold a flush until released
// (to observe coalescing), and can fail either call.
#pragma once

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "devices/pmem/pmem_backend.h"

namespace dsec::devices {

class FakePmemBackend : public PmemBackend {
 public:
  absl::Status Flush() override {
    absl::MutexLock lock(&mu_);
    ++flushes_started_;
    mu_.Await(absl::Condition(
        +[](FakePmemBackend* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu_) { return !b->hold_; }, this));
    ++flushes_;
    return flush_result_;
  }
  absl::Status CheckSize() override {
    absl::MutexLock lock(&mu_);
    return size_result_;
  }
  void set_hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  void set_flush_result(absl::Status s) {
    absl::MutexLock lock(&mu_);
    flush_result_ = std::move(s);
  }
  void set_size_result(absl::Status s) {
    absl::MutexLock lock(&mu_);
    size_result_ = std::move(s);
  }
  int flushes() {
    absl::MutexLock lock(&mu_);
    return flushes_;
  }
  // Blocks until `n` flushes have started (a held flush counts as started).
  void AwaitStarted(int n) {
    absl::MutexLock lock(&mu_);
    auto cond = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return flushes_started_ >= n; };
    mu_.Await(absl::Condition(&cond));
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int flushes_ ABSL_GUARDED_BY(mu_) = 0;
  int flushes_started_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status flush_result_ ABSL_GUARDED_BY(mu_);
  absl::Status size_result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::devices
