// SPDX-License-Identifier: Apache-2.0
// Vm's snapshots: CaptureState, SaveSnapshot and Restore (vm.h).
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/json_fields.h"
#include "base/logging.h"
#include "base/status.h"
#include "devices/acpi/acpi_pm_device.h"
#include "devices/i8042/i8042_device.h"
#include "devices/pit/pit_device.h"
#include "devices/serial/console_output.h"
#include "devices/serial/serial_device.h"
#include "devices/testdev/testdev_device.h"
#include "platform/arch/x86_64/cpuid.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/kvm/kvm_vcpu.h"
#include "vmm/vm/irqfd_line.h"
#include "vmm/vm/virtio_devices.h"
#include "vmm/vm/vm.h"
#include "vmm/vm/vm_config_json.h"

namespace dsec::vm {

namespace {

constexpr uint64_t kPage = snapshot::kPageSize;
// IA32_TSC_DEADLINE (Intel SDM vol. 4, table 2-2).
constexpr uint32_t kMsrTscDeadline = 0x6e0;

// KVM_GET_MSRS of every MSR in `list` that KVM reads on this vCPU: KVM
// stops at the first MSR it refuses (one the host's CPU lacks), which is
// skipped and the rest read on.
absl::StatusOr<std::vector<kvm::MsrEntry>> ReadableMsrs(kvm::KvmVcpu& vcpu,
                                                        const std::vector<uint32_t>& list) {
  std::vector<kvm::MsrEntry> out;
  size_t at = 0;
  while (at < list.size()) {
    DSEC_ASSIGN_OR_RETURN(std::vector<kvm::MsrEntry> got,
                          vcpu.GetMsrsPrefix(std::span<const uint32_t>(list).subspan(at)));
    out.insert(out.end(), got.begin(), got.end());
    at += got.size() + 1;  // past the refused one (or the end)
  }
  return out;
}

// CPUID bits that are state rather than features: OSXSAVE (leaf 1 ECX 27)
// and OSPKE (leaf 7 ECX 4) follow CR4; leaf 1 EBX is APIC ID and counts.
struct FeatureWord {
  uint32_t function;
  uint32_t index;
  int reg;  // 0 eax, 1 ebx, 2 ecx, 3 edx
  uint32_t ignore;
  const char* reg_name;
};
constexpr FeatureWord kFeatureWords[] = {
    {0x1, 0, 2, 1u << 27, "ecx"},  {0x1, 0, 3, 0, "edx"},
    {0x7, 0, 1, 0, "ebx"},         {0x7, 0, 2, 1u << 4, "ecx"},
    {0x7, 0, 3, 0, "edx"},         {0xd, 1, 0, 0, "eax"},
    {0x80000001, 0, 2, 0, "ecx"},  {0x80000001, 0, 3, 0, "edx"},
};

// Names of the features a guest is likely to depend on.
const char* FeatureName(uint32_t function, uint32_t index, int reg, int bit) {
  struct Name {
    uint32_t function, index;
    int reg, bit;
    const char* name;
  };
  static constexpr Name kNames[] = {
      {1, 0, 2, 0, "sse3"},       {1, 0, 2, 1, "pclmulqdq"}, {1, 0, 2, 9, "ssse3"},
      {1, 0, 2, 12, "fma"},       {1, 0, 2, 13, "cx16"},     {1, 0, 2, 19, "sse4.1"},
      {1, 0, 2, 20, "sse4.2"},    {1, 0, 2, 21, "x2apic"},   {1, 0, 2, 22, "movbe"},
      {1, 0, 2, 23, "popcnt"},    {1, 0, 2, 24, "tsc-deadline"}, {1, 0, 2, 25, "aes"},
      {1, 0, 2, 26, "xsave"},     {1, 0, 2, 28, "avx"},      {1, 0, 2, 29, "f16c"},
      {1, 0, 2, 30, "rdrand"},    {1, 0, 2, 31, "hypervisor"}, {1, 0, 3, 25, "sse"},
      {1, 0, 3, 26, "sse2"},      {7, 0, 1, 3, "bmi1"},      {7, 0, 1, 5, "avx2"},
      {7, 0, 1, 8, "bmi2"},       {7, 0, 1, 9, "erms"},      {7, 0, 1, 16, "avx512f"},
      {7, 0, 1, 18, "rdseed"},    {7, 0, 1, 19, "adx"},      {7, 0, 1, 29, "sha"},
      {7, 0, 2, 9, "vaes"},       {7, 0, 2, 10, "vpclmulqdq"}, {0xd, 1, 0, 0, "xsaveopt"},
      {0xd, 1, 0, 1, "xsavec"},   {0xd, 1, 0, 3, "xsaves"},  {0x80000001, 0, 2, 5, "abm"},
      {0x80000001, 0, 3, 20, "nx"}, {0x80000001, 0, 3, 26, "pdpe1gb"},
      {0x80000001, 0, 3, 27, "rdtscp"}, {0x80000001, 0, 3, 29, "lm"},
  };
  for (const Name& n : kNames) {
    if (n.function == function && n.index == index && n.reg == reg && n.bit == bit) return n.name;
  }
  return nullptr;
}

uint32_t Reg(const kvm::CpuidEntry& e, int reg) {
  switch (reg) {
    case 0: return e.eax;
    case 1: return e.ebx;
    case 2: return e.ecx;
    default: return e.edx;
  }
}

const kvm::CpuidEntry* FindLeaf(const std::vector<kvm::CpuidEntry>& table, uint32_t function,
                                uint32_t index) {
  for (const kvm::CpuidEntry& e : table) {
    if (e.function == function &&
        ((e.flags & kvm::kCpuidFlagSignificantIndex) == 0 || e.index == index)) {
      return &e;
    }
  }
  return nullptr;
}

// FailedPrecondition naming every feature the snapshot's guest saw that
// `host` (what this host would give the same vCPU) lacks.
absl::Status CheckCpuFeatures(const std::vector<kvm::CpuidEntry>& saw,
                              const std::vector<kvm::CpuidEntry>& host) {
  std::vector<std::string> missing;
  for (const FeatureWord& w : kFeatureWords) {
    const kvm::CpuidEntry* s = FindLeaf(saw, w.function, w.index);
    if (s == nullptr) continue;
    const kvm::CpuidEntry* h = FindLeaf(host, w.function, w.index);
    const uint32_t have = h == nullptr ? 0 : Reg(*h, w.reg);
    const uint32_t lack = Reg(*s, w.reg) & ~have & ~w.ignore;
    for (int bit = 0; bit < 32; ++bit) {
      if ((lack & (1u << bit)) == 0) continue;
      const char* name = FeatureName(w.function, w.index, w.reg, bit);
      missing.push_back(absl::StrFormat("%s(leaf 0x%x.%u %s bit %d)", name ? name : "",
                                        w.function, w.index, w.reg_name, bit));
    }
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the snapshot's guest saw CPU features this host lacks: ",
                   absl::StrJoin(missing, ", ")));
}

// XCR0 from struct kvm_xcrs (u32 nr_xcrs, u32 flags, then {u32 xcr, u32
// reserved, u64 value}[16]); 1 (x87 only, its reset value) when absent.
uint64_t Xcr0(const kvm::XcrsState& xcrs) {
  uint32_t n = 0;
  std::memcpy(&n, xcrs.bytes, sizeof(n));
  for (uint32_t i = 0; i < std::min<uint32_t>(n, 16); ++i) {
    uint32_t index = 0;
    uint64_t value = 0;
    std::memcpy(&index, xcrs.bytes + 8 + i * 16, sizeof(index));
    std::memcpy(&value, xcrs.bytes + 8 + i * 16 + 8, sizeof(value));
    if (index == 0) return value;
  }
  return 1;
}

// Writes `len` bytes at `offset`, all of them.
absl::Status PwriteAll(int fd, const uint8_t* data, uint64_t len, uint64_t offset) {
  while (len > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(len, 64ull << 20));
    ssize_t n = ::pwrite(fd, data, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("writing the snapshot's memory file");
    }
    data += n;
    offset += static_cast<uint64_t>(n);
    len -= static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

bool ZeroPage(const uint8_t* p) {
  static const uint8_t kZero[kPage] = {};
  return std::memcmp(p, kZero, kPage) == 0;
}

// One region of guest RAM into the memory file at `file_offset`; returns
// the data bytes written. A memfd region is copied by its data extents
// (SEEK_DATA/SEEK_HOLE: pages the guest never touched stay holes); a region
// without one (a VM restored from a snapshot) page by page, skipping pages
// of zeros.
absl::StatusOr<uint64_t> WriteRegion(int out, const memory::GuestRegion& region, int memfd,
                                     uint64_t file_offset,
                                     const std::function<const uint8_t*(uint64_t)>& page_at = {}) {
  uint64_t written = 0;
  if (memfd >= 0) {
    off_t pos = 0;
    const off_t end = static_cast<off_t>(region.size);
    while (pos < end) {
      off_t data = ::lseek(memfd, pos, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;  // no data after pos
        return ErrnoStatus("lseek(guest RAM, SEEK_DATA)");
      }
      off_t hole = ::lseek(memfd, data, SEEK_HOLE);
      if (hole < 0) return ErrnoStatus("lseek(guest RAM, SEEK_HOLE)");
      hole = std::min(hole, end);
      DSEC_RETURN_IF_ERROR(PwriteAll(out, region.host + data, static_cast<uint64_t>(hole - data),
                                     file_offset + static_cast<uint64_t>(data)));
      written += static_cast<uint64_t>(hole - data);
      pos = hole;
    }
    return written;
  }
  if (page_at) {
    // A lazy restore's RAM: each page where it is (the guest's copy if the
    // pager served it, else the source it would be copied from), so that
    // the snapshot does not fault every page in.
    for (uint64_t off = 0; off < region.size; off += kPage) {
      const uint8_t* p = page_at(off);
      if (ZeroPage(p)) continue;
      DSEC_RETURN_IF_ERROR(PwriteAll(out, p, kPage, file_offset + off));
      written += kPage;
    }
    return written;
  }
  uint64_t run_start = 0, run_len = 0;
  for (uint64_t off = 0; off <= region.size; off += kPage) {
    const bool data = off < region.size && !ZeroPage(region.host + off);
    if (data) {
      if (run_len == 0) run_start = off;
      run_len += kPage;
      continue;
    }
    if (run_len > 0) {
      DSEC_RETURN_IF_ERROR(
          PwriteAll(out, region.host + run_start, run_len, file_offset + run_start));
      written += run_len;
      run_len = 0;
    }
  }
  return written;
}

// A diff snapshot's pages of one region: those the copy-on-write mapping
// made private since the restore (written by the guest or a device), read
// from /proc/self/pagemap (bit 63 present, 62 swapped, 61 file-page or
// shared: a private page is present or swapped and not a file page). Each
// run is written at its place in the memory file and listed in `extents`.
absl::StatusOr<uint64_t> WriteRegionDiff(int out, int pagemap, const memory::GuestRegion& region,
                                         uint64_t file_offset,
                                         std::vector<snapshot::Extent>* extents) {
  constexpr uint64_t kPresent = 1ull << 63, kSwapped = 1ull << 62, kFileOrShared = 1ull << 61;
  constexpr size_t kBatch = 4096;
  std::vector<uint64_t> entries(kBatch);
  const uint64_t pages = region.size / kPage;
  const uint64_t first = reinterpret_cast<uintptr_t>(region.host) / kPage;
  uint64_t written = 0, run_start = 0, run_len = 0;
  auto flush = [&]() -> absl::Status {
    if (run_len == 0) return absl::OkStatus();
    DSEC_RETURN_IF_ERROR(
        PwriteAll(out, region.host + run_start, run_len, file_offset + run_start));
    if (extents->size() >= snapshot::kMaxExtents) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the guest changed its memory in more than ", snapshot::kMaxExtents,
          " separate runs since the restore: take a full snapshot"));
    }
    extents->push_back({file_offset + run_start, run_len});
    written += run_len;
    run_len = 0;
    return absl::OkStatus();
  };
  for (uint64_t base = 0; base < pages; base += kBatch) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBatch, pages - base));
    const ssize_t got = ::pread(pagemap, entries.data(), n * sizeof(uint64_t),
                                static_cast<off_t>((first + base) * sizeof(uint64_t)));
    if (got != static_cast<ssize_t>(n * sizeof(uint64_t))) {
      return ErrnoStatus("reading /proc/self/pagemap");
    }
    for (size_t k = 0; k < n; ++k) {
      const uint64_t e = entries[k];
      const bool dirty = (e & (kPresent | kSwapped)) != 0 && (e & kFileOrShared) == 0;
      const uint64_t off = (base + k) * kPage;
      if (dirty) {
        if (run_len == 0) run_start = off;
        run_len += kPage;
      } else {
        DSEC_RETURN_IF_ERROR(flush());
      }
    }
  }
  DSEC_RETURN_IF_ERROR(flush());
  return written;
}

