// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/descriptor_chain.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace dsec::virtio {

namespace {

uint64_t Sum(std::span<const GuestBuffer> buffers) {
  uint64_t total = 0;
  for (const auto& b : buffers) total += b.len;
  return total;
}

uint64_t RemainingFrom(std::span<const GuestBuffer> buffers, size_t index, uint32_t offset) {
  if (index >= buffers.size()) return 0;
  return Sum(buffers.subspan(index)) - offset;
}

absl::Status ShortChain(const char* what, uint64_t want, uint64_t have) {
  return absl::InvalidArgumentError(
      absl::StrFormat("descriptor chain too short: %s %d bytes, %d left", what, want, have));
}

// Advances (index, offset) by n bytes, then past any empty buffers, so that
// index names a buffer with bytes left (or the end). The caller checked
// n <= remaining. With n == 0 it only skips empty buffers, which is how the
// loops below step over zero-length descriptors.
void Advance(std::span<const GuestBuffer> buffers, size_t& index, uint32_t& offset, uint64_t n) {
  while (n > 0) {
    uint64_t here = buffers[index].len - offset;
    if (n < here) {
      offset += static_cast<uint32_t>(n);
      return;
    }
    n -= here;
    ++index;
    offset = 0;
  }
  // Step over empty buffers so that index points at a non-empty one or the end.
  while (index < buffers.size() && buffers[index].len == offset) {
    ++index;
    offset = 0;
  }
}

std::vector<GuestBuffer> Take(std::span<const GuestBuffer> buffers, size_t& index,
                              uint32_t& offset, uint64_t max) {
  std::vector<GuestBuffer> out;
  while (max > 0 && index < buffers.size()) {
    uint64_t here = std::min<uint64_t>(buffers[index].len - offset, max);
    if (here > 0) out.push_back({buffers[index].gpa + offset, static_cast<uint32_t>(here)});
    max -= here;
    Advance(buffers, index, offset, here);
  }
  return out;
}

}  // namespace

uint64_t DescriptorChain::ReadableBytes() const { return Sum(readable); }
uint64_t DescriptorChain::WritableBytes() const { return Sum(writable); }

absl::Status ChainReader::Read(std::span<uint8_t> out) {
  uint64_t remaining = Remaining();
  if (out.size() > remaining) return ShortChain("reading", out.size(), remaining);
  size_t index = index_;
  uint32_t offset = offset_;
  uint64_t done = 0;
  while (done < out.size()) {
    const GuestBuffer& b = buffers_[index];
    uint64_t n = std::min<uint64_t>(b.len - offset, out.size() - done);
    if (n > 0) {
      absl::Status s = memory_.Read(b.gpa + offset, out.subspan(done, n));
      if (!s.ok()) return s;
    }
    done += n;
    Advance(buffers_, index, offset, n);
  }
  index_ = index;
  offset_ = offset;
  return absl::OkStatus();
}

absl::Status ChainReader::Skip(uint64_t n) {
  uint64_t remaining = Remaining();
  if (n > remaining) return ShortChain("skipping", n, remaining);
  Advance(buffers_, index_, offset_, n);
  return absl::OkStatus();
}

uint64_t ChainReader::Remaining() const { return RemainingFrom(buffers_, index_, offset_); }

std::vector<GuestBuffer> ChainReader::TakeRanges(uint64_t max) {
  return Take(buffers_, index_, offset_, max);
}

absl::Status ChainWriter::Write(std::span<const uint8_t> in) {
  uint64_t remaining = Remaining();
  if (in.size() > remaining) return ShortChain("writing", in.size(), remaining);
  // Check every target range first so that a failure writes nothing.
  {
    size_t index = index_;
    uint32_t offset = offset_;
    uint64_t done = 0;
    while (done < in.size()) {
      const GuestBuffer& b = buffers_[index];
      uint64_t n = std::min<uint64_t>(b.len - offset, in.size() - done);
      if (n > 0 && !memory_.IsValidRange(b.gpa + offset, n)) {
        return absl::InvalidArgumentError("descriptor buffer outside guest memory");
      }
      done += n;
      Advance(buffers_, index, offset, n);
    }
  }
  uint64_t done = 0;
  while (done < in.size()) {
    const GuestBuffer& b = buffers_[index_];
    uint64_t n = std::min<uint64_t>(b.len - offset_, in.size() - done);
    if (n > 0) {
      absl::Status s = memory_.Write(b.gpa + offset_, in.subspan(done, n));
      if (!s.ok()) return s;
    }
    done += n;
    Advance(buffers_, index_, offset_, n);
  }
  written_ += in.size();
  return absl::OkStatus();
}

absl::Status ChainWriter::Skip(uint64_t n) {
  uint64_t remaining = Remaining();
  if (n > remaining) return ShortChain("skipping", n, remaining);
  Advance(buffers_, index_, offset_, n);
  written_ += n;
  return absl::OkStatus();
}

uint64_t ChainWriter::Remaining() const { return RemainingFrom(buffers_, index_, offset_); }

std::vector<GuestBuffer> ChainWriter::TakeRanges(uint64_t max) {
  uint64_t before = Remaining();
  auto out = Take(buffers_, index_, offset_, max);
  written_ += before - Remaining();
  return out;
}

}  // namespace dsec::virtio
