// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/event_loop.h"
#include "base/eventfd.h"
#include "base/mmap.h"
#include "platform/bus/bus.h"
#include "platform/kvm/kvm_system.h"
#include "platform/kvm/kvm_vm.h"
#include "platform/memory/memfd_guest_memory.h"
#include "platform/memory/uffd_pager.h"
#include "vmm/vcpu/vcpu_thread.h"
#include "sched/isolation.h"
#include "vmm/snapshot/snapshot_format.h"
#include "vmm/vm/vm_config.h"

namespace dsec::devices {
class AcpiPmDevice;
class ConsoleOutput;
class SerialDevice;
class I8042Device;
class PitDevice;
class EventLoopTimerService;
class TestDevice;
}  // namespace dsec::devices

namespace dsec::vm {

class IrqfdLine;
class VirtioDevices;

// How a VM ended. The first request wins; later ones are ignored.
enum class StopReason {
  kGuestShutdown,  // the guest asked to stop (test device, or ACPI-less poweroff)
  kReset,          // the guest asked for a reset (i8042 pulse, KVM reset event)
  kTripleFault,    // KVM_EXIT_SHUTDOWN
  kInternalError,  // KVM failure or an exit the monitor cannot handle
  kTimeout,        // VmConfig::timeout_ms expired
  kHostRequest,    // RequestStop from the host side (signal, API)
};
std::string_view StopReasonName(StopReason reason);

struct StopInfo {
  StopReason reason = StopReason::kInternalError;
  uint32_t guest_exit_code = 0;  // for kGuestShutdown
  std::string detail;
};

// CLOCK_MONOTONIC nanoseconds (system-wide, so comparable with timestamps of
// other processes such as a benchmark's fork time); 0 = did not happen.
struct BootTimestamps {
  int64_t create_ns = 0;          // Vm::Create entered
  int64_t kvm_ready_ns = 0;       // KVM VM created
  int64_t memory_ready_ns = 0;    // guest RAM mapped and registered as memslots
  int64_t loaded_ns = 0;          // irqchip, PIT, kernel, boot structures and devices
  int64_t vcpus_ready_ns = 0;     // vCPUs created and configured (end of Create)
  int64_t first_run_ns = 0;       // the boot vCPU's first KVM_RUN
  int64_t first_insn_ns = 0;      // test device event FIRST_INSN
  int64_t first_user_ns = 0;      // test device event FIRST_USER
  int64_t workload_done_ns = 0;   // test device event WORKLOAD_DONE
  int64_t stop_ns = 0;            // the stop request
};

struct VmPlacementInfo {
  std::string qos;        // "ls" / "be"
  std::string mechanism;  // "core-sched" / "cpuset"
  std::vector<int> cpus;
  std::vector<int> vcpu_cpus;
};

struct VmStats {
  StopInfo stop;
  std::optional<VmPlacementInfo> placement;
  BootTimestamps timestamps;
  uint64_t guest_mem_bytes = 0;
  uint64_t guest_resident_bytes = 0;  // guest RAM the host has backed (mincore)
  uint64_t vmm_rss_bytes = 0;         // VmRSS of the whole process at stop
  uint64_t vmm_peak_rss_bytes = 0;    // VmHWM
  // Private_Dirty of the whole process minus the guest RAM it backs: what
  // one more monitor costs the host (its text and read-only data are file
  // pages shared by every monitor and not in this figure).
  uint64_t vmm_private_dirty_bytes = 0;
  uint64_t console_bytes_in = 0;
  uint64_t console_bytes_written = 0;
  uint64_t console_bytes_dropped = 0;
  uint64_t testdev_messages = 0;
  uint64_t testdev_dropped = 0;
  uint64_t vcpu_exits = 0;
  uint64_t unclaimed_accesses = 0;
  // Where each vCPU was when the VM stopped (RIP, and CPL from CS): what a
  // guest that hung until its timeout was doing.
  std::vector<uint64_t> vcpu_rips;
  std::vector<int> vcpu_cpls;
  // A lazy restore's pager (zero otherwise): guest pages copied in on a
  // fault, pages served before and dropped since (zeros), pages prefetched.
  uint64_t lazy_faults = 0;
  uint64_t lazy_zero_faults = 0;
  uint64_t lazy_prefetched_pages = 0;
};

// How Restore maps guest RAM.
struct RestoreOptions {
  // false: the memory file mapped MAP_PRIVATE (clones share its pages in
  // the page cache). true: anonymous memory filled on first touch through
  // userfaultfd from a read-only mapping of the file, each page copied
  // (clones share nothing they touched), with `prefetch` copied in before
  // the VM runs: the pages an earlier restore touched (Vm::TouchedPages).
  bool lazy = false;
  std::vector<snapshot::Extent> prefetch;
};

// What SaveSnapshot wrote.
struct SnapshotResult {
  uint64_t memory_bytes = 0;          // guest RAM in the snapshot (file size)
  uint64_t memory_bytes_written = 0;  // of it, data (the rest are holes)
  uint64_t manifest_bytes = 0;
  int64_t capture_ns = 0;  // vCPU, VM and device state
  int64_t memory_ns = 0;   // writing and syncing guest RAM
  int64_t total_ns = 0;
};

// One microVM: guest memory, the KVM VM and its vCPU threads, the device
// buses, and the event-loop thread that runs device back-ends and timers.
//
// Threads: Create/Start/Wait are called by one owner thread. Pause, Resume
// and RequestStop may be called from any thread. vCPU threads and the event
// loop call into the VM through the device callbacks below.
// Lifetime: Wait() (or the destructor, which stops and waits) joins every
// thread; after it returns no thread of this VM runs and every fd it opened
// is closed when the object is destroyed.
// The threads a VM starts, for VmThreadHook.
enum class VmThread { kVcpu, kEventLoop, kPager };
// Runs on each VM thread as it starts, after its CPU placement and before
// its work (a vCPU's first KVM_RUN, the event loop's first wait). An error
// stops the VM (kInternalError) and that thread.
using VmThreadHook = std::function<absl::Status(VmThread)>;

class Vm : private vcpu::VcpuStopSink {
 public:
  static absl::StatusOr<std::unique_ptr<Vm>> Create(const VmConfig& config);
  ~Vm() override;