// Removes what a failed SaveSnapshot created.
class PartialFiles {
 public:
  explicit PartialFiles(int dir_fd) : dir_fd_(dir_fd) {}
  ~PartialFiles() {
    for (const std::string& name : names_) (void)::unlinkat(dir_fd_, name.c_str(), 0);
  }
  void Add(std::string name) { names_.push_back(std::move(name)); }
  void Keep() { names_.clear(); }

 private:
  int dir_fd_;
  std::vector<std::string> names_;
};

}  // namespace

// The event loop held for a snapshot: a task on the loop thread reads the
// devices' state, then waits until released, so that nothing the loop runs
// (device back-ends, timers, the PIT's interrupts) changes guest memory,
// device or irqchip state while the snapshot is read and written.
struct Vm::LoopHold {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool release ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<nlohmann::json> devices ABSL_GUARDED_BY(mu) = absl::UnknownError("not read");
  ~LoopHold() = default;
  void Release() {
    absl::MutexLock lock(&mu);
    release = true;
  }
};

absl::StatusOr<nlohmann::json> Vm::CaptureDevices() const {
  nlohmann::json d = nlohmann::json::object();
  d["serial"] = serial_->SaveState();
  d["i8042"] = i8042_->SaveState();
  if (acpi_pm_) d["acpi_pm"] = acpi_pm_->SaveState();
  if (pit_) d["pit"] = pit_->SaveState();
  d["testdev"] = testdev_->SaveState();
  if (virtio_->size() > 0) {
    DSEC_ASSIGN_OR_RETURN(d["virtio"], virtio_->SaveState());
  }
  return d;
}

