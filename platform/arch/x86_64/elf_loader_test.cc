// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "platform/arch/x86_64/kernel_loader.h"
#include "platform/arch/x86_64/test_images.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

using testing::BuildElf32;
using testing::BuildElf64;
using testing::PvhNote;
using testing::TestSegment;

class ElfLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = memory::FakeGuestMemory::Create({{0, 32 * kMiB}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
  }
  std::vector<uint8_t> Bytes(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }
  absl::StatusCode Code(const std::vector<uint8_t>& img) {
    return ParseKernel(img, *mem_).status().code();
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(ElfLoaderTest, LoadsSegmentsAtPhysicalAddressAndZeroesBss) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 0xAB), 0x2000},
                                    {PT_LOAD, 0x1100000, Bytes(0x10, 0xCD)}});
  ASSERT_TRUE(mem_->Fill(0x1000000, 0xEE, 0x2000).ok());
  auto k = ParseKernel(img, *mem_);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->format, KernelFormat::kElf64);
  EXPECT_EQ(k->entry64, 0x1000000u);
  EXPECT_FALSE(k->pvh_entry);
  EXPECT_EQ(k->footprint, (AddressRange{0x1000000, 0x100010}));
  ASSERT_TRUE(LoadKernel(img, *k, *mem_).ok());
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x10000ff), 0xAB);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x1000100), 0);  // bss
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x1001fff), 0);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x1100000), 0xCD);
}

TEST_F(ElfLoaderTest, FindsPvhNoteWithFourOrEightByteDescriptor) {
  for (uint32_t descsz : {4u, 8u}) {
    auto img = BuildElf64(0x1000000, {{PT_NOTE, 0, PvhNote(0x1000040, descsz)},
                                      {PT_LOAD, 0x1000000, Bytes(0x100, 1)}});
    auto k = ParseKernel(img, *mem_);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(k->pvh_entry, 0x1000040u);
  }
}

TEST_F(ElfLoaderTest, AcceptsElf32WithPvhNote) {
  auto img = BuildElf32(0xc1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)},
                                     {PT_NOTE, 0, PvhNote(0x1000010, 4)}});
  auto k = ParseKernel(img, *mem_);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->format, KernelFormat::kElf32);
  EXPECT_FALSE(k->entry64);
  EXPECT_EQ(k->pvh_entry, 0x1000010u);
}

TEST_F(ElfLoaderTest, RejectsElf32WithoutPvhNote) {
  auto img = BuildElf32(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElfLoaderTest, RejectsTruncatedElf) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)}});
  for (size_t n : {size_t{4}, size_t{40}, sizeof(Elf64_Ehdr) + 10, img.size() - 1}) {
    std::vector<uint8_t> cut(img.begin(), img.begin() + n);
    EXPECT_EQ(Code(cut), absl::StatusCode::kInvalidArgument) << n;
  }
}

TEST_F(ElfLoaderTest, RejectsWrongMachineClassAndEndianness) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)}});
  auto bad = img;
  bad[offsetof(Elf64_Ehdr, e_machine)] = EM_AARCH64 & 0xff;
  bad[offsetof(Elf64_Ehdr, e_machine) + 1] = EM_AARCH64 >> 8;
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
  bad = img;
  bad[EI_CLASS] = 7;
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
  bad = img;
  bad[EI_DATA] = ELFDATA2MSB;
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElfLoaderTest, RejectsFileSizeLargerThanMemSize) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1), 0x80}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElfLoaderTest, RejectsSegmentOutsideRam) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)},
                                    {PT_LOAD, 32 * kMiB - 0x10, Bytes(0x100, 1)}});
  auto s = ParseKernel(img, *mem_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("segment 1"), std::string::npos) << s;
}

