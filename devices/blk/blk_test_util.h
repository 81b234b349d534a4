// SPDX-License-Identifier: Apache-2.0
// Test helpers for devices/blk: a temporary image file that removes itself,
// and running an event loop until a condition holds (with a deadline, no
// sleeps).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "base/clock.h"
#include "base/event_loop.h"
#include "base/scoped_fd.h"

namespace dsec::devices::testing {

// A file of `size` bytes filled with `fill`, in a fresh directory under
// $TMPDIR (or /tmp); both are removed by the destructor.
class TempImage {
 public:
  explicit TempImage(uint64_t size, uint8_t fill = 0) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr ? tmp : "/tmp") + "/dsec-blk-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    dir_ = buf.data();
    path_ = dir_ + "/disk.img";
    std::vector<uint8_t> bytes(size, fill);
    ScopedFd fd(::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    if (!fd.valid() ||
        ::write(fd.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      ADD_FAILURE() << "cannot create " << path_;
    }
  }
  ~TempImage() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  TempImage(const TempImage&) = delete;
  TempImage& operator=(const TempImage&) = delete;

  const std::string& path() const { return path_; }

  std::vector<uint8_t> ReadAll() const {
    std::vector<uint8_t> out;
    ScopedFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return out;
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) return out;
    out.resize(static_cast<size_t>(st.st_size));
    if (::pread(fd.get(), out.data(), out.size(), 0) != static_cast<ssize_t>(out.size())) {
      out.clear();
    }
    return out;
  }

 private:
  std::string dir_;
  std::string path_;
};

// Runs `loop` until `done()` holds or 10 s pass; returns done().
inline bool RunUntil(EventLoop& loop, const std::function<bool()>& done) {
  const int64_t deadline = MonotonicClock::Get().NowNs() + 10'000'000'000;
  while (!done()) {
    if (MonotonicClock::Get().NowNs() > deadline) return false;
    if (!loop.RunOnce(100).ok()) return false;
  }
  return true;
}

}  // namespace dsec::devices::testing
