// SPDX-License-Identifier: Apache-2.0
// ELF kernel parsing (System V gABI "ELF header", "Program header", "Note
// section"), for vmlinux-style images loaded at their physical addresses.
#include <elf.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "platform/arch/x86_64/kernel_loader.h"
#include "base/status.h"

namespace dsec::arch {

namespace {

absl::Status Bad(std::string msg) { return absl::InvalidArgumentError("ELF kernel: " + msg); }

// True when [off, off+len) lies inside a buffer of `size` bytes, without
// overflow.
bool InBounds(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

template <typename T>
T ReadAt(std::span<const uint8_t> image, uint64_t off) {
  T value;
  std::memcpy(&value, image.data() + off, sizeof(T));
  return value;
}

// Walks the notes of one PT_NOTE segment looking for the Xen PHYS32_ENTRY
// note. Each note is namesz, descsz, type (4 bytes each), then name and desc,
// each padded to the segment's alignment.
absl::Status ScanNotes(std::span<const uint8_t> notes, uint64_t align, size_t index,
                       std::optional<uint32_t>* pvh_entry) {
  uint64_t pos = 0;
  auto pad = [align](uint64_t n) { return (n + align - 1) & ~(align - 1); };
  while (notes.size() - pos >= 12) {
    uint32_t namesz = ReadAt<uint32_t>(notes, pos);
    uint32_t descsz = ReadAt<uint32_t>(notes, pos + 4);
    uint32_t type = ReadAt<uint32_t>(notes, pos + 8);
    uint64_t name_off = pos + 12;
    // namesz/descsz are 32-bit, so the padded sums cannot overflow 64 bits.
    uint64_t desc_off = name_off + pad(namesz);
    uint64_t next = desc_off + pad(descsz);
    if (!InBounds(name_off, namesz, notes.size()) || !InBounds(desc_off, descsz, notes.size())) {
      return Bad(absl::StrFormat("note in segment %d runs past the segment end", index));
    }
    if (namesz == 4 && std::memcmp(notes.data() + name_off, "Xen", 4) == 0 &&
        type == kXenElfNotePhys32Entry) {
      // The desc is the entry as a 32-bit value or, as Linux emits it with
      // _ASM_PTR, a 64-bit one that must still fit 32 bits.
      uint64_t entry;
      if (descsz == 4) {
        entry = ReadAt<uint32_t>(notes, desc_off);
      } else if (descsz == 8) {
        entry = ReadAt<uint64_t>(notes, desc_off);
      } else {
        return Bad(absl::StrFormat("PVH entry note has a %d-byte descriptor (want 4 or 8)",
                                   descsz));
      }
      if (entry > UINT32_MAX) {
        return Bad(absl::StrFormat("PVH entry 0x%x is above 4 GiB", entry));
      }
      *pvh_entry = static_cast<uint32_t>(entry);
    }
    if (next >= notes.size()) break;
    pos = next;
  }
  return absl::OkStatus();
}

template <typename Ehdr, typename Phdr>
absl::StatusOr<KernelImage> ParseElfClass(std::span<const uint8_t> image,
                                          const memory::GuestMemory& mem, bool is64) {
  if (image.size() < sizeof(Ehdr)) {
    return Bad(absl::StrFormat("file of %d bytes is shorter than the ELF header", image.size()));
  }
  const Ehdr eh = ReadAt<Ehdr>(image, 0);
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return Bad("not little-endian");
  if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT) {
    return Bad("unknown ELF version");
  }
  const uint16_t want_machine = is64 ? EM_X86_64 : EM_386;
  if (eh.e_machine != want_machine) {
    return Bad(absl::StrFormat("machine %d is not %s", eh.e_machine,
                               is64 ? "x86-64 (EM_X86_64)" : "i386 (EM_386)"));
  }
  if (eh.e_type != ET_EXEC) return Bad(absl::StrFormat("type %d is not ET_EXEC", eh.e_type));
  if (eh.e_phentsize != sizeof(Phdr)) {
    return Bad(absl::StrFormat("program header size %d, expected %d", eh.e_phentsize,
                               sizeof(Phdr)));
  }
  if (eh.e_phnum == 0 || eh.e_phnum > kMaxProgramHeaders) {
    return Bad(absl::StrFormat("%d program headers (must be 1..%d)", eh.e_phnum,
                               kMaxProgramHeaders));
  }
  if (!InBounds(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Phdr), image.size())) {
    return Bad(absl::StrFormat("program headers at 0x%x run past the end of the file",
                               eh.e_phoff));
  }

