// SPDX-License-Identifier: Apache-2.0
#include "vmm/snapshot/snapshot_format.h"

#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dsec::snapshot {
namespace {

using ::testing::HasSubstr;

Manifest Sample() {
  Manifest m;
  m.created_unix_ms = 1'700'000'000'000;
  m.config = {{"mem_mib", 128}, {"vcpus", 2}};
  m.memory_file_bytes = 128ull << 20;
  m.regions = {{0, 128ull << 20, 0}};
  for (uint32_t id = 0; id < 2; ++id) {
    VcpuState v;
    v.id = id;
    v.regs.rip = 0x1000 + id;
    v.regs.rax = 0xdeadbeef;
    v.sregs.cr0 = 0x80050033;
    v.fpu.bytes[3] = 7;
    v.xsave.emplace(4096 + 2688, 0);
    (*v.xsave)[4095] = 0x5a;
    v.lapic.regs[0x80] = 0x10;
    v.events.bytes[1] = 1;
    v.mp_state = id == 0 ? kvm::kMpStateRunnable : kvm::kMpStateHalted;
    v.msrs = {{0x10, 0, 123456789}, {0xc0000080, 0, 0xd01}};
    kvm::CpuidEntry e;
    e.function = 1;
    e.ecx = 0x80000000;
    v.cpuid = {e};
    v.tsc_khz = 2'600'000;
    m.vcpus.push_back(v);
  }
  for (uint32_t chip = 0; chip < 3; ++chip) {
    kvm::IrqchipState c;
    c.bytes[0] = static_cast<uint8_t>(chip);
    c.bytes[100] = 0x42;
    m.irqchips.push_back(c);
  }
  m.clock.bytes[0] = 9;
  m.devices = {{"serial", {{"ier", 1}}}, {"pit", {{"port_b", 0}}}};
  return m;
}

// A manifest whose body is `body` with a correct header.
std::string WithBody(const std::string& body) {
  uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  return absl::StrCat(R"({"format":"dsec-vm-snapshot","version":1,"body_bytes":)", body.size(),
                      R"(,"crc32":)", crc, "}\n", body);
}

// The sample's body as JSON, to edit field by field.
nlohmann::json SampleBody() {
  std::string text = SerializeManifest(Sample());
  return nlohmann::json::parse(text.substr(text.find('\n') + 1));
}

TEST(SnapshotFormatTest, RoundTrips) {
  Manifest m = Sample();
  absl::StatusOr<Manifest> back = ParseManifest(SerializeManifest(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->created_unix_ms, m.created_unix_ms);
  EXPECT_EQ(back->config, m.config);
  EXPECT_EQ(back->memory_file_bytes, m.memory_file_bytes);
  ASSERT_EQ(back->vcpus.size(), 2u);
  EXPECT_EQ(back->vcpus[1].regs.rip, 0x1001u);
  EXPECT_EQ(back->vcpus[0].regs.rax, 0xdeadbeefu);
  EXPECT_EQ(back->vcpus[0].sregs.cr0, 0x80050033u);
  EXPECT_EQ(back->vcpus[0].fpu.bytes[3], 7);
  ASSERT_TRUE(back->vcpus[0].xsave.has_value());
  ASSERT_EQ(back->vcpus[0].xsave->size(), 4096u + 2688u);
  EXPECT_EQ((*back->vcpus[0].xsave)[4095], 0x5a);
  EXPECT_FALSE(back->vcpus[0].xcrs.has_value());
  EXPECT_EQ(back->vcpus[0].lapic.regs[0x80], 0x10);
  EXPECT_EQ(back->vcpus[1].mp_state, kvm::kMpStateHalted);
  ASSERT_EQ(back->vcpus[0].msrs.size(), 2u);
  EXPECT_EQ(back->vcpus[0].msrs[0].data, 123456789u);
  EXPECT_EQ(back->vcpus[0].msrs[1].index, 0xc0000080u);
  ASSERT_EQ(back->vcpus[0].cpuid.size(), 1u);
  EXPECT_EQ(back->vcpus[0].cpuid[0].ecx, 0x80000000u);
  EXPECT_EQ(back->vcpus[0].tsc_khz, 2'600'000u);
  ASSERT_EQ(back->irqchips.size(), 3u);
  EXPECT_EQ(back->irqchips[2].bytes[0], 2);
  EXPECT_EQ(back->irqchips[1].bytes[100], 0x42);
  EXPECT_EQ(back->clock.bytes[0], 9);
  EXPECT_EQ(back->devices, m.devices);
  EXPECT_FALSE(back->parent.has_value());
  m.parent = ParentRef{"base-1", 0xdeadbeef};
  m.extents = {{0, 4096}, {8192, 8192}};
  back = ParseManifest(SerializeManifest(m));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->parent.has_value());
  EXPECT_EQ(back->parent->name, "base-1");
  EXPECT_EQ(back->parent->crc32, 0xdeadbeefu);
  ASSERT_EQ(back->extents.size(), 2u);
  EXPECT_EQ(back->extents[1].offset, 8192u);
  EXPECT_EQ(back->extents[1].length, 8192u);
  // Extents that overlap, or a diff without them, are refused.
  nlohmann::json body = nlohmann::json::parse(
      SerializeManifest(m).substr(SerializeManifest(m).find('\n') + 1));
  body["memory"]["extents"] = {{0, 8192}, {4096, 4096}};
  EXPECT_EQ(FieldOf(ParseManifest(WithBody(body.dump())).status()).value_or(""),
            "memory.extents[1]");
  body["memory"].erase("extents");
  EXPECT_EQ(FieldOf(ParseManifest(WithBody(body.dump())).status()).value_or(""), "memory.extents");
}

TEST(SnapshotFormatTest, RefusesTruncatedAndCorrupted) {
  std::string text = SerializeManifest(Sample());
  EXPECT_THAT(ParseManifest("").status().message(), HasSubstr("no header line"));
  EXPECT_THAT(ParseManifest(text.substr(0, text.size() - 1)).status().message(),
              HasSubstr("truncated"));
  EXPECT_THAT(ParseManifest(text + " ").status().message(), HasSubstr("truncated or appended"));
  std::string flipped = text;
  flipped[flipped.size() - 10] ^= 0x01;
  EXPECT_THAT(ParseManifest(flipped).status().message(), HasSubstr("CRC-32"));
}

TEST(SnapshotFormatTest, NamesForeignFormatsAndVersions) {
  std::string text = SerializeManifest(Sample());
  std::string body = text.substr(text.find('\n') + 1);
  absl::Status v2 = ParseManifest(absl::StrCat(
      R"({"format":"dsec-vm-snapshot","version":2,"body_bytes":)", body.size(), R"(,"crc32":0})",
      "\n", body)).status();
  EXPECT_EQ(v2.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(v2.message(), HasSubstr("version 2 is not supported"));
  absl::Status other =
      ParseManifest(absl::StrCat(R"({"format":"firecracker","version":1,"body_bytes":2,"crc32":0})",
                                 "\n{}"))
          .status();
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("not a dsec-vmm snapshot"));
}

// Each hostile edit of the body is refused naming the field, before any
// caller would map or allocate what it asks for.
TEST(SnapshotFormatTest, RefusesHostileFields) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string field;
  };
  const Case cases[] = {
      {[](nlohmann::json& b) { b["memory"]["bytes"] = 1ull << 50; }, "memory.bytes"},
      {[](nlohmann::json& b) { b["memory"]["regions"][0]["size"] = 256ull << 20; },
       "memory.regions[0]"},
      {[](nlohmann::json& b) { b["memory"]["regions"][0]["offset"] = 4096; },
       "memory.regions[0]"},
      {[](nlohmann::json& b) { b["memory"]["regions"][0]["gpa"] = 4095; }, "memory.regions[0]"},
      {[](nlohmann::json& b) { b["memory"]["regions"][0]["offset"] = UINT64_MAX; },
       "memory.regions[0].offset"},
      {[](nlohmann::json& b) {
         b["memory"]["regions"].push_back({{"gpa", 0}, {"size", 4096}, {"offset", 4096}});
       },
       "memory.regions[1]"},
      {[](nlohmann::json& b) { b["memory"]["file"] = "../../etc/shadow"; }, "memory.file"},
      {[](nlohmann::json& b) { b["vcpus"] = nlohmann::json::array(); }, "vcpus"},
      {[](nlohmann::json& b) { b["vcpus"][1]["id"] = 0; }, "vcpus[1]"},
      {[](nlohmann::json& b) { b["vcpus"][0]["lapic"] = "AAAA"; }, "vcpus[0].lapic"},
      {[](nlohmann::json& b) { b["vcpus"][0]["regs"] = "not base64!"; }, "vcpus[0].regs"},
      {[](nlohmann::json& b) { b["vcpus"][0]["mp_state"] = 99; }, "vcpus[0].mp_state"},
      {[](nlohmann::json& b) { b["vcpus"][0]["msrs"][0] = {1ull << 40, 0}; },
       "vcpus[0].msrs[0]"},
      {[](nlohmann::json& b) {
         for (int i = 0; i < 2000; ++i) b["vcpus"][0]["msrs"].push_back({1, 2});
       },
       "vcpus[0].msrs"},
      {[](nlohmann::json& b) { b["vcpus"][0]["cpuid"][0] = {1, 2, 3}; }, "vcpus[0].cpuid[0]"},
      {[](nlohmann::json& b) { b["vcpus"][0]["surprise"] = 1; }, "vcpus[0].surprise"},
      {[](nlohmann::json& b) { b["irqchips"].erase(2); }, "irqchips"},
      {[](nlohmann::json& b) { std::swap(b["irqchips"][0], b["irqchips"][1]); }, "irqchips[0]"},
      {[](nlohmann::json& b) { b["clock"] = ""; }, "clock"},
      {[](nlohmann::json& b) { b["devices"] = 3; }, "devices"},
      {[](nlohmann::json& b) { b["config"] = "x"; }, "config"},
      {[](nlohmann::json& b) { b["extra"] = true; }, "extra"},
      {[](nlohmann::json& b) { b["parent"] = {{"name", "../base"}, {"crc32", 1}}; }, "parent.name"},
      {[](nlohmann::json& b) { b["parent"] = {{"name", ".."}, {"crc32", 1}}; }, "parent.name"},
      {[](nlohmann::json& b) { b["parent"] = {{"name", "base"}, {"crc32", -1}}; }, "parent.crc32"},
  };
  for (const Case& c : cases) {
    nlohmann::json body = SampleBody();
    c.edit(body);
    absl::Status s = ParseManifest(WithBody(body.dump())).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << s;
    EXPECT_EQ(FieldOf(s).value_or(""), c.field) << s;
  }
  // The unedited body parses: the cases above fail for their edit alone.
  EXPECT_TRUE(ParseManifest(WithBody(SampleBody().dump())).ok());
}