TEST_F(ElfLoaderTest, RejectsSegmentOverMonitorMemoryNamingIt) {
  for (uint64_t addr : {uint64_t{0x8000}, uint64_t{0x2ffff}, uint64_t{0x9FC00},
                        uint64_t{0xF0000}}) {
    auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)},
                                      {PT_LOAD, addr, Bytes(0x10, 1)}});
    auto s = ParseKernel(img, *mem_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << addr;
    EXPECT_NE(s.message().find("segment 1"), std::string::npos) << s;
  }
}

TEST_F(ElfLoaderTest, AcceptsSegmentInTheFreeLowArea) {
  auto img = BuildElf64(0x30000, {{PT_LOAD, 0x30000, Bytes(0x100, 1)}});
  EXPECT_TRUE(ParseKernel(img, *mem_).ok());
}

TEST_F(ElfLoaderTest, RejectsOverlappingSegments) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1), 0x1000},
                                    {PT_LOAD, 0x1000800, Bytes(0x10, 1)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElfLoaderTest, RejectsAbsurdCountsAndOffsets) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, Bytes(0x100, 1)}});
  auto with = [&](auto mutate) {
    auto bad = img;
    Elf64_Ehdr eh;
    std::memcpy(&eh, bad.data(), sizeof(eh));
    Elf64_Phdr ph;
    std::memcpy(&ph, bad.data() + eh.e_phoff, sizeof(ph));
    mutate(eh, ph);
    std::memcpy(bad.data(), &eh, sizeof(eh));
    if (eh.e_phoff == sizeof(eh)) std::memcpy(bad.data() + sizeof(eh), &ph, sizeof(ph));
    return Code(bad);
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(with([](Elf64_Ehdr& e, Elf64_Phdr&) { e.e_phnum = 0xffff; }), kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr& e, Elf64_Phdr&) { e.e_phnum = 0; }), kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr& e, Elf64_Phdr&) { e.e_phoff = UINT64_MAX - 8; }), kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr& e, Elf64_Phdr&) { e.e_phentsize = 12; }), kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr&, Elf64_Phdr& p) { p.p_offset = UINT64_MAX - 0x10; }), kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr&, Elf64_Phdr& p) { p.p_filesz = p.p_memsz = 1ull << 62; }),
            kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr&, Elf64_Phdr& p) {
              p.p_paddr = UINT64_MAX - 0x10;
              p.p_memsz = 0x100;
            }),
            kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr& e, Elf64_Phdr&) { e.e_entry = 0x2000000; }), kInvalid);
  EXPECT_EQ(with([](Elf64_Ehdr& e, Elf64_Phdr&) { e.e_type = ET_DYN; }), kInvalid);
}

TEST_F(ElfLoaderTest, RejectsMalformedNotes) {
  auto note = PvhNote(0x1000000, 8);
  note[0] = 0xff;  // namesz runs past the segment
  auto img = BuildElf64(0x1000000, {{PT_NOTE, 0, note}, {PT_LOAD, 0x1000000, Bytes(0x10, 1)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
  img = BuildElf64(0x1000000,
                   {{PT_NOTE, 0, PvhNote(0x1000000, 2)}, {PT_LOAD, 0x1000000, Bytes(0x10, 1)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
  img = BuildElf64(0x1000000, {{PT_NOTE, 0, PvhNote(0x100000000ull, 8)},
                               {PT_LOAD, 0x1000000, Bytes(0x10, 1)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
  img = BuildElf64(0x1000000,
                   {{PT_NOTE, 0, PvhNote(0x5000, 8)}, {PT_LOAD, 0x1000000, Bytes(0x10, 1)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);  // entry not loaded
}

TEST_F(ElfLoaderTest, RejectsNoLoadableSegment) {
  auto img = BuildElf64(0x1000000, {{PT_NOTE, 0, PvhNote(0x1000000, 8)}});
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElfLoaderTest, RejectsUnknownFormat) {
  std::vector<uint8_t> junk(4096, 0x90);
  EXPECT_EQ(Code(junk), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code({}), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::arch