absl::StatusOr<std::shared_ptr<Vm::LoopHold>> Vm::HoldLoop(bool hold) {
  bool loop_running;
  {
    absl::MutexLock lock(&mu_);
    loop_running = started_;
  }
  auto h = std::make_shared<LoopHold>();
  if (!loop_running) {
    // Not started: this thread is the only one; nothing to hold.
    absl::StatusOr<nlohmann::json> d = CaptureDevices();
    absl::MutexLock lock(&h->mu);
    h->devices = std::move(d);
    h->done = true;
    return h;
  }
  // Requests in flight (a disk read the kernel is still filling) are waited
  // out: the vCPUs are parked, so no new ones come. 2 s at most.
  for (int attempt = 0; attempt < 2000; ++attempt) {
    h = std::make_shared<LoopHold>();
    loop_->Post([this, h, hold] {
      absl::StatusOr<nlohmann::json> d = CaptureDevices();
      absl::MutexLock lock(&h->mu);
      const bool ok = d.ok();
      h->devices = std::move(d);
      h->done = true;
      if (ok && hold) h->mu.Await(absl::Condition(&h->release));
    });
    {
      absl::MutexLock lock(&h->mu);
      if (!h->mu.AwaitWithTimeout(absl::Condition(&h->done), absl::Seconds(10))) {
        h->release = true;  // if it ever runs, it does not wait
        return absl::DeadlineExceededError("the VM's event loop did not answer within 10 s");
      }
      if (h->devices.ok() || !absl::IsUnavailable(h->devices.status())) return h;
    }
    ::usleep(1000);
  }
  absl::MutexLock lock(&h->mu);
  return h->devices.status();
}

