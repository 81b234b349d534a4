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
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));

  // 1. The source's writable layer, packed once (the source frozen while it
  //    is read, then running on).
  const std::string name = absl::StrCat("fork-", id);
  const std::string version = absl::StrCat(NowMs(), "-", g_fork_seq.fetch_add(1));
  const std::string tag = absl::StrCat(name, ":", version);
  json base;
  bool reused = false;
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
  }
  if (fork.ttl_s) base["ttl_s"] = *fork.ttl_s;

  // 2. The children, each with a fresh writable layer over the source's
  //    layers and the packed one. All or none: a child that cannot be made
  //    takes the ones made before it back.
  std::vector<std::shared_ptr<Entry>> children;
  for (int64_t i = 0; i < fork.count; ++i) {
    absl::StatusOr<std::shared_ptr<Entry>> child = CreateEntry(base, std::nullopt);
    if (!child.ok()) {
      for (const std::shared_ptr<Entry>& c : children) (void)Delete(c->id);
      // The layer goes with the fork; one reused (stored before, others
      // may stand on it) only loses this fork's tag.
      if (absl::Status s = reused ? store.Untag(tag) : store.Remove(tag); !s.ok()) {
        DSEC_LOG(warn, "daemon: fork of {}: removing {}: {}", id, tag, s.ToString());
      }
      return Annotate(child.status(), absl::StrCat("fork of ", id, ": child ", i + 1, " of ", fork.count));
    }
    children.push_back(*std::move(child));
  }
  DSEC_LOG(info, "daemon: sandbox={} forked into {} (layer {})", id, children.size(), tag);
  json list = json::array();
  for (const std::shared_ptr<Entry>& c : children) list.push_back(Describe(*c));
  return json{{"source", id},
              {"layer", tag},
              {"sandboxes", list},
              {"forked", "files"},
              {"processes", kProcessesNotCarried}};
}

}  // namespace dsec::daemon
