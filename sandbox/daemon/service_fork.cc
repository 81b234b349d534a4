// SPDX-License-Identifier: Apache-2.0
// POST /v1/sandboxes/{id}/fork: many sandboxes from one file-system state.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
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

// Distinguishes forks of one source within one millisecond.
std::atomic<uint64_t> g_fork_seq{0};

constexpr char kProcessesNotCarried[] =
    "not carried: a fork copies the file system only (the children start with no processes; "
    "checkpointing processes with CRIU is not built)";

}  // namespace

json Service::CloneBody(const Entry& e, const std::string& extra_layer) const {
  json b = json::object();
  b["tier"] = registry_.name(e.tier);
  std::vector<std::string> layers = e.layers;
  layers.push_back(extra_layer);
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
  if (options_.layer_store.empty()) {
    return absl::UnavailableError("this daemon has no layer store (a fork packs the source's files into one)");
  }
  if (!fork.task_ids.empty() && !trajectories_) {
    return absl::UnavailableError("this daemon has no trajectory store (task_ids)");
  }
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));

  // 1. The source's writable layer, packed once (the source frozen while it
  //    is read, then running on).
  const std::string name = absl::StrCat("fork-", id);
  const std::string version = absl::StrCat(NowMs(), "-", g_fork_seq.fetch_add(1));
  const std::string tag = absl::StrCat(name, ":", version);
  json base;
  bool reused = false;
  std::vector<trajectory::Record> parent_execs, parent_checkpoints;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    if (e->replayer && !e->replayer->live()) {
      return absl::FailedPreconditionError(
          "the sandbox is replaying its task: a fork can be made once an exec has gone live");
    }
    DSEC_ASSIGN_OR_RETURN(layers::BuildResult built, PackLocked(*e, store, name, version));
    // The same files as a layer already stored: that layer, tagged once
    // more (and never removed by a failed fork: others may stand on it).
    reused = built.reused;
    base = CloneBody(*e, tag);
    // The source's trajectory so far, for the children's logs.
    if (!fork.task_ids.empty() && e->task_id) {
      DSEC_ASSIGN_OR_RETURN(trajectory::TrajectoryLog * log, trajectories_->Get(*e->task_id));
      parent_execs = log->Execs();
      parent_checkpoints = log->Checkpoints();
    }
  }
  if (fork.ttl_s) base["ttl_s"] = *fork.ttl_s;

  // 2. The children, each with a fresh writable layer over the source's
  //    layers and the packed one. All or none: a child that cannot be made
  //    takes the ones made before it back.
  std::vector<std::shared_ptr<Entry>> children;
  std::vector<std::string> logs_written;
  for (int64_t i = 0; i < fork.count; ++i) {
    json child_body = base;
    if (!fork.task_ids.empty()) child_body["task_id"] = fork.task_ids[i];
    absl::StatusOr<std::shared_ptr<Entry>> child = CreateEntry(child_body, std::nullopt);
    absl::Status failed = child.status();
    if (child.ok() && !fork.task_ids.empty()) {
      // The child's log, before anything can append to it.
      std::lock_guard<std::mutex> lock((*child)->mu);
      absl::StatusOr<trajectory::TrajectoryLog*> log = trajectories_->Get(fork.task_ids[i]);
      failed = log.ok() ? WriteChildLog(**log, parent_execs, parent_checkpoints, tag) : log.status();
      if (failed.ok()) {
        logs_written.push_back(fork.task_ids[i]);
      } else if (!absl::IsAlreadyExists(failed)) {
        logs_written.push_back(fork.task_ids[i]);  // partly written: it goes
      }
      if (!failed.ok()) {
        failed = Annotate(failed, absl::StrCat("task_ids[", i, "] ", fork.task_ids[i]));
      }
    }
    if (!failed.ok()) {
      if (child.ok()) children.push_back(*std::move(child));
      for (const std::shared_ptr<Entry>& c : children) (void)Delete(c->id);
      for (const std::string& t : logs_written) {
        if (absl::Status s = trajectories_->Remove(t); !s.ok()) {
          DSEC_LOG(warn, "daemon: fork of {}: removing the log of {}: {}", id, t, s.ToString());
        }
      }
      // The layer goes with the fork; one reused (stored before, others
      // may stand on it) only loses this fork's tag.
      if (absl::Status s = reused ? store.Untag(tag) : store.Remove(tag); !s.ok()) {
        DSEC_LOG(warn, "daemon: fork of {}: removing {}: {}", id, tag, s.ToString());
      }
      return Annotate(failed, absl::StrCat("fork of ", id, ": child ", i + 1, " of ", fork.count));
    }
    children.push_back(*std::move(child));
  }
  DSEC_LOG(info, "daemon: sandbox={} forked into {} (layer {})", id, children.size(), tag);
  json list = json::array();
  for (const std::shared_ptr<Entry>& c : children) list.push_back(Describe(*c));
  return json{{"source", id},
              {"layer", tag},
              {"fork_seq", parent_execs.size()},
              {"sandboxes", list},
              {"forked", "files"},
              {"processes", kProcessesNotCarried}};
}

}  // namespace dsec::daemon
