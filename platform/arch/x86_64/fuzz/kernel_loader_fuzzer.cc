// SPDX-License-Identifier: Apache-2.0
// Feeds arbitrary bytes to the kernel loaders and the whole boot setup. The
// first byte picks the protocol and whether the rest is also used as an
// initrd; everything after it is the kernel image. Any input must yield a
// plan or an error, never a crash or an out-of-bounds access.
#include <cstddef>
#include <cstdint>
#include <span>

#include "platform/arch/x86_64/boot.h"
#include "platform/arch/x86_64/kernel_loader.h"
#include "platform/memory/fake_guest_memory.h"

namespace {

const dsec::memory::GuestMemory& Memory() {
  // 32 MiB is enough for synthetic kernels at 1 and 16 MiB, small enough to
  // keep each iteration fast.
  static auto* mem = [] {
    auto m = dsec::memory::FakeGuestMemory::Create({{0, 32ull << 20}});
    if (!m.ok()) __builtin_trap();
    return m->release();
  }();
  return *mem;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  std::span<const uint8_t> image(data + 1, size - 1);
  const auto& mem = Memory();

  auto parsed = dsec::arch::ParseKernel(image, mem);
  if (parsed.ok()) {
    if (!dsec::arch::LoadKernel(image, *parsed, mem).ok()) __builtin_trap();
  }

  dsec::arch::BootConfig config;
  config.kernel = image;
  if (selector & 4) config.initrd = image.first(image.size() / 2);
  config.cmdline = "console=ttyS0";
  config.vcpu_count = 1 + (selector >> 3) % 8;
  switch (selector & 3) {
    case 1:
      config.protocol = dsec::arch::BootProtocol::kLinux64;
      break;
    case 2:
      config.protocol = dsec::arch::BootProtocol::kPvh;
      break;
    default:
      config.protocol = dsec::arch::BootProtocol::kAuto;
      break;
  }
  (void)dsec::arch::SetupBoot(mem, config);
  return 0;
}
