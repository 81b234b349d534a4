// SPDX-License-Identifier: Apache-2.0
// One nftables table of the node's, through Debian's nft(8): made (or
// replaced, atomically) from a ruleset text, and deleted by the owner's
// destructor.
//
// Threads: the owner's thread.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::network {

// Runs nft commands (the nft(8) language) in one transaction. The error
// carries nft's own message.
absl::Status RunNft(const std::string& commands);

class NftTable {
 public:
  // `family` "ip", "ip6" or "inet"; `name` [A-Za-z0-9_]{1,64}; `body` the
  // table's chains and rules (the text inside "table ip NAME { ... }"). A
  // table of that name is replaced in the same transaction (a daemon
  // restarted after kill -9 takes over its predecessor's table).
  static absl::StatusOr<NftTable> Create(const std::string& family, const std::string& name,
                                         const std::string& body);
  NftTable(NftTable&& other) noexcept : family_(std::move(other.family_)), name_(std::move(other.name_)) {
    other.name_.clear();
  }
  NftTable& operator=(NftTable&& other) noexcept;
  NftTable(const NftTable&) = delete;
  NftTable& operator=(const NftTable&) = delete;
  ~NftTable();

  const std::string& name() const { return name_; }

 private:
  NftTable(std::string family, std::string name) : family_(std::move(family)), name_(std::move(name)) {}
  void Delete();
  std::string family_, name_;
};

}  // namespace dsec::network
