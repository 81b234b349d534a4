// SPDX-License-Identifier: Apache-2.0
#include "vmm/vcpu/vcpu_thread.h"

#include <signal.h>
#include <unistd.h>
#include <time.h>

#include <cstring>
#include <mutex>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::vcpu {

namespace {

// The handler does nothing: delivering the signal is what makes KVM_RUN
// return EINTR. No SA_RESTART, so the ioctl is not restarted.
void KickHandler(int) {}

absl::Status InstallKickHandler() {
  static absl::Status status = [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = KickHandler;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(VcpuThread::KickSignal(), &sa, nullptr) != 0)
      return ErrnoStatus("sigaction(vCPU kick signal)");
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace

// --- VcpuControl -----------------------------------------------------------

VcpuControl::State VcpuControl::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

void VcpuControl::Pause(int expected_parked, const std::function<void()>& kick_all) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kStopped) return;
    state_ = State::kPaused;
  }
  kick_all();
  absl::MutexLock lock(&mu_);
  auto all_parked = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return parked_ + exited_ >= expected_parked || state_ != State::kPaused;
  };
  mu_.Await(absl::Condition(&all_parked));
}

void VcpuControl::Resume() {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kPaused) state_ = State::kRunning;
}

void VcpuControl::Stop() {
  absl::MutexLock lock(&mu_);
  state_ = State::kStopped;
}

bool VcpuControl::WaitWhilePaused() {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kPaused) {
    ++parked_;
    auto not_paused = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return state_ != State::kPaused;
    };
    mu_.Await(absl::Condition(&not_paused));
    --parked_;
  }
  return state_ != State::kStopped;
}

void VcpuControl::ThreadExited() {
  absl::MutexLock lock(&mu_);
  ++exited_;
}

// --- VcpuThread ------------------------------------------------------------

int VcpuThread::KickSignal() { return SIGRTMIN + 1; }

VcpuThread::VcpuThread(std::unique_ptr<kvm::KvmVcpu> vcpu, const bus::Bus* pio,
                       const bus::Bus* mmio, VcpuControl* control, VcpuStopSink* sink)
    : vcpu_(std::move(vcpu)), pio_(pio), mmio_(mmio), control_(control), sink_(sink) {}

VcpuThread::~VcpuThread() {
  DSEC_CHECK(!thread_.joinable());  // Join() first: the thread uses members
}

absl::Status VcpuThread::Start() {
  DSEC_RETURN_IF_ERROR(InstallKickHandler());
  thread_ = std::thread([this] {
    native_.store(pthread_self());
    tid_.store(::gettid());
    started_.store(true, std::memory_order_release);
    Loop();
    control_->ThreadExited();
  });
  return absl::OkStatus();
}

void VcpuThread::Kick() {
  vcpu_->SetImmediateExit(true);
  // If the thread has not published its id yet it has not entered KVM_RUN
  // either, and immediate_exit alone makes its first KVM_RUN return.
  if (started_.load(std::memory_order_acquire)) {
    pthread_kill(native_.load(), KickSignal());
  }
}

void VcpuThread::Join() {
  if (thread_.joinable()) thread_.join();
}

void VcpuThread::Loop() {
  if (pre_run_hook_) {
    absl::Status s = pre_run_hook_();
    if (!s.ok()) {
      sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError,
                        absl::StrCat("vCPU set-up before KVM_RUN failed: ", s.ToString()));
      return;
    }
  }
  metrics_.first_run_ns.store(MonotonicNowNs());
  // A vCPU parks only after KVM_RUN returned "interrupted": KVM completes
  // an exit's I/O (the data a port or MMIO read returns, the instruction's
  // end) on the next KVM_RUN, before it looks at immediate_exit, so a parked
  // vCPU has no operation half done and its registers are whole (what a
  // snapshot saves; Documentation/virt/kvm/api.rst, "kvm_run").
  bool may_park = true;
  for (;;) {
    if (may_park && !control_->WaitWhilePaused()) return;
    may_park = false;
    absl::StatusOr<kvm::VcpuExit> exit = vcpu_->Run();
    if (!exit.ok()) {
      sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError, exit.status().ToString());
      return;
    }
    metrics_.exits.fetch_add(1, std::memory_order_relaxed);
    if (std::holds_alternative<kvm::vcpu_exit::Interrupted>(*exit)) {
      // Clear before looking at the requests (kvm_vcpu.h explains why).
      vcpu_->SetImmediateExit(false);
      may_park = true;
      continue;
    }
    if (!HandleExit(*exit)) return;
  }
}

