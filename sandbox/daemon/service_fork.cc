// SPDX-License-Identifier: Apache-2.0
// POST /v1/sandboxes/{id}/fork: many sandboxes from one file-system state.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/daemon/requests.h"
#include "sandbox/daemon/service.h"
#include "sandbox/daemon/service_internal.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/network/policy.h"
#include "sandbox/trajectory/log.h"
#include "sandbox/trajectory/record.h"

namespace dsec::daemon {

using json = nlohmann::json;

namespace {

// Children a fork makes at once.
constexpr size_t kForkCreatesAtOnce = 4;

// Distinguishes forks of one source within one millisecond.
std::atomic<uint64_t> g_fork_seq{0};

constexpr char kProcessesNotCarried[] =
    "not carried: the children have the source's files and no processes";
constexpr char kProcessesCarried[] =
    "carried: each child continues from the source's saved machine (memory, CPUs, devices), "
    "its processes included";

}  // namespace

json Service::CloneBody(const Entry& e, const std::string& extra_layer) const {
  json b = json::object();
  b["tier"] = registry_.name(e.tier);
  std::vector<std::string> layers = e.layers;
  if (!extra_layer.empty()) layers.push_back(extra_layer);
  b["layers"] = layers;
  if (e.cpus > 0) b["cpus"] = e.cpus;
  b["memory_mib"] = e.memory_mib;
  b["pids"] = e.pids;
  if (!e.qos.empty()) b["qos"] = e.qos;
  if (e.options.is_object()) {
    for (const auto& [key, value] : e.options.items()) b[key] = value;
  }
  // The policy in force now (a PATCH replaces the create-time one).
  if (std::shared_ptr<const network::NetworkSpec> spec = e.NetworkSpec()) {
    b["network"] = network::NetworkSpecJson(*spec);
  }
  return b;
}

namespace {

// A child's log: the source's trajectory up to the fork (its execs, each
// with its recorded result, and its checkpoints, in order), then a
// checkpoint at the fork point naming the fork's layer, so that a resumed
// child replays the source's prefix and goes live on the forked files.
absl::Status WriteChildLog(trajectory::TrajectoryLog& log, const std::vector<trajectory::Record>& execs,
                           const std::vector<trajectory::Record>& checkpoints, const std::string& layer) {
  if (log.next_seq() != 0 || !log.Checkpoints().empty()) {
    return absl::AlreadyExistsError("the task already has a trajectory");
  }
  auto checkpoints_at = [&](uint64_t seq) -> absl::Status {
    for (const trajectory::Record& c : checkpoints) {
      if (c.seq == seq) DSEC_RETURN_IF_ERROR(log.AppendCheckpoint(seq, c.layer));
    }
    return absl::OkStatus();
  };
  for (uint64_t k = 0; k < execs.size(); ++k) {
    DSEC_RETURN_IF_ERROR(checkpoints_at(k));
    DSEC_RETURN_IF_ERROR(log.AppendExec(execs[k].request, execs[k].result).status());
  }
  DSEC_RETURN_IF_ERROR(checkpoints_at(execs.size()));
  return log.AppendCheckpoint(execs.size(), layer);
}

}  // namespace

absl::StatusOr<json> Service::Fork(const std::string& id, const json& body) {
  DSEC_ASSIGN_OR_RETURN(ForkRequest fork,
                        ParseForkRequest(body, RequestLimits{options_.max_ttl_s, options_.max_timeout_s}));
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  const tier::TierTraits& traits = registry_.traits(e->tier);
  if (!traits.persistent_files) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", traits.name, " tier keeps no state between calls: there is nothing to fork"));
  }
  if (!fork.task_ids.empty() && !trajectories_) {
    return absl::UnavailableError("this daemon has no trajectory store (task_ids)");
  }
  const size_t count = static_cast<size_t>(fork.count);
  std::optional<layers::LayerStore> store;
  if (!options_.layer_store.empty()) {
    DSEC_ASSIGN_OR_RETURN(layers::LayerStore s, layers::LayerStore::Create(options_.layer_store));
    store = std::move(s);
  }

  // 1. The source, saved once (frozen while it is read, then running on):
  //    its whole machine where the tier can, so that the children continue
  //    from this point with its processes; its writable layer packed into
  //    a layer where not, and for the children's trajectories (their
  //    checkpoint at the fork point).
  const std::string name = absl::StrCat("fork-", id);
  const std::string version = absl::StrCat(NowMs(), "-", g_fork_seq.fetch_add(1));
  std::string tag;
  SavedMachine machine;
  MachineSource source;
  json base;
  bool reused = false;
  std::vector<trajectory::Record> parent_execs, parent_checkpoints;
  double files_pause_ms = 0;  // how long the source stood still for the pack
  auto drop_machine = [&machine] {
    std::error_code ec;
    if (!machine.dir.empty()) std::filesystem::remove_all(machine.dir, ec);
  };
  {
    OpsGuard lock = OpsLock(*e);
    if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    if (e->replayer && !e->replayer->live()) {
      return absl::FailedPreconditionError(
          "the sandbox is replaying its task: a fork can be made once an exec has gone live");
    }
    machine = SaveMachineLocked(*e, absl::StrCat(name, "-", version));
    if (machine.dir.empty() || !fork.task_ids.empty()) {
      if (!store) {
        drop_machine();
        return absl::UnavailableError("this daemon has no layer store (a fork packs the source's files into one)");
      }
      // The children's shells can be made while the files are packed.
      if (machine.dir.empty()) registry_.tier(e->tier).ExpectCreates(count, e->options, e->qos);
      absl::StatusOr<layers::BuildResult> built = PackLocked(*e, *store, name, version, &files_pause_ms);
      if (!built.ok()) {
        drop_machine();
        return built.status();
      }
      // The same files as a layer already stored: that layer, tagged once
      // more (and never removed by a failed fork: others may stand on it).
      reused = built->reused;
      tag = absl::StrCat(name, ":", version);
    }
    // A machine's children have its files in their memory: the source's
    // layers only, its very images.
    base = CloneBody(*e, machine.dir.empty() ? tag : "");
    source = MachineSource{machine.dir, e->images};
    // The source's trajectory so far, for the children's logs.
    if (!fork.task_ids.empty() && e->task_id) {
      absl::StatusOr<trajectory::TrajectoryLog*> log = trajectories_->Get(*e->task_id);
      if (!log.ok()) {
        drop_machine();
        return log.status();
      }
      parent_execs = (*log)->Execs();
      parent_checkpoints = (*log)->Checkpoints();
    }
  }
  if (fork.ttl_s) base["ttl_s"] = *fork.ttl_s;

