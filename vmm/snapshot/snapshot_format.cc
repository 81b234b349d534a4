// SPDX-License-Identifier: Apache-2.0
#include "vmm/snapshot/snapshot_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::snapshot {

namespace {

uint32_t Crc32(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large inputs in pieces.
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
std::string Blob(const T& value) {
  return absl::Base64Escape(
      absl::string_view(reinterpret_cast<const char*>(&value), sizeof(T)));
}
template <uint32_t N>
std::string Blob(const kvm::OpaqueState<N>& value) {
  return absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(value.bytes), N));
}

// A blob field of exactly sizeof(T) bytes into `out`.
template <typename T>
absl::Status ReadBlob(JsonFields& f, std::string_view key, T* out) {
  DSEC_ASSIGN_OR_RETURN(std::string bytes, f.Bytes(key, sizeof(T), sizeof(T)));
  if (bytes.size() != sizeof(T)) return absl::InternalError("blob size");  // Bytes checked it
  std::memcpy(static_cast<void*>(out), bytes.data(), bytes.size());
  return absl::OkStatus();
}

nlohmann::json VcpuJson(const VcpuState& v) {
  nlohmann::json msrs = nlohmann::json::array();
  for (const kvm::MsrEntry& m : v.msrs) msrs.push_back({m.index, m.data});
  nlohmann::json cpuid = nlohmann::json::array();
  for (const kvm::CpuidEntry& e : v.cpuid) {
    cpuid.push_back({e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx});
  }
  nlohmann::json j = {{"id", v.id},
                      {"regs", Blob(v.regs)},
                      {"sregs", Blob(v.sregs)},
                      {"fpu", Blob(v.fpu)},
                      {"debugregs", Blob(v.debugregs)},
                      {"lapic", Blob(v.lapic)},
                      {"events", Blob(v.events)},
                      {"mp_state", v.mp_state},
                      {"msrs", std::move(msrs)},
                      {"cpuid", std::move(cpuid)},
                      {"tsc_khz", v.tsc_khz}};
  if (v.xsave) {
    j["xsave"] = absl::Base64Escape(
        absl::string_view(reinterpret_cast<const char*>(v.xsave->data()), v.xsave->size()));
  }
  if (v.xcrs) j["xcrs"] = Blob(*v.xcrs);
  return j;
}

// An array field of at most `max` items; InvalidArgument naming it.
absl::StatusOr<const nlohmann::json*> Array(JsonFields& f, std::string_view key, size_t min,
                                            size_t max) {
  const nlohmann::json* v = f.Raw(key);
  const std::string path = f.Path(key);
  if (v == nullptr || !v->is_array() || v->size() < min || v->size() > max) {
    return InvalidField(path, absl::StrCat(path, " must be a list of ", min, "..", max, " items"));
  }
  return v;
}

// A JSON array of exactly `n` unsigned integers each at most `hi`.
absl::StatusOr<std::vector<uint64_t>> Tuple(const nlohmann::json& v, const std::string& path,
                                            size_t n, uint64_t hi) {
  if (!v.is_array() || v.size() != n) {
    return InvalidField(path, absl::StrCat(path, " must be a list of ", n, " integers"));
  }
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) {
    const nlohmann::json& x = v[i];
    if (!x.is_number_unsigned() || x.get<uint64_t>() > hi) {
      const std::string ipath = JsonFields::ItemPath(path, i);
      return InvalidField(ipath, absl::StrCat(ipath, " must be an integer between 0 and ", hi));
    }
    out.push_back(x.get<uint64_t>());
  }
  return out;
}

