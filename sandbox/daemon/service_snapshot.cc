// SPDX-License-Identifier: Apache-2.0
// Sandbox snapshots through the API: POST /v1/sandboxes/{id}/snapshot,
// GET/DELETE /v1/snapshots[/{id}], and create with {"snapshot": id}.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/daemon/service.h"
#include "sandbox/daemon/service_internal.h"
#include "sandbox/daemon/snapshot_store.h"
#include "sandbox/layers/layer_store.h"

namespace dsec::daemon {

using json = nlohmann::json;

namespace {

constexpr char kFilesOnly[] =
    "not carried: a snapshot holds the file system only (a sandbox made from it starts with no "
    "processes; checkpointing processes with CRIU is not built)";

// What a create with "snapshot" may set besides it: the sandbox's own life
// and task. Everything that decides its contents comes from the snapshot.
constexpr const char* kCreateOverrides[] = {"ttl_s", "task_id"};

absl::StatusOr<SnapshotStore> OpenStore(const std::string& dir) {
  if (dir.empty()) {
    return absl::UnavailableError("this daemon keeps no snapshots (it was started without a snapshot directory)");
  }
  return SnapshotStore::Open(dir);
}

json Summary(const json& record) {
  json s = record;
  s.erase("create");
  return s;
}

}  // namespace

absl::StatusOr<json> Service::Snapshot(const std::string& id, const json& body) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  const tier::TierTraits& traits = registry_.traits(e->tier);
  if (!traits.persistent_files) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", traits.name, " tier keeps no state between calls: there is nothing to snapshot"));
  }
  if (options_.layer_store.empty()) {
    return absl::UnavailableError("this daemon has no layer store (a snapshot packs the sandbox's files into one)");
  }
  DSEC_ASSIGN_OR_RETURN(SnapshotStore snapshots, OpenStore(options_.snapshot_dir));
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  const std::string snapshot_id = SnapshotStore::NewId();
  const std::string name = absl::StrCat("snapshot-", id);
  const std::string version = snapshot_id.substr(5);
  const std::string tag = absl::StrCat(name, ":", version);
  json record;
  bool reused = false;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    if (e->replayer && !e->replayer->live()) {
      return absl::FailedPreconditionError(
          "the sandbox is replaying its task: a snapshot can be taken once an exec has gone live");
    }
    DSEC_ASSIGN_OR_RETURN(layers::BuildResult built, PackLocked(*e, store, name, version));
    reused = built.reused;
    record = json{{"id", snapshot_id},
                  {"source", id},
                  {"tier", registry_.name(e->tier)},
                  {"layer", tag},
                  {"digest", built.layer.digest},
                  {"size_bytes", built.layer.size},
                  {"created_unix_ms", NowMs()},
                  {"captured", "files"},
                  {"processes", kFilesOnly},
                  {"create", CloneBody(*e, tag)}};
  }
  if (absl::Status s = snapshots.Put(record); !s.ok()) {
    if (absl::Status u = reused ? store.Untag(tag) : store.Remove(tag); !u.ok()) {
      DSEC_LOG(warn, "daemon: snapshot of {}: removing {}: {}", id, tag, u.ToString());
    }
    return s;
  }
  DSEC_LOG(info, "daemon: sandbox={} snapshot={} (layer {})", id, snapshot_id, tag);
  return Summary(record);
}

absl::StatusOr<json> Service::ListSnapshots() const {
  DSEC_ASSIGN_OR_RETURN(SnapshotStore snapshots, OpenStore(options_.snapshot_dir));
  json list = json::array();
  for (const json& r : snapshots.List()) list.push_back(Summary(r));
  return json{{"snapshots", list}};
}

absl::StatusOr<json> Service::GetSnapshot(const std::string& snapshot_id) const {
  DSEC_ASSIGN_OR_RETURN(SnapshotStore snapshots, OpenStore(options_.snapshot_dir));
  DSEC_ASSIGN_OR_RETURN(json record, snapshots.Get(snapshot_id));
  return Summary(record);
}

absl::Status Service::DeleteSnapshot(const std::string& snapshot_id) {
  DSEC_ASSIGN_OR_RETURN(SnapshotStore snapshots, OpenStore(options_.snapshot_dir));
  DSEC_ASSIGN_OR_RETURN(json record, snapshots.Get(snapshot_id));
  DSEC_RETURN_IF_ERROR(snapshots.Remove(snapshot_id));
  const std::string tag = record.value("layer", "");
  if (!tag.empty() && !options_.layer_store.empty()) {
    absl::StatusOr<layers::LayerStore> store = layers::LayerStore::Create(options_.layer_store);
    absl::Status s = store.ok() ? store->Untag(tag) : store.status();
    if (!s.ok() && !absl::IsNotFound(s)) {
      DSEC_LOG(warn, "daemon: snapshot {} removed; its layer tag {} stays: {}", snapshot_id, tag,
               s.ToString());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<json> Service::FromSnapshot(const json& body) const {
  const json& sid = body["snapshot"];
  if (!sid.is_string()) return InvalidField("snapshot", "snapshot must be a snapshot id (a string)");
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() == "snapshot") continue;
    bool allowed = false;
    for (const char* k : kCreateOverrides) allowed = allowed || it.key() == k;
    if (!allowed) {
      return InvalidField(it.key(), absl::StrCat(it.key(), " cannot be given with snapshot (the "
                                                           "snapshot decides it; ttl_s and task_id "
                                                           "may be)"));
    }
  }
  DSEC_ASSIGN_OR_RETURN(SnapshotStore snapshots, OpenStore(options_.snapshot_dir));
  absl::StatusOr<json> record = snapshots.Get(sid.get<std::string>());
  if (!record.ok()) {
    if (absl::IsNotFound(record.status())) {
      return InvalidField("snapshot", absl::StrCat("no snapshot ", sid.get<std::string>()));
    }
    return record.status();
  }
  json made = (*record)["create"];
  for (const char* k : kCreateOverrides) {
    if (body.contains(k)) made[k] = body[k];
  }
  return made;
}

}  // namespace dsec::daemon
