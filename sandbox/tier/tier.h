// SPDX-License-Identifier: Apache-2.0
// The one interface the node daemon drives every tier through. A Tier makes
// TierSandboxes; the daemon's Service owns them and serialises calls on
// each one. What a tier accepts and defaults is in its TierTraits, which
// the tier supplies: the daemon checks requests against them and never
// compares tier names.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dir_watch.h"
#include "base/exec_control.h"
#include "sandbox/tier/options.h"

namespace dsec::sched {
class SandboxIsolation;
}
namespace dsec::network {
struct NetworkSpec;
class NodeNetwork;
class SandboxNetwork;
}  // namespace dsec::network

namespace dsec::tier {

struct CreateSpec {
  std::string id;                   // sb-<random>
  std::vector<std::string> images;  // resolved EROFS image files, lowest first
  double cpus = 0;                  // 0 = no quota
  uint64_t memory_mib = 512;
  uint64_t pids = 512;
  std::string qos;                  // "", "ls" or "be"
  // The sandbox's QoS placement, or null when it has none: the tier puts
  // the sandbox's processes in its cgroup. Shared: the daemon's entry holds
  // it too, and hands it to a re-created sandbox.
  std::shared_ptr<const sched::SandboxIsolation> isolation;
  // The tier's own create options (TierTraits::options), validated, with
  // their defaults filled in.
  TierOptions options;
  // Networking (sandbox/network), only for a tier whose traits offer it:
  // null, the sandbox has an empty network namespace; else its egress
  // policy, and the node's network it leases its address from (outlives
  // the sandbox).
  std::shared_ptr<const network::NetworkSpec> network;
  network::NodeNetwork* node_network = nullptr;
  // Machine snapshots, for a tier whose traits offer them
  // (TierTraits::machine_snapshots); both empty otherwise.
  // machine_staging: a new, empty directory of the node's snapshot store
  // (made by the daemon) that the sandbox's SaveMachine may write into and
  // the tier removes with the sandbox (the daemon removes those a killed
  // daemon left); "" = SaveMachine is refused.
  std::string machine_staging;
  // machine: a directory SaveMachine filled; the sandbox continues from
  // that machine (memory, CPUs, devices, its processes) instead of
  // starting afresh. `images` must be the saved sandbox's.
  std::string machine;
};

// What SaveMachine wrote.
struct MachineSaved {
  uint64_t memory_bytes = 0;          // guest memory the snapshot covers
  uint64_t memory_bytes_written = 0;  // what its memory file holds (sparse)
  double pause_ms = 0;                // how long the sandbox stood still
};

struct ExecSpec {
  std::vector<std::string> argv;  // ExecForm::kArgv: the command; kCode: extra args
  std::string code;               // ExecForm::kCode: the script
  std::string stdin_data;
  std::map<std::string, std::string> env;  // added to the tier's default environment
  std::string cwd;                         // "" = tier default
  int64_t timeout_ms = 60000;
  uint64_t output_cap_bytes = 4u << 20;
  // Optional: each piece of output as the tier reads it (stream 1 = stdout,
  // 2 = stderr), only what its cap admits, in order. Called on the exec's
  // thread from the tier's read loop: it must return promptly (the exec's
  // timeout waits meanwhile). A tier that cannot call it still returns all
  // output in the outcome.
  std::function<void(int stream, std::string_view bytes)> on_output;
  // Optional: called once on the exec's thread as soon as the command's
  // process exists, so that a KillExecs that came before it (while the
  // process was being made) can reach it. A tier that cannot tell never
  // calls it.
  std::function<void()> on_spawned;
  // Optional, for a tier with TierTraits::exec_control (others ignore it):
  // stdin streamed after the start and signals to this command alone,
  // from other threads while it runs (base/exec_control.h).
  std::shared_ptr<ExecControl> control;
};

struct ExecOutcome {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  std::string killed_by;  // "" | timeout | memory | output | pids
  std::string stdout_data;
  std::string stderr_data;
  uint64_t stdout_dropped = 0;  // bytes of each stream over the cap/rate
  uint64_t stderr_dropped = 0;
  double duration_ms = 0;
};

// A command the tier could not start (NotFound: no such program;
// PermissionDenied: not executable), reported as a shell would: exit 127
// or 126, the reason on stderr. nullopt for any other status.
std::optional<ExecOutcome> ShellOutcomeOf(const absl::Status& start_error);

struct FileEntry {
  std::string name;
  std::string type;  // file | dir | symlink | other
  uint64_t size = 0;
  uint32_t mode = 0;
};

// Directory watches: base/dir_watch.h.
using dsec::DirWatch;
// Directories one recursive watch holds at most (an inotify watch each:
// the host's fs.inotify.max_user_watches, shared by the node, or the
// guest's).
inline constexpr size_t kMaxWatchedDirs = 1024;
using dsec::FileEvent;

// One sandbox of a tier. Threads: the daemon calls one method at a time
// per sandbox (its entry lock), except KillExecs, the file methods of a
// tier with TierTraits::files_beside_exec, which may come while an Exec
// runs, and Exec itself for a tier with TierTraits::concurrent_execs,
// which may run on several threads at once; on such a tier Pause,
// Resume, UpperDir, UpperXattrPrefix and SaveMachine also come while its
// Execs run (one of them at a time: a pause freezes running commands, a
// resume lets them go on). Destroy ends its life, never beside another
// method.
class TierSandbox {
 public:
  virtual ~TierSandbox() = default;
  virtual absl::StatusOr<ExecOutcome> Exec(const ExecSpec& spec) = 0;
  virtual absl::Status Pause() = 0;
  virtual absl::Status Resume() = 0;
  // Files, by absolute path inside the sandbox (never outside its root).
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) = 0;
  virtual absl::Status WriteFile(const std::string& path, const std::string& data,
                                 uint32_t mode) = 0;
  virtual absl::StatusOr<std::vector<FileEntry>> ListDir(const std::string& path) = 0;
  // A watch on the directory `path` (and every directory below it when
  // `recursive`, at most kMaxWatchedDirs of them), under the same rules as
  // the other file methods; called like them. Unimplemented where the tier
  // cannot watch.
  virtual absl::StatusOr<std::unique_ptr<DirWatch>> WatchDir(const std::string& path, bool recursive);
  // The writable layer's directory for pack_diff (the sandbox is frozen
  // by the caller meanwhile); FailedPrecondition where the tier has none.
  virtual absl::StatusOr<std::string> UpperDir() = 0;
  // Namespace of overlayfs' xattrs in UpperDir ("user.overlay." where the
  // overlay was mounted with userxattr).
  virtual std::string UpperXattrPrefix() const { return "trusted.overlay."; }
  // The sandbox's network (created with a CreateSpec::network), or null.
  // Thread-safe on its own, so the daemon keeps a reference and reads it
  // without the sandbox's lock; Destroy closes it (sandbox_network.h).
  virtual std::shared_ptr<network::SandboxNetwork> network() const { return nullptr; }
  // Kills every process the sandbox's execs started; the sandbox itself
  // (its init, files, network) stays. The one method the daemon calls from
  // another thread while a method runs (an Exec, which then ends): a
  // delete does it first, so that a long command does not hold the delete
  // until it ends. Not while Destroy runs (the daemon's lock orders them).
  // Default: nothing, and false (the delete waits for the exec to end).
  virtual bool KillExecs() { return false; }
  // Why the sandbox can run nothing more although nobody deleted it (its
  // init died, say, taken by its memory cgroup's OOM killer), or nullopt
  // while it runs. Called like KillExecs, from any thread, while another
  // method may run; cheap (the daemon asks on every GET). Default: nullopt.
  virtual std::optional<std::string> Ended() { return std::nullopt; }
  // Writes the whole running machine (memory, CPUs, devices: its
  // processes too) into `dest_dir`, an existing empty directory on the
  // node's snapshot store, from which Tier::Create with CreateSpec::machine
  // makes sandboxes that continue from this point; the sandbox stands still
  // meanwhile, then runs on (paused stays paused). Unimplemented or
  // FailedPrecondition, saying why, where this sandbox cannot be saved
  // whole (the caller may fall back to its files). Default: Unimplemented.
  virtual absl::StatusOr<MachineSaved> SaveMachine(const std::string& dest_dir);
  virtual absl::Status Destroy() = 0;
};

