// SPDX-License-Identifier: Apache-2.0
// Front ends: other APIs served over the daemon's Service beside the node's
// own (sandbox/e2b: E2B's). They depend on the daemon, so the daemon
// cannot name them; a front end's library adds itself to dsec-vmmd (its
// CMake puts its registration file into the binary) and the daemon finds
// it in LinkedFrontEnds().
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace dsec::daemon {

class Service;

// A running front end: stopped before the sandboxes are destroyed.
class FrontEnd {
 public:
  virtual ~FrontEnd() = default;
  virtual void Stop() = 0;
};
// Started once the node API listens, with the daemon's Service.
using FrontEndStarter = std::function<absl::StatusOr<std::unique_ptr<FrontEnd>>(Service* service)>;

// How a front end joins dsec-vmmd: its flags, then (after parsing) its
// starter, or null when its flags leave it off.
class FrontEndSetup {
 public:
  virtual ~FrontEndSetup() = default;
  virtual void AddFlags(CLI::App& app) = 0;
  virtual absl::StatusOr<FrontEndStarter> Starter() = 0;
};

// One setup of each front end linked into this binary.
std::vector<std::unique_ptr<FrontEndSetup>> LinkedFrontEnds();

// A static object of a front end's registration file (constructed before
// main): adds `make` to LinkedFrontEnds.
class FrontEndRegistration {
 public:
  explicit FrontEndRegistration(std::unique_ptr<FrontEndSetup> (*make)());
};

}  // namespace dsec::daemon