  KernelImage out;
  out.format = is64 ? KernelFormat::kElf64 : KernelFormat::kElf32;
  for (size_t i = 0; i < eh.e_phnum; ++i) {
    const Phdr ph = ReadAt<Phdr>(image, eh.e_phoff + i * sizeof(Phdr));
    if (!InBounds(ph.p_offset, ph.p_filesz, image.size())) {
      return Bad(absl::StrFormat("segment %d: file range [0x%x, +0x%x) is outside the file", i,
                                 ph.p_offset, ph.p_filesz));
    }
    if (ph.p_type == PT_NOTE) {
      uint64_t align = ph.p_align == 8 ? 8 : 4;
      DSEC_RETURN_IF_ERROR(
          ScanNotes(image.subspan(ph.p_offset, ph.p_filesz), align, i, &out.pvh_entry));
      continue;
    }
    if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
    if (ph.p_filesz > ph.p_memsz) {
      return Bad(absl::StrFormat("segment %d: file size 0x%x exceeds memory size 0x%x", i,
                                 ph.p_filesz, ph.p_memsz));
    }
    AddressRange range{ph.p_paddr, ph.p_memsz};
    DSEC_RETURN_IF_ERROR(
        internal::CheckKernelRange(range, mem, absl::StrFormat("ELF kernel segment %d", i)));
    for (const KernelSegment& prev : out.segments) {
      if (range.Overlaps({prev.gpa, prev.mem_size})) {
        return Bad(absl::StrFormat("segment %d [0x%x, 0x%x) overlaps an earlier segment at 0x%x",
                                   i, range.start, range.end(), prev.gpa));
      }
    }
    out.segments.push_back({ph.p_offset, ph.p_filesz, ph.p_paddr, ph.p_memsz});
  }
  if (out.segments.empty()) return Bad("no loadable (PT_LOAD) segment");

  uint64_t lo = UINT64_MAX, hi = 0;
  for (const KernelSegment& s : out.segments) {
    lo = std::min(lo, s.gpa);
    hi = std::max(hi, s.gpa + s.mem_size);
  }
  out.footprint = {lo, hi - lo};

  auto loaded = [&out](uint64_t addr) {
    return std::any_of(out.segments.begin(), out.segments.end(), [addr](const KernelSegment& s) {
      return addr >= s.gpa && addr - s.gpa < s.file_size;
    });
  };
  if (out.pvh_entry && !loaded(*out.pvh_entry)) {
    return Bad(absl::StrFormat("PVH entry 0x%x is outside the loaded segments", *out.pvh_entry));
  }
  if (is64) {
    // vmlinux's e_entry is the physical address of startup_64. An image that
    // only has a PVH entry may carry a virtual e_entry; then it can only
    // boot via PVH.
    if (loaded(eh.e_entry)) {
      out.entry64 = eh.e_entry;
    } else if (!out.pvh_entry) {
      return Bad(absl::StrFormat("entry 0x%x is outside the loaded segments", eh.e_entry));
    }
  } else if (!out.pvh_entry) {
    return Bad("32-bit ELF kernel has no PVH entry note (Xen, XEN_ELFNOTE_PHYS32_ENTRY)");
  }
  return out;
}

}  // namespace

absl::StatusOr<KernelImage> ParseElfKernel(std::span<const uint8_t> image,
                                           const memory::GuestMemory& mem) {
  if (image.size() < EI_NIDENT || std::memcmp(image.data(), ELFMAG, SELFMAG) != 0) {
    return Bad("bad magic");
  }
  switch (image[EI_CLASS]) {
    case ELFCLASS64:
      return ParseElfClass<Elf64_Ehdr, Elf64_Phdr>(image, mem, true);
    case ELFCLASS32:
      return ParseElfClass<Elf32_Ehdr, Elf32_Phdr>(image, mem, false);
    default:
      return Bad(absl::StrFormat("unknown ELF class %d", image[EI_CLASS]));
  }
}

}  // namespace dsec::arch
