// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/service.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sandbox/daemon/errors.h"
#include "sandbox/daemon/requests.h"
#include "sandbox/daemon/service_internal.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::daemon {

using nlohmann::json;

namespace {

std::string NewId() {
  uint8_t b[8];
  if (::getrandom(b, sizeof(b), 0) != sizeof(b)) {
    uint64_t x = static_cast<uint64_t>(WallClock::Get().NowNs()) ^ (static_cast<uint64_t>(::getpid()) << 40);
    memcpy(b, &x, sizeof(b));
  }
  std::string id = "sb-";
  for (uint8_t c : b) absl::StrAppendFormat(&id, "%02x", c);
  return id;
}

}  // namespace

namespace {
std::vector<std::string> TierNames(const tier::TierRegistry& registry) {
  std::vector<std::string> names;
  for (tier::TierId t : registry.ids()) names.push_back(registry.name(t));
  return names;
}
}  // namespace

absl::Status HostFailure(const char* what, const std::string& id, const absl::Status& status) {
  absl::Status client = WithoutHostPaths(status);
  if (client.message() != status.message()) {
    DSEC_LOG_RATELIMITED(warn, 5, "daemon: sandbox={} {}: {}", id, what, status.ToString());
  }
  return client;
}

Service::Service(ServiceOptions options, std::vector<std::unique_ptr<tier::Tier>> tiers,
                 std::unique_ptr<trajectory::TrajectoryStore> trajectories)
    : options_(std::move(options)),
      registry_(std::move(tiers), options_.unavailable_tiers),
      trajectories_(std::move(trajectories)),
      metrics_(TierNames(registry_)) {
  // Staging directories of sandboxes a killed daemon left (its sandboxes
  // are gone: the tiers' CleanupOrphans ran before).
  if (!options_.snapshot_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(MachineDir("staging"), ec);
    RemoveUnrecordedMachines();
  }
  if (options_.start_reaper) reaper_ = std::thread([this] { ReaperLoop(); });
}

int64_t Service::NowMs() const {
  const Clock& clock = options_.wall_clock != nullptr ? *options_.wall_clock : WallClock::Get();
  return clock.NowNs() / 1'000'000;
}

Service::~Service() {
  {
    std::lock_guard<std::mutex> lock(reaper_mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  DestroyAll();
}

void Service::ReaperLoop() {
  std::unique_lock<std::mutex> lock(reaper_mu_);
  while (!stopping_) {
    // A periodic timer, not synchronisation: TTLs have 1 s resolution.
    reaper_cv_.wait_for(lock, std::chrono::seconds(1));
    if (stopping_) break;
    lock.unlock();
    ReapExpired();
    lock.lock();
  }
}

int Service::ReapExpired() {
  std::vector<std::string> expired;
  const int64_t now = NowMs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) {
      if (const int64_t x = e->expires_ms.load(); x != 0 && x <= now) expired.push_back(id);
    }
  }
  int n = 0;
  for (const std::string& id : expired) {
    if (Delete(id).ok()) {
      DSEC_LOG(info, "daemon: sandbox={} ttl expired, destroyed", id);
      ++n;
    }
  }
  return n;
}

void Service::SetRecovered(json recovered) {
  std::lock_guard<std::mutex> lock(mu_);
  recovered_ = std::move(recovered);
}

int Service::sandbox_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(sandboxes_.size());
}