  // Snapshots (vm_snapshot.cc; the format is vmm/snapshot).
  //
  // CaptureState: the state of every vCPU, the irqchip, the clock and the
  // devices, for a VM that is paused or not started (FailedPrecondition
  // otherwise, and for what cannot be snapshotted yet: virtio devices whose
  // state is not saved (all but virtio-rng today) and
  // the in-kernel PIT, each named). Any thread.
  absl::StatusOr<snapshot::Manifest> CaptureState();
  // Writes a snapshot of this paused VM into the directory `dir_fd`: guest
  // RAM as `memory` (holes where the guest never wrote), then
  // `manifest.json`, published last by a rename, both synced and read-only.
  // AlreadyExists if the directory holds a snapshot; a failure removes what
  // it wrote. The VM stays paused.
  //
  // With `diff`, for a VM restored from a snapshot: only the guest pages
  // written since the restore (by the guest or its devices: the pages the
  // copy-on-write mapping made private, read from /proc/self/pagemap) go
  // into `memory`, listed as its extents, and the manifest names the
  // snapshot restored from as its parent (its directory name and CRC).
  // Restore finds the parent beside the diff. FailedPrecondition for a VM
  // that was not restored.
  absl::StatusOr<SnapshotResult> SaveSnapshot(int dir_fd, bool diff = false);
  // A VM in the state the snapshot in `dir` saved, ready to Start(): guest
  // RAM is the snapshot's memory file mapped copy-on-write (MAP_PRIVATE),
  // so VMs restored from one snapshot share its pages in the page cache;
  // vCPUs, irqchip, clock and devices as saved. The guest-visible settings
  // come from the snapshot; of `host` only the host-side ones count
  // (console, timeout_ms, qos, and `devices` when given: the same kinds in
  // the snapshot's order, whose host ends are used; a clone needs its own
  // vsock socket path). Everything read is checked before anything
  // is mapped (InvalidArgument naming the field; FailedPrecondition for a
  // foreign format, or CPU features the guest saw that this host lacks,
  // named).
  //
  // With options.lazy, see RestoreOptions: prefetch runs outside guest RAM
  // are InvalidArgument; a host without userfaultfd for this process is
  // FailedPrecondition. The pager's thread runs from here on (it serves
  // what Restore itself touches) and takes the owner's hook at Start
  // (VmThread::kPager).
  static absl::StatusOr<std::unique_ptr<Vm>> Restore(const std::string& dir,
                                                     const VmConfig& host,
                                                     const RestoreOptions& options = {});
  // For a lazy restore: the guest pages served so far (faulted in or
  // prefetched), as memory-file runs, sorted; empty otherwise.
  std::vector<snapshot::Extent> TouchedPages() const;
  bool lazy() const { return pager_ != nullptr; }

