// SPDX-License-Identifier: Apache-2.0
// The node's sandbox snapshots (POST /v1/sandboxes/{id}/snapshot): one
// JSON record per snapshot in a directory of its own, each saying how to
// make a sandbox in the snapshot's state (the source's settings, with the
// layer that holds its files on top). Records are written whole (a
// temporary file, fsync, rename), so that a crash leaves a snapshot or
// none, and they outlive the daemon.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dsec::daemon {

class SnapshotStore {
 public:
  // Creates `dir` (0700) if missing.
  static absl::StatusOr<SnapshotStore> Open(const std::string& dir);

  // "snap-" and 16 lower-case hex digits; anything else is no snapshot id
  // (and never becomes a path).
  static bool ValidId(const std::string& id);
  static std::string NewId();

  // Stores `record` under record["id"]; AlreadyExists if it is taken.
  absl::Status Put(const nlohmann::json& record);
  // NotFound for an unknown (or malformed) id; DataLoss for a record that
  // is not what Put wrote.
  absl::StatusOr<nlohmann::json> Get(const std::string& id) const;
  // Every readable record, oldest first.
  std::vector<nlohmann::json> List() const;
  absl::Status Remove(const std::string& id);

 private:
  explicit SnapshotStore(std::string dir) : dir_(std::move(dir)) {}
  std::string Path(const std::string& id) const { return dir_ + "/" + id + ".json"; }
  std::string dir_;
};

}  // namespace dsec::daemon
