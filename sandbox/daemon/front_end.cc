// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/front_end.h"

namespace dsec::daemon {

namespace {

// Filled by static constructors, read by main: no thread exists yet.
std::vector<std::unique_ptr<FrontEndSetup> (*)()>& Makers() {
  static auto* makers = new std::vector<std::unique_ptr<FrontEndSetup> (*)()>();
  return *makers;
}

}  // namespace

FrontEndRegistration::FrontEndRegistration(std::unique_ptr<FrontEndSetup> (*make)()) { Makers().push_back(make); }

std::vector<std::unique_ptr<FrontEndSetup>> LinkedFrontEnds() {
  std::vector<std::unique_ptr<FrontEndSetup>> setups;
  for (auto make : Makers()) setups.push_back(make());
  return setups;
}

}  // namespace dsec::daemon