absl::StatusOr<snapshot::Manifest> Vm::CaptureState() {
  std::shared_ptr<LoopHold> hold;
  return Capture(&hold, false);
}

absl::StatusOr<snapshot::Manifest> Vm::Capture(std::shared_ptr<LoopHold>* hold, bool hold_loop) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) return absl::FailedPreconditionError("the VM is stopping");
    if (started_ && control_.state() != vcpu::VcpuControl::State::kPaused) {
      return absl::FailedPreconditionError("the VM must be paused for a snapshot");
    }
  }
  if (config_.pit == PitChoice::kKernel) {
    return absl::FailedPreconditionError(
        "a VM with the in-kernel PIT (pit: kernel) cannot be snapshotted: its state is not saved "
        "(use the default user-space PIT)");
  }
  // Devices first, on the loop (held for a SaveSnapshot until it is done):
  // the vCPU and irqchip state below are then read with nothing running.
  DSEC_ASSIGN_OR_RETURN(*hold, HoldLoop(hold_loop));
  snapshot::Manifest m;
  {
    absl::MutexLock lock(&(*hold)->mu);
    if (!(*hold)->devices.ok()) return (*hold)->devices.status();
    m.devices = *(*hold)->devices;
  }
  m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  m.config = VmConfigToJson(config_);
  uint64_t offset = 0;
  for (const memory::GuestRegion& r : memory_->regions()) {
    m.regions.push_back({r.gpa, r.size, offset});
    offset += r.size;
  }
  m.memory_file_bytes = offset;
  for (auto& thread : vcpus_) {
    kvm::KvmVcpu& v = thread->vcpu();
    snapshot::VcpuState s;
    s.id = v.id();
    DSEC_ASSIGN_OR_RETURN(s.regs, v.GetRegs());
    DSEC_ASSIGN_OR_RETURN(s.sregs, v.GetSregs());
    DSEC_ASSIGN_OR_RETURN(s.fpu, v.GetFpuRegs());
    DSEC_ASSIGN_OR_RETURN(s.cpuid, v.GetCpuid());
    if (xsave_size_ > 0) {
      absl::StatusOr<std::vector<uint8_t>> x = v.GetXsave(xsave_size_);
      if (x.ok()) {
        s.xsave = std::move(*x);
      } else {
        // PVM hosts (this project's development machines) refuse
        // KVM_GET_XSAVE once the vCPU ran. KVM_GET_FPU holds the x87 and
        // SSE state, which is all of it while the guest's XCR0 enables
        // nothing beyond them; with AVX or more enabled that state would be
        // lost: refused.
        DSEC_ASSIGN_OR_RETURN(kvm::XcrsState xcrs, v.GetXcrs());
        const uint64_t xcr0 = Xcr0(xcrs);
        if ((xcr0 & ~uint64_t{3}) != 0) {
          return absl::Status(
              x.status().code(),
              absl::StrFormat("the guest enabled XSAVE state beyond x87/SSE (XCR0 0x%x) and this "
                              "host's KVM will not read it: %s",
                              xcr0, x.status().message()));
        }
        DSEC_LOG(debug, "vcpu {}: no XSAVE area ({}); XCR0 0x{:x}: KVM_GET_FPU holds it all",
                 v.id(), x.status().ToString(), xcr0);
      }
    }
    if (has_xcrs_) {
      DSEC_ASSIGN_OR_RETURN(kvm::XcrsState x, v.GetXcrs());
      s.xcrs = x;
    }
    DSEC_ASSIGN_OR_RETURN(s.debugregs, v.GetDebugRegs());
    DSEC_ASSIGN_OR_RETURN(s.lapic, v.GetLapic());
    DSEC_ASSIGN_OR_RETURN(s.events, v.GetVcpuEvents());
    DSEC_ASSIGN_OR_RETURN(s.mp_state, v.GetMpState());
    DSEC_ASSIGN_OR_RETURN(s.msrs, ReadableMsrs(v, msr_index_list_));
    if (auto khz = v.GetTscKhz(); khz.ok()) s.tsc_khz = *khz;
    m.vcpus.push_back(std::move(s));
  }
  for (uint32_t chip = 0; chip < 3; ++chip) {
    DSEC_ASSIGN_OR_RETURN(kvm::IrqchipState c, kvm_vm_->GetIrqchip(chip));
    m.irqchips.push_back(c);
  }
  // The clock now, not as the pause stopped it: the counters read above
  // (the TSC, Hyper-V's reference time) ran on with it, and a restore must
  // not put the clock behind them.
  DSEC_ASSIGN_OR_RETURN(m.clock, kvm_vm_->GetClock());
  return m;
}

