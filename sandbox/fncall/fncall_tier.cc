// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/fncall_tier.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/fncall/pool.h"
#include "sandbox/network/sandbox_network.h"

namespace dsec::fncall {


namespace {

absl::Status NoState(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("fncall sandboxes keep no state between calls: ", what,
                   " is available on the container tier"));
}

class FncallTierSandbox : public tier::TierSandbox {
 public:
  FncallTierSandbox(FncallTier* tier, std::shared_ptr<FncallTier::Shared> shared,
                    std::shared_ptr<network::SandboxNetwork> network)
      : tier_(tier), shared_(std::move(shared)), network_(std::move(network)) {}
  ~FncallTierSandbox() override { (void)Destroy(); }

  absl::StatusOr<tier::ExecOutcome> Exec(const tier::ExecSpec& spec) override {
    if (shared_ == nullptr) return absl::FailedPreconditionError("sandbox destroyed");
    CallRequest req;
    req.code = spec.code;
    req.args = spec.argv;
    req.stdin_data = spec.stdin_data;
    if (!spec.env.empty()) {
      req.env = PoolConfig{}.env;
      for (const auto& [k, v] : spec.env) req.env.push_back(absl::StrCat(k, "=", v));
    }
    if (!spec.cwd.empty()) req.cwd = spec.cwd;
    req.timeout_ms = spec.timeout_ms;
    req.output_cap_bytes = spec.output_cap_bytes;
    req.on_output = spec.on_output;
    DSEC_ASSIGN_OR_RETURN(CallResult r, shared_->pool->Call(req));
    tier::ExecOutcome out;
    out.exit_code = r.exit_code;
    out.signal = r.signal;
    switch (r.killed_by) {
      case KilledBy::kNone: break;
      case KilledBy::kTimeout: out.killed_by = "timeout"; break;
      case KilledBy::kMemory: out.killed_by = "memory"; break;
      case KilledBy::kOutputCap: out.killed_by = "output"; break;
      case KilledBy::kPids: out.killed_by = "pids"; break;
    }
    out.timed_out = r.killed_by == KilledBy::kTimeout;
    out.stdout_data = std::move(r.stdout_data);
    out.stderr_data = std::move(r.stderr_data);
    out.stdout_dropped = r.stdout_dropped;
    out.stderr_dropped = r.stderr_dropped;
    out.duration_ms = static_cast<double>(r.wall_ns) / 1e6;
    return out;
  }
  absl::Status Pause() override { return NoState("pause"); }
  absl::Status Resume() override { return NoState("resume"); }
  absl::StatusOr<std::string> ReadFile(const std::string&, uint64_t) override { return NoState("files"); }
  absl::Status WriteFile(const std::string&, const std::string&, uint32_t) override {
    return NoState("files");
  }
  absl::StatusOr<std::vector<tier::FileEntry>> ListDir(const std::string&) override { return NoState("files"); }
  absl::StatusOr<std::string> UpperDir() override { return NoState("pack_diff"); }
  std::shared_ptr<network::SandboxNetwork> network() const override { return network_; }
  absl::Status Destroy() override {
    if (shared_ == nullptr) return absl::OkStatus();
    std::string key = shared_->key;
    shared_.reset();
    // A sandbox with a network has its pool alone: its workers (and their
    // addresses, veths and cgroups) go here; then the policy.
    tier_->Release(key);
    if (network_) network_->Close();
    return absl::OkStatus();
  }

 private:
  FncallTier* tier_;
  std::shared_ptr<FncallTier::Shared> shared_;
  std::shared_ptr<network::SandboxNetwork> network_;
};

}  // namespace

const tier::TierTraits& FncallTierTraits() {
  static const tier::TierTraits kTraits = [] {
    tier::TierTraits t;
    t.name = "fncall";
    tier::OptionSpec lang;
    lang.name = "lang";
    lang.choices = {"python", "bash"};
    lang.default_value = "python";
    t.options = {lang};
    t.exec_form = tier::TierTraits::ExecForm::kCode;
    t.default_cwd = "/tmp";
    // Each call starts from a fresh scratch directory: nothing is left.
    t.persistent_files = false;
    t.orphans = "pools";
    // A sandbox with a network gets a pool of its own whose workers each
    // join it (sandbox/network's SandboxNetwork::Join).
    t.network = true;
    // A sandbox is a lease on the node's warm pool of workers: creating
    // one adds no task, descriptor or cgroup (measured), only the
    // daemon's bookkeeping. With a network it gets a pool of its own
    // (measured: its zygote and workers, their cgroups, three mounts in
    // the host's table, the policy's BPF descriptors).
    t.footprint = {.memory_bytes = 64 << 10};
    t.network_footprint = {.memory_bytes = 3 << 20, .pids = 5, .fds = 25, .mounts = 3, .cgroups = 2, .netns = 1};
    t.default_layers = [](const tier::TierOptions& o) {
      return tier::OptionString(o, "lang", "python") == "python"
                 ? std::vector<std::string>{"base:bookworm", "python:1"}
                 : std::vector<std::string>{"base:bookworm"};
    };
    // A call is its language, its script, then its arguments.
    t.recorded_command = [](const tier::TierOptions& o, const tier::ExecSpec& spec) {
      std::vector<std::string> argv = {tier::OptionString(o, "lang", "python"), "-c", spec.code};
      argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
      return argv;
    };
    return t;
  }();
  return kTraits;
}

FncallTier::~FncallTier() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, shared] : pools_) {
    if (shared->pool) (void)shared->pool->Destroy();
  }
}

int FncallTier::pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(pools_.size());
}