  // Called on the event-loop thread for each test-device message, in order.
  // Set before Start().
  void SetTestMessageCallback(std::function<void(std::string_view)> callback);

  absl::Status Start(VmThreadHook on_thread_start = {});
  // Parks every vCPU outside KVM_RUN; returns when all are parked. The
  // guest's kvmclock stands still from the pause to the resume (its value
  // at the pause is taken with KVM_GET_CLOCK and put back with
  // KVM_SET_CLOCK, as QEMU does): a guest on kvm-clock sees no time pass
  // while paused, so its timers and timeouts do not all fire at the resume.
  // Its wall clock then lags by the pause, which the sandbox tier corrects
  // through the agent.
  absl::Status Pause();
  absl::Status Resume();
  // The guest's kvmclock (KVM_GET_CLOCK), nanoseconds.
  absl::StatusOr<uint64_t> GuestClockNs() const;
  void RequestStop(StopReason reason, std::string detail, uint32_t guest_exit_code = 0);
  // Readable (eventfd) once a stop has been requested, for owners that also
  // wait on other fds (signals).
  int stop_requested_fd() const { return stop_event_->fd(); }
  // Blocks until the VM stopped and every thread is joined. Idempotent.
  VmStats Wait();

  bool paused() const;
  // CLOCK_MONOTONIC of the boot vCPU's first KVM_RUN (0 until it ran).
  int64_t first_run_ns() const;
  std::vector<std::string> TestMessages() const;
  // Kernel thread ids of the vCPU threads (0 until a thread started).
  std::vector<pid_t> VcpuThreadIds() const;
  std::optional<VmPlacementInfo> placement() const;
  const memory::MemfdGuestMemory& memory() const { return *memory_; }
  // The command line the guest was given (with the virtio-mmio devices the
  // monitor appended).
  const std::string& cmdline() const { return cmdline_; }
  // The virtio devices; what they offer the owner (a balloon's
  // BalloonControl, a pmem layer) is found by type: virtio()->Find<T>().
  const VirtioDevices* virtio() const { return virtio_.get(); }
  uint32_t vcpu_count() const { return static_cast<uint32_t>(vcpus_.size()); }

 private:
  class TestListener;
  Vm();

  absl::Status SetUpVcpus(const VmConfig& config, const void* boot_plan);
  // The VcpuThread for a configured vCPU (placement, the owner's hook).
  void AddVcpuThread(std::unique_ptr<kvm::KvmVcpu> vcpu);
  absl::Status SetUpRestoredVcpus(const snapshot::Manifest& manifest);
  absl::Status RestoreDevices(const nlohmann::json& devices);
  struct LoopHold;
  // The devices' state (legacy and virtio), on the loop thread.
  absl::StatusOr<nlohmann::json> CaptureDevices() const;
  // Reads the devices on the loop thread and, with `hold`, keeps the loop
  // waiting until the returned hold is released.
  absl::StatusOr<std::shared_ptr<LoopHold>> HoldLoop(bool hold);
  absl::StatusOr<snapshot::Manifest> Capture(std::shared_ptr<LoopHold>* hold, bool hold_loop);
  // After guest RAM: the TSS, irqchip (and KVM's PIT), the event loop, the
  // legacy devices and the virtio devices (Create and Restore alike).
  absl::Status SetUpMachine(const VmConfig& config);
  absl::Status SetUpDevices(const VmConfig& config);
  absl::Status SetUpTimers(const VmConfig& config);
  absl::Status SetUpPlacement(const VmConfig& config);
  void DrainConsole();
  void OnVcpuStop(uint32_t vcpu_id, vcpu::VcpuStopCause cause, std::string detail) override;
  void KickAll();
  void CollectStats();

