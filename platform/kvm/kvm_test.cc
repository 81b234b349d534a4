// SPDX-License-Identifier: Apache-2.0
// Integration tests of platform/kvm against the host's /dev/kvm. Guest programs
// are a handful of 64-bit instructions started straight in long mode: CPL0
// code is emulated on the CI host (HOST.md: about 1 us per instruction), so
// they stay tiny.
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/eventfd.h"
#include "base/mmap.h"
#include "platform/kvm/kvm_system.h"
#include "platform/kvm/kvm_vcpu.h"
#include "platform/kvm/kvm_vm.h"
#include "platform/memory/memfd_guest_memory.h"

namespace dsec::kvm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kRamSize = 2 << 20;     // slot at gpa 0
constexpr uint64_t kRomGpa = 0x200000;     // read-only slot, one page
constexpr uint64_t kMmioGpa = 0x10000000;  // no slot: exits as MMIO
constexpr uint64_t kPml4 = 0x1000, kPdpt = 0x2000, kPd = 0x3000;
constexpr uint64_t kGdt = 0x500;
constexpr uint64_t kCode = 0x10000;
constexpr uint32_t kRomPattern = 0x11223344;

bool HaveKvm() { return ::access("/dev/kvm", R_OK | W_OK) == 0; }

#define SKIP_WITHOUT_KVM() \
  if (!HaveKvm()) GTEST_SKIP() << "no /dev/kvm"

template <typename T>
const T& As(const VcpuExit& exit) {
  const T* v = std::get_if<T>(&exit);
  EXPECT_NE(v, nullptr) << "unexpected exit, variant index " << exit.index();
  static const T kEmpty{};
  return v ? *v : kEmpty;
}