// What one sandbox holds of the node's countable resources, for the
// daemon's capacity check (sandbox/daemon/node_capacity.h): figures
// measured on an idle sandbox, not limits.
struct Footprint {
  int64_t memory_bytes = 0;  // host memory
  int64_t pids = 0;          // tasks (processes and threads)
  int64_t fds = 0;           // descriptors the daemon holds for it
  int64_t mounts = 0;        // mounts in the daemon's (the host's) namespace
  int64_t cgroups = 0;       // memory cgroups
  int64_t netns = 0;         // network namespaces
  int64_t inotify = 0;       // inotify instances held while it lives
  Footprint& operator+=(const Footprint& o) {
    memory_bytes += o.memory_bytes;
    pids += o.pids;
    fds += o.fds;
    mounts += o.mounts;
    cgroups += o.cgroups;
    netns += o.netns;
    inotify += o.inotify;
    return *this;
  }
};

// What a tier accepts and defaults, supplied by the tier itself.
struct TierTraits {
  std::string name;  // the API's "tier" value
  // The create fields it takes beyond the common ones (layers, cpus,
  // memory_mib, pids, qos, ttl_s, task_id), e.g. fncall's "lang".
  std::vector<OptionSpec> options;
  // Exec: a command (argv), or a script (code, with argv as its arguments).
  enum class ExecForm { kArgv, kCode };
  ExecForm exec_form = ExecForm::kArgv;
  std::string default_cwd = "/";
  // Files written by an exec stay for the next one (files API results,
  // pack_diff, trajectory checkpoints); false for tiers whose calls leave
  // nothing behind.
  bool persistent_files = true;
  // The layer references a sandbox gets when its request names none.
  std::function<std::vector<std::string>(const TierOptions& options)> default_layers;
  // What identifies an exec's command in a trajectory; null: its argv.
  // (A script tier records how it runs the script, e.g. [lang, -c, code].)
  std::function<std::vector<std::string>(const TierOptions& options, const ExecSpec& spec)>
      recorded_command;
  // What CleanupOrphans counts ("sandboxes", "pools"): health reports it as
  // recovered.<name>_<orphans>.
  std::string orphans = "sandboxes";
  // It gives sandboxes a network when asked (CreateSpec::network); a tier
  // without it refuses "network" on create.
  bool network = false;
  // Its ReadFile/WriteFile/ListDir work on the host's side, touching
  // nothing an Exec uses: the daemon runs them while an exec runs (still
  // never while the sandbox is replaced, destroyed or packed).
  bool files_beside_exec = false;
  // Its sandboxes run several Execs at once: the daemon lets a sandbox's
  // execs overlap (those of a task's sandbox still go one at a time: its
  // trajectory is one sequence), and pauses, packs, forks and snapshots
  // them while commands run (frozen meanwhile) instead of waiting for the
  // commands to end.
  bool concurrent_execs = false;
  // Its Exec serves ExecSpec::control (streamed stdin, signals to one
  // command); without it a request that needs one is refused.
  bool exec_control = false;
  // What an idle sandbox holds of the node, and what a network adds to it
  // (memory_mib is a limit, not a reservation: not counted).
  Footprint footprint;
  Footprint network_footprint;
  // Its sandboxes may be saved whole (TierSandbox::SaveMachine) and made
  // from such a save (CreateSpec::machine): the daemon gives each a
  // CreateSpec::machine_staging directory.
  bool machine_snapshots = false;
};