  VmConfig config_;
  std::string cmdline_;
  BootTimestamps timestamps_;
  std::unique_ptr<memory::MemfdGuestMemory> memory_;
  // A lazy restore: the snapshot's memory mapped read-only (the pages'
  // source), and the pager that fills memory_ from it; destroyed before
  // both and after everything that touches guest RAM (declared after
  // memory_, before the KVM VM, devices and vCPUs).
  std::unique_ptr<memory::MemfdGuestMemory> lazy_source_;
  std::unique_ptr<memory::UserfaultPager> pager_;
  // Guest RAM's memslots, declared before the KVM VM so that they are
  // destroyed after it (and before the memory they map): closing the VM fd
  // frees them all at once, whereas deleting each first would wait for SRCU
  // grace periods in every monitor's exit (KVM swaps the memslot array twice
  // per deletion and waits for readers each time; slow once the irqchip
  // exists on this host, docs/deviations.md). A MemSlot destroyed while its
  // VM is open removes its slot.
  std::vector<kvm::MemSlot> ram_slots_;
  std::unique_ptr<kvm::KvmSystem> kvm_;
  std::unique_ptr<kvm::KvmVm> kvm_vm_;
  // Known at creation, for CaptureState on threads that may not issue
  // system ioctls (the jailed control thread): the MSRs KVM lists, and
  // whether it has KVM_GET_XSAVE / KVM_GET_XCRS.
  std::vector<uint32_t> msr_index_list_;
  size_t xsave_size_ = 0;  // KvmVm::XsaveSize()
  // Restored VMs: the snapshot restored from (a diff snapshot's parent).
  std::optional<snapshot::ParentRef> restored_from_;
  bool has_xcrs_ = false;

  bus::Bus pio_bus_{"pio"};
  bus::Bus mmio_bus_{"mmio"};
  std::unique_ptr<IrqfdLine> serial_irq_;
  std::unique_ptr<devices::ConsoleOutput> console_;
  std::shared_ptr<devices::SerialDevice> serial_;
  std::shared_ptr<devices::I8042Device> i8042_;
  std::unique_ptr<devices::AcpiPmDevice> acpi_pm_;
  std::shared_ptr<IrqfdLine> pit_irq_;
  std::unique_ptr<devices::EventLoopTimerService> pit_timers_;
  std::shared_ptr<devices::PitDevice> pit_;
  std::unique_ptr<TestListener> test_listener_;
  std::shared_ptr<devices::TestDevice> testdev_;

  std::unique_ptr<EventLoop> loop_;
  // After the loop, memory and KVM VM (destroyed before them): transports
  // unregister from all three.
  std::unique_ptr<VirtioDevices> virtio_;
  std::thread loop_thread_;
  int console_retry_timer_ = -1;
  bool console_watching_writable_ = false;

  // Outlive the vCPU threads (declared before them): their ThreadPlacements
  // point into the isolation.
  std::unique_ptr<sched::Isolator> isolator_;
  std::unique_ptr<sched::SandboxIsolation> isolation_;
  std::optional<VmPlacementInfo> placement_info_;

  vcpu::VcpuControl control_;
  std::vector<std::unique_ptr<vcpu::VcpuThread>> vcpus_;

  std::optional<EventFd> stop_event_;
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool waited_ ABSL_GUARDED_BY(mu_) = false;
  StopInfo stop_ ABSL_GUARDED_BY(mu_);
  VmStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mu_);
  // The kvmclock at the pause, put back at the resume.
  std::optional<kvm::ClockData> clock_at_pause_ ABSL_GUARDED_BY(mu_);
  std::function<void(std::string_view)> message_callback_;
  VmThreadHook thread_hook_;  // set by Start before any thread exists
};

}  // namespace dsec::vm
