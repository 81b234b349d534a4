// SPDX-License-Identifier: Apache-2.0
// The node daemon's service layer, independent of HTTP: the sandbox
// registry over the tiers, request validation (errors name the field),
// limits, the TTL reaper, metrics, and the trajectory log (record every
// exec of a task's sandbox before answering; resume a task by replaying
// its recording). Requests and answers are the API's JSON documents
// (docs/api.yaml); the HTTP layer only maps routes and errors.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "base/clock.h"
#include "sandbox/daemon/metrics.h"
#include "sandbox/daemon/node_capacity.h"
#include "sandbox/daemon/qos_placer.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/tier/registry.h"
#include "sandbox/tier/tier.h"
#include "sandbox/trajectory/log.h"
#include "sandbox/trajectory/replay.h"

namespace dsec::network {
class NodeNetwork;
}

namespace dsec::daemon {

inline constexpr char kVersion[] = "0.1.0";
inline constexpr char kDefaultTrajectoryDir[] = "/var/lib/dsec-vmm/trajectories";
inline constexpr char kDefaultSnapshotDir[] = "/var/lib/dsec-vmm/snapshots";

// Turns a sandbox's layer references (the request's, or the tier's
// defaults from its tier::TierTraits, a checkpoint layer possibly on top) into
// image files, lowest first.
using LayerResolver = std::function<absl::StatusOr<std::vector<std::string>>(
    const std::string& tier, const std::vector<std::string>& refs)>;

struct ServiceOptions {
  int max_sandboxes = 256;
  int max_concurrent_execs = 32;
  int64_t max_ttl_s = 7 * 24 * 3600;
  int64_t max_timeout_s = 3600;
  int64_t default_timeout_s = 60;
  uint64_t output_cap_bytes = 4u << 20;  // per exec, stdout + stderr
  uint64_t max_file_bytes = 64u << 20;   // files read/write
  // Directory watches (WatchDir) alive at once on the node and on one
  // sandbox. Each holds an inotify instance of the daemon's user, of
  // which the host allows fs.inotify.max_user_instances (128 by default).
  int max_dir_watches = 64;
  int max_dir_watches_per_sandbox = 16;
  std::string layer_store;               // for pack_diff and /v1/layers ("" = none)
  // Sandbox snapshots' records (snapshot_store.h; "" = no snapshots): the
  // files live in the layer store, the records here.
  std::string snapshot_dir;
  // pack_diff: a layer's size at most, and what the store's disk keeps
  // free (sandbox/layers/pack_diff.h); 429 RESOURCE_EXHAUSTED beyond.
  uint64_t max_layer_bytes = 4ull << 30;
  uint64_t layer_store_reserve_bytes = 512ull << 20;
  LayerResolver resolve_layers;
  bool start_reaper = true;
  // Places sandboxes created with a qos (null: none is placed, each says
  // why in qos_reason).
  std::shared_ptr<QosPlacer> qos;
  // Tiers the API names that this node does not offer, with why (a
  // tier::TierSetup whose Make answered Unavailable): a create asking for
  // one is answered 503 with the reason, and health lists them.
  std::map<std::string, std::string> unavailable_tiers;
  // For TTLs (wall time, as expires_unix_ms shows them); null: the real
  // wall clock. Tests drive the reaper with a FakeClock.
  const Clock* wall_clock = nullptr;
  // The node's sandbox network (sandbox/network), made on first use; null:
  // this daemon offers none (a create with "network" is answered 503).
  // Unavailable with the reason where the host cannot offer it.
  std::function<absl::StatusOr<network::NodeNetwork*>()> node_network;
  // What GET /v1/health says of it: {"available": ..., ...}.
  std::function<nlohmann::json()> network_health;
  // The node's capacity check (node_capacity.h); null: only max_sandboxes.
  std::shared_ptr<NodeCapacity> capacity;
};

// What a streamed exec sees besides its result. Both run on the thread
// that called Exec and must return promptly.
struct ExecObserver {
  // The request is valid and it is the sandbox's turn: the command runs
  // (or is answered from the trajectory) now. Errors after this one are
  // the exec's, not the request's.
  std::function<void()> on_start;
  // Live output (tier::ExecSpec::on_output). Not called for replayed execs.
  std::function<void(int stream, std::string_view bytes)> on_output;
  // Streamed stdin and signals to this command (tier::ExecSpec::control):
  // refused (FailedPrecondition) on a tier without TierTraits::exec_control,
  // and on a task's sandbox (its trajectory records stdin given up front).
  std::shared_ptr<ExecControl> control;
};

// Threads: every method from any thread (the HTTP pool). Calls on one
// sandbox are serialised by its entry lock, but execs on a tier with
// TierTraits::concurrent_execs share it (overlap); the registry lock is
// never held while a tier works.
class Service {
 public:
  // Takes the tiers this node offers (each registered once, by its traits'
  // name) and the trajectory store (may be null: no task support).
  Service(ServiceOptions options, std::vector<std::unique_ptr<tier::Tier>> tiers,
          std::unique_ptr<trajectory::TrajectoryStore> trajectories);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  nlohmann::json Health() const;
  std::string MetricsText() const;
  // What the start-up cleanup found (shown in Health as "recovered").
  void SetRecovered(nlohmann::json recovered);

