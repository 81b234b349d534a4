// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/vm.h"

#include <fcntl.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "devices/acpi/acpi_pm_device.h"
#include "devices/i8042/i8042_device.h"
#include "devices/pit/pit_device.h"
#include "devices/pit/timer_service.h"
#include "platform/interrupt/interrupt_line.h"
#include "devices/serial/console_output.h"
#include "devices/serial/serial_device.h"
#include "devices/testdev/testdev_device.h"
#include "devices/testdev/testdev_regs.h"
#include "platform/arch/x86_64/acpi.h"
#include "platform/arch/x86_64/boot.h"
#include "platform/arch/x86_64/cpuid.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/arch/x86_64/mptable.h"
#include "base/logging.h"
#include "base/status.h"
#include "platform/bus/offset_device.h"
#include "vmm/vm/image_file.h"
#include "vmm/vm/irqfd_line.h"
#include "vmm/vm/virtio_devices.h"

namespace dsec::vm {

namespace {

// Legacy PC resources (the same everywhere since the IBM PC/AT).
constexpr uint16_t kCom1Port = 0x3f8;
constexpr uint32_t kCom1Irq = 4;
constexpr uint16_t kI8042DataPort = 0x60;
constexpr uint16_t kI8042CommandPort = 0x64;
// Three pages below the LAPIC/IOAPIC area that KVM may use for its TSS (Intel
// real-mode emulation); kept out of RAM by the 32-bit hole.
constexpr uint64_t kKvmTssAddress = 0xfffb'd000;

// "VmRSS:    1234 kB" from /proc/self/status (or another /proc file with
// the same "Key: N kB" lines).
uint64_t ProcStatusKb(const char* key, const char* file = "/proc/self/status") {
  std::ifstream in(file);
  std::string line;
  const size_t key_len = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, key_len, key) == 0 && line.size() > key_len && line[key_len] == ':') {
      return std::strtoull(line.c_str() + key_len + 1, nullptr, 10);
    }
  }
  return 0;
}

arch::BootProtocol ToArch(BootProtocolChoice choice) {
  switch (choice) {
    case BootProtocolChoice::kLinux64:
      return arch::BootProtocol::kLinux64;
    case BootProtocolChoice::kPvh:
      return arch::BootProtocol::kPvh;
    case BootProtocolChoice::kAuto:
      break;
  }
  return arch::BootProtocol::kAuto;
}

}  // namespace

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kGuestShutdown:
      return "guest-shutdown";
    case StopReason::kReset:
      return "reset";
    case StopReason::kTripleFault:
      return "triple-fault";
    case StopReason::kInternalError:
      return "internal-error";
    case StopReason::kTimeout:
      return "timeout";
    case StopReason::kHostRequest:
      return "host-request";
  }
  return "unknown";
}

// Receives the test device's reports (on vCPU threads).
class Vm::TestListener : public devices::TestDevice::Listener {
 public:
  explicit TestListener(Vm* vm) : vm_(vm) {}
  void OnMessage(std::string_view message) override {
    std::string copy(message);
    {
      absl::MutexLock lock(&vm_->mu_);
      vm_->messages_.push_back(copy);
    }
    // Printing is I/O: it happens on the event loop, never on the vCPU thread.
    if (vm_->message_callback_) {
      vm_->loop_->Post([vm = vm_, copy = std::move(copy)] { vm->message_callback_(copy); });
    }
  }
  void OnEvent(uint32_t code, int64_t mono_ns) override {
    absl::MutexLock lock(&vm_->mu_);
    int64_t* slot = nullptr;
    switch (code) {
      case DSEC_TESTDEV_EVENT_FIRST_INSN:
        slot = &vm_->timestamps_.first_insn_ns;
        break;
      case DSEC_TESTDEV_EVENT_FIRST_USER:
        slot = &vm_->timestamps_.first_user_ns;
        break;
      case DSEC_TESTDEV_EVENT_WORKLOAD_DONE:
        slot = &vm_->timestamps_.workload_done_ns;
        break;
      default:
        return;
    }
    if (*slot == 0) *slot = mono_ns;
  }
  void OnShutdown(uint32_t code) override {
    vm_->RequestStop(StopReason::kGuestShutdown, absl::StrCat("test device exit code ", code),
                     code);
  }

