// SPDX-License-Identifier: Apache-2.0
// Fuzzes what the trajectory log reads back from disk (untrusted: a crash,
// a bad disk or a hostile writer may have left anything there).
// - DecodeRecord: whatever it accepts re-encodes to a record that decodes
//   identically and passes ValidateRecord.
// - TrajectoryLog::Open on arbitrary file contents (behind the real header
//   half of the time): never crashes; when it opens, the file is left on a
//   frame boundary (a second Open finds nothing to repair and the same
//   records), and an append still works.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sandbox/trajectory/log.h"
#include "sandbox/trajectory/record.h"
#include "base/file_io.h"
#include "base/logging.h"

namespace {

const std::string& Dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/dev/shm/dsec-trj-fuzz-XXXXXX";
    char* d = ::mkdtemp(tmpl);
    if (d == nullptr) __builtin_trap();
    dsec::log::SetLevel("off");
    return new std::string(d);
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = dsec::trajectory;
  if (size == 0) return 0;
  const bool with_header = data[0] & 1;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);

  auto record = t::DecodeRecord(body);
  if (record.ok()) {
    if (!t::ValidateRecord(*record).ok()) __builtin_trap();
    auto again = t::DecodeRecord(t::EncodeRecord(*record));
    if (!again.ok() || t::EncodeRecord(*again) != t::EncodeRecord(*record)) __builtin_trap();
  }

  std::string path = Dir() + "/log.trj";
  std::string contents = with_header ? std::string("DSECTRJ\x01", 8) : std::string();
  contents.append(body);
  if (!dsec::WriteFile(path, contents, 0600).ok()) __builtin_trap();
  {
    auto log = t::TrajectoryLog::Open(path, 1 << 20, nullptr);
    if (log.ok()) {
      size_t execs = (*log)->Execs().size();
      log->reset();
      auto reopened = t::TrajectoryLog::Open(path, 1 << 20, nullptr);
      if (!reopened.ok() || (*reopened)->recovery().truncated_bytes != 0 ||
          (*reopened)->Execs().size() != execs) {
        __builtin_trap();
      }
      t::ExecRequest req;
      req.argv = {"true"};
      t::ExecResult res;
      res.exit_code = 0;
      auto appended = (*reopened)->AppendExec(req, res);
      if (appended.ok() && appended->seq != execs) __builtin_trap();
    }
  }
  ::unlink(path.c_str());
  return 0;
}