std::vector<uint8_t> Bytes(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

// A VM with 2 MiB of RAM holding identity page tables (1 GiB of 2 MiB pages),
// a flat GDT and the test's code, a one-page read-only slot, and one vCPU set
// into 64-bit mode at kCode.
class GuestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveKvm()) GTEST_SKIP() << "no /dev/kvm";
    auto sys = KvmSystem::Create();
    ASSERT_TRUE(sys.ok()) << sys.status();
    sys_ = std::make_unique<KvmSystem>(std::move(*sys));
    auto vm = sys_->CreateVm();
    ASSERT_TRUE(vm.ok()) << vm.status();
    vm_ = std::move(*vm);
    auto ram = Mmap::Anonymous(kRamSize);
    ASSERT_TRUE(ram.ok()) << ram.status();
    ram_ = std::move(*ram);
    auto rom = Mmap::Anonymous(4096);
    ASSERT_TRUE(rom.ok()) << rom.status();
    rom_ = std::move(*rom);
    std::memcpy(rom_.data(), &kRomPattern, sizeof(kRomPattern));
  }

  void TearDown() override {
    vcpu_.reset();
    vm_.reset();
  }

  template <typename T>
  void Put(uint64_t gpa, const T& v) {
    std::memcpy(ram_.data() + gpa, &v, sizeof(T));
  }

  // Lays out page tables, GDT and `code`, adds the slots and creates vCPU 0.
  void StartGuest(std::vector<uint8_t> code, MemSlotFlags ram_flags = {}) {
    // 4-level paging (Intel SDM vol. 3A, 4.5): P|RW tables, 2 MiB PS pages.
    Put<uint64_t>(kPml4, kPdpt | 0x3);
    Put<uint64_t>(kPdpt, kPd | 0x3);
    for (uint64_t i = 0; i < 512; ++i) Put<uint64_t>(kPd + i * 8, (i << 21) | 0x83);
    // Null, 64-bit code (selector 0x08), data (0x10) descriptors (SDM 3A, 3.4.5).
    Put<uint64_t>(kGdt, 0);
    Put<uint64_t>(kGdt + 8, 0x00af9b000000ffffULL);
    Put<uint64_t>(kGdt + 16, 0x00cf93000000ffffULL);
    std::memcpy(ram_.data() + kCode, code.data(), code.size());

    auto ram_slot = vm_->AddMemorySlot(0, kRamSize, ram_.data(), ram_flags);
    ASSERT_TRUE(ram_slot.ok()) << ram_slot.status();
    ram_slot_ = *ram_slot;
    auto rom_slot = vm_->AddMemorySlot(kRomGpa, 4096, rom_.data(), {.readonly = true});
    ASSERT_TRUE(rom_slot.ok()) << rom_slot.status();

    auto vcpu = vm_->CreateVcpu(0);
    ASSERT_TRUE(vcpu.ok()) << vcpu.status();
    vcpu_ = std::move(*vcpu);
    auto cpuid = sys_->GetSupportedCpuid();
    ASSERT_TRUE(cpuid.ok()) << cpuid.status();
    ASSERT_TRUE(vcpu_->SetCpuid(*cpuid).ok());

    auto sregs = vcpu_->GetSregs();
    ASSERT_TRUE(sregs.ok()) << sregs.status();
    Segment code_seg{.base = 0,
                     .limit = 0xffffffff,
                     .selector = 0x08,
                     .type = 0xb,
                     .present = 1,
                     .dpl = 0,
                     .db = 0,
                     .s = 1,
                     .l = 1,
                     .g = 1};
    Segment data_seg{.base = 0,
                     .limit = 0xffffffff,
                     .selector = 0x10,
                     .type = 0x3,
                     .present = 1,
                     .dpl = 0,
                     .db = 1,
                     .s = 1,
                     .l = 0,
                     .g = 1};
    sregs->cs = code_seg;
    sregs->ds = sregs->es = sregs->fs = sregs->gs = sregs->ss = data_seg;
    sregs->gdt.base = kGdt;
    sregs->gdt.limit = 3 * 8 - 1;
    // Values known to work on the PVM host (HOST.md): PG|AM|WP|NE|ET|MP|PE,
    // PAE only, EFER NXE|LMA|LME|SCE.
    sregs->cr0 = 0x80050033;
    sregs->cr3 = kPml4;
    sregs->cr4 = 0x20;
    sregs->efer = 0xd01;
    absl::Status s = vcpu_->SetSregs(*sregs);
    ASSERT_TRUE(s.ok()) << s;
    Registers regs;
    regs.rip = kCode;
    regs.rsp = 0x8000;
    regs.rflags = 0x2;
    s = vcpu_->SetRegs(regs);
    ASSERT_TRUE(s.ok()) << s;
  }

  VcpuExit RunOnce() {
    auto exit = vcpu_->Run();
    EXPECT_TRUE(exit.ok()) << exit.status();
    return exit.ok() ? *exit : VcpuExit(vcpu_exit::Unknown{.exit_reason = ~0u});
  }

  std::unique_ptr<KvmSystem> sys_;
  std::unique_ptr<KvmVm> vm_;
  std::unique_ptr<KvmVcpu> vcpu_;
  Mmap ram_;
  Mmap rom_;
  uint32_t ram_slot_ = 0;
};

TEST(KvmSystemTest, ReportsApiVersionAndCapabilities) {
  SKIP_WITHOUT_KVM();
  auto sys = KvmSystem::Create();
  ASSERT_TRUE(sys.ok()) << sys.status();
  EXPECT_GT(sys->CheckExtension(Capability::kUserMemory), 0);
  EXPECT_GT(sys->CheckExtension(Capability::kNrMemslots), 0);
  EXPECT_TRUE(sys->RequireExtensions({Capability::kIrqfd, Capability::kIoeventfd,
                                      Capability::kReadonlyMem, Capability::kImmediateExit})
                  .ok());
  EXPECT_EQ(CapabilityName(Capability::kIrqfd), "KVM_CAP_IRQFD");
}

TEST(KvmSystemTest, MissingCapabilityIsUnavailableAndNamed) {
  SKIP_WITHOUT_KVM();
  auto sys = KvmSystem::Create();
  ASSERT_TRUE(sys.ok()) << sys.status();
  absl::Status s = sys->RequireExtensions({Capability::kIrqfd, static_cast<Capability>(100000)});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("KVM_CAP_100000"));
}

