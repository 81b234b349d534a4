// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/sha256.h"

#include "base/status.h"

namespace dsec::layers {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation failure or a libcrypto without SHA-256 is not recoverable.
  DSEC_CHECK(ctx_ != nullptr);
  DSEC_CHECK(EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(const void* data, size_t len) {
  if (len == 0) return;
  DSEC_CHECK(EVP_DigestUpdate(ctx_, data, len) == 1);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest out{};
  unsigned int len = 0;
  DSEC_CHECK(EVP_DigestFinal_ex(ctx_, out.data(), &len) == 1 && len == out.size());
  return out;
}

std::string ToHex(const uint8_t* bytes, size_t len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(len * 2, '0');
  for (size_t i = 0; i < len; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return s;
}

}  // namespace dsec::layers