 private:
  Vm* vm_;
};

absl::StatusOr<std::unique_ptr<Vm>> Vm::Create(const VmConfig& config) {
  std::unique_ptr<Vm> vm(new Vm());
  vm->timestamps_.create_ns = MonotonicNowNs();
  vm->config_ = config;
  if (config.vcpus < 1 || config.vcpus > arch::kMaxVcpus) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--vcpus must be between 1 and %d, got %d", arch::kMaxVcpus, config.vcpus));
  }
  if (config.mem_mib < arch::kMinRamBytes / arch::kMiB || config.mem_mib > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--mem-mib must be between %d and 1048576, got %d", arch::kMinRamBytes / arch::kMiB,
        config.mem_mib));
  }
  DSEC_ASSIGN_OR_RETURN(EventFd stop_event, EventFd::Create(EFD_NONBLOCK));
  vm->stop_event_.emplace(std::move(stop_event));

  // Images first: a bad path or a malformed kernel is the most likely error
  // and is reported before any KVM object exists.
  DSEC_ASSIGN_OR_RETURN(ImageFile kernel, ImageFile::Open(config.kernel_path, "kernel"));
  std::optional<ImageFile> initrd;
  if (config.initrd_path) {
    DSEC_ASSIGN_OR_RETURN(ImageFile f, ImageFile::Open(*config.initrd_path, "initrd"));
    initrd.emplace(std::move(f));
  }

  DSEC_ASSIGN_OR_RETURN(kvm::KvmSystem kvm, kvm::KvmSystem::Create());
  vm->kvm_ = std::make_unique<kvm::KvmSystem>(std::move(kvm));
  DSEC_RETURN_IF_ERROR(vm->kvm_->RequireExtensions(
      {kvm::Capability::kIrqchip, kvm::Capability::kUserMemory, kvm::Capability::kSetTssAddr,
       kvm::Capability::kIrqfd, kvm::Capability::kIoeventfd,
       kvm::Capability::kImmediateExit, kvm::Capability::kExtCpuid}));
  DSEC_ASSIGN_OR_RETURN(vm->kvm_vm_, vm->kvm_->CreateVm());
  vm->timestamps_.kvm_ready_ns = MonotonicNowNs();

  // Guest RAM is registered before the irqchip exists. Measured here: once
  // the in-kernel irqchip is set up, the first KVM_SET_USER_MEMORY_REGION
  // waits 4-10 ms (an SRCU grace period of the host kernel); before it, the
  // same call takes about 0.1 ms.
  DSEC_ASSIGN_OR_RETURN(auto ranges, arch::RamRanges(config.mem_mib * arch::kMiB));
  std::vector<memory::MemfdGuestMemory::Range> mem_ranges;
  for (const auto& r : ranges) mem_ranges.push_back({r.start, r.size});
  DSEC_ASSIGN_OR_RETURN(vm->memory_, memory::MemfdGuestMemory::Create(mem_ranges, {}));
  DSEC_ASSIGN_OR_RETURN(vm->ram_slots_, vm->kvm_vm_->AddGuestMemory(*vm->memory_));
  vm->timestamps_.memory_ready_ns = MonotonicNowNs();

  DSEC_RETURN_IF_ERROR(vm->SetUpMachine(config));

  arch::BootConfig boot;
  boot.kernel = kernel.bytes();
  if (initrd) boot.initrd = initrd->bytes();
  boot.cmdline = vm->cmdline_;
  boot.vcpu_count = config.vcpus;
  boot.protocol = ToArch(config.boot);
  boot.acpi = config.acpi;
  DSEC_ASSIGN_OR_RETURN(arch::BootPlan plan, arch::SetupBoot(*vm->memory_, boot));
  vm->timestamps_.loaded_ns = MonotonicNowNs();

  DSEC_RETURN_IF_ERROR(vm->SetUpPlacement(config));
  DSEC_RETURN_IF_ERROR(vm->SetUpVcpus(config, &plan));
  DSEC_RETURN_IF_ERROR(vm->SetUpTimers(config));
  vm->timestamps_.vcpus_ready_ns = MonotonicNowNs();
  DSEC_LOG(debug, "vm created kernel={} protocol={} mem_mib={} vcpus={}", config.kernel_path,
           arch::BootProtocolName(plan.protocol), config.mem_mib, config.vcpus);
  return vm;
}