  // 2. The children: restored from the machine (its memory mapped copy-on-
  //    write by each), or each with a fresh writable layer over the source's
  //    layers and the packed one. All or none: a child that cannot be made
  //    takes the ones made before it back.
  std::vector<std::shared_ptr<Entry>> made(count);
  std::vector<absl::Status> failures(count);
  std::vector<char> log_written(count, 0);
  auto make_child = [&](size_t i) {
    json child_body = base;
    if (!fork.task_ids.empty()) child_body["task_id"] = fork.task_ids[i];
    absl::StatusOr<std::shared_ptr<Entry>> child =
        CreateEntry(child_body, std::nullopt, machine.dir.empty() ? nullptr : &source);
    if (!child.ok()) {
      failures[i] = child.status();
      return;
    }
    made[i] = *std::move(child);
    if (fork.task_ids.empty()) return;
    // The child's log, before anything can append to it.
    std::lock_guard<std::shared_mutex> lock(made[i]->mu);
    absl::StatusOr<trajectory::TrajectoryLog*> log = trajectories_->Get(fork.task_ids[i]);
    absl::Status s = log.ok() ? WriteChildLog(**log, parent_execs, parent_checkpoints, tag) : log.status();
    // A log partly written goes too; one that was there before stays.
    if (s.ok() || !absl::IsAlreadyExists(s)) log_written[i] = 1;
    if (!s.ok()) failures[i] = Annotate(s, absl::StrCat("task_ids[", i, "] ", fork.task_ids[i]));
  };
  // Made side by side: a create mostly waits (for its init, its cgroups'
  // migration, the kernel's grace periods), so a few at once overlap.
  // After a failure no further child is started.
  {
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    auto worker = [&] {
      for (size_t i; !stop.load() && (i = next.fetch_add(1)) < count;) {
        make_child(i);
        if (!failures[i].ok()) stop.store(true);
      }
    };
    std::vector<std::thread> helpers;
    for (size_t w = 1; w < std::min(count, kForkCreatesAtOnce); ++w) helpers.emplace_back(worker);
    worker();
    for (std::thread& t : helpers) t.join();
  }
  size_t failed_at = count;
  for (size_t i = 0; i < count && failed_at == count; ++i) {
    if (!failures[i].ok()) failed_at = i;
  }
  if (failed_at < count) {
    // All or none: the children made are taken back.
    for (const std::shared_ptr<Entry>& c : made) {
      if (c) (void)Delete(c->id);
    }
    for (size_t i = 0; i < count; ++i) {
      if (!log_written[i]) continue;
      if (absl::Status s = trajectories_->Remove(fork.task_ids[i]); !s.ok()) {
        DSEC_LOG(warn, "daemon: fork of {}: removing the log of {}: {}", id, fork.task_ids[i], s.ToString());
      }
    }
    drop_machine();
    // The layer goes with the fork; one reused (stored before, others
    // may stand on it) only loses this fork's tag.
    if (!tag.empty()) {
      if (absl::Status s = reused ? store->Untag(tag) : store->Remove(tag); !s.ok()) {
        DSEC_LOG(warn, "daemon: fork of {}: removing {}: {}", id, tag, s.ToString());
      }
    }
    return Annotate(failures[failed_at],
                    absl::StrCat("fork of ", id, ": child ", failed_at + 1, " of ", fork.count));
  }
  std::vector<std::shared_ptr<Entry>> children = std::move(made);
  // The children mapped the saved memory when they started: the files can
  // go (the pages stay theirs and shared, in the page cache).
  drop_machine();
  DSEC_LOG(info, "daemon: sandbox={} forked into {} ({})", id, children.size(),
           machine.dir.empty() ? absl::StrCat("layer ", tag) : std::string("machine"));
  json list = json::array();
  for (const std::shared_ptr<Entry>& c : children) list.push_back(Describe(*c));
  json answer{{"source", id},
              {"layer", tag.empty() ? json(nullptr) : json(tag)},
              {"fork_seq", parent_execs.size()},
              {"sandboxes", list}};
  if (machine.dir.empty()) {
    answer["forked"] = "files";
    answer["processes"] = absl::StrCat(kProcessesNotCarried, ": ", machine.refused);
    answer["pause_ms"] = files_pause_ms;
  } else {
    answer["forked"] = "machine";
    answer["processes"] = kProcessesCarried;
    answer["memory_bytes"] = machine.saved.memory_bytes;
    answer["pause_ms"] = machine.saved.pause_ms;
  }
  return answer;
}

}  // namespace dsec::daemon
