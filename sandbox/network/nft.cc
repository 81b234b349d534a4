// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/nft.h"

#include <nftables/libnftables.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/logging.h"

namespace dsec::network {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

absl::Status RunNft(const std::string& commands) {
  struct nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return absl::InternalError("nft_ctx_new failed");
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  const int rc = nft_run_cmd_from_buffer(ctx, commands.c_str());
  std::string err = nft_ctx_get_error_buffer(ctx) ? nft_ctx_get_error_buffer(ctx) : "";
  nft_ctx_free(ctx);
  if (rc != 0) {
    const std::string why(absl::StripAsciiWhitespace(err));
    // No nf_tables in the kernel (or no right to use it): the node cannot
    // offer NAT, which is a host limitation, not bad input.
    if (why.find("Operation not supported") != std::string::npos ||
        why.find("Protocol not supported") != std::string::npos ||
        why.find("Operation not permitted") != std::string::npos) {
      return absl::UnavailableError(absl::StrCat("nftables: ", why));
    }
    return absl::InternalError(absl::StrCat("nftables: ", why.empty() ? "failed" : why));
  }
  return absl::OkStatus();
}

absl::StatusOr<NftTable> NftTable::Create(const std::string& family, const std::string& name,
                                          const std::string& body) {
  if (family != "ip" && family != "ip6" && family != "inet") {
    return absl::InvalidArgumentError(absl::StrCat("nftables family '", family, "'"));
  }
  if (!ValidName(name)) return absl::InvalidArgumentError(absl::StrCat("nftables table name '", name, "'"));
  const std::string t = absl::StrCat(family, " ", name);
  // "add" makes the delete harmless when there was no table yet.
  absl::Status s = RunNft(absl::StrCat("add table ", t, "\ndelete table ", t, "\ntable ", t, " {\n",
                                       body, "\n}\n"));
  if (!s.ok()) return s;
  return NftTable(family, name);
}

NftTable& NftTable::operator=(NftTable&& other) noexcept {
  if (this != &other) {
    Delete();
    family_ = std::move(other.family_);
    name_ = std::move(other.name_);
    other.name_.clear();
  }
  return *this;
}

NftTable::~NftTable() { Delete(); }

void NftTable::Delete() {
  if (name_.empty()) return;
  if (absl::Status s = RunNft(absl::StrCat("delete table ", family_, " ", name_)); !s.ok()) {
    DSEC_LOG(warn, "nft_table={} remove_failed={}", name_, s.ToString());
  }
  name_.clear();
}

}  // namespace dsec::network
