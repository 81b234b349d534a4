// SPDX-License-Identifier: Apache-2.0
// Sandbox snapshots through the API: POST /v1/sandboxes/{id}/snapshot,
// GET/DELETE /v1/snapshots[/{id}], and create with {"snapshot": id}.
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
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
    "not carried: the snapshot holds the sandbox's files (a sandbox made from it starts with no processes)";
constexpr char kMachine[] =
    "carried: the snapshot holds the sandbox's whole machine (memory, CPUs, devices); a sandbox made from "
    "it continues from that point, its processes included";

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

// Removes the tags that kept a machine snapshot's images from `layer gc`.
void Unpin(layers::LayerStore& store, const json& pins, const std::string& snapshot_id) {
  if (!pins.is_array()) return;
  for (const json& tag : pins) {
    if (!tag.is_string()) continue;
    absl::Status s = store.Untag(tag.get<std::string>());
    if (!s.ok() && !absl::IsNotFound(s)) {
      DSEC_LOG(warn, "daemon: snapshot {}: untagging {}: {}", snapshot_id, tag.get<std::string>(), s.ToString());
    }
  }
}

}  // namespace

void Service::RemoveUnrecordedMachines() {
  // Saved machines no snapshot record names: a fork's (its children are
  // gone with the daemon that made them) or a snapshot's whose record was
  // never written. A record that cannot be read keeps its machine.
  absl::StatusOr<SnapshotStore> records = SnapshotStore::Open(options_.snapshot_dir);
  if (!records.ok()) return;
  std::error_code ec;
  std::filesystem::directory_iterator it(MachineDir(""), ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "staging" || !absl::IsNotFound(records->Get(name).status())) continue;
    std::error_code rm;
    std::filesystem::remove_all(it->path(), rm);
    DSEC_LOG(info, "daemon: removed the saved machine {}, which no snapshot names{}", name,
             rm ? absl::StrCat(" (partly: ", rm.message(), ")") : "");
  }
  // Likewise the pins of such snapshots (pin-<snapshot id>:image-<i>; a
  // tag whose name is not "pin-" and a snapshot id is someone else's).
  if (options_.layer_store.empty()) return;
  absl::StatusOr<layers::LayerStore> store = layers::LayerStore::Create(options_.layer_store);
  absl::StatusOr<std::vector<layers::LayerInfo>> all =
      store.ok() ? store->List() : absl::StatusOr<std::vector<layers::LayerInfo>>(store.status());
  if (!all.ok()) return;
  for (const layers::LayerInfo& l : *all) {
    for (const std::string& tag : l.tags) {
      const size_t colon = tag.find(':');
      const size_t prefix = std::char_traits<char>::length(layers::kPinTagPrefix);
      if (tag.rfind(layers::kPinTagPrefix, 0) != 0 || colon == std::string::npos) continue;
      const std::string snapshot_id = tag.substr(prefix, colon - prefix);
      if (!SnapshotStore::ValidId(snapshot_id) || !absl::IsNotFound(records->Get(snapshot_id).status())) continue;
      if (absl::Status s = store->Untag(tag); !s.ok()) {
        DSEC_LOG(warn, "daemon: untagging {}, which no snapshot names: {}", tag, s.ToString());
      }
    }
  }
}