TEST(SnapshotFormatTest, TouchedPagesRoundTripAndHostileListsAreRefused) {
  const std::vector<Extent> runs = {{0, 4096}, {8192, 3 * 4096}, {1ull << 30, 4096}};
  absl::StatusOr<std::vector<Extent>> back = ParseTouched(SerializeTouched(runs));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ((*back)[i].offset, runs[i].offset);
    EXPECT_EQ((*back)[i].length, runs[i].length);
  }
  EXPECT_TRUE(ParseTouched(SerializeTouched({}))->empty());
  // More runs than the format holds are joined across the smallest gaps:
  // still a list it reads, covering every page given.
  std::vector<Extent> many;
  for (uint64_t i = 0; i < kMaxExtents + 10; ++i) many.push_back({i * 2 * 4096, 4096});
  absl::StatusOr<std::vector<Extent>> joined = ParseTouched(SerializeTouched(many));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_LE(joined->size(), kMaxExtents);
  ASSERT_FALSE(joined->empty());
  EXPECT_EQ(joined->front().offset, 0u);
  EXPECT_EQ(joined->back().offset + joined->back().length, many.back().offset + 4096);
  const std::string head = R"({"format":"dsec-vm-touched","version":1,"runs":)";
  for (const char* runs_json : {"[[1,4096]]", "[[0,100]]", "[[0,0]]", "[[8192,4096],[0,4096]]",
                                "[[0,8192],[4096,4096]]", "[[1099511627776,4096]]", "[[0]]",
                                "[[-4096,4096]]", "{}", "[[0,4096,1]]"}) {
    absl::StatusOr<std::vector<Extent>> r = ParseTouched(head + runs_json + "}");
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << runs_json << ": " << r.status();
    if (!r.ok()) {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr("runs")) << runs_json;
    }
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ParseTouched(head + "[], \"extra\": 1}").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseTouched("not json").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseTouched(std::string(kMaxTouchedBytes + 1, ' ')).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ParseTouched(R"({"format":"dsec-vm-snapshot","version":1,"runs":[]})").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ParseTouched(R"({"format":"dsec-vm-touched","version":2,"runs":[]})").status()));
}

TEST(SnapshotFormatTest, ReadBoundedFileTakesOnlyARegularFileWithinItsBound) {
  char tmpl[] = "/tmp/dsec-snapshot-format-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string file = dir + "/f", link = dir + "/l";
  {
    std::ofstream out(file, std::ios::binary);
    out << "0123456789";
  }
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  absl::StatusOr<std::string> ok = ReadBoundedFile(file, 10);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "0123456789");
  EXPECT_TRUE(absl::IsInvalidArgument(ReadBoundedFile(file, 9).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadBoundedFile(dir, 1 << 20).status()));
  EXPECT_FALSE(ReadBoundedFile(link, 1 << 20).ok());  // not followed
  EXPECT_FALSE(ReadBoundedFile(dir + "/missing", 10).ok());
  ::unlink(link.c_str());
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace dsec::snapshot