json Service::Health() const {
  json h;
  h["status"] = "ok";
  h["version"] = kVersion;
  h["tiers"] = json::object();
  for (const auto& [name, why] : registry_.unavailable()) {
    h["tiers"][name] = false;
    h["tiers_unavailable"][name] = why;
  }
  // A tier present but unusable on this host (microvm where guest kernel
  // code is emulated) is false, with the reason.
  for (tier::TierId t : registry_.ids()) {
    absl::Status a = registry_.tier(t).Availability();
    h["tiers"][registry_.name(t)] = a.ok();
    if (!a.ok()) h["tiers_unavailable"][registry_.name(t)] = std::string(a.message());
  }
  // Sampled outside the registry lock (a few /proc reads).
  if (options_.capacity) {
    std::map<std::string, tier::Footprint> footprints;
    for (tier::TierId t : registry_.ids()) footprints[registry_.name(t)] = registry_.tier(t).traits().footprint;
    h["capacity"] = options_.capacity->Headroom(footprints);
  } else {
    h["capacity"] = {{"checked", false}, {"reason", "only --max-sandboxes limits this node"}};
  }
  std::lock_guard<std::mutex> lock(mu_);
  h["sandboxes"] = sandboxes_.size();
  h["recovered"] = recovered_;
  h["qos"] = {{"available", options_.qos != nullptr && options_.qos->available()},
              {"status", options_.qos != nullptr ? options_.qos->status() : "no placement configured"}};
  h["network"] = options_.network_health
                     ? options_.network_health()
                     : json{{"available", false}, {"reason", "this daemon offers no sandbox networking"}};
  return h;
}

std::string Service::MetricsText() const {
  std::string out;
  std::map<std::pair<std::string, std::string>, int> counts;
  for (tier::TierId t : registry_.ids()) {
    counts[{registry_.name(t), "running"}] = 0;
    counts[{registry_.name(t), "paused"}] = 0;
    counts[{registry_.name(t), "ended"}] = 0;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) {
      counts[{registry_.name(e->tier), e->Ended(/*wait=*/false) ? "ended" : e->paused ? "paused" : "running"}]++;
    }
  }
  // QoS class ("none" without one) -> {placed, not placed}.
  std::map<std::string, std::pair<int, int>> by_qos = {{"ls", {0, 0}}, {"be", {0, 0}}, {"none", {0, 0}}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) {
      std::lock_guard<std::mutex> qos_lock(e->qos_mu);
      auto& n = by_qos[e->qos.empty() ? "none" : e->qos];
      (e->qos_lease ? n.first : n.second)++;
    }
  }
  out += "# HELP dsec_sandboxes_qos Sandboxes by QoS class and whether sched/ placed them.\n"
         "# TYPE dsec_sandboxes_qos gauge\n";
  for (const auto& [qos, n] : by_qos) {
    absl::StrAppendFormat(&out, "dsec_sandboxes_qos{qos=\"%s\",applied=\"true\"} %d\n", qos, n.first);
    absl::StrAppendFormat(&out, "dsec_sandboxes_qos{qos=\"%s\",applied=\"false\"} %d\n", qos, n.second);
  }
  const bool placing = options_.qos != nullptr && options_.qos->available();
  absl::StrAppendFormat(&out,
                        "# HELP dsec_qos_placement_available 1 if sched/ places sandboxes on this node.\n"
                        "# TYPE dsec_qos_placement_available gauge\n"
                        "dsec_qos_placement_available %d\n",
                        placing ? 1 : 0);
  if (options_.qos != nullptr) {
    const QosPlacer::Counts c = options_.qos->counts();
    absl::StrAppendFormat(&out,
                          "# HELP dsec_qos_placements_total Placement decisions for sandboxes with a qos.\n"
                          "# TYPE dsec_qos_placements_total counter\n"
                          "dsec_qos_placements_total{result=\"placed\"} %d\n"
                          "dsec_qos_placements_total{result=\"refused\"} %d\n",
                          c.placed, c.refused);
  }
  out += "# HELP dsec_sandboxes Sandboxes by tier and state.\n# TYPE dsec_sandboxes gauge\n";
  for (const auto& [k, n] : counts) {
    absl::StrAppendFormat(&out, "dsec_sandboxes{tier=\"%s\",state=\"%s\"} %d\n", k.first, k.second, n);
  }
  out += "# HELP dsec_create_seconds Sandbox create latency.\n# TYPE dsec_create_seconds histogram\n";
  for (const auto& [t, h] : metrics_.create_ms) out += h.Render("dsec_create_seconds", absl::StrCat("tier=\"", t, "\""));
  out += "# HELP dsec_exec_seconds Exec latency (live execs).\n# TYPE dsec_exec_seconds histogram\n";
  for (const auto& [t, h] : metrics_.exec_ms) out += h.Render("dsec_exec_seconds", absl::StrCat("tier=\"", t, "\""));
  out += "# HELP dsec_execs_total Execs answered (live and replayed).\n# TYPE dsec_execs_total counter\n";
  for (const auto& [t, n] : metrics_.execs_total) {
    absl::StrAppendFormat(&out, "dsec_execs_total{tier=\"%s\"} %d\n", t, n.load());
  }
  absl::StrAppendFormat(&out,
                        "# HELP dsec_dropped_output_bytes_total Output bytes dropped by caps and rate limits.\n"
                        "# TYPE dsec_dropped_output_bytes_total counter\n"
                        "dsec_dropped_output_bytes_total %d\n"
                        "# HELP dsec_replayed_execs_total Execs answered from a trajectory without running.\n"
                        "# TYPE dsec_replayed_execs_total counter\n"
                        "dsec_replayed_execs_total %d\n"
                        "# HELP dsec_rejected_total Requests refused by a node limit (429).\n"
                        "# TYPE dsec_rejected_total counter\n"
                        "dsec_rejected_total %d\n"
                        "# HELP dsec_execs_running Execs running now.\n"
                        "# TYPE dsec_execs_running gauge\n"
                        "dsec_execs_running %d\n"
                        "# HELP dsec_unrecorded_execs_total Execs the trajectory quota could not record.\n"
                        "# TYPE dsec_unrecorded_execs_total counter\n"
                        "dsec_unrecorded_execs_total %d\n",
                        metrics_.dropped_output_bytes.load(), metrics_.replayed_execs.load(),
                        metrics_.rejected_limit.load(), running_execs_.load(),
                        metrics_.unrecorded_execs.load());
  if (options_.capacity) {
    out += "# HELP dsec_capacity_refused_total Creates refused because the node was full, by resource.\n"
           "# TYPE dsec_capacity_refused_total counter\n";
    const auto refused = options_.capacity->refused();
    for (int i = 0; i < kResourceCount; ++i) {
      absl::StrAppendFormat(&out, "dsec_capacity_refused_total{resource=\"%s\"} %d\n",
                            ResourceName(static_cast<Resource>(i)), refused[i]);
    }
  }
  out += NetworkMetricsText();
  // Each tier's own figures (warm pools, id ranges, ...).
  for (tier::TierId t : registry_.ids()) out += registry_.tier(t).MetricsText();
  if (trajectories_) {
    absl::StrAppendFormat(&out,
                          "# HELP dsec_trajectory_bytes Bytes of trajectory logs on this node.\n"
                          "# TYPE dsec_trajectory_bytes gauge\n"
                          "dsec_trajectory_bytes %d\n"
                          "dsec_trajectory_quota_bytes %d\n",
                          trajectories_->node_quota().used(), trajectories_->node_quota().limit());
  }
  return out;
}