TEST(KvmSystemTest, MissingDeviceIsUnavailable) {
  auto sys = KvmSystem::Create("/nonexistent/kvm");
  EXPECT_EQ(sys.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(sys.status().message(), HasSubstr("/nonexistent/kvm"));
}

TEST(KvmSystemTest, ReportsSupportedCpuidMsrsAndMmapSize) {
  SKIP_WITHOUT_KVM();
  auto sys = KvmSystem::Create();
  ASSERT_TRUE(sys.ok()) << sys.status();
  auto cpuid = sys->GetSupportedCpuid();
  ASSERT_TRUE(cpuid.ok()) << cpuid.status();
  ASSERT_FALSE(cpuid->empty());
  EXPECT_EQ((*cpuid)[0].function, 0u);  // leaf 0 comes first and always exists
  auto msrs = sys->GetMsrIndexList();
  ASSERT_TRUE(msrs.ok()) << msrs.status();
  EXPECT_FALSE(msrs->empty());
  auto size = sys->VcpuMmapSize();
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_GE(*size, 4096u);
}

TEST_F(GuestTest, AddsReadOnlySlotAndReusesFreedSlotNumbers) {
  auto a = vm_->AddMemorySlot(0, kRamSize, ram_.data());
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = vm_->AddMemorySlot(kRomGpa, 4096, rom_.data(), {.readonly = true});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  ASSERT_TRUE(vm_->RemoveMemorySlot(*a).ok());
  auto c = vm_->AddMemorySlot(0, kRamSize, ram_.data());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, *a);
}

TEST_F(GuestTest, OverlappingSlotFailsNamingIoctlAndErrno) {
  ASSERT_TRUE(vm_->AddMemorySlot(0, kRamSize, ram_.data()).ok());
  auto overlap = vm_->AddMemorySlot(0x100000, 4096, rom_.data());
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(overlap.status().message(), HasSubstr("KVM_SET_USER_MEMORY_REGION(slot 1"));
  EXPECT_THAT(overlap.status().message(), HasSubstr("gpa 0x100000"));
  EXPECT_THAT(overlap.status().message(), HasSubstr("(errno 17)"));
}