bool VcpuThread::HandleExit(kvm::VcpuExit& exit) {
  using namespace kvm::vcpu_exit;
  if (auto* io = std::get_if<Io>(&exit)) {
    HandleIo(*io);
    return true;
  }
  if (auto* mmio = std::get_if<Mmio>(&exit)) {
    HandleMmio(*mmio);
    return true;
  }
  if (std::holds_alternative<Shutdown>(exit)) {
    sink_->OnVcpuStop(id(), VcpuStopCause::kTripleFault, "KVM_EXIT_SHUTDOWN (triple fault)");
    return false;
  }
  if (auto* ev = std::get_if<SystemEvent>(&exit)) {
    if (ev->type == SystemEvent::kReset) {
      sink_->OnVcpuStop(id(), VcpuStopCause::kSystemReset, "KVM_SYSTEM_EVENT_RESET");
    } else if (ev->type == SystemEvent::kShutdown) {
      sink_->OnVcpuStop(id(), VcpuStopCause::kSystemOff, "KVM_SYSTEM_EVENT_SHUTDOWN");
    } else {
      sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError,
                        absl::StrCat("KVM_SYSTEM_EVENT type ", ev->type));
    }
    return false;
  }
  if (std::holds_alternative<Hlt>(exit)) {
    // Only possible without an in-kernel irqchip, which the monitor always
    // creates: a halted vCPU with nobody to wake it is a dead guest.
    sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError, "KVM_EXIT_HLT without irqchip");
    return false;
  }
  if (auto* fe = std::get_if<FailEntry>(&exit)) {
    sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError,
                      absl::StrFormat("KVM_EXIT_FAIL_ENTRY hardware_reason=0x%x cpu=%d",
                                      fe->hardware_reason, fe->cpu));
    return false;
  }
  if (auto* ie = std::get_if<InternalError>(&exit)) {
    std::string detail = absl::StrCat("KVM_EXIT_INTERNAL_ERROR suberror=", ie->suberror);
    for (uint64_t d : ie->data) absl::StrAppend(&detail, absl::StrFormat(" 0x%x", d));
    sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError, detail);
    return false;
  }
  if (auto* unk = std::get_if<Unknown>(&exit)) {
    sink_->OnVcpuStop(id(), VcpuStopCause::kInternalError,
                      absl::StrCat("unexpected KVM exit reason ", unk->exit_reason));
    return false;
  }
  return true;
}

void VcpuThread::HandleIo(kvm::vcpu_exit::Io& io) {
  metrics_.io_exits.fetch_add(1, std::memory_order_relaxed);
  // String I/O (rep outsb/insb) arrives as `count` accesses of `size` bytes;
  // devices see them one by one, as the hardware would.
  for (uint32_t i = 0; i < io.count; ++i) {
    std::span<uint8_t> chunk = io.data.subspan(size_t{i} * io.size, io.size);
    bool claimed = io.is_write ? pio_->Write(io.port, chunk) : pio_->Read(io.port, chunk);
    if (!claimed) {
      // Linux probes legacy ports that do not exist here (0x80 delay port,
      // PS/2 mouse, ...): reads float high, writes vanish.
      if (!io.is_write) std::memset(chunk.data(), 0xff, chunk.size());
      metrics_.unclaimed_accesses.fetch_add(1, std::memory_order_relaxed);
      DSEC_LOG_RATELIMITED(debug, 5, "vcpu={} unclaimed port {} 0x{:x} size={}", id(),
                           io.is_write ? "write" : "read", io.port, io.size);
    }
  }
}

void VcpuThread::HandleMmio(kvm::vcpu_exit::Mmio& mmio) {
  metrics_.mmio_exits.fetch_add(1, std::memory_order_relaxed);
  bool claimed = mmio.is_write ? mmio_->Write(mmio.gpa, mmio.data) : mmio_->Read(mmio.gpa, mmio.data);
  if (!claimed) {
    if (!mmio.is_write) std::memset(mmio.data.data(), 0xff, mmio.data.size());
    metrics_.unclaimed_accesses.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(warn, 5, "vcpu={} unclaimed mmio {} 0x{:x} len={}", id(),
                         mmio.is_write ? "write" : "read", mmio.gpa, mmio.len);
  }
}

}  // namespace dsec::vcpu