absl::Status Vm::SetUpMachine(const VmConfig& config) {
  DSEC_RETURN_IF_ERROR(kvm_vm_->SetTssAddress(kKvmTssAddress));
  DSEC_RETURN_IF_ERROR(kvm_vm_->CreateIrqchip());
  if (config.pit == PitChoice::kKernel) {
    DSEC_RETURN_IF_ERROR(kvm_->RequireExtensions({kvm::Capability::kPit2}));
    DSEC_RETURN_IF_ERROR(kvm_vm_->CreatePit2());
  }
  DSEC_ASSIGN_OR_RETURN(loop_, EventLoop::Create());
  DSEC_RETURN_IF_ERROR(SetUpDevices(config));
  VirtioDevices::Context vctx{kvm_vm_.get(), memory_.get(), loop_.get(), &mmio_bus_};
  DSEC_ASSIGN_OR_RETURN(virtio_, VirtioDevices::Create(config.devices, vctx));
  cmdline_ = config.cmdline + virtio_->CommandLine();
  return absl::OkStatus();
}

absl::Status Vm::SetUpDevices(const VmConfig& config) {
  // Console: UART -> ConsoleOutput (bounded ring, rate limit, cap) -> fd.
  devices::ConsoleOutputOptions opts;
  opts.rate_bytes_per_sec = config.console.rate_bytes_per_s;
  opts.burst_bytes = config.console.burst_bytes;
  opts.max_total_bytes = config.console.cap_bytes;
  ScopedFd out;
  switch (config.console.kind) {
    case ConsoleConfig::Kind::kStdio: {
      DSEC_ASSIGN_OR_RETURN(out, devices::ConsoleOutput::OpenStdout());
      break;
    }
    case ConsoleConfig::Kind::kFile: {
      DSEC_ASSIGN_OR_RETURN(out, devices::ConsoleOutput::OpenFile(config.console.path));
      break;
    }
    case ConsoleConfig::Kind::kNone: {
      out.Reset(::open("/dev/null", O_WRONLY | O_CLOEXEC));
      if (!out.valid()) return ErrnoStatus("open(/dev/null)");
      break;
    }
  }
  DSEC_ASSIGN_OR_RETURN(console_, devices::ConsoleOutput::Create(std::move(out), opts));
  DSEC_ASSIGN_OR_RETURN(serial_irq_, IrqfdLine::Create(*kvm_vm_, kCom1Irq));
  serial_ = std::make_shared<devices::SerialDevice>(console_.get(), serial_irq_.get());
  DSEC_RETURN_IF_ERROR(pio_bus_.Insert(serial_, kCom1Port, 8));

  i8042_ = std::make_shared<devices::I8042Device>([this] {
    RequestStop(StopReason::kReset, "guest pulsed the i8042 reset line");
  });
  // The controller's data port is its offset 0 and the status/command port
  // its offset 4; port 0x61 in between belongs to the PIT.
  DSEC_RETURN_IF_ERROR(pio_bus_.Insert(i8042_, kI8042DataPort, 1));
  DSEC_RETURN_IF_ERROR(pio_bus_.Insert(std::make_shared<bus::OffsetBusDevice>(i8042_, 4),
                                       kI8042CommandPort, 1));

  if (config.acpi) {
    // ACPI soft-off (S5 through PM1_CNT): Linux's poweroff.
    acpi_pm_ = std::make_unique<devices::AcpiPmDevice>(arch::kAcpiS5SleepType, [this] {
      RequestStop(StopReason::kGuestShutdown, "guest powered off (ACPI S5)", 0);
    });
    DSEC_RETURN_IF_ERROR(pio_bus_.Insert(acpi_pm_->event_block(), arch::kAcpiPm1EventPort,
                                         arch::kAcpiPm1EventLength));
    DSEC_RETURN_IF_ERROR(pio_bus_.Insert(acpi_pm_->control_block(), arch::kAcpiPm1ControlPort,
                                         arch::kAcpiPm1ControlLength));
  }

  if (config.pit == PitChoice::kUser) {
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<IrqfdLine> irq0, IrqfdLine::Create(*kvm_vm_, 0));
    pit_irq_ = std::move(irq0);
    pit_timers_ = std::make_unique<devices::EventLoopTimerService>(loop_.get());
    devices::PitDevice::Options po;
    po.irq0 = pit_irq_.get();
    po.timers = pit_timers_.get();
    pit_ = devices::PitDevice::Create(po);
    DSEC_RETURN_IF_ERROR(pio_bus_.Insert(pit_->counter_ports(),
                                         devices::PitDevice::kCounterPortsBase,
                                         devices::PitDevice::kCounterPortsLength));
    DSEC_RETURN_IF_ERROR(pio_bus_.Insert(pit_->port_b(), devices::PitDevice::kPortB,
                                         devices::PitDevice::kPortBLength));
  }

  test_listener_ = std::make_unique<TestListener>(this);
  testdev_ = std::make_shared<devices::TestDevice>(*memory_, test_listener_.get());
  DSEC_RETURN_IF_ERROR(mmio_bus_.Insert(testdev_, DSEC_TESTDEV_BASE, DSEC_TESTDEV_SIZE));
  return absl::OkStatus();
}