absl::StatusOr<VcpuState> ParseVcpu(const nlohmann::json& j, const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j, path));
  VcpuState v;
  DSEC_ASSIGN_OR_RETURN(uint64_t id, f.Uint("id", 0, kMaxVcpus - 1));
  v.id = static_cast<uint32_t>(id);
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "regs", &v.regs));
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "sregs", &v.sregs));
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "fpu", &v.fpu.bytes));
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "debugregs", &v.debugregs.bytes));
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "lapic", &v.lapic.regs));
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "events", &v.events.bytes));
  if (f.Raw("xsave") != nullptr) {
    DSEC_ASSIGN_OR_RETURN(std::string x, f.Bytes("xsave", 4096, kMaxXsaveBytes));
    v.xsave.emplace(x.begin(), x.end());
  }
  if (f.Raw("xcrs") != nullptr) {
    v.xcrs.emplace();
    DSEC_RETURN_IF_ERROR(ReadBlob(f, "xcrs", &v.xcrs->bytes));
  }
  DSEC_ASSIGN_OR_RETURN(uint64_t mp_state, f.Uint("mp_state", 0, kvm::kMpStateSipiReceived));
  v.mp_state = static_cast<uint32_t>(mp_state);
  DSEC_ASSIGN_OR_RETURN(uint64_t tsc_khz, f.Uint("tsc_khz", 0, 100'000'000));
  v.tsc_khz = static_cast<uint32_t>(tsc_khz);

  DSEC_ASSIGN_OR_RETURN(const nlohmann::json* msrs, Array(f, "msrs", 0, kMaxMsrs));
  for (size_t i = 0; i < msrs->size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(std::vector<uint64_t> t,
                          Tuple((*msrs)[i], JsonFields::ItemPath(f.Path("msrs"), i), 2, UINT64_MAX));
    if (t[0] > UINT32_MAX) {
      const std::string ipath = JsonFields::ItemPath(f.Path("msrs"), i);
      return InvalidField(ipath, absl::StrCat(ipath, ": MSR index above 0xffffffff"));
    }
    kvm::MsrEntry m;
    m.index = static_cast<uint32_t>(t[0]);
    m.data = t[1];
    v.msrs.push_back(m);
  }
  DSEC_ASSIGN_OR_RETURN(const nlohmann::json* cpuid, Array(f, "cpuid", 1, kMaxCpuidEntries));
  for (size_t i = 0; i < cpuid->size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(
        std::vector<uint64_t> t,
        Tuple((*cpuid)[i], JsonFields::ItemPath(f.Path("cpuid"), i), 7, UINT32_MAX));
    kvm::CpuidEntry e;
    e.function = static_cast<uint32_t>(t[0]);
    e.index = static_cast<uint32_t>(t[1]);
    e.flags = static_cast<uint32_t>(t[2]);
    e.eax = static_cast<uint32_t>(t[3]);
    e.ebx = static_cast<uint32_t>(t[4]);
    e.ecx = static_cast<uint32_t>(t[5]);
    e.edx = static_cast<uint32_t>(t[6]);
    v.cpuid.push_back(e);
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return v;
}

absl::Status CheckRegions(const std::vector<MemoryRegion>& regions, uint64_t file_bytes) {
  uint64_t total = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const MemoryRegion& r = regions[i];
    const std::string path = JsonFields::ItemPath("memory.regions", i);
    if (r.size == 0 || r.gpa % kPageSize != 0 || r.size % kPageSize != 0 ||
        r.offset % kPageSize != 0) {
      return InvalidField(path, absl::StrCat(path, ": gpa, size and offset must be multiples of ",
                                             kPageSize, " and size non-zero"));
    }
    // Bounds are checked field by field (each at most kMaxMemoryBytes or
    // 2^52), so these sums cannot overflow.
    if (r.offset + r.size > file_bytes) {
      return InvalidField(path, absl::StrCat(path, " ends at byte ", r.offset + r.size,
                                             " of a memory file of ", file_bytes, " bytes"));
    }
    if (i > 0) {
      const MemoryRegion& p = regions[i - 1];
      if (r.gpa < p.gpa + p.size) {
        return InvalidField(path, absl::StrCat(path, " overlaps or precedes the region before it"));
      }
      if (r.offset < p.offset + p.size) {
        return InvalidField(path,
                            absl::StrCat(path, " shares file bytes with the region before it"));
      }
    }
    total += r.size;
  }
  if (total > kMaxMemoryBytes) {
    return InvalidField("memory.regions", "memory.regions add up to more than 1 TiB");
  }
  return absl::OkStatus();
}

}  // namespace

bool ValidParentName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