json Service::Describe(const Entry& e) const {
  json j;
  j["id"] = e.id;
  j["tier"] = registry_.name(e.tier);
  // A sandbox that ended by itself (its init died) is kept, saying why,
  // until it is deleted.
  const std::optional<std::string> ended = e.Ended(/*wait=*/false);
  j["state"] = ended ? "ended" : e.paused ? "paused" : "running";
  j["ended_reason"] = ended ? json(*ended) : json(nullptr);
  j["layers"] = e.layers;
  j["cpus"] = e.cpus;
  j["memory_mib"] = e.memory_mib;
  j["pids"] = e.pids;
  j["qos"] = e.qos.empty() ? json(nullptr) : json(e.qos);
  // The tier options the API shows for every sandbox (user_namespace).
  for (const tier::OptionSpec& o : registry_.known_options()) {
    if (!o.shown) continue;
    auto v = e.options.find(o.name);
    j[o.name] = v != e.options.end() ? *v : o.default_value;
  }
  {
    std::lock_guard<std::mutex> lock(e.qos_mu);
    j["qos_applied"] = e.qos_lease != nullptr;
    j["qos_reason"] = e.qos_reason.empty() ? json(nullptr) : json(e.qos_reason);
    j["placement"] = nullptr;
    if (e.qos_lease) {
      const sched::Placement& p = e.qos_lease->placement();
      j["placement"] = {{"qos", e.qos}, {"cpus", p.cpus}, {"mems", p.mems},
                        {"mechanism", e.qos_lease->mechanism()}};
      if (std::string cg = e.qos_lease->CgroupPath(); !cg.empty()) j["placement"]["cgroup"] = cg;
    }
  }
  j["task_id"] = e.task_id ? json(*e.task_id) : json(nullptr);
  j["created_unix_ms"] = e.created_ms;
  const int64_t expires = e.expires_ms.load();
  j["expires_unix_ms"] = expires != 0 ? json(expires) : json(nullptr);
  j["execs"] = e.execs.load();
  j["network"] = NetworkJson(e);
  return j;
}