TEST_F(GuestTest, RejectsMisalignedSlotAndUnknownSlotRemoval) {
  EXPECT_EQ(vm_->AddMemorySlot(0x800, 4096, rom_.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vm_->AddMemorySlot(0, 0, rom_.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vm_->RemoveMemorySlot(7).code(), absl::StatusCode::kNotFound);
}

TEST_F(GuestTest, MemSlotRemovesItsSlotWhenDestroyed) {
  {
    auto slot = MemSlot::Create(vm_.get(), kRomGpa, 4096, rom_.data(), {.readonly = true});
    ASSERT_TRUE(slot.ok()) << slot.status();
    MemSlot moved = std::move(*slot);
    EXPECT_TRUE(moved.active());
    EXPECT_FALSE(slot->active());
    EXPECT_FALSE(vm_->AddMemorySlot(kRomGpa, 4096, rom_.data()).ok());
  }
  EXPECT_TRUE(vm_->AddMemorySlot(kRomGpa, 4096, rom_.data()).ok());
}

TEST_F(GuestTest, MemSlotOutlivingItsVmLeavesTheSlotToTheVmClose) {
  auto slot = MemSlot::Create(vm_.get(), kRomGpa, 4096, rom_.data(), {.readonly = true});
  ASSERT_TRUE(slot.ok()) << slot.status();
  // Closing the VM frees the slot; the handle must not touch the closed fd
  // (whose number a new VM may already have).
  vm_.reset();
  auto other = sys_->CreateVm();
  ASSERT_TRUE(other.ok()) << other.status();
  auto taken = (*other)->AddMemorySlot(kRomGpa, 4096, rom_.data());
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(slot->active());
  slot->Reset();
  EXPECT_FALSE(slot->active());
  // The other VM's slot with the same number is still there.
  EXPECT_FALSE((*other)->AddMemorySlot(kRomGpa, 4096, rom_.data()).ok());
  EXPECT_TRUE((*other)->RemoveMemorySlot(*taken).ok());
}

TEST_F(GuestTest, GuestMmioReadOnlyWriteAndPortIoExitToMonitor) {
  ASSERT_NO_FATAL_FAILURE(StartGuest({
      0x8b, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00,  // mov eax, [0x200000]   (ROM read)
      0x89, 0x04, 0x25, 0x00, 0x00, 0x00, 0x10,  // mov [0x10000000], eax (MMIO write)
      0xb8, 0x0d, 0xf0, 0xfe, 0xca,              // mov eax, 0xcafef00d
      0x89, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00,  // mov [0x200000], eax   (ROM write)
      0xb0, 0x42,                                // mov al, 0x42
      0xe6, 0x80,                                // out 0x80, al
      0x8b, 0x04, 0x25, 0x08, 0x00, 0x00, 0x10,  // mov eax, [0x10000008] (MMIO read)
      0xe7, 0x84,                                // out 0x84, eax
      0xf4,                                      // hlt
  }));

  VcpuExit exit = RunOnce();
  const auto& mmio = As<vcpu_exit::Mmio>(exit);
  EXPECT_EQ(mmio.gpa, kMmioGpa);
  EXPECT_TRUE(mmio.is_write);
  EXPECT_EQ(Bytes(mmio.data), (std::vector<uint8_t>{0x44, 0x33, 0x22, 0x11}));

  exit = RunOnce();
  const auto& rom_write = As<vcpu_exit::Mmio>(exit);
  EXPECT_EQ(rom_write.gpa, kRomGpa);
  EXPECT_TRUE(rom_write.is_write);
  EXPECT_EQ(Bytes(rom_write.data), (std::vector<uint8_t>{0x0d, 0xf0, 0xfe, 0xca}));
  uint32_t rom_now;
  std::memcpy(&rom_now, rom_.data(), sizeof(rom_now));
  EXPECT_EQ(rom_now, kRomPattern);

  exit = RunOnce();
  const auto& out = As<vcpu_exit::Io>(exit);
  EXPECT_EQ(out.port, 0x80);
  EXPECT_EQ(out.size, 1);
  EXPECT_EQ(out.count, 1u);
  EXPECT_TRUE(out.is_write);
  EXPECT_EQ(Bytes(out.data), (std::vector<uint8_t>{0x42}));

  // An MMIO read: the monitor's bytes reach the guest, which echoes them.
  exit = RunOnce();
  const auto& read = As<vcpu_exit::Mmio>(exit);
  EXPECT_EQ(read.gpa, kMmioGpa + 8);
  EXPECT_FALSE(read.is_write);
  ASSERT_EQ(read.len, 4u);
  const uint8_t reply[4] = {0xde, 0xc0, 0xad, 0x0b};
  std::memcpy(read.data.data(), reply, 4);

  exit = RunOnce();
  const auto& echo = As<vcpu_exit::Io>(exit);
  EXPECT_EQ(echo.port, 0x84);
  EXPECT_EQ(echo.size, 4);
  EXPECT_EQ(Bytes(echo.data), (std::vector<uint8_t>{0xde, 0xc0, 0xad, 0x0b}));

  exit = RunOnce();
  EXPECT_TRUE(std::holds_alternative<vcpu_exit::Hlt>(exit)) << exit.index();
}

TEST_F(GuestTest, IoeventfdSignalsWithoutExitToMonitor) {
  auto event = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(event.ok()) << event.status();
  auto reg = vm_->RegisterIoeventfd(*event, kMmioGpa, 4, IoSpace::kMmio);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_NO_FATAL_FAILURE(StartGuest({
      0x89,
      0x04,
      0x25,
      0x00,
      0x00,
      0x00,
      0x10,  // mov [0x10000000], eax (ioeventfd)
      0x89,
      0x04,
      0x25,
      0x00,
      0x10,
      0x00,
      0x10,  // mov [0x10001000], eax (plain MMIO)
      0xf4,
  }));
  VcpuExit exit = RunOnce();
  EXPECT_EQ(As<vcpu_exit::Mmio>(exit).gpa, kMmioGpa + 0x1000);
  auto count = event->Consume();
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 1u);
}

TEST_F(GuestTest, IoeventfdDuplicateIsRejectedUntilDeregistered) {
  auto event = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(event.ok()) << event.status();
  auto first = vm_->RegisterIoeventfd(*event, 0x3f8, 1, IoSpace::kPio, 0x5a);
  ASSERT_TRUE(first.ok()) << first.status();
  auto dup = vm_->RegisterIoeventfd(*event, 0x3f8, 1, IoSpace::kPio, 0x5a);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.status().message(), HasSubstr("KVM_IOEVENTFD(pio 0x3f8"));
  first->Reset();
  EXPECT_TRUE(vm_->RegisterIoeventfd(*event, 0x3f8, 1, IoSpace::kPio, 0x5a).ok());
  EXPECT_EQ(vm_->RegisterIoeventfd(*event, 0x3f8, 3, IoSpace::kPio).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GuestTest, IrqfdRegistersWithIrqchipAndDeregistersWhenDestroyed) {
  ASSERT_TRUE(vm_->CreateIrqchip().ok());
  auto event = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(event.ok()) << event.status();
  {
    auto reg = vm_->RegisterIrqfd(*event, 5);
    ASSERT_TRUE(reg.ok()) << reg.status();
    IrqfdRegistration moved = std::move(*reg);
    EXPECT_EQ(moved.gsi(), 5u);
    auto dup = vm_->RegisterIrqfd(*event, 5);
    EXPECT_FALSE(dup.ok());
    EXPECT_THAT(dup.status().message(), HasSubstr("KVM_IRQFD(gsi 5)"));
    EXPECT_TRUE(event->Signal().ok());
  }
  auto again = vm_->RegisterIrqfd(*event, 5);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(GuestTest, ImmediateExitMakesRunReturnInterrupted) {
  ASSERT_NO_FATAL_FAILURE(StartGuest({0xf4}));  // hlt
  vcpu_->SetImmediateExit(true);
  VcpuExit exit = RunOnce();
  EXPECT_TRUE(std::holds_alternative<vcpu_exit::Interrupted>(exit)) << exit.index();
  vcpu_->SetImmediateExit(false);
  exit = RunOnce();
  EXPECT_TRUE(std::holds_alternative<vcpu_exit::Hlt>(exit)) << exit.index();
}

void EmptyKickHandler(int) {}

TEST_F(GuestTest, KickFromAnotherThreadInterruptsSpinningGuest) {
  struct sigaction sa = {};
  sa.sa_handler = EmptyKickHandler;  // no SA_RESTART: KVM_RUN must see EINTR
  struct sigaction old = {};
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  ASSERT_NO_FATAL_FAILURE(StartGuest({0xeb, 0xfe}));  // jmp . (forever)
  pthread_t self = ::pthread_self();
  // The kick may land before, during or after entry to KVM_RUN; immediate_exit
  // covers the first case, the signal the others.
  std::thread kicker([&] {
    vcpu_->SetImmediateExit(true);
    ::pthread_kill(self, SIGUSR1);
  });
  VcpuExit exit = RunOnce();
  kicker.join();
  EXPECT_TRUE(std::holds_alternative<vcpu_exit::Interrupted>(exit)) << exit.index();
  ::sigaction(SIGUSR1, &old, nullptr);
}

TEST_F(GuestTest, DirtyLogReportsPagesTheGuestWrote) {
  ASSERT_NO_FATAL_FAILURE(StartGuest(
      {
          0x89,
          0x04,
          0x25,
          0x00,
          0x00,
          0x10,
          0x00,  // mov [0x100000], eax
          0xf4,
      },
      {.log_dirty = true}));
  auto before = vm_->GetDirtyLog(ram_slot_);  // clears setup-time state
  ASSERT_TRUE(before.ok()) << before.status();
  VcpuExit exit = RunOnce();
  EXPECT_TRUE(std::holds_alternative<vcpu_exit::Hlt>(exit)) << exit.index();
  auto log = vm_->GetDirtyLog(ram_slot_);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), kRamSize / 4096 / 64);
  constexpr uint64_t kPage = 0x100000 / 4096;
  EXPECT_TRUE(((*log)[kPage / 64] >> (kPage % 64)) & 1);
}