std::string SerializeManifest(const Manifest& m) {
  nlohmann::json regions = nlohmann::json::array();
  for (const MemoryRegion& r : m.regions) {
    regions.push_back({{"gpa", r.gpa}, {"size", r.size}, {"offset", r.offset}});
  }
  nlohmann::json vcpus = nlohmann::json::array();
  for (const VcpuState& v : m.vcpus) vcpus.push_back(VcpuJson(v));
  nlohmann::json irqchips = nlohmann::json::array();
  for (const kvm::IrqchipState& c : m.irqchips) irqchips.push_back(Blob(c));
  nlohmann::json body = {
      {"created_unix_ms", m.created_unix_ms},
      {"config", m.config},
      {"memory", {{"file", kMemoryFile}, {"bytes", m.memory_file_bytes}, {"regions", regions}}},
      {"vcpus", std::move(vcpus)},
      {"irqchips", std::move(irqchips)},
      {"clock", Blob(m.clock)},
      {"devices", m.devices},
  };
  if (m.parent) {
    body["parent"] = {{"name", m.parent->name}, {"crc32", m.parent->crc32}};
    nlohmann::json extents = nlohmann::json::array();
    for (const Extent& e : m.extents) extents.push_back({e.offset, e.length});
    body["memory"]["extents"] = std::move(extents);
  }
  std::string text = body.dump();
  nlohmann::json header = {{"format", kFormatName},
                           {"version", kFormatVersion},
                           {"body_bytes", text.size()},
                           {"crc32", Crc32(text)}};
  return absl::StrCat(header.dump(), "\n", text);
}