absl::StatusOr<std::shared_ptr<Service::Entry>> Service::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  return it->second;
}

absl::StatusOr<std::shared_ptr<Service::Entry>> Service::CreateEntry(const json& body,
                                                                    std::optional<std::string> forced_task,
                                                                    const MachineSource* machine) {
  DSEC_ASSIGN_OR_RETURN(CreateRequest req, ParseCreateRequest(body, RequestLimits{options_.max_ttl_s,
                                                                                  options_.max_timeout_s}));
  DSEC_ASSIGN_OR_RETURN(tier::TierId tier_id, registry_.Find(req.tier));
  const tier::TierTraits& traits = registry_.traits(tier_id);
  auto e = std::make_shared<Entry>(tier_id);
  DSEC_ASSIGN_OR_RETURN(e->options, registry_.ParseOptions(tier_id, req.tier_fields));
  e->refs = req.layers;
  e->layers = e->refs.empty() ? traits.default_layers(e->options) : e->refs;
  if (req.cpus) e->cpus = *req.cpus;
  if (req.memory_mib) e->memory_mib = *req.memory_mib;
  if (req.pids) e->pids = *req.pids;
  if (req.qos) e->qos = *req.qos;
  if (req.network) {
    if (!traits.network) {
      return InvalidField("network", absl::StrCat("the ", traits.name, " tier offers no network"));
    }
    e->network_spec = std::make_shared<const network::NetworkSpec>(std::move(*req.network));
  }
  std::optional<std::string> task = req.task_id;
  if (forced_task) {
    if (task) return InvalidField("task_id", "task_id comes from the URL on resume");
    task = forced_task;
  }
  if (task) {
    if (!trajectories_) return absl::UnavailableError("this daemon has no trajectory store");
    e->task_id = task;
  }
  const std::optional<int64_t> ttl = req.ttl_s;
  e->id = NewId();
  e->created_ms = NowMs();
  if (ttl) e->expires_ms = e->created_ms + *ttl * 1000;

  // The node's capacity: a full node refuses with the resource named,
  // before anything is made.
  CapacityLease lease;
  if (options_.capacity) {
    tier::Footprint need = traits.footprint;
    if (e->network_spec) need += traits.network_footprint;
    absl::StatusOr<CapacityLease> l = options_.capacity->Reserve(need, traits.name);
    if (!l.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.rejected_limit++;
      return l.status();
    }
    lease = std::move(*l);
  }

  // Limits and task ownership, reserved before the (slow) tier create.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(sandboxes_.size()) + pending_creates_ >= options_.max_sandboxes) {
      metrics_.rejected_limit++;
      return absl::ResourceExhaustedError(
          absl::StrCat("this node holds its maximum of ", options_.max_sandboxes, " sandboxes"));
    }
    if (e->task_id) {
      auto it = task_owner_.find(*e->task_id);
      if (it != task_owner_.end()) {
        return absl::AlreadyExistsError(
            absl::StrCat("task ", *e->task_id, " already has a live sandbox (", it->second, ")"));
      }
      task_owner_[*e->task_id] = e->id;
    }
    pending_creates_++;
  }
  auto release = [&](bool keep) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_creates_--;
    if (keep) {
      sandboxes_[e->id] = e;
    } else if (e->task_id) {
      task_owner_.erase(*e->task_id);
    }
  };
  const int64_t start_ns = MonotonicNowNs();
  PlaceQos(*e);
  auto sb = MakeTierSandbox(*e, {}, "", machine);
  if (!sb.ok()) {
    release(false);
    std::lock_guard<std::mutex> lock(e->qos_mu);
    e->qos_lease.reset();
    return HostFailure("create", e->id, sb.status());
  }
  e->ReplaceSandbox(std::move(*sb));
  e->SetNet(e->sandbox->network());
  lease.Commit();
  e->capacity = std::move(lease);
  metrics_.create_ms.at(registry_.name(e->tier)).Observe(static_cast<double>(MonotonicNowNs() - start_ns) / 1e6);
  release(true);
  DSEC_LOG(info, "daemon: sandbox={} tier={} created", e->id, registry_.name(e->tier));
  return e;
}