absl::Status Vm::SetUpPlacement(const VmConfig& config) {
  if (!config.qos) return absl::OkStatus();
  DSEC_ASSIGN_OR_RETURN(sched::Topology topology, sched::Topology::Read());
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<sched::PlacementEngine> engine,
                        sched::PlacementEngine::Create(std::move(topology)));
  sched::PlacementRequest request;
  request.sandbox = absl::StrCat("vm-", ::getpid());
  request.qos = *config.qos;
  request.vcpus = static_cast<int>(config.vcpus);
  DSEC_ASSIGN_OR_RETURN(sched::Placement placement, engine->Place(request));
  DSEC_ASSIGN_OR_RETURN(isolator_, sched::Isolator::Create());
  // On the owner thread, before any VM thread exists: with core scheduling
  // the threads spawned from here inherit the sandbox's cookie.
  DSEC_ASSIGN_OR_RETURN(isolation_, isolator_->Isolate(placement));
  VmPlacementInfo info;
  info.qos = std::string(sched::QosClassName(placement.qos));
  info.mechanism = std::string(sched::IsolationMechanismName(isolator_->mechanism()));
  info.cpus = placement.cpus;
  info.vcpu_cpus = placement.vcpu_cpus;
  placement_info_ = info;
  DSEC_LOG(info, "vm placement qos={} mechanism={} cpus={}", info.qos, info.mechanism,
           info.cpus.size());
  return absl::OkStatus();
}

absl::Status Vm::SetUpVcpus(const VmConfig& config, const void* boot_plan) {
  const auto& plan = *static_cast<const arch::BootPlan*>(boot_plan);
  DSEC_ASSIGN_OR_RETURN(std::vector<kvm::CpuidEntry> supported, kvm_->GetSupportedCpuid());
  DSEC_ASSIGN_OR_RETURN(std::vector<uint32_t> msr_list, kvm_->GetMsrIndexList());
  msr_index_list_ = msr_list;
  xsave_size_ = kvm_vm_->XsaveSize();
  has_xcrs_ = kvm_->CheckExtension(kvm::Capability::kXcrs) > 0;
  // Only MSRs this KVM can set: the boot set is the architectural minimum,
  // and an MSR KVM does not know would fail the whole KVM_SET_MSRS.
  std::vector<kvm::MsrEntry> msrs;
  for (const auto& m : plan.msrs) {
    if (std::find(msr_list.begin(), msr_list.end(), m.index) != msr_list.end()) msrs.push_back(m);
  }
  arch::CpuidOptions cpuid_options;
  cpuid_options.tsc_deadline_timer =
      kvm_->CheckExtension(kvm::Capability::kTscDeadlineTimer) > 0;
  for (uint32_t id = 0; id < config.vcpus; ++id) {
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<kvm::KvmVcpu> vcpu, kvm_vm_->CreateVcpu(id));
    DSEC_ASSIGN_OR_RETURN(std::vector<kvm::CpuidEntry> cpuid,
                          arch::NormalizeCpuid(supported, id, config.vcpus, cpuid_options));
    DSEC_RETURN_IF_ERROR(vcpu->SetCpuid(cpuid));
    DSEC_RETURN_IF_ERROR(vcpu->SetMsrs(msrs));
    DSEC_RETURN_IF_ERROR(vcpu->SetFpu(plan.fpu));
    DSEC_ASSIGN_OR_RETURN(kvm::LapicState lapic, vcpu->GetLapic());
    arch::ConfigureLapicLvt(std::span<uint8_t, kvm::LapicState::kSize>(lapic.regs));
    DSEC_RETURN_IF_ERROR(vcpu->SetLapic(lapic));
    if (id == 0) {
      // The boot vCPU starts at the kernel entry; the others wait in the
      // in-kernel LAPIC for INIT/SIPI from the guest, as on real hardware.
      DSEC_RETURN_IF_ERROR(vcpu->SetSregs(plan.sregs));
      DSEC_RETURN_IF_ERROR(vcpu->SetRegs(plan.regs));
    }
    AddVcpuThread(std::move(vcpu));
  }
  return absl::OkStatus();
}