absl::StatusOr<Manifest> ParseManifest(std::string_view bytes) {
  if (bytes.size() > kMaxManifestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot manifest is ", bytes.size(),
                                                   " bytes, more than the ", kMaxManifestBytes,
                                                   " allowed"));
  }
  const size_t nl = bytes.find('\n');
  if (nl == std::string_view::npos || nl > 4096) {
    return absl::InvalidArgumentError(
        "snapshot manifest has no header line (truncated, or not a dsec-vmm snapshot)");
  }
  nlohmann::json header = nlohmann::json::parse(bytes.substr(0, nl), nullptr, false);
  if (header.is_discarded()) {
    return absl::InvalidArgumentError("snapshot manifest header is not JSON");
  }
  DSEC_ASSIGN_OR_RETURN(JsonFields h, JsonFields::Of(header, "header"));
  DSEC_ASSIGN_OR_RETURN(std::string format, h.String("format", 64));
  if (format != kFormatName) {
    return absl::FailedPreconditionError(
        absl::StrCat("not a dsec-vmm snapshot: format \"", format, "\", want \"",
                     std::string(kFormatName), "\""));
  }
  DSEC_ASSIGN_OR_RETURN(uint64_t version, h.Uint("version", 0, UINT32_MAX));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("snapshot format version ", version,
                                                      " is not supported: this monitor reads "
                                                      "version ",
                                                      kFormatVersion));
  }
  DSEC_ASSIGN_OR_RETURN(uint64_t body_bytes, h.Uint("body_bytes", 2, kMaxManifestBytes));
  DSEC_ASSIGN_OR_RETURN(uint64_t crc, h.Uint("crc32", 0, UINT32_MAX));
  DSEC_RETURN_IF_ERROR(h.RejectUnknown());
  std::string_view body_text = bytes.substr(nl + 1);
  if (body_text.size() != body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot manifest body is ", body_text.size(),
                                                   " bytes, the header says ", body_bytes,
                                                   " (truncated or appended to)"));
  }
  if (Crc32(body_text) != crc) {
    return absl::InvalidArgumentError("snapshot manifest body fails its CRC-32 (corrupted)");
  }
  nlohmann::json body = nlohmann::json::parse(body_text, nullptr, false);
  if (body.is_discarded()) return absl::InvalidArgumentError("snapshot manifest body is not JSON");

  Manifest m;
  m.crc32 = static_cast<uint32_t>(crc);
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body, ""));
  if (const nlohmann::json* parent = f.Raw("parent")) {
    DSEC_ASSIGN_OR_RETURN(JsonFields pf, JsonFields::Of(*parent, "parent"));
    ParentRef ref;
    DSEC_ASSIGN_OR_RETURN(ref.name, pf.String("name", 128));
    if (!ValidParentName(ref.name)) {
      return InvalidField("parent.name",
                          "parent.name must be a directory name of [A-Za-z0-9._-], not . or ..");
    }
    DSEC_ASSIGN_OR_RETURN(uint64_t pcrc, pf.Uint("crc32", 0, UINT32_MAX));
    ref.crc32 = static_cast<uint32_t>(pcrc);
    DSEC_RETURN_IF_ERROR(pf.RejectUnknown());
    m.parent = std::move(ref);
  }
  DSEC_ASSIGN_OR_RETURN(uint64_t created, f.Uint("created_unix_ms", 0, uint64_t{1} << 52));
  m.created_unix_ms = static_cast<int64_t>(created);
  const nlohmann::json* config = f.Raw("config");
  if (config == nullptr || !config->is_object()) {
    return InvalidField("config", "config must be a JSON object");
  }
  m.config = *config;

  {
    const nlohmann::json* mem = f.Raw("memory");
    if (mem == nullptr) return InvalidField("memory", "memory is required");
    DSEC_ASSIGN_OR_RETURN(JsonFields mf, JsonFields::Of(*mem, "memory"));
    DSEC_ASSIGN_OR_RETURN(std::string file, mf.String("file", 64));
    if (file != kMemoryFile) {
      return InvalidField("memory.file", absl::StrCat("memory.file must be \"", kMemoryFile, "\""));
    }
    DSEC_ASSIGN_OR_RETURN(m.memory_file_bytes, mf.Uint("bytes", kPageSize, kMaxMemoryBytes));
    DSEC_ASSIGN_OR_RETURN(const nlohmann::json* regions, Array(mf, "regions", 1, kMaxRegions));
    for (size_t i = 0; i < regions->size(); ++i) {
      DSEC_ASSIGN_OR_RETURN(JsonFields rf,
                            JsonFields::Of((*regions)[i], JsonFields::ItemPath("memory.regions", i)));
      MemoryRegion r;
      DSEC_ASSIGN_OR_RETURN(r.gpa, rf.Uint("gpa", 0, uint64_t{1} << 52));
      DSEC_ASSIGN_OR_RETURN(r.size, rf.Uint("size", 0, kMaxMemoryBytes));
      DSEC_ASSIGN_OR_RETURN(r.offset, rf.Uint("offset", 0, kMaxMemoryBytes));
      DSEC_RETURN_IF_ERROR(rf.RejectUnknown());
      m.regions.push_back(r);
    }
    if (const nlohmann::json* ex = mf.Raw("extents")) {
      if (!m.parent) return InvalidField("memory.extents", "memory.extents without a parent");
      if (!ex->is_array() || ex->size() > kMaxExtents) {
        return InvalidField("memory.extents",
                            absl::StrCat("memory.extents must be a list of at most ", kMaxExtents));
      }
      uint64_t end = 0;
      for (size_t i = 0; i < ex->size(); ++i) {
        const std::string path = JsonFields::ItemPath("memory.extents", i);
        DSEC_ASSIGN_OR_RETURN(std::vector<uint64_t> t, Tuple((*ex)[i], path, 2, kMaxMemoryBytes));
        if (t[1] == 0 || t[0] % kPageSize != 0 || t[1] % kPageSize != 0 || t[0] < end ||
            t[0] + t[1] > m.memory_file_bytes) {
          return InvalidField(path, absl::StrCat(path, " must be a page-aligned run after the "
                                                       "one before it, inside the memory file"));
        }
        end = t[0] + t[1];
        m.extents.push_back({t[0], t[1]});
      }
    } else if (m.parent) {
      return InvalidField("memory.extents", "a diff snapshot needs memory.extents");
    }
    DSEC_RETURN_IF_ERROR(mf.RejectUnknown());
    DSEC_RETURN_IF_ERROR(CheckRegions(m.regions, m.memory_file_bytes));
  }

  DSEC_ASSIGN_OR_RETURN(const nlohmann::json* vcpus, Array(f, "vcpus", 1, kMaxVcpus));
  for (size_t i = 0; i < vcpus->size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(VcpuState v, ParseVcpu((*vcpus)[i], JsonFields::ItemPath("vcpus", i)));
    if (v.id != i) {
      const std::string path = JsonFields::ItemPath("vcpus", i);
      return InvalidField(path, absl::StrCat(path, ".id must be ", i));
    }
    m.vcpus.push_back(std::move(v));
  }

  DSEC_ASSIGN_OR_RETURN(const nlohmann::json* chips, Array(f, "irqchips", 3, 3));
  for (size_t i = 0; i < chips->size(); ++i) {
    const std::string path = JsonFields::ItemPath("irqchips", i);
    std::string raw;
    if (!(*chips)[i].is_string() || !absl::Base64Unescape((*chips)[i].get<std::string>(), &raw) ||
        raw.size() != kvm::IrqchipState::kSize) {
      return InvalidField(path, absl::StrCat(path, " must be base64 of ",
                                             kvm::IrqchipState::kSize, " bytes"));
    }
    kvm::IrqchipState c;
    std::memcpy(c.bytes, raw.data(), raw.size());
    uint32_t chip_id;
    std::memcpy(&chip_id, c.bytes, sizeof(chip_id));
    if (chip_id != i) {
      return InvalidField(path, absl::StrCat(path, " is chip ", chip_id, ", want chip ", i));
    }
    m.irqchips.push_back(c);
  }
  DSEC_RETURN_IF_ERROR(ReadBlob(f, "clock", &m.clock.bytes));
  const nlohmann::json* devices = f.Raw("devices");
  if (devices == nullptr || !devices->is_object()) {
    return InvalidField("devices", "devices must be a JSON object");
  }
  m.devices = *devices;
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return m;
}

