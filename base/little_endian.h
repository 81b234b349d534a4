// SPDX-License-Identifier: Apache-2.0
// Little-endian integers in byte buffers: wire formats (the guest agent's
// and fncall's frames, the trajectory log), on-disk formats (EROFS, swap
// headers) and device register windows. Byte by byte, so any alignment and
// any host byte order work; compilers turn the loops into one load/store.
// Header-only and allocation-free except the Append* functions: safe in a
// child between fork/clone and exec, and in the static guest agent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace dsec {

inline uint16_t LoadLe16(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return static_cast<uint16_t>(b[0] | b[1] << 8);
}

inline uint32_t LoadLe32(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
         static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
}

inline uint64_t LoadLe64(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return static_cast<uint64_t>(LoadLe32(b)) | static_cast<uint64_t>(LoadLe32(b + 4)) << 32;
}

inline void StoreLe16(void* p, uint16_t v) {
  auto* b = static_cast<uint8_t*>(p);
  b[0] = static_cast<uint8_t>(v);
  b[1] = static_cast<uint8_t>(v >> 8);
}

inline void StoreLe32(void* p, uint32_t v) {
  auto* b = static_cast<uint8_t*>(p);
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void StoreLe64(void* p, uint64_t v) {
  auto* b = static_cast<uint8_t*>(p);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void AppendLe32(std::string* out, uint32_t v) {
  char b[4];
  StoreLe32(b, v);
  out->append(b, sizeof(b));
}

inline void AppendLe64(std::string* out, uint64_t v) {
  char b[8];
  StoreLe64(b, v);
  out->append(b, sizeof(b));
}

// Bytes [offset, offset + data.size()) of a little-endian register of
// `width` bytes (at most 8) holding `value`: what a guest access of any
// size at any offset into the register reads. Bytes beyond the register
// read 0.
inline void ReadLeWindow(uint64_t value, size_t width, uint64_t offset, std::span<uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    data[i] = at < width ? static_cast<uint8_t>(value >> (8 * at)) : 0;
  }
}

// `value` with bytes [offset, offset + data.size()) of its `width`-byte
// little-endian form replaced by `data` (a guest write of any size at any
// offset); bytes beyond the register are dropped.
inline uint64_t WriteLeWindow(uint64_t value, size_t width, uint64_t offset,
                              std::span<const uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    if (at >= width) continue;
    value &= ~(uint64_t{0xff} << (8 * at));
    value |= uint64_t{data[i]} << (8 * at);
  }
  return value;
}

// The whole of `data` (1 to 8 bytes) as a little-endian value, and back.
inline uint64_t LoadLe(std::span<const uint8_t> data) { return WriteLeWindow(0, 8, 0, data); }
inline void StoreLe(uint64_t value, std::span<uint8_t> data) { ReadLeWindow(value, 8, 0, data); }

}  // namespace dsec