absl::StatusOr<std::unique_ptr<tier::TierSandbox>> Service::MakeTierSandbox(
    Entry& e, const std::vector<std::string>& extra_refs, const std::string& tier_id,
    const MachineSource* machine) {
  if (!options_.resolve_layers) return absl::InternalError("no layer resolver configured");
  // A tier this host cannot run fails before its layers are resolved (a
  // default layer may be built first, which takes minutes).
  tier::Tier& tier = registry_.tier(e.tier);
  DSEC_RETURN_IF_ERROR(tier.Availability());
  // The requested layers or the tier's defaults, a checkpoint layer
  // (extra_refs, which brings its parents) on top.
  // A saved machine's guest maps the very images it was saved with (a tag
  // may have moved since): those, not the layers resolved anew.
  absl::StatusOr<std::vector<std::string>> images;
  if (machine != nullptr) {
    for (const std::string& image : machine->images) {
      if (!PathExists(image)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "a layer image the saved machine stands on is gone (removed by `layer gc`?): ", image));
      }
    }
    images = machine->images;
  } else {
    std::vector<std::string> refs = e.refs.empty() ? tier.traits().default_layers(e.options) : e.refs;
    refs.insert(refs.end(), extra_refs.begin(), extra_refs.end());
    images = options_.resolve_layers(tier.name(), refs);
  }
  if (!images.ok()) {
    if (absl::IsNotFound(images.status()) || absl::IsInvalidArgument(images.status())) {
      return InvalidField("layers", std::string(images.status().message()));
    }
    return images.status();
  }
  tier::CreateSpec spec;
  spec.id = tier_id.empty() ? e.id : tier_id;
  spec.images = *images;
  if (machine != nullptr) spec.machine = machine->dir;
  spec.cpus = e.cpus;
  spec.memory_mib = e.memory_mib;
  spec.pids = e.pids;
  spec.qos = e.qos;
  spec.options = e.options;
  {
    std::lock_guard<std::mutex> lock(e.qos_mu);
    if (e.qos_lease) spec.isolation = e.qos_lease->isolation();
  }
  if (std::shared_ptr<const network::NetworkSpec> net = e.NetworkSpec()) {
    if (!options_.node_network) {
      return absl::UnavailableError("this daemon offers no sandbox networking");
    }
    DSEC_ASSIGN_OR_RETURN(spec.node_network, options_.node_network());
    spec.network = std::move(net);
  }
  // Where the sandbox may save its machine: a fresh directory beside the
  // saved ones (same file system: a save is moved, not copied).
  std::string staging;
  if (tier.traits().machine_snapshots && !options_.snapshot_dir.empty()) {
    staging = MachineDir(absl::StrCat("staging/", spec.id));
    std::error_code ec;
    std::filesystem::remove_all(staging, ec);
    if (absl::Status s = MakeDirs(staging, 0700); s.ok()) {
      spec.machine_staging = staging;
    } else {
      DSEC_LOG(warn, "daemon: sandbox={}: no machine snapshots for it: {}", spec.id, s.ToString());
      staging.clear();
    }
  }
  absl::StatusOr<std::unique_ptr<tier::TierSandbox>> sb = tier.Create(spec);
  if (!sb.ok()) {
    std::error_code ec;
    if (!staging.empty()) std::filesystem::remove_all(staging, ec);
    return sb.status();
  }
  e.images = *images;
  return sb;
}

