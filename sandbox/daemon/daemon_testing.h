// SPDX-License-Identifier: Apache-2.0
// Test support for the daemon: a busybox layer in a temporary layer store,
// a layer resolver over it, and an HTTP client on a unix socket.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sandbox/daemon/service.h"

namespace dsec::daemon::testing {

// Builds a busybox tree and stores it as bb:1 in `store_root`.
absl::Status BuildBusyboxLayer(const std::string& store_root, const std::string& work_dir);
// refs -> store chains (bottom first); the tiers' default layers map to
// what tests build: base:bookworm -> bb:1 (none for fncall, whose image is
// a whole root), python:1 -> `fncall_image`.
LayerResolver StoreResolver(const std::string& store_root, const std::string& fncall_image);

std::unique_ptr<httplib::Client> UnixClient(const std::string& socket_path);
// Body as JSON (null on parse failure).
nlohmann::json JsonOf(const httplib::Result& r);

}  // namespace dsec::daemon::testing
