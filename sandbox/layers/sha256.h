// SPDX-License-Identifier: Apache-2.0
// SHA-256 over OpenSSL's EVP interface (libcrypto), the one hash the layer
// store uses for tree digests.
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsec::layers {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Single-threaded use; a hasher is finished once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t len);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  Sha256Digest Finish();

 private:
  EVP_MD_CTX* ctx_;
};

// Lower-case hex of `bytes`.
std::string ToHex(const uint8_t* bytes, size_t len);
inline std::string ToHex(const Sha256Digest& d) { return ToHex(d.data(), d.size()); }

}  // namespace dsec::layers