TEST_F(GuestTest, VcpuStateRoundTripsAndRefusedMsrIsNamed) {
  ASSERT_TRUE(vm_->CreateIrqchip().ok());
  ASSERT_NO_FATAL_FAILURE(StartGuest({0xf4}));
  auto regs = vcpu_->GetRegs();
  ASSERT_TRUE(regs.ok()) << regs.status();
  EXPECT_EQ(regs->rip, kCode);
  auto sregs = vcpu_->GetSregs();
  ASSERT_TRUE(sregs.ok()) << sregs.status();
  EXPECT_EQ(sregs->cr3, kPml4);
  EXPECT_TRUE(vcpu_->SetFpu(FpuState{}).ok());

  constexpr uint32_t kSysenterCs = 0x174;
  const MsrEntry good[] = {{.index = kSysenterCs, .reserved = 0, .data = 0x10}};
  absl::Status s = vcpu_->SetMsrs(good);
  ASSERT_TRUE(s.ok()) << s;
  const uint32_t indices[] = {kSysenterCs};
  auto msrs = vcpu_->GetMsrs(indices);
  ASSERT_TRUE(msrs.ok()) << msrs.status();
  EXPECT_EQ((*msrs)[0].data, 0x10u);
  const MsrEntry bad[] = {{.index = kSysenterCs, .reserved = 0, .data = 0x10},
                          {.index = 0xdeadbeef, .reserved = 0, .data = 1}};
  s = vcpu_->SetMsrs(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("0xdeadbeef"));

  auto lapic = vcpu_->GetLapic();
  ASSERT_TRUE(lapic.ok()) << lapic.status();
  EXPECT_TRUE(vcpu_->SetLapic(*lapic).ok());
  auto events = vcpu_->GetVcpuEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(vcpu_->SetVcpuEvents(*events).ok());
  auto mp = vcpu_->GetMpState();
  ASSERT_TRUE(mp.ok()) << mp.status();
  EXPECT_EQ(*mp, kMpStateRunnable);
  EXPECT_TRUE(vcpu_->SetMpState(kMpStateRunnable).ok());
  auto khz = vcpu_->GetTscKhz();
  ASSERT_TRUE(khz.ok()) << khz.status();
  EXPECT_GT(*khz, 0u);
}