  absl::StatusOr<nlohmann::json> Create(const nlohmann::json& body);
  nlohmann::json List() const;
  absl::StatusOr<nlohmann::json> Get(const std::string& id) const;
  absl::Status Delete(const std::string& id);
  // Ends the sandbox's running exec without waiting for its lock: kills
  // every process its execs started, as an exec's timeout does (tier.h
  // KillExecs). Unimplemented where the tier cannot; the exec's own answer
  // reports the kill. For front ends whose clients signal a running
  // command (sandbox/e2b: envd's SendSignal).
  absl::Status KillExecs(const std::string& id);
  // Whether an exec on this sandbox takes an ExecObserver::control (its
  // tier's TierTraits::exec_control, and not a task's sandbox).
  absl::StatusOr<bool> ExecControlOffered(const std::string& id) const;
  // Moves a sandbox's TTL end to now + ttl_s (at most the node's max TTL;
  // a sandbox created without one gets one). For front ends whose clients
  // extend a sandbox's life (sandbox/e2b: E2B's setTimeout).
  absl::StatusOr<nlohmann::json> SetTtl(const std::string& id, int64_t ttl_s);
  absl::StatusOr<nlohmann::json> Exec(const std::string& id, const nlohmann::json& body,
                                      const ExecObserver* observer = nullptr);
  absl::StatusOr<nlohmann::json> Pause(const std::string& id);
  absl::StatusOr<nlohmann::json> Resume(const std::string& id);
  absl::StatusOr<std::string> ReadFile(const std::string& id, const std::string& path);
  absl::Status WriteFile(const std::string& id, const std::string& path, const std::string& mode,
                         const std::string& data);
  absl::StatusOr<nlohmann::json> ListFiles(const std::string& id, const std::string& path);
  // A watch on a directory of the sandbox (tier::DirWatch; Unimplemented
  // where its tier cannot watch). It lives apart from the sandbox's lock
  // (an exec or pause does not wait for it); the sandbox's delete closes
  // it. ResourceExhausted beyond max_dir_watches (node, sandbox).
  absl::StatusOr<std::shared_ptr<tier::DirWatch>> WatchDir(const std::string& id, const std::string& path,
                                                           bool recursive);
  absl::StatusOr<nlohmann::json> PackDiff(const std::string& id, const nlohmann::json& body);
  // POST /v1/sandboxes/{id}/fork: the source's writable layer packed once
  // into a layer of the store (source frozen meanwhile), then `count` new
  // sandboxes with the source's settings and that layer on top of its
  // layers, each with a fresh writable layer; the source runs on. Files
  // only: processes are not carried (the answer says so).
  absl::StatusOr<nlohmann::json> Fork(const std::string& id, const nlohmann::json& body);
  // POST /v1/sandboxes/{id}/snapshot: the source's writable layer packed
  // into the layer store as a fork does (source frozen meanwhile, then
  // running on), and a record in the snapshot store of how to make a
  // sandbox from it: the source's settings with that layer on top. Create
  // with {"snapshot": id} makes one; records outlive the daemon. Files
  // only (the answer says so); fncall: 400.
  absl::StatusOr<nlohmann::json> Snapshot(const std::string& id, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> ListSnapshots() const;
  absl::StatusOr<nlohmann::json> GetSnapshot(const std::string& snapshot_id) const;
  // Removes the record and the layer's tag (a sandbox running from it
  // keeps its files; `dsec-vmm layer gc` reclaims an image nothing tags).
  absl::Status DeleteSnapshot(const std::string& snapshot_id);

  // PATCH /v1/sandboxes/{id}/network: replaces the egress policy of a
  // sandbox created with a network (new connections at once).
  absl::StatusOr<nlohmann::json> SetNetwork(const std::string& id, const nlohmann::json& body);

  absl::StatusOr<nlohmann::json> ListLayers() const;
  absl::StatusOr<nlohmann::json> AddLayer(const nlohmann::json& body);
  absl::Status RemoveLayer(const std::string& ref);

  absl::StatusOr<nlohmann::json> ResumeTask(const std::string& task_id, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> TaskLog(const std::string& task_id) const;
  absl::Status DeleteTask(const std::string& task_id);

  // Destroys every sandbox (shutdown).
  void DestroyAll();
  // Destroys sandboxes whose TTL passed (the reaper calls it each second).
  int ReapExpired();
  int sandbox_count() const;

 private:
  struct Entry;
  struct Parsed;
  absl::StatusOr<std::shared_ptr<Entry>> Find(const std::string& id) const;
  int64_t NowMs() const;
  struct MachineSource;
  // A create body with {"snapshot": id} as the snapshot's record makes it,
  // and the saved machine it continues from, if the snapshot holds one.
  absl::StatusOr<nlohmann::json> FromSnapshot(const nlohmann::json& body,
                                              std::optional<MachineSource>* machine) const;
  // A saved machine (SaveMachineLocked) and the layer images it was saved
  // with (the exact files: its guest maps them).
  struct MachineSource {
    std::string dir;
    std::vector<std::string> images;
  };
  // `machine`: the sandbox continues from it; null = a fresh one.
  absl::StatusOr<std::shared_ptr<Entry>> CreateEntry(const nlohmann::json& body,
                                                     std::optional<std::string> forced_task,
                                                     const MachineSource* machine = nullptr);
  // Resolves e's layers (plus extra_refs on top) and creates the tier
  // sandbox, under e.id unless tier_id is given; from a saved machine
  // (with its images, not e's layers resolved anew) when one is given. A
  // tier with machine snapshots gets a staging directory for them
  // (machines/staging/<id>), which it removes with the sandbox.
  absl::StatusOr<std::unique_ptr<tier::TierSandbox>> MakeTierSandbox(
      Entry& e, const std::vector<std::string>& extra_refs, const std::string& tier_id = "",
      const MachineSource* machine = nullptr);
  // Machine snapshots live in <snapshot_dir>/machines/<name>; "" when the
  // daemon keeps no snapshots.
  std::string MachineDir(const std::string& name) const;
  // At start: saved machines and layer pins that no snapshot record names
  // (a daemon killed mid-fork or mid-snapshot) go.
  void RemoveUnrecordedMachines();
  // Under e.mu: the whole machine of e (TierSandbox::SaveMachine) into a
  // new MachineDir(name). On success `dir` is set; otherwise `refused`
  // says why (the caller falls back to e's files) and nothing is left.
  struct SavedMachine {
    std::string dir;
    tier::MachineSaved saved;
    std::string refused;
  };
  SavedMachine SaveMachineLocked(Entry& e, const std::string& name);
  nlohmann::json Describe(const Entry& e) const;
  // GET's "network": the policy, addresses and counters, or null.
  static nlohmann::json NetworkJson(const Entry& e);
  // Per-sandbox network counters for /metrics.
  std::string NetworkMetricsText() const;
  // Places e (qos "ls"/"be") through options_.qos; records the lease or why not.
  void PlaceQos(Entry& e);
  absl::StatusOr<nlohmann::json> GoLive(Entry& e, const trajectory::ExecRequest& req,
                                        const tier::ExecSpec& spec);
  absl::StatusOr<nlohmann::json> RunLive(Entry& e, const trajectory::ExecRequest& req,
                                         const tier::ExecSpec& spec);
  void DestroyEntry(Entry& e);
  void ReaperLoop();
  // The lock a files call on e holds: the entry's, or kill_mu alone for a
  // tier whose files live beside its execs (service_internal.h).
  struct FilesGuard {
    std::unique_lock<std::mutex> beside;
    std::unique_lock<std::shared_mutex> entry;
  };
  FilesGuard FilesLock(Entry& e) const;
  // The lock pause, resume, pack_diff, fork and snapshot hold: on a tier
  // whose execs overlap (not a task's sandbox) the entry's shared with
  // ops_mu, so that they neither wait for running commands (a background
  // server would hold them until its timeout) nor stop them for longer
  // than a freeze; elsewhere the entry's exclusively.
  struct OpsGuard {
    std::shared_lock<std::shared_mutex> shared;
    std::unique_lock<std::mutex> ops;
    std::unique_lock<std::shared_mutex> exclusive;
  };
  OpsGuard OpsLock(Entry& e) const;
  // pack_diff's core, under e.mu: packs e's writable layer (frozen
  // meanwhile) into `store` as name:version; `pause_ms`, if given, gets how
  // long the sandbox stood still (0 if it was paused already).
  absl::StatusOr<layers::BuildResult> PackLocked(Entry& e, layers::LayerStore& store,
                                                 const std::string& name, const std::string& version,
                                                 double* pause_ms = nullptr);
  // The create body that makes a sandbox like e (tier, layers, limits,
  // tier options, network policy), with `extra_layer` on top ("" = none).
  nlohmann::json CloneBody(const Entry& e, const std::string& extra_layer) const;

  const ServiceOptions options_;
  // Directory watches alive (WatchDir): shared with each watch's deleter,
  // which may run after the Service is gone.
  const std::shared_ptr<std::atomic<int>> dir_watches_ = std::make_shared<std::atomic<int>>(0);
  const tier::TierRegistry registry_;
  std::unique_ptr<trajectory::TrajectoryStore> trajectories_;
  mutable Metrics metrics_;
  std::atomic<int> running_execs_{0};

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> sandboxes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> task_owner_ ABSL_GUARDED_BY(mu_);  // task -> sandbox id
  int pending_creates_ ABSL_GUARDED_BY(mu_) = 0;
  nlohmann::json recovered_ ABSL_GUARDED_BY(mu_) = nlohmann::json::object();

  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  std::thread reaper_;
};

// Result JSON of an exec (the contract's exec result object).
nlohmann::json ExecResultJson(const tier::ExecOutcome& out);
std::string Base64Encode(const std::string& bytes);
absl::StatusOr<std::string> Base64Decode(const std::string& text);
// Valid UTF-8 with invalid sequences replaced by U+FFFD.
std::string ToValidUtf8(const std::string& bytes);

}  // namespace dsec::daemon
