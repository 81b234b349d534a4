// SPDX-License-Identifier: Apache-2.0
#include "sandbox/tier/setup.h"

#include <utility>

namespace dsec::tier {

namespace {

class NotBuilt : public TierSetup {
 public:
  NotBuilt(std::string name, std::string reason) : reason_(std::move(reason)) {
    traits_.name = std::move(name);
  }
  const TierTraits& traits() const override { return traits_; }
  void AddFlags(CLI::App&) override {}
  absl::StatusOr<std::unique_ptr<Tier>> Make() override { return absl::UnavailableError(reason_); }

 private:
  TierTraits traits_;
  std::string reason_;
};

}  // namespace

std::unique_ptr<TierSetup> NotBuiltTier(std::string name, std::string reason) {
  return std::make_unique<NotBuilt>(std::move(name), std::move(reason));
}

}  // namespace dsec::tier