void Vm::AddVcpuThread(std::unique_ptr<kvm::KvmVcpu> vcpu) {
  const uint32_t id = vcpu->id();
  auto thread = std::make_unique<vcpu::VcpuThread>(std::move(vcpu), &pio_bus_, &mmio_bus_,
                                                   &control_,
                                                   static_cast<vcpu::VcpuStopSink*>(this));
  std::optional<sched::ThreadPlacement> tp;
  if (isolation_) tp = isolation_->ForVcpu(id);
  thread->SetPreRunHook([this, tp]() -> absl::Status {
    // Pinned and isolated on its own thread, before the first KVM_RUN;
    // then the owner's hook (the monitor's jail).
    if (tp) {
      DSEC_RETURN_IF_ERROR(sched::ApplyToCurrentThread(*tp));
    }
    return thread_hook_ ? thread_hook_(VmThread::kVcpu) : absl::OkStatus();
  });
  vcpus_.push_back(std::move(thread));
}

absl::Status Vm::SetUpTimers(const VmConfig& config) {
  DSEC_RETURN_IF_ERROR(
      loop_->Add(console_->wake_fd(), EPOLLIN, [this](uint32_t) { DrainConsole(); }));
  if (config.timeout_ms > 0) {
    DSEC_RETURN_IF_ERROR(loop_
                             ->AddTimer(static_cast<int64_t>(config.timeout_ms) * 1'000'000, 0,
                                        [this] {
                                          RequestStop(StopReason::kTimeout,
                                                      absl::StrCat("timeout of ",
                                                                   config_.timeout_ms,
                                                                   " ms expired"));
                                        })
                             .status());
  }
  return absl::OkStatus();
}

void Vm::DrainConsole() {
  devices::ConsoleOutput::DrainResult r = console_->Drain();
  if (r.retry_after_ns > 0 && console_retry_timer_ < 0) {
    auto id = loop_->AddTimer(r.retry_after_ns, 0, [this] {
      console_retry_timer_ = -1;
      DrainConsole();
    });
    if (id.ok()) console_retry_timer_ = *id;
  }
  // A full pipe or terminal: the wake eventfd re-fires on new output, and the
  // retry timer (armed when throttled) covers a reader that catches up.
  if (r.wait_writable && console_retry_timer_ < 0) {
    auto id = loop_->AddTimer(10'000'000, 0, [this] {
      console_retry_timer_ = -1;
      DrainConsole();
    });
    if (id.ok()) console_retry_timer_ = *id;
  }
}

void Vm::SetTestMessageCallback(std::function<void(std::string_view)> callback) {
  message_callback_ = std::move(callback);
}

absl::Status Vm::Start(VmThreadHook on_thread_start) {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("VM already started");
    started_ = true;
  }
  thread_hook_ = std::move(on_thread_start);
  loop_thread_ = std::thread([this] {
    if (isolation_) {
      // Device back-ends run with the sandbox, not on a stranger's CPU.
      absl::Status placed = sched::ApplyToCurrentThread(isolation_->ForSandboxThread());
      if (!placed.ok()) {
        RequestStop(StopReason::kInternalError, placed.ToString());
        return;
      }
    }
    if (thread_hook_) {
      if (absl::Status s = thread_hook_(VmThread::kEventLoop); !s.ok()) {
        RequestStop(StopReason::kInternalError, s.ToString());
        return;
      }
    }
    absl::Status s = loop_->Run();
    if (!s.ok()) RequestStop(StopReason::kInternalError, s.ToString());
  });
  if (pager_ && thread_hook_) {
    // The pager has served faults since Restore; the hook (a jail's gate,
    // which may hold it until every thread arrived) runs on it now, between
    // two faults; an error there stops the VM (the pager's on_error). It
    // stays where the monitor's own threads are, not in the sandbox's
    // placement: a host-side helper, like the control thread.
    pager_->PostToThread([this] { return thread_hook_(VmThread::kPager); });
  }
  for (auto& v : vcpus_) {
    absl::Status s = v->Start();
    if (!s.ok()) {
      RequestStop(StopReason::kInternalError, s.ToString());
      return s;
    }
  }
  return absl::OkStatus();
}