std::string SerializeTouched(const std::vector<Extent>& runs_in) {
  // Within the format's bound: runs closer than a gap are joined, the gap
  // doubling until few enough are left (prefetching a few pages more is
  // harmless; a list ParseTouched refuses is not).
  std::vector<Extent> runs = runs_in;
  for (uint64_t gap = kPageSize; runs.size() > kMaxExtents; gap *= 2) {
    std::vector<Extent> joined;
    for (const Extent& e : runs) {
      if (!joined.empty() && e.offset - (joined.back().offset + joined.back().length) <= gap) {
        joined.back().length = e.offset + e.length - joined.back().offset;
      } else {
        joined.push_back(e);
      }
    }
    runs = std::move(joined);
  }
  nlohmann::json list = nlohmann::json::array();
  for (const Extent& e : runs) list.push_back({e.offset, e.length});
  return nlohmann::json{{"format", kTouchedFormatName}, {"version", kFormatVersion}, {"runs", list}}
             .dump() +
         "\n";
}

absl::StatusOr<std::vector<Extent>> ParseTouched(std::string_view bytes) {
  if (bytes.size() > kMaxTouchedBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a touched-pages list is at most ", kMaxTouchedBytes, " bytes"));
  }
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("a touched-pages list is one JSON object");
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j, ""));
  DSEC_ASSIGN_OR_RETURN(std::string format, f.String("format", 64));
  if (format != kTouchedFormatName) {
    return absl::FailedPreconditionError(
        absl::StrCat("not a touched-pages list (format \"", format, "\")"));
  }
  DSEC_ASSIGN_OR_RETURN(uint64_t version, f.Uint("version", 0, UINT32_MAX));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("touched-pages list version ", version, "; this monitor reads ", kFormatVersion));
  }
  DSEC_ASSIGN_OR_RETURN(const nlohmann::json* runs, Array(f, "runs", 0, kMaxExtents));
  std::vector<Extent> out;
  uint64_t end = 0;
  for (size_t i = 0; i < runs->size(); ++i) {
    const std::string path = JsonFields::ItemPath("runs", i);
    DSEC_ASSIGN_OR_RETURN(std::vector<uint64_t> t, Tuple((*runs)[i], path, 2, kMaxMemoryBytes));
    if (t[1] == 0 || t[0] % kPageSize != 0 || t[1] % kPageSize != 0 || t[0] < end ||
        t[0] + t[1] > kMaxMemoryBytes) {
      return InvalidField(path, absl::StrCat(path, " must be a page-aligned run after the one "
                                                   "before it, inside 1 TiB"));
    }
    end = t[0] + t[1];
    out.push_back({t[0], t[1]});
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return out;
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("open(", path, ")"));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(absl::StrCat("fstat(", path, ")"));
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file of at most ", max_bytes, " bytes"));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::pread(fd.get(), text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("read(", path, ")"));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace dsec::snapshot
