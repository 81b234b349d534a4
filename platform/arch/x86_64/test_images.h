// SPDX-License-Identifier: Apache-2.0
// Builders of small synthetic kernel images for the loader tests and the
// fuzzer's seeds. Test-only; not part of the library.
#pragma once

#include <asm/bootparam.h>
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace dsec::arch::testing {

struct TestSegment {
  uint32_t type = PT_LOAD;
  uint64_t paddr = 0;
  std::vector<uint8_t> data;
  uint64_t memsz = 0;  // 0: data.size()
  uint64_t align = 4;
};

// A Xen note "Xen" / XEN_ELFNOTE_PHYS32_ENTRY with a 4- or 8-byte desc.
inline std::vector<uint8_t> PvhNote(uint64_t entry, uint32_t descsz = 8) {
  std::vector<uint8_t> n(12 + 4 + descsz);
  uint32_t hdr[3] = {4, descsz, 18};
  std::memcpy(n.data(), hdr, 12);
  std::memcpy(n.data() + 12, "Xen", 4);
  std::memcpy(n.data() + 16, &entry, descsz <= 8 ? descsz : 8);
  return n;
}

template <typename Ehdr, typename Phdr>
std::vector<uint8_t> BuildElf(uint64_t entry, const std::vector<TestSegment>& segs,
                              unsigned char cls, uint16_t machine) {
  std::vector<uint8_t> out(sizeof(Ehdr) + segs.size() * sizeof(Phdr));
  Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = cls;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = machine;
  eh.e_version = EV_CURRENT;
  eh.e_entry = static_cast<decltype(eh.e_entry)>(entry);
  eh.e_phoff = sizeof(Ehdr);
  eh.e_ehsize = sizeof(Ehdr);
  eh.e_phentsize = sizeof(Phdr);
  eh.e_phnum = static_cast<uint16_t>(segs.size());
  std::memcpy(out.data(), &eh, sizeof(eh));
  for (size_t i = 0; i < segs.size(); ++i) {
    while (out.size() % 16) out.push_back(0);
    Phdr ph{};
    ph.p_type = segs[i].type;
    ph.p_offset = static_cast<decltype(ph.p_offset)>(out.size());
    ph.p_paddr = static_cast<decltype(ph.p_paddr)>(segs[i].paddr);
    ph.p_vaddr = ph.p_paddr;
    ph.p_filesz = static_cast<decltype(ph.p_filesz)>(segs[i].data.size());
    ph.p_memsz = static_cast<decltype(ph.p_memsz)>(segs[i].memsz ? segs[i].memsz
                                                                  : segs[i].data.size());
    ph.p_align = static_cast<decltype(ph.p_align)>(segs[i].align);
    std::memcpy(out.data() + sizeof(Ehdr) + i * sizeof(Phdr), &ph, sizeof(ph));
    out.insert(out.end(), segs[i].data.begin(), segs[i].data.end());
  }
  return out;
}

inline std::vector<uint8_t> BuildElf64(uint64_t entry, const std::vector<TestSegment>& segs) {
  return BuildElf<Elf64_Ehdr, Elf64_Phdr>(entry, segs, ELFCLASS64, EM_X86_64);
}
inline std::vector<uint8_t> BuildElf32(uint32_t entry, const std::vector<TestSegment>& segs) {
  return BuildElf<Elf32_Ehdr, Elf32_Phdr>(entry, segs, ELFCLASS32, EM_386);
}

struct BzOptions {
  uint8_t setup_sects = 4;
  uint16_t version = 0x020f;
  uint8_t loadflags = LOADED_HIGH;
  uint16_t xloadflags = XLF_KERNEL_64;
  uint32_t init_size = 0x100000;
  uint32_t pm_size = 0x4000;
  uint32_t cmdline_size = 2047;
  uint32_t initrd_addr_max = 0x7fffffff;
  uint8_t relocatable = 1;
  uint32_t kernel_alignment = 0x200000;
  uint64_t pref_address = 0x1000000;
};

// A bzImage with a setup header and `pm_size` bytes of protected-mode code
// whose byte i is (i & 0xff).
inline std::vector<uint8_t> BuildBzImage(const BzOptions& o) {
  uint64_t sects = o.setup_sects == 0 ? 4 : o.setup_sects;
  std::vector<uint8_t> out((sects + 1) * 512 + o.pm_size);
  setup_header h{};
  h.setup_sects = o.setup_sects;
  h.boot_flag = 0xAA55;
  h.jump = 0x66eb;  // "jmp short" over the header: 0x202 + 0x66 = 0x268
  std::memcpy(&h.header, "HdrS", 4);
  h.version = o.version;
  h.loadflags = o.loadflags;
  h.xloadflags = o.xloadflags;
  h.init_size = o.init_size;
  h.cmdline_size = o.cmdline_size;
  h.initrd_addr_max = o.initrd_addr_max;
  h.relocatable_kernel = o.relocatable;
  h.kernel_alignment = o.kernel_alignment;
  h.pref_address = o.pref_address;
  std::memcpy(out.data() + 0x1f1, &h, sizeof(h));
  for (uint64_t i = 0; i < o.pm_size; ++i) out[(sects + 1) * 512 + i] = static_cast<uint8_t>(i);
  return out;
}

}  // namespace dsec::arch::testing
