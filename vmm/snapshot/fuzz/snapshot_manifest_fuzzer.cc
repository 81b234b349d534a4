// SPDX-License-Identifier: Apache-2.0
// Feeds bytes to the snapshot manifest parser (what `dsec-monitor --restore`
// reads before it maps anything): it must return an error or a manifest,
// never crash, and what it accepts must hold the checked bounds and
// round-trip. Half the inputs are raw; the other half get a correct header
// (format, version, length, CRC) around the bytes, so that the fuzzer spends
// its time in the body's checks rather than failing the CRC.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vmm/snapshot/snapshot_format.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Exercise(std::string_view bytes) {
  absl::StatusOr<dsec::snapshot::Manifest> m = dsec::snapshot::ParseManifest(bytes);
  if (!m.ok()) {
    Check(m.status().code() == absl::StatusCode::kInvalidArgument ||
          m.status().code() == absl::StatusCode::kFailedPrecondition);
    return;
  }
  Check(!m->vcpus.empty() && m->vcpus.size() <= dsec::snapshot::kMaxVcpus);
  Check(m->irqchips.size() == 3);
  for (const auto& r : m->regions) {
    Check(r.size > 0 && r.offset + r.size <= m->memory_file_bytes);
  }
  absl::StatusOr<dsec::snapshot::Manifest> again =
      dsec::snapshot::ParseManifest(dsec::snapshot::SerializeManifest(*m));
  Check(again.ok());
  Check(again->vcpus.size() == m->vcpus.size() && again->regions.size() == m->regions.size());
}

}  // namespace

// The touched-pages list a lazy restore prefetches from: what it accepts
// is sorted, page-aligned and round-trips.
void ExerciseTouched(std::string_view bytes) {
  absl::StatusOr<std::vector<dsec::snapshot::Extent>> runs = dsec::snapshot::ParseTouched(bytes);
  if (!runs.ok()) {
    Check(runs.status().code() == absl::StatusCode::kInvalidArgument ||
          runs.status().code() == absl::StatusCode::kFailedPrecondition);
    return;
  }
  uint64_t end = 0;
  for (const auto& r : *runs) {
    Check(r.length > 0 && r.offset % 4096 == 0 && r.length % 4096 == 0 && r.offset >= end);
    end = r.offset + r.length;
  }
  absl::StatusOr<std::vector<dsec::snapshot::Extent>> again =
      dsec::snapshot::ParseTouched(dsec::snapshot::SerializeTouched(*runs));
  Check(again.ok() && again->size() == runs->size());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ExerciseTouched(in);
  if (size > 0 && (data[0] & 1)) {
    std::string_view body = in.substr(1);
    uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    Exercise(absl::StrCat(R"({"format":"dsec-vm-snapshot","version":1,"body_bytes":)",
                          body.size(), R"(,"crc32":)", crc, "}\n", std::string(body)));
  } else {
    Exercise(in);
  }
  return 0;
}