absl::StatusOr<SnapshotResult> Vm::SaveSnapshot(int dir_fd, bool diff) {
  const int64_t t0 = MonotonicNowNs();
  {
    absl::MutexLock lock(&mu_);
    if (!started_ || control_.state() != vcpu::VcpuControl::State::kPaused) {
      return absl::FailedPreconditionError("the VM must be paused for a snapshot");
    }
  }
  std::shared_ptr<LoopHold> hold;
  // Released when this returns, whichever way (the loop then runs on).
  struct Releaser {
    std::shared_ptr<LoopHold>* h;
    ~Releaser() {
      if (*h) (*h)->Release();
    }
  } releaser{&hold};
  if (diff && (!restored_from_ || !memory_->private_file())) {
    return absl::FailedPreconditionError(
        "a diff snapshot is of a VM restored from a snapshot (its parent); take a full one");
  }
  if (diff && !snapshot::ValidParentName(restored_from_->name)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the snapshot this VM was restored from is in a directory named \"",
        restored_from_->name, "\", which a diff cannot name as its parent ([A-Za-z0-9._-])"));
  }
  DSEC_ASSIGN_OR_RETURN(snapshot::Manifest manifest, Capture(&hold, true));
  if (diff) manifest.parent = restored_from_;
  SnapshotResult result;
  result.capture_ns = MonotonicNowNs() - t0;

  PartialFiles partial(dir_fd);
  // Read-only from creation: the file is mapped by every VM restored from
  // it and must never change (MAP_PRIVATE shows later writes to the file).
  ScopedFd mem(::openat(dir_fd, snapshot::kMemoryFile,
                        O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
  if (!mem.valid()) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError("the snapshot directory already holds a snapshot");
    }
    return ErrnoStatus("creating the snapshot's memory file");
  }
  partial.Add(snapshot::kMemoryFile);
  if (::ftruncate(mem.get(), static_cast<off_t>(manifest.memory_file_bytes)) != 0) {
    return ErrnoStatus("sizing the snapshot's memory file");
  }
  const auto regions = memory_->regions();
  ScopedFd pagemap;
  if (diff) {
    pagemap.Reset(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    if (!pagemap.valid()) return ErrnoStatus("open(/proc/self/pagemap)");
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    uint64_t n = 0;
    if (diff) {
      DSEC_ASSIGN_OR_RETURN(n, WriteRegionDiff(mem.get(), pagemap.get(), regions[i],
                                               manifest.regions[i].offset, &manifest.extents));
    } else {
      std::function<const uint8_t*(uint64_t)> page_at;
      if (pager_) {
        const uint8_t* target = regions[i].host;
        const uint8_t* source = lazy_source_->regions()[i].host;
        page_at = [this, i, target, source](uint64_t off) {
          return pager_->Served(i, off / kPage) ? target + off : source + off;
        };
      }
      DSEC_ASSIGN_OR_RETURN(n, WriteRegion(mem.get(), regions[i], memory_->RegionFd(i),
                                           manifest.regions[i].offset, page_at));
    }
    result.memory_bytes_written += n;
  }
  if (::fsync(mem.get()) != 0) return ErrnoStatus("fsync(snapshot memory file)");
  result.memory_bytes = manifest.memory_file_bytes;
  result.memory_ns = MonotonicNowNs() - t0 - result.capture_ns;

  const std::string text = snapshot::SerializeManifest(manifest);
  const std::string tmp = absl::StrCat(snapshot::kManifestFile, ".tmp");
  ScopedFd mf(::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
  if (!mf.valid()) return ErrnoStatus("creating the snapshot's manifest");
  partial.Add(tmp);
  DSEC_RETURN_IF_ERROR(
      PwriteAll(mf.get(), reinterpret_cast<const uint8_t*>(text.data()), text.size(), 0));
  if (::fsync(mf.get()) != 0) return ErrnoStatus("fsync(snapshot manifest)");
  if (::renameat(dir_fd, tmp.c_str(), dir_fd, snapshot::kManifestFile) != 0) {
    return ErrnoStatus("publishing the snapshot's manifest");
  }
  partial.Keep();
  if (::fsync(dir_fd) != 0) return ErrnoStatus("fsync(snapshot directory)");
  result.manifest_bytes = text.size();
  result.total_ns = MonotonicNowNs() - t0;
  return result;
}

absl::Status Vm::RestoreDevices(const nlohmann::json& devices) {
  std::vector<std::string> expected = {"serial", "i8042", "testdev"};
  if (acpi_pm_) expected.push_back("acpi_pm");
  if (pit_) expected.push_back("pit");
  if (virtio_->size() > 0) expected.push_back("virtio");
  for (auto it = devices.begin(); it != devices.end(); ++it) {
    if (std::find(expected.begin(), expected.end(), it.key()) == expected.end()) {
      return InvalidField(absl::StrCat("devices.", it.key()),
                          absl::StrCat("the snapshot holds state for device ", it.key(),
                                       ", which its configuration does not have"));
    }
  }
  for (const std::string& name : expected) {
    if (!devices.contains(name)) {
      return InvalidField(absl::StrCat("devices.", name),
                          absl::StrCat("the snapshot holds no state for device ", name));
    }
  }
  DSEC_RETURN_IF_ERROR(serial_->RestoreState(devices.at("serial")));
  DSEC_RETURN_IF_ERROR(i8042_->RestoreState(devices.at("i8042")));
  DSEC_RETURN_IF_ERROR(testdev_->RestoreState(devices.at("testdev")));
  if (acpi_pm_) DSEC_RETURN_IF_ERROR(acpi_pm_->RestoreState(devices.at("acpi_pm")));
  if (pit_) DSEC_RETURN_IF_ERROR(pit_->RestoreState(devices.at("pit")));
  if (virtio_->size() > 0) DSEC_RETURN_IF_ERROR(virtio_->RestoreState(devices.at("virtio")));
  return absl::OkStatus();
}

absl::Status Vm::SetUpRestoredVcpus(const snapshot::Manifest& m) {
  DSEC_ASSIGN_OR_RETURN(std::vector<kvm::CpuidEntry> supported, kvm_->GetSupportedCpuid());
  DSEC_ASSIGN_OR_RETURN(msr_index_list_, kvm_->GetMsrIndexList());
  xsave_size_ = kvm_vm_->XsaveSize();
  has_xcrs_ = kvm_->CheckExtension(kvm::Capability::kXcrs) > 0;
  const bool tsc_control = kvm_->CheckExtension(kvm::Capability::kTscControl) > 0;
  arch::CpuidOptions cpuid_options;
  cpuid_options.tsc_deadline_timer =
      kvm_->CheckExtension(kvm::Capability::kTscDeadlineTimer) > 0;
  for (const snapshot::VcpuState& s : m.vcpus) {
    const std::string who = absl::StrCat("vcpus[", s.id, "]");
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<kvm::KvmVcpu> vcpu, kvm_vm_->CreateVcpu(s.id));
    // What a guest booted on this host would see: the table this monitor
    // gives a new vCPU, as KVM reports it back (PVM hosts report the CPU's
    // own CPUID, which their guests see, rather than the table set).
    DSEC_ASSIGN_OR_RETURN(
        std::vector<kvm::CpuidEntry> normalized,
        arch::NormalizeCpuid(supported, s.id, static_cast<uint32_t>(m.vcpus.size()), cpuid_options));
    DSEC_RETURN_IF_ERROR(vcpu->SetCpuid(normalized));
    DSEC_ASSIGN_OR_RETURN(std::vector<kvm::CpuidEntry> host, vcpu->GetCpuid());
    DSEC_RETURN_IF_ERROR(CheckCpuFeatures(s.cpuid, host));
    if ((s.xsave.has_value() && xsave_size_ == 0) || (s.xcrs.has_value() && !has_xcrs_)) {
      return absl::FailedPreconditionError(
          "the snapshot holds XSAVE state and this host's KVM cannot restore it");
    }
    std::vector<uint8_t> xsave;
    if (s.xsave) {
      // KVM reads this host's size: a smaller area (from a host with less
      // XSAVE state) is padded with zeros, components in their init state;
      // a larger one must not carry components this host lacks.
      xsave = *s.xsave;
      if (xsave.size() < xsave_size_) xsave.resize(xsave_size_, 0);
      if (xsave.size() > xsave_size_ &&
          std::any_of(xsave.begin() + static_cast<std::ptrdiff_t>(xsave_size_), xsave.end(),
                      [](uint8_t b) { return b != 0; })) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the snapshot's XSAVE area (", s.xsave->size(), " bytes) holds state beyond this "
            "host's ", xsave_size_, " bytes"));
      }
    }
    // The order KVM needs: the CPUID table first (it decides which MSRs
    // and XSAVE features exist), the TSC rate before the TSC, special
    // registers (APIC base) before the LAPIC, pending events last.
    DSEC_RETURN_IF_ERROR(vcpu->SetCpuid(s.cpuid));
    if (s.tsc_khz != 0 && tsc_control) {
      absl::StatusOr<uint32_t> khz = vcpu->GetTscKhz();
      if (khz.ok() && *khz != s.tsc_khz) DSEC_RETURN_IF_ERROR(vcpu->SetTscKhz(s.tsc_khz));
    }
    DSEC_RETURN_IF_ERROR(vcpu->SetSregs(s.sregs));
    DSEC_RETURN_IF_ERROR(vcpu->SetRegs(s.regs));
    DSEC_RETURN_IF_ERROR(vcpu->SetFpuRegs(s.fpu));
    if (s.xsave) DSEC_RETURN_IF_ERROR(vcpu->SetXsave(xsave));
    if (s.xcrs) DSEC_RETURN_IF_ERROR(vcpu->SetXcrs(*s.xcrs));
    DSEC_RETURN_IF_ERROR(vcpu->SetDebugRegs(s.debugregs));
    DSEC_RETURN_IF_ERROR(vcpu->SetMsrs(s.msrs));
    DSEC_RETURN_IF_ERROR(vcpu->SetLapic(s.lapic));
    // The TSC deadline once more, after the LAPIC: KVM drops a write of it
    // while the LAPIC timer is not in TSC-deadline mode, which only the
    // LAPIC state sets (a Linux guest's timer would never fire again).
    std::vector<kvm::MsrEntry> deadline;
    for (const kvm::MsrEntry& e : s.msrs) {
      if (e.index == kMsrTscDeadline) deadline.push_back(e);
    }
    if (!deadline.empty()) DSEC_RETURN_IF_ERROR(vcpu->SetMsrs(deadline));
    DSEC_RETURN_IF_ERROR(vcpu->SetMpState(s.mp_state));
    DSEC_RETURN_IF_ERROR(vcpu->SetVcpuEvents(s.events));
    AddVcpuThread(std::move(vcpu));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Vm>> Vm::Restore(const std::string& dir_in, const VmConfig& host,
                                                 const RestoreOptions& options) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::unique_ptr<Vm> vm(new Vm());
  vm->timestamps_.create_ns = MonotonicNowNs();
  const std::string manifest_path = absl::StrCat(dir, "/", snapshot::kManifestFile);
  DSEC_ASSIGN_OR_RETURN(std::string text, snapshot::ReadBoundedFile(manifest_path, snapshot::kMaxManifestBytes));
  absl::StatusOr<snapshot::Manifest> parsed = snapshot::ParseManifest(text);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(manifest_path, ": ", parsed.status().message()));
  }
  snapshot::Manifest& m = *parsed;

  // The guest-visible configuration is the snapshot's; checked as any
  // configuration is, then against the rest of the manifest.
  absl::StatusOr<VmConfig> saved = VmConfigFromJson(m.config);
  if (!saved.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path, ": config: ", saved.status().message()));
  }
  VmConfig config = *saved;
  config.console = host.console;
  config.timeout_ms = host.timeout_ms;
  config.qos = host.qos;
  // Devices' host ends (a vsock's socket path, a tap) are the restoring
  // side's when it names devices: the same kinds in the same order; what
  // the guest sees of each (a vsock CID, a pmem window) is checked against
  // the snapshot by the device's RestoreState.
  if (!host.devices.empty()) {
    if (host.devices.size() != config.devices.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          manifest_path, ": the snapshot's VM has ", config.devices.size(),
          " virtio devices, the restore names ", host.devices.size()));
    }
    for (size_t i = 0; i < host.devices.size(); ++i) {
      if (host.devices[i]->kind().name() != config.devices[i]->kind().name()) {
        return absl::InvalidArgumentError(absl::StrCat(
            manifest_path, ": virtio device ", i, " is a ",
            std::string(config.devices[i]->kind().name()), " in the snapshot, a ",
            std::string(host.devices[i]->kind().name()), " in the restore"));
      }
    }
    config.devices = host.devices;
  }
  vm->config_ = config;
  if (config.vcpus != m.vcpus.size()) {
    return InvalidField("vcpus", absl::StrCat(manifest_path, ": ", m.vcpus.size(),
                                              " vCPU states for a VM of ", config.vcpus));
  }
  if (config.mem_mib < arch::kMinRamBytes / arch::kMiB || config.mem_mib > (1u << 20)) {
    return InvalidField("config.mem_mib", absl::StrCat(manifest_path, ": mem_mib out of range"));
  }
  if (config.pit == PitChoice::kKernel) {
    return InvalidField("config.pit", absl::StrCat(manifest_path,
                                                   ": the in-kernel PIT is not saved in snapshots"));
  }
  DSEC_ASSIGN_OR_RETURN(auto ranges, arch::RamRanges(config.mem_mib * arch::kMiB));
  if (ranges.size() != m.regions.size()) {
    return InvalidField("memory.regions",
                        absl::StrCat(manifest_path, ": memory regions do not match mem_mib"));
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].start != m.regions[i].gpa || ranges[i].size != m.regions[i].size) {
      return InvalidField(absl::StrCat("memory.regions[", i, "]"),
                          absl::StrCat(manifest_path, ": memory region ", i,
                                       " does not match the VM's RAM layout"));
    }
  }

  // A diff snapshot's ancestors, each beside it under the name its child
  // gives and with the CRC its child recorded, down to a full snapshot;
  // every one with this memory layout. All checked before anything is
  // mapped.
  struct Link {
    std::string dir;
    snapshot::Manifest manifest;
    ScopedFd memory;
  };
  std::vector<Link> chain;
  chain.push_back(Link{dir, m, ScopedFd()});
  const std::string parent_dir = dir.rfind('/') == std::string::npos
                                     ? std::string(".")
                                     : dir.substr(0, dir.rfind('/'));
  while (chain.back().manifest.parent) {
    const snapshot::ParentRef ref = *chain.back().manifest.parent;
    if (chain.size() > 16) {
      return absl::FailedPreconditionError(
          absl::StrCat(manifest_path, ": more than 16 diff snapshots on one full snapshot"));
    }
    const std::string pdir = absl::StrCat(parent_dir, "/", ref.name);
    const std::string ppath = absl::StrCat(pdir, "/", snapshot::kManifestFile);
    DSEC_ASSIGN_OR_RETURN(std::string ptext, snapshot::ReadBoundedFile(ppath, snapshot::kMaxManifestBytes));
    absl::StatusOr<snapshot::Manifest> pm = snapshot::ParseManifest(ptext);
    if (!pm.ok()) {
      return absl::Status(pm.status().code(), absl::StrCat(ppath, ": ", pm.status().message()));
    }
    if (pm->crc32 != ref.crc32) {
      return absl::FailedPreconditionError(absl::StrCat(
          manifest_path, ": its parent ", ref.name, " is not the snapshot it was taken from "
          "(manifest CRC-32 differs)"));
    }
    if (pm->memory_file_bytes != m.memory_file_bytes || pm->regions.size() != m.regions.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(ppath, ": another memory layout than its diff's"));
    }
    for (size_t i = 0; i < m.regions.size(); ++i) {
      if (pm->regions[i].gpa != m.regions[i].gpa || pm->regions[i].size != m.regions[i].size ||
          pm->regions[i].offset != m.regions[i].offset) {
        return absl::FailedPreconditionError(
            absl::StrCat(ppath, ": another memory layout than its diff's"));
      }
    }
    chain.push_back(Link{pdir, *std::move(pm), ScopedFd()});
  }
  // Each memory file: a regular file of exactly the size its manifest
  // gives, checked before it is mapped.
  for (Link& link : chain) {
    const std::string memory_path = absl::StrCat(link.dir, "/", snapshot::kMemoryFile);
    link.memory.Reset(::open(memory_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!link.memory.valid()) {
      if (errno == ENOENT) {
        return absl::NotFoundError(absl::StrCat(memory_path, ": the snapshot has no memory file"));
      }
      return ErrnoStatus(absl::StrCat("open(", memory_path, ")"));
    }
    struct stat st;
    if (::fstat(link.memory.get(), &st) != 0) {
      return ErrnoStatus(absl::StrCat("fstat(", memory_path, ")"));
    }
    if (!S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_size) != link.manifest.memory_file_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          memory_path, ": want a regular file of ", link.manifest.memory_file_bytes,
          " bytes, found ",
          S_ISREG(st.st_mode) ? absl::StrCat(st.st_size, " bytes") : std::string("another kind")));
    }
  }
  vm->restored_from_ = snapshot::ParentRef{
      dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1), m.crc32};

  DSEC_ASSIGN_OR_RETURN(EventFd stop_event, EventFd::Create(EFD_NONBLOCK));
  vm->stop_event_.emplace(std::move(stop_event));
  DSEC_ASSIGN_OR_RETURN(kvm::KvmSystem kvm, kvm::KvmSystem::Create());
  vm->kvm_ = std::make_unique<kvm::KvmSystem>(std::move(kvm));
  DSEC_RETURN_IF_ERROR(vm->kvm_->RequireExtensions(
      {kvm::Capability::kIrqchip, kvm::Capability::kUserMemory, kvm::Capability::kSetTssAddr,
       kvm::Capability::kIrqfd, kvm::Capability::kIoeventfd, kvm::Capability::kImmediateExit,
       kvm::Capability::kExtCpuid, kvm::Capability::kVcpuEvents, kvm::Capability::kMpState,
       kvm::Capability::kAdjustClock}));
  DSEC_ASSIGN_OR_RETURN(vm->kvm_vm_, vm->kvm_->CreateVm());
  vm->timestamps_.kvm_ready_ns = MonotonicNowNs();

  std::vector<memory::MemfdGuestMemory::Range> mem_ranges;
  std::vector<uint64_t> offsets;
  for (const snapshot::MemoryRegion& r : m.regions) {
    mem_ranges.push_back({r.gpa, r.size});
    offsets.push_back(r.offset);
  }
  // The full snapshot's memory, then each diff's runs over it, oldest
  // first: all of it shared copy-on-write with every other restore (or,
  // lazily, the source the pager copies pages from).
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<memory::MemfdGuestMemory> mapped,
                        memory::MemfdGuestMemory::MapPrivateFile(
                            mem_ranges, chain.back().memory.get(), offsets));
  for (size_t k = chain.size() - 1; k-- > 0;) {
    std::vector<memory::MemfdGuestMemory::Run> runs;
    for (const snapshot::Extent& e : chain[k].manifest.extents) runs.push_back({e.offset, e.length});
    DSEC_RETURN_IF_ERROR(mapped->OverlayPrivateFile(chain[k].memory.get(), offsets, runs));
  }
  if (!options.lazy) {
    if (!options.prefetch.empty()) {
      return absl::InvalidArgumentError("prefetch is for a lazy restore");
    }
    vm->memory_ = std::move(mapped);
  } else {
    // Guest RAM starts empty; the pager copies each page in from the
    // mapped file when it is first touched (by the guest, a device, KVM,
    // or this restore), or now if an earlier restore touched it.
    vm->lazy_source_ = std::move(mapped);
    DSEC_ASSIGN_OR_RETURN(vm->memory_, memory::MemfdGuestMemory::MapAnonymous(mem_ranges));
    std::vector<memory::UserfaultPager::Range> ranges;
    for (size_t i = 0; i < mem_ranges.size(); ++i) {
      ranges.push_back({vm->memory_->regions()[i].host, vm->lazy_source_->regions()[i].host,
                        mem_ranges[i].size, offsets[i]});
    }
    DSEC_ASSIGN_OR_RETURN(vm->pager_, memory::UserfaultPager::Create(std::move(ranges)));
    std::vector<memory::UserfaultPager::Run> prefetch;
    for (const snapshot::Extent& e : options.prefetch) prefetch.push_back({e.offset, e.length});
    DSEC_RETURN_IF_ERROR(vm->pager_->Prefetch(prefetch));
    Vm* raw = vm.get();
    DSEC_RETURN_IF_ERROR(vm->pager_->Start([raw](const absl::Status& error) {
      raw->RequestStop(StopReason::kInternalError,
                       absl::StrCat("lazy restore's pager: ", error.message()));
    }));
  }
  DSEC_ASSIGN_OR_RETURN(vm->ram_slots_, vm->kvm_vm_->AddGuestMemory(*vm->memory_));
  vm->timestamps_.memory_ready_ns = MonotonicNowNs();

  DSEC_RETURN_IF_ERROR(vm->SetUpMachine(config));
  DSEC_RETURN_IF_ERROR(vm->RestoreDevices(m.devices));
  for (const kvm::IrqchipState& chip : m.irqchips) {
    DSEC_RETURN_IF_ERROR(vm->kvm_vm_->SetIrqchip(chip));
  }
  DSEC_RETURN_IF_ERROR(vm->kvm_vm_->SetClock(m.clock));
  vm->timestamps_.loaded_ns = MonotonicNowNs();

  DSEC_RETURN_IF_ERROR(vm->SetUpPlacement(config));
  DSEC_RETURN_IF_ERROR(vm->SetUpRestoredVcpus(m));
  DSEC_RETURN_IF_ERROR(vm->SetUpTimers(config));
  vm->timestamps_.vcpus_ready_ns = MonotonicNowNs();
  DSEC_LOG(debug, "vm restored from {} mem_mib={} vcpus={}", dir, config.mem_mib, config.vcpus);
  return vm;
}

std::vector<snapshot::Extent> Vm::TouchedPages() const {
  std::vector<snapshot::Extent> out;
  if (!pager_) return out;
  for (const memory::UserfaultPager::Run& r : pager_->Touched()) out.push_back({r.offset, r.length});
  return out;
}

}  // namespace dsec::vm