absl::StatusOr<std::unique_ptr<tier::TierSandbox>> FncallTier::Create(const tier::CreateSpec& spec) {
  const std::string lang = tier::OptionString(spec.options, "lang", "python");
  if (spec.network && spec.node_network == nullptr) {
    return absl::InternalError("a network was asked for without the node's network");
  }
  // A placed sandbox (qos) gets a pool of its own inside its QoS cgroup:
  // sharing workers would put strangers' calls on an LS sandbox's core.
  // So does one with a network: its workers carry its address and policy.
  const bool own_pool = spec.isolation != nullptr || spec.network != nullptr;
  const std::string key =
      own_pool ? absl::StrCat("own|", spec.id)
               : absl::StrCat(absl::StrJoin(spec.images, ","), "|", lang, "|", spec.memory_mib,
                              "|", spec.pids);
  std::shared_ptr<network::SandboxNetwork> net;
  if (spec.network) {
    // The policy first (Unavailable where it cannot be enforced); the
    // workers join it as the pool starts them.
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<network::SandboxNetwork> n,
                          network::SandboxNetwork::CreateShared(spec.node_network, *spec.network));
    net = std::move(n);
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pools_.find(key);
  if (it == pools_.end()) {
    PoolConfig c;
    uint32_t rnd = 0;
    if (::getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = static_cast<uint32_t>(::getpid());
    c.id = absl::StrFormat("d%d-%08x", ::getpid(), rnd);
    c.layers = spec.images;
    c.language = lang == "bash" ? Language::kBash : Language::kPython;
    c.limits.memory_bytes = spec.memory_mib << 20;
    c.limits.pids = spec.pids;
    c.max_workers = options_.max_workers_per_pool;
    c.min_idle = options_.min_idle;
    c.state_root = options_.state_root;
    if (own_pool) {
      // One operation at a time per sandbox: one worker busy, one ready.
      c.max_workers = std::min(c.max_workers, 2);
      c.min_idle = std::min(c.min_idle, c.max_workers);
      c.isolation = spec.isolation;
      c.network = net;
    }
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<Pool> pool, Pool::Create(std::move(c)));
    auto shared = std::make_shared<Shared>();
    shared->key = key;
    shared->own = own_pool;
    shared->pool = std::move(pool);
    it = pools_.emplace(key, std::move(shared)).first;
  }
  it->second->users++;
  std::unique_ptr<tier::TierSandbox> sandbox(new FncallTierSandbox(this, it->second, net));
  if (net) {
    // A network its workers cannot join (no cgroup v2 hierarchy, the
    // kernel refusing the programs) fails the create with the reason,
    // rather than every call.
    Pool* pool = it->second->pool.get();
    lock.unlock();
    if (absl::Status s = pool->WaitReady(1, PoolConfig{}.setup_timeout_ms); !s.ok()) {
      (void)sandbox->Destroy();
      return Annotate(s, "network");
    }
  }
  return sandbox;
}

void FncallTier::Release(const std::string& key) {
  std::shared_ptr<Shared> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(key);
    if (it == pools_.end()) return;
    if (--it->second->users > 0) return;
    it->second->released = ++release_seq_;
    if (it->second->own) {
      // A placed sandbox's pool is its alone (its QoS cgroup goes with the
      // sandbox): never kept warm.
      gone = std::move(it->second);
      pools_.erase(it);
    } else {
      // Keep it warm unless too many pools sit unused: then the one unused
      // longest goes.
      int unused = 0;
      auto oldest = pools_.end();
      for (auto p = pools_.begin(); p != pools_.end(); ++p) {
        if (p->second->users > 0 || p->second->own) continue;
        ++unused;
        if (oldest == pools_.end() || p->second->released < oldest->second->released) oldest = p;
      }
      if (unused <= options_.max_unused_pools) return;
      gone = std::move(oldest->second);
      pools_.erase(oldest);
    }
  }
  // Outside the lock: stopping workers takes a while.
  if (absl::Status s = gone->pool->Destroy(); !s.ok()) {
    DSEC_LOG(warn, "fncall: destroying a pool: {}", s.ToString());
  }
}

absl::StatusOr<int> FncallTier::CleanupOrphans() {
  return container::CleanupOrphans(options_.state_root);
}

std::string FncallTier::MetricsText() const {
  int in_use = 0, warm = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, shared] : pools_) (shared->users > 0 ? in_use : warm)++;
  }
  return absl::StrFormat(
      "# HELP dsec_fncall_pools fncall worker pools: used by a sandbox, or kept warm.\n"
      "# TYPE dsec_fncall_pools gauge\n"
      "dsec_fncall_pools{state=\"in_use\"} %d\n"
      "dsec_fncall_pools{state=\"warm\"} %d\n",
      in_use, warm);
}

FncallTierSetup::FncallTierSetup() { options_.state_root = kDefaultStateRoot; }

void FncallTierSetup::AddFlags(CLI::App& app) {
  app.add_option("--fncall-state-dir", options_.state_root, "fncall pools' state")->capture_default_str();
  app.add_option("--fncall-max-workers", options_.max_workers_per_pool, "Workers per fncall pool")
      ->capture_default_str();
  app.add_option("--fncall-warm-pools", options_.max_unused_pools,
                 "fncall pools kept warm after their last sandbox is deleted")
      ->capture_default_str();
}

absl::StatusOr<std::unique_ptr<tier::Tier>> FncallTierSetup::Make() {
  // Each pool's state dir makes missing parents; the root is made now for
  // the orphan cleanup, which runs before any pool exists.
  ::mkdir(options_.state_root.c_str(), 0700);
  return std::unique_ptr<tier::Tier>(new FncallTier(options_));
}

}  // namespace dsec::fncall