std::string Service::MachineDir(const std::string& name) const {
  if (options_.snapshot_dir.empty()) return "";
  return absl::StrCat(options_.snapshot_dir, "/machines/", name);
}

Service::SavedMachine Service::SaveMachineLocked(Entry& e, const std::string& name) {
  SavedMachine out;
  if (!registry_.traits(e.tier).machine_snapshots) {
    out.refused = absl::StrCat("the ", registry_.name(e.tier), " tier cannot save a sandbox's processes");
    return out;
  }
  if (options_.snapshot_dir.empty()) {
    out.refused = "this daemon keeps no snapshots (it was started without a snapshot directory)";
    return out;
  }
  const std::string dir = MachineDir(name);
  absl::Status made = MakeDirs(MachineDir(""), 0700);
  if (made.ok() && ::mkdir(dir.c_str(), 0700) != 0) made = ErrnoToStatus(absl::StrCat("mkdir ", dir));
  absl::StatusOr<tier::MachineSaved> saved =
      made.ok() ? e.sandbox->SaveMachine(dir) : absl::StatusOr<tier::MachineSaved>(made);
  if (!saved.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    out.refused = std::string(WithoutHostPaths(saved.status()).message());
    if (!absl::IsUnimplemented(saved.status()) && !absl::IsFailedPrecondition(saved.status())) {
      DSEC_LOG(warn, "daemon: sandbox={}: saving its machine failed: {}", e.id, saved.status().ToString());
    }
    return out;
  }
  out.dir = dir;
  out.saved = *saved;
  return out;
}

absl::StatusOr<json> Service::Create(const json& body) {
  if (body.is_object() && body.contains("snapshot")) {
    std::optional<MachineSource> machine;
    DSEC_ASSIGN_OR_RETURN(json made, FromSnapshot(body, &machine));
    DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e,
                          CreateEntry(made, std::nullopt, machine ? &*machine : nullptr));
    return Describe(*e);
  }
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, CreateEntry(body, std::nullopt));
  return Describe(*e);
}

json Service::List() const {
  json list = json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : sandboxes_) list.push_back(Describe(*e));
  return json{{"sandboxes", list}};
}

absl::StatusOr<json> Service::Get(const std::string& id) const {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  return Describe(*e);
}

void Service::DestroyEntry(Entry& e) {
  // Running execs hold e.mu: end them rather than wait for them (their
  // clients get the killed result), and refuse the ones queued behind.
  // (A paused sandbox runs no exec, and its frozen processes would not
  // die before the tier's destroy thaws them.)
  e.deleting = true;
  if (e.paused && registry_.traits(e.tier).concurrent_execs) {
    // Commands may have run on into the pause (OpsLock): thawed, so that
    // the kill below ends them (a frozen process dies only once thawed
    // under cgroup v1's freezer) and they give the lock back.
    OpsGuard ops = OpsLock(e);
    if (e.paused && !e.destroyed && e.sandbox != nullptr && e.sandbox->Resume().ok()) e.paused = false;
  }
  if (!e.paused) e.KillExecs();
  std::lock_guard<std::shared_mutex> lock(e.mu);
  if (e.destroyed) return;
  e.destroyed = true;
  if (e.sandbox) {
    std::lock_guard<std::mutex> kill_lock(e.kill_mu);
    if (absl::Status s = e.sandbox->Destroy(); !s.ok()) {
      DSEC_LOG(warn, "daemon: sandbox={} destroy: {}", e.id, s.ToString());
    }
    e.sandbox.reset();
    e.CloseWatchesLocked();
  }
  e.capacity.Release();
  // After the tier sandbox: its processes are gone from the QoS cgroup.
  std::lock_guard<std::mutex> qos_lock(e.qos_mu);
  e.qos_lease.reset();
}

