// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/nft.h"


#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/logging.h"
#include "base/subprocess.h"

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
  // nft(8) from Debian's nftables: the same parser and netlink code as
  // libnftables (which Debian ships only as a shared library, and the CLI
  // and benchmarks are static). Run once per node setup, never per sandbox.
  SpawnOptions o;
  o.argv = {"nft", commands};
  o.inherit_env = false;
  o.env = {"PATH=/usr/sbin:/sbin:/usr/bin:/bin"};
  o.err = Stdio::Capture();
  o.out = Stdio::Capture();
  o.timeout_ms = 30'000;
  absl::StatusOr<SubprocessResult> r = RunSubprocess(o);
  if (!r.ok()) {
    if (absl::IsNotFound(r.status())) {
      return absl::UnavailableError(absl::StrCat("nftables: the nft program is missing (", r.status().message(), ")"));
    }
    return r.status();
  }
  if (!r->Succeeded()) {
    const std::string why(absl::StripAsciiWhitespace(r->err));
    // No nf_tables in the kernel (or no right to use it): the node cannot
    // offer NAT, which is a host limitation, not bad input.
    if (why.find("Operation not supported") != std::string::npos ||
        why.find("Protocol not supported") != std::string::npos ||
        why.find("Operation not permitted") != std::string::npos) {
      return absl::UnavailableError(absl::StrCat("nftables: ", why));
    }
    return absl::InternalError(absl::StrCat("nftables: ", why.empty() ? r->Describe() : why));
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