TEST_F(GuestTest, SetsUpIrqchipPitAndGsiRouting) {
  ASSERT_TRUE(vm_->SetTssAddress(0xfffbd000).ok());
  ASSERT_TRUE(vm_->SetIdentityMapAddress(0xfffbc000).ok());
  absl::Status s = vm_->CreateIrqchip();
  ASSERT_TRUE(s.ok()) << s;
  s = vm_->CreatePit2();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(vm_->SetIrqLine(4, true).ok());
  EXPECT_TRUE(vm_->SetIrqLine(4, false).ok());

  // The default ISA routing (IOAPIC pins 0-23, PIC pins 0-15) plus one MSI
  // route; an irqfd on the MSI GSI proves the table took effect.
  std::vector<GsiRoute> routes;
  for (uint32_t gsi = 0; gsi < 24; ++gsi) {
    routes.push_back({.gsi = gsi, .irqchip = GsiRoute::kIoapic, .pin = gsi});
    if (gsi < 16 && gsi != 2) {
      routes.push_back({.gsi = gsi,
                        .irqchip = gsi < 8 ? GsiRoute::kPicMaster : GsiRoute::kPicSlave,
                        .pin = gsi % 8});
    }
  }
  routes.push_back(
      {.gsi = 24, .kind = GsiRoute::Kind::kMsi, .msi_address = 0xfee00000, .msi_data = 0x30});
  s = vm_->SetGsiRouting(routes);
  ASSERT_TRUE(s.ok()) << s;
  auto event = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(event.ok()) << event.status();
  auto reg = vm_->RegisterIrqfd(*event, 24);
  EXPECT_TRUE(reg.ok()) << reg.status();
  // An MSI needs a destination: KVM fails it with EPERM when no vCPU matches.
  auto vcpu = vm_->CreateVcpu(0);
  ASSERT_TRUE(vcpu.ok()) << vcpu.status();
  auto delivered = vm_->SignalMsi(0xfee00000, 0x31);
  EXPECT_TRUE(delivered.ok()) << delivered.status();
}

TEST_F(GuestTest, AddsOneSlotPerGuestMemoryRegionAndRollsBackOnFailure) {
  auto mem = memory::MemfdGuestMemory::Create({{0, 1 << 20}, {0x100000000, 1 << 20}}, {});
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto slots = vm_->AddGuestMemory(**mem);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(slots->size(), 2u);
  EXPECT_EQ((*slots)[1].gpa(), 0x100000000u);
  // Their owner goes while the VM stays: the slots are removed.
  slots->clear();

  // The second region collides with an existing slot: the first region's
  // slot must be removed again.
  auto blocker = vm_->AddMemorySlot(0x100000000, 4096, rom_.data());
  ASSERT_TRUE(blocker.ok()) << blocker.status();
  EXPECT_FALSE(vm_->AddGuestMemory(**mem).ok());
  EXPECT_TRUE(vm_->AddMemorySlot(0, 4096, rom_.data()).ok());
}

}  // namespace
}  // namespace dsec::kvm
