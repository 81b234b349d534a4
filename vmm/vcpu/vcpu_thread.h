// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "platform/bus/bus.h"
#include "platform/kvm/kvm_vcpu.h"

namespace dsec::vcpu {

// Why a vCPU asks the VM to stop.
enum class VcpuStopCause {
  kTripleFault,    // KVM_EXIT_SHUTDOWN
  kSystemReset,    // KVM_EXIT_SYSTEM_EVENT reset
  kSystemOff,      // KVM_EXIT_SYSTEM_EVENT shutdown
  kInternalError,  // entry failure, emulation failure, unknown exit, KVM_RUN error
};

// Implemented by the VM: receives the stop requests of its vCPU threads.
// Called on a vCPU thread; must not block for long.
class VcpuStopSink {
 public:
  virtual ~VcpuStopSink() = default;
  virtual void OnVcpuStop(uint32_t vcpu_id, VcpuStopCause cause, std::string detail) = 0;
};

// Run / pause / stop state shared by all vCPU threads of one VM.
//
// Threads: any thread may call Pause/Resume/Stop; vCPU threads call the
// Park*/Should* methods. Pause() returns only when every running vCPU thread
// has left KVM_RUN and parked, so the caller may then read vCPU state.
class VcpuControl {
 public:
  enum class State { kRunning, kPaused, kStopped };

  State state() const;
  // Moves to kPaused, calls `kick_all` (which must kick every vCPU thread out
  // of KVM_RUN), and waits until `expected_parked` threads have parked
  // (threads that already exited count as parked).
  void Pause(int expected_parked, const std::function<void()>& kick_all);
  void Resume();
  void Stop();

  // vCPU side: blocks while paused; returns false when the VM is stopping.
  bool WaitWhilePaused();
  void ThreadExited();

 private:
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kRunning;
  int parked_ ABSL_GUARDED_BY(mu_) = 0;
  int exited_ ABSL_GUARDED_BY(mu_) = 0;
};

// One vCPU thread: loops in KVM_RUN and dispatches port and MMIO exits to the
// buses on this thread (devices reached that way are thread-safe and never
// block: see platform/bus). Everything that ends the guest goes to the
// VcpuStopSink.
//
// Lifetime: owns the KvmVcpu. The buses, control and sink must outlive it;
// Join() before destroying them.
class VcpuThread {
 public:
  struct Metrics {
    std::atomic<uint64_t> exits{0};
    std::atomic<uint64_t> io_exits{0};
    std::atomic<uint64_t> mmio_exits{0};
    std::atomic<uint64_t> unclaimed_accesses{0};
    std::atomic<int64_t> first_run_ns{0};  // CLOCK_MONOTONIC of the first KVM_RUN
  };

  VcpuThread(std::unique_ptr<kvm::KvmVcpu> vcpu, const bus::Bus* pio, const bus::Bus* mmio,
             VcpuControl* control, VcpuStopSink* sink);
  ~VcpuThread();
  VcpuThread(const VcpuThread&) = delete;
  VcpuThread& operator=(const VcpuThread&) = delete;

  // Runs on the vCPU thread before its first KVM_RUN (CPU placement, core
  // scheduling cookie, seccomp filter). A failure stops the VM. Set before
  // Start().
  void SetPreRunHook(std::function<absl::Status()> hook) { pre_run_hook_ = std::move(hook); }

  // Installs the kick signal handler (once per process) and starts the thread.
  absl::Status Start();
  // Makes the thread leave KVM_RUN soon (see kvm_vcpu.h for the protocol).
  void Kick();
  void Join();

  uint32_t id() const { return vcpu_->id(); }
  // The thread's kernel id (0 before it started).
  pid_t tid() const { return tid_.load(); }
  kvm::KvmVcpu& vcpu() { return *vcpu_; }
  const Metrics& metrics() const { return metrics_; }

  // The signal used to kick vCPU threads out of KVM_RUN.
  static int KickSignal();

 private:
  void Loop();
  // Returns false when the vCPU must stop.
  bool HandleExit(kvm::VcpuExit& exit);
  void HandleIo(kvm::vcpu_exit::Io& io);
  void HandleMmio(kvm::vcpu_exit::Mmio& mmio);

  std::unique_ptr<kvm::KvmVcpu> vcpu_;
  const bus::Bus* pio_;
  const bus::Bus* mmio_;
  VcpuControl* control_;
  VcpuStopSink* sink_;
  std::function<absl::Status()> pre_run_hook_;
  std::thread thread_;
  std::atomic<pthread_t> native_{};
  std::atomic<bool> started_{false};
  std::atomic<pid_t> tid_{0};
  Metrics metrics_;
};

}  // namespace dsec::vcpu