void Vm::KickAll() {
  for (auto& v : vcpus_) v->Kick();
}

absl::Status Vm::Pause() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return absl::FailedPreconditionError("VM not started");
    if (stop_requested_) return absl::FailedPreconditionError("VM is stopping");
  }
  control_.Pause(static_cast<int>(vcpus_.size()), [this] { KickAll(); });
  absl::MutexLock lock(&mu_);
  if (clock_at_pause_) return absl::OkStatus();  // paused already: the first pause's value
  absl::StatusOr<kvm::ClockData> clock = kvm_vm_->GetClock();
  if (!clock.ok()) {
    // Paused all the same; the guest's clock then runs on through the pause.
    DSEC_LOG(warn, "vm: pause: the guest's clock runs on while paused: {}", clock.status().ToString());
    return absl::OkStatus();
  }
  clock_at_pause_ = *clock;
  return absl::OkStatus();
}

absl::Status Vm::Resume() {
  if (control_.state() != vcpu::VcpuControl::State::kPaused)
    return absl::FailedPreconditionError("VM is not paused");
  {
    absl::MutexLock lock(&mu_);
    if (clock_at_pause_) {
      absl::Status s = kvm_vm_->SetClock(*clock_at_pause_);
      if (!s.ok()) DSEC_LOG(warn, "vm: resume: the guest's clock jumps by the pause: {}", s.ToString());
      clock_at_pause_.reset();
    }
  }
  control_.Resume();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Vm::GuestClockNs() const {
  DSEC_ASSIGN_OR_RETURN(kvm::ClockData clock, kvm_vm_->GetClock());
  uint64_t ns = 0;  // struct kvm_clock_data starts with the clock (__u64)
  static_assert(sizeof(clock.bytes) >= sizeof(ns));
  std::memcpy(&ns, clock.bytes, sizeof(ns));
  return ns;
}

int64_t Vm::first_run_ns() const {
  return vcpus_.empty() ? 0 : vcpus_[0]->metrics().first_run_ns.load();
}

bool Vm::paused() const { return control_.state() == vcpu::VcpuControl::State::kPaused; }

void Vm::OnVcpuStop(uint32_t vcpu_id, vcpu::VcpuStopCause cause, std::string detail) {
  StopReason reason = StopReason::kInternalError;
  switch (cause) {
    case vcpu::VcpuStopCause::kTripleFault:
      reason = StopReason::kTripleFault;
      break;
    case vcpu::VcpuStopCause::kSystemReset:
      reason = StopReason::kReset;
      break;
    case vcpu::VcpuStopCause::kSystemOff:
      reason = StopReason::kGuestShutdown;
      break;
    case vcpu::VcpuStopCause::kInternalError:
      reason = StopReason::kInternalError;
      break;
  }
  RequestStop(reason, absl::StrCat("vcpu ", vcpu_id, ": ", detail));
}

void Vm::RequestStop(StopReason reason, std::string detail, uint32_t guest_exit_code) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) return;
    stop_requested_ = true;
    stop_ = StopInfo{reason, guest_exit_code, std::move(detail)};
    timestamps_.stop_ns = MonotonicNowNs();
  }
  control_.Stop();
  KickAll();
  if (loop_) loop_->Stop();
  (void)stop_event_->Signal();
}