// A tier: creates sandboxes, cleans up what a killed daemon left.
// Threads: every method from any thread.
class Tier {
 public:
  virtual ~Tier() = default;
  virtual const TierTraits& traits() const = 0;
  const std::string& name() const { return traits().name; }
  virtual absl::StatusOr<std::unique_ptr<TierSandbox>> Create(const CreateSpec& spec) = 0;
  // Removes sandboxes/pools of dead owners under the tier's state root;
  // returns how many.
  virtual absl::StatusOr<int> CleanupOrphans() = 0;
  // OK when Create can succeed on this host, else the Unavailable status
  // it fails with (GET /v1/health shows it). Tiers that need nothing of
  // the host beyond what the daemon checked keep the default.
  virtual absl::Status Availability() const { return absl::OkStatus(); }
  // `n` creates with these options and QoS class are coming soon (a fork's
  // children, once the source is packed): a tier that makes sandboxes'
  // shells ahead of time may start on them now. A hint: nothing is owed.
  virtual void ExpectCreates(size_t /*n*/, const TierOptions& /*options*/, const std::string& /*qos*/) {}
  // A layer image was removed from the store (no sandbox uses it): drop
  // what the tier keeps of it (a cached mount holds the file open).
  virtual void LayerRemoved(const std::string& /*image*/) {}
  // The tier's own metrics, whole Prometheus text lines (# HELP, # TYPE
  // and samples) with names starting dsec_<tier>_; "" for none.
  virtual std::string MetricsText() const { return ""; }
};

}  // namespace dsec::tier