void Service::PlaceQos(Entry& e) {
  if (e.qos.empty()) return;
  QosDecision d;
  if (options_.qos == nullptr) {
    d.reason = "this daemon places no sandboxes (no sched/ placement configured)";
  } else {
    // CPUs' worth: the quota rounded up, at least one.
    const int vcpus = e.cpus > 0 ? static_cast<int>(std::ceil(e.cpus)) : 1;
    d = options_.qos->Place(e.id, e.qos, vcpus);
  }
  if (!d.lease) DSEC_LOG(info, "daemon: sandbox={} qos={} not applied: {}", e.id, e.qos, d.reason);
  std::lock_guard<std::mutex> lock(e.qos_mu);
  e.qos_lease = std::move(d.lease);
  e.qos_reason = std::move(d.reason);
}

absl::Status Service::Delete(const std::string& id) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    e = it->second;
    sandboxes_.erase(it);
  }
  DestroyEntry(*e);
  std::lock_guard<std::mutex> lock(mu_);
  if (e->task_id) {
    auto it = task_owner_.find(*e->task_id);
    if (it != task_owner_.end() && it->second == e->id) task_owner_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status Service::KillExecs(const std::string& id) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  if (!e->KillExecs()) {
    return absl::UnimplementedError(
        absl::StrCat("the ", registry_.name(e->tier), " tier cannot end a running command"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Service::ExecControlOffered(const std::string& id) const {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  return registry_.traits(e->tier).exec_control && !e->task_id;
}

absl::StatusOr<json> Service::SetTtl(const std::string& id, int64_t ttl_s) {
  if (ttl_s < 0 || ttl_s > options_.max_ttl_s) {
    return InvalidField("ttl_s", absl::StrCat("must be in [0, ", options_.max_ttl_s, "]"));
  }
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  // Not under the entry's lock: a running exec must not delay it. The
  // reaper reads it atomically; 0 s means "expire now".
  e->expires_ms = NowMs() + ttl_s * 1000;
  if (ttl_s == 0) {
    std::lock_guard<std::mutex> lock(reaper_mu_);
    reaper_cv_.notify_all();
  }
  return Describe(*e);
}

void Service::DestroyAll() {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) ids.push_back(id);
  }
  for (const std::string& id : ids) (void)Delete(id);
}

absl::StatusOr<json> Service::Pause(const std::string& id) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  {
    OpsGuard lock = OpsLock(*e);
    if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    if (absl::Status s = e->sandbox->Pause(); !s.ok()) return HostFailure("pause", id, s);
    e->paused = true;
  }
  return Describe(*e);
}

absl::StatusOr<json> Service::Resume(const std::string& id) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  {
    OpsGuard lock = OpsLock(*e);
    if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
    if (absl::Status s = e->sandbox->Resume(); !s.ok()) return HostFailure("resume", id, s);
    e->paused = false;
  }
  return Describe(*e);
}

Service::OpsGuard Service::OpsLock(Entry& e) const {
  OpsGuard g;
  if (registry_.traits(e.tier).concurrent_execs && !e.task_id) {
    g.shared = std::shared_lock<std::shared_mutex>(e.mu);
    g.ops = std::unique_lock<std::mutex>(e.ops_mu);
  } else {
    g.exclusive = std::unique_lock<std::shared_mutex>(e.mu);
  }
  return g;
}

Service::FilesGuard Service::FilesLock(Entry& e) const {
  if (registry_.traits(e.tier).files_beside_exec) return {std::unique_lock<std::mutex>(e.kill_mu), {}};
  return {{}, std::unique_lock<std::shared_mutex>(e.mu)};
}

absl::StatusOr<std::string> Service::ReadFile(const std::string& id, const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  FilesGuard lock = FilesLock(*e);
  if (e->sandbox == nullptr || e->deleting) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  auto r = e->sandbox->ReadFile(path, options_.max_file_bytes);
  if (absl::IsInvalidArgument(r.status())) return InvalidField("path", std::string(r.status().message()));
  return r;
}