absl::StatusOr<json> Service::Snapshot(const std::string& id, const json& body) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  const tier::TierTraits& traits = registry_.traits(e->tier);
  if (!traits.persistent_files) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", traits.name, " tier keeps no state between calls: there is nothing to snapshot"));
  }
  DSEC_ASSIGN_OR_RETURN(SnapshotStore snapshots, OpenStore(options_.snapshot_dir));
  const std::string snapshot_id = SnapshotStore::NewId();
  const std::string name = absl::StrCat("snapshot-", id);
  const std::string version = snapshot_id.substr(5);
  std::string tag;
  std::optional<layers::LayerStore> store;
  json record;
  bool reused = false;
  SavedMachine machine;
  {
    OpsGuard lock = OpsLock(*e);
    if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    if (e->replayer && !e->replayer->live()) {
      return absl::FailedPreconditionError(
          "the sandbox is replaying its task: a snapshot can be taken once an exec has gone live");
    }
    // The whole machine where the tier can; else the files, packed into a
    // layer.
    machine = SaveMachineLocked(*e, snapshot_id);
    record = json{{"id", snapshot_id},
                  {"source", id},
                  {"tier", registry_.name(e->tier)},
                  {"created_unix_ms", NowMs()}};
    if (!machine.dir.empty()) {
      record["captured"] = "machine";
      record["processes"] = kMachine;
      record["memory_bytes"] = machine.saved.memory_bytes;
      record["size_bytes"] = machine.saved.memory_bytes_written;
      record["pause_ms"] = machine.saved.pause_ms;
      record["layer"] = nullptr;
      // The exact images its guest maps (a tag may move meanwhile), each
      // tagged in the layer store so that `layer gc` keeps it while the
      // snapshot lives.
      record["images"] = e->images;
      record["create"] = CloneBody(*e, "");
      json pins = json::array();
      if (!options_.layer_store.empty()) {
        absl::Status pinned = [&]() -> absl::Status {
          DSEC_ASSIGN_OR_RETURN(layers::LayerStore s, layers::LayerStore::Create(options_.layer_store));
          store = std::move(s);
          for (size_t i = 0; i < e->images.size(); ++i) {
            const std::string digest = store->DigestOfImage(e->images[i]);
            if (digest.empty()) continue;
            const std::string pin = absl::StrCat(layers::kPinTagPrefix, snapshot_id);
            const std::string version = absl::StrCat("image-", i);
            DSEC_RETURN_IF_ERROR(store->Tag(digest, pin, version));
            pins.push_back(absl::StrCat(pin, ":", version));
          }
          return absl::OkStatus();
        }();
        if (!pinned.ok()) {
          if (store) Unpin(*store, pins, snapshot_id);
          std::error_code ec;
          std::filesystem::remove_all(machine.dir, ec);
          return HostFailure("snapshot (keeping its images from layer gc)", id, pinned);
        }
      }
      record["pins"] = pins;
    } else {
      if (options_.layer_store.empty()) {
        return absl::UnavailableError("this daemon has no layer store (a snapshot packs the sandbox's files into one)");
      }
      DSEC_ASSIGN_OR_RETURN(layers::LayerStore s, layers::LayerStore::Create(options_.layer_store));
      store = std::move(s);
      DSEC_ASSIGN_OR_RETURN(layers::BuildResult built, PackLocked(*e, *store, name, version));
      reused = built.reused;
      tag = absl::StrCat(name, ":", version);
      record["captured"] = "files";
      record["processes"] = absl::StrCat(kFilesOnly, ": ", machine.refused);
      record["layer"] = tag;
      // Pinned like a machine's images, so that a `layer rm` of the tag
      // cannot take the files from under the snapshot.
      const std::string pin = absl::StrCat(layers::kPinTagPrefix, snapshot_id);
      if (absl::Status s = store->Tag(built.layer.digest, pin, "layer"); !s.ok()) {
        if (absl::Status u = reused ? store->Untag(tag) : store->Remove(tag); !u.ok()) {
          DSEC_LOG(warn, "daemon: snapshot of {}: removing {}: {}", id, tag, u.ToString());
        }
        return HostFailure("snapshot (keeping its layer from layer rm and gc)", id, s);
      }
      record["pins"] = json::array({absl::StrCat(pin, ":layer")});
      record["digest"] = built.layer.digest;
      record["size_bytes"] = built.layer.size;
      record["create"] = CloneBody(*e, tag);
    }
  }
  if (absl::Status s = snapshots.Put(record); !s.ok()) {
    std::error_code ec;
    if (!machine.dir.empty()) std::filesystem::remove_all(machine.dir, ec);
    if (store && record.contains("pins")) Unpin(*store, record["pins"], snapshot_id);
    if (!tag.empty()) {
      if (absl::Status u = reused ? store->Untag(tag) : store->Remove(tag); !u.ok()) {
        DSEC_LOG(warn, "daemon: snapshot of {}: removing {}: {}", id, tag, u.ToString());
      }
    }
    return s;
  }
  DSEC_LOG(info, "daemon: sandbox={} snapshot={} ({})", id, snapshot_id,
           machine.dir.empty() ? absl::StrCat("layer ", tag) : std::string("machine"));
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
  if (record.value("captured", "") == "machine") {
    std::error_code ec;
    std::filesystem::remove_all(MachineDir(snapshot_id), ec);
    if (ec) DSEC_LOG(warn, "daemon: snapshot {} removed; its machine stays: {}", snapshot_id, ec.message());
  }
  const std::string tag = record["layer"].is_string() ? record["layer"].get<std::string>() : "";
  const bool pinned = record.contains("pins") && record["pins"].is_array() && !record["pins"].empty();
  if ((!tag.empty() || pinned) && !options_.layer_store.empty()) {
    absl::StatusOr<layers::LayerStore> store = layers::LayerStore::Create(options_.layer_store);
    absl::Status s = !store.ok() ? store.status() : tag.empty() ? absl::OkStatus() : store->Untag(tag);
    if (!s.ok() && !absl::IsNotFound(s)) {
      DSEC_LOG(warn, "daemon: snapshot {} removed; its layer tag {} stays: {}", snapshot_id, tag,
               s.ToString());
    }
    if (store.ok() && pinned) Unpin(*store, record["pins"], snapshot_id);
  }
  return absl::OkStatus();
}

absl::StatusOr<json> Service::FromSnapshot(const json& body, std::optional<MachineSource>* machine) const {
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
  if (record->value("captured", "") == "machine") {
    MachineSource m;
    m.dir = MachineDir(sid.get<std::string>());
    const json& images = (*record)["images"];
    if (!images.is_array() || images.empty()) {
      return absl::DataLossError(absl::StrCat("snapshot ", sid.get<std::string>(), ": its record names no images"));
    }
    for (const json& i : images) {
      if (!i.is_string()) {
        return absl::DataLossError(absl::StrCat("snapshot ", sid.get<std::string>(), ": a malformed image"));
      }
      m.images.push_back(i.get<std::string>());
    }
    *machine = std::move(m);
  }
  for (const char* k : kCreateOverrides) {
    if (body.contains(k)) made[k] = body[k];
  }
  return made;
}

}  // namespace dsec::daemon