VmStats Vm::Wait() {
  {
    absl::MutexLock lock(&mu_);
    if (waited_) return stats_;
    if (!started_) {
      waited_ = true;
      stats_.stop = StopInfo{StopReason::kHostRequest, 0, "never started"};
      return stats_;
    }
  }
  // Sleeps on the condition until a stop is requested; the threads then exit.
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&stop_requested_));
  }
  for (auto& v : vcpus_) v->Join();
  if (loop_thread_.joinable()) loop_thread_.join();
  // The loop thread is gone: run what it had not got to (test messages
  // posted just before the stop) on this thread.
  (void)loop_->RunOnce(0);
  // Last words of the guest: write what is buffered (within the cap).
  for (int i = 0; i < 64 && console_->buffered_bytes() > 0; ++i) {
    if (console_->Drain().wait_writable) break;
  }
  CollectStats();
  absl::MutexLock lock(&mu_);
  waited_ = true;
  return stats_;
}

void Vm::CollectStats() {
  VmStats s;
  {
    absl::MutexLock lock(&mu_);
    s.stop = stop_;
    s.timestamps = timestamps_;
  }
  if (!vcpus_.empty()) s.timestamps.first_run_ns = vcpus_[0]->metrics().first_run_ns.load();
  s.placement = placement_info_;
  s.guest_mem_bytes = memory_->TotalSize();
  if (auto r = memory_->ResidentBytes(); r.ok()) s.guest_resident_bytes = *r;
  s.vmm_rss_bytes = ProcStatusKb("VmRSS") * 1024;
  s.vmm_peak_rss_bytes = ProcStatusKb("VmHWM") * 1024;
  const uint64_t private_dirty = ProcStatusKb("Private_Dirty", "/proc/self/smaps_rollup") * 1024;
  s.vmm_private_dirty_bytes =
      private_dirty > s.guest_resident_bytes ? private_dirty - s.guest_resident_bytes : 0;
  auto cm = console_->metrics();
  s.console_bytes_in = cm.bytes_in;
  s.console_bytes_written = cm.bytes_written;
  s.console_bytes_dropped = cm.dropped_rate_limited + cm.dropped_cap + cm.dropped_overflow +
                            cm.dropped_write_error;
  auto tm = testdev_->metrics();
  s.testdev_messages = tm.messages;
  s.testdev_dropped = tm.messages_dropped + tm.invalid_messages;
  for (auto& v : vcpus_) {
    s.vcpu_exits += v->metrics().exits.load();
    s.unclaimed_accesses += v->metrics().unclaimed_accesses.load();
    // Every vCPU thread is joined: their fds are free to read.
    absl::StatusOr<kvm::Registers> regs = v->vcpu().GetRegs();
    absl::StatusOr<kvm::SpecialRegisters> sregs = v->vcpu().GetSregs();
    s.vcpu_rips.push_back(regs.ok() ? regs->rip : 0);
    s.vcpu_cpls.push_back(sregs.ok() ? static_cast<int>(sregs->cs.selector & 3) : -1);
  }
  if (pager_) {
    const memory::UserfaultPager::Stats ps = pager_->stats();
    s.lazy_faults = ps.faults;
    s.lazy_zero_faults = ps.zero_faults;
    s.lazy_prefetched_pages = ps.prefetched_pages;
  }
  absl::MutexLock lock(&mu_);
  stats_ = s;
}

std::vector<pid_t> Vm::VcpuThreadIds() const {
  std::vector<pid_t> ids;
  for (const auto& v : vcpus_) ids.push_back(v->tid());
  return ids;
}

std::optional<VmPlacementInfo> Vm::placement() const { return placement_info_; }

std::vector<std::string> Vm::TestMessages() const {
  absl::MutexLock lock(&mu_);
  return messages_;
}

Vm::Vm() = default;

Vm::~Vm() {
  bool started;
  {
    absl::MutexLock lock(&mu_);
    started = started_;
  }
  if (started) {
    RequestStop(StopReason::kHostRequest, "VM destroyed");
    Wait();
  }
  // Every thread that touches guest RAM is joined: the pager goes before
  // the members its calls use (the thread hook, RequestStop's state).
  if (pager_) pager_->Stop();
  // Members are destroyed in reverse order: vCPU threads (joined) first, then
  // the event loop, devices, irqfds (the KvmVm outlives them), the KvmVm
  // (its close frees guest RAM's memslots), guest memory.
  vcpus_.clear();
  isolation_.reset();  // removes the sandbox's cgroup once its threads are gone
  virtio_.reset();
  pit_.reset();
  serial_irq_.reset();
}

}  // namespace dsec::vm