absl::Status Service::WriteFile(const std::string& id, const std::string& path, const std::string& mode,
                                const std::string& data) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  DSEC_ASSIGN_OR_RETURN(const uint32_t m, ParseFileMode(mode));
  if (data.size() > options_.max_file_bytes) {
    return absl::ResourceExhaustedError("file larger than the upload limit");
  }
  // A write can last (the container tier's is made by a process of the
  // sandbox, which the sandbox can stop): where commands run side by side
  // it goes like one, under the entry's lock shared with ops_mu (against
  // pause, pack_diff, fork, snapshot), not under kill_mu, which a delete
  // needs first to kill the sandbox's commands, the writer among them.
  const tier::TierTraits& traits = registry_.traits(e->tier);
  std::optional<OpsGuard> ops;
  std::optional<FilesGuard> files;
  if (traits.files_beside_exec && traits.concurrent_execs && !e->task_id) {
    ops.emplace(OpsLock(*e));
  } else {
    files.emplace(FilesLock(*e));
  }
  if (e->sandbox == nullptr || e->deleting || e->destroyed) {
    return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  }
  absl::Status s = e->sandbox->WriteFile(path, data, m);
  if (absl::IsInvalidArgument(s)) return InvalidField("path", std::string(s.message()));
  return s;
}

absl::StatusOr<json> Service::ListFiles(const std::string& id, const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  FilesGuard lock = FilesLock(*e);
  if (e->sandbox == nullptr || e->deleting) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  auto entries = e->sandbox->ListDir(path);
  if (absl::IsInvalidArgument(entries.status())) {
    return InvalidField("path", std::string(entries.status().message()));
  }
  if (!entries.ok()) return entries.status();
  json list = json::array();
  for (const tier::FileEntry& f : *entries) {
    list.push_back({{"name", ToValidUtf8(f.name)}, {"type", f.type}, {"size", f.size}, {"mode", f.mode}});
  }
  return json{{"entries", list}};
}

absl::StatusOr<std::shared_ptr<tier::DirWatch>> Service::WatchDir(const std::string& id, const std::string& path,
                                                                    bool recursive) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  FilesGuard lock = FilesLock(*e);
  // e->watches is kill_mu's (FilesLock holds it for a tier whose files
  // live beside its execs, else e->mu: kill_mu comes after it).
  std::unique_lock<std::mutex> kill_lock;
  if (!lock.beside.owns_lock()) kill_lock = std::unique_lock<std::mutex>(e->kill_mu);
  if (e->sandbox == nullptr || e->deleting) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  std::erase_if(e->watches, [](const std::weak_ptr<tier::DirWatch>& w) { return w.expired(); });
  if (e->watches.size() >= static_cast<size_t>(options_.max_dir_watches_per_sandbox)) {
    return absl::ResourceExhaustedError(absl::StrCat("sandbox ", id, " has ", e->watches.size(),
                                                     " directory watches, the most a sandbox may have"));
  }
  std::shared_ptr<std::atomic<int>> count = dir_watches_;
  if (count->fetch_add(1) >= options_.max_dir_watches) {
    count->fetch_sub(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("the node has ", options_.max_dir_watches, " directory watches, the most it keeps at once"));
  }
  absl::StatusOr<std::unique_ptr<tier::DirWatch>> made = e->sandbox->WatchDir(path, recursive);
  if (!made.ok()) {
    count->fetch_sub(1);
    if (absl::IsUnimplemented(made.status())) {
      return absl::UnimplementedError(absl::StrCat("the ", registry_.name(e->tier), " tier cannot watch directories"));
    }
    if (absl::IsInvalidArgument(made.status())) return InvalidField("path", std::string(made.status().message()));
    return made.status();
  }
  std::shared_ptr<tier::DirWatch> watch(made->release(), [count](tier::DirWatch* w) {
    delete w;
    count->fetch_sub(1);
  });
  e->watches.push_back(watch);
  return watch;
}

}  // namespace dsec::daemon
