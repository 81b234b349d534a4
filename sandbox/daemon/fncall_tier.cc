// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/fncall_tier.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/fncall/pool.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::daemon {

namespace {

absl::Status NoState(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("fncall sandboxes keep no state between calls: ", what,
                   " is available on the container tier"));
}

class FncallTierSandbox : public TierSandbox {
 public:
  FncallTierSandbox(FncallTier* tier, std::shared_ptr<FncallTier::Shared> shared)
      : tier_(tier), shared_(std::move(shared)) {}
  ~FncallTierSandbox() override { (void)Destroy(); }

  absl::StatusOr<ExecOutcome> Exec(const ExecSpec& spec) override {
    if (shared_ == nullptr) return absl::FailedPreconditionError("sandbox destroyed");
    fncall::CallRequest req;
    req.code = spec.code;
    req.args = spec.argv;
    req.stdin_data = spec.stdin_data;
    if (!spec.env.empty()) {
      req.env = fncall::PoolConfig{}.env;
      for (const auto& [k, v] : spec.env) req.env.push_back(absl::StrCat(k, "=", v));
    }
    if (!spec.cwd.empty()) req.cwd = spec.cwd;
    req.timeout_ms = spec.timeout_ms;
    req.output_cap_bytes = spec.output_cap_bytes;
    req.on_output = spec.on_output;
    DSEC_ASSIGN_OR_RETURN(fncall::CallResult r, shared_->pool->Call(req));
    ExecOutcome out;
    out.exit_code = r.exit_code;
    out.signal = r.signal;
    switch (r.killed_by) {
      case fncall::KilledBy::kNone: break;
      case fncall::KilledBy::kTimeout: out.killed_by = "timeout"; break;
      case fncall::KilledBy::kMemory: out.killed_by = "memory"; break;
      case fncall::KilledBy::kOutputCap: out.killed_by = "output"; break;
      case fncall::KilledBy::kPids: out.killed_by = "pids"; break;
    }
    out.timed_out = r.killed_by == fncall::KilledBy::kTimeout;
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
  absl::StatusOr<std::vector<FileEntry>> ListDir(const std::string&) override { return NoState("files"); }
  absl::StatusOr<std::string> UpperDir() override { return NoState("pack_diff"); }
  absl::Status Destroy() override {
    if (shared_ == nullptr) return absl::OkStatus();
    std::string key = shared_->key;
    shared_.reset();
    tier_->Release(key);
    return absl::OkStatus();
  }

 private:
  FncallTier* tier_;
  std::shared_ptr<FncallTier::Shared> shared_;
};

}  // namespace

const TierTraits& FncallTier::traits() const {
  static const TierTraits kTraits = [] {
    TierTraits t;
    t.name = "fncall";
    t.langs = {"python", "bash"};
    t.exec_form = TierTraits::ExecForm::kCode;
    t.default_cwd = "/tmp";
    // Each call starts from a fresh scratch directory: nothing is left.
    t.persistent_files = false;
    t.orphans = "pools";
    t.default_layers = [](const std::string& lang) {
      return lang == "python" ? std::vector<std::string>{"base:bookworm", "python:1"}
                              : std::vector<std::string>{"base:bookworm"};
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

absl::StatusOr<std::unique_ptr<TierSandbox>> FncallTier::Create(const CreateSpec& spec) {
  // A placed sandbox (qos) gets a pool of its own inside its QoS cgroup:
  // sharing workers would put strangers' calls on an LS sandbox's core.
  const bool own_pool = spec.isolation != nullptr;
  const std::string key =
      own_pool ? absl::StrCat("qos|", spec.id)
               : absl::StrCat(absl::StrJoin(spec.images, ","), "|", spec.lang, "|", spec.memory_mib,
                              "|", spec.pids);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(key);
  if (it == pools_.end()) {
    fncall::PoolConfig c;
    uint32_t rnd = 0;
    if (::getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = static_cast<uint32_t>(::getpid());
    c.id = absl::StrFormat("d%d-%08x", ::getpid(), rnd);
    c.layers = spec.images;
    c.language = spec.lang == "bash" ? fncall::Language::kBash : fncall::Language::kPython;
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
    }
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<fncall::Pool> pool, fncall::Pool::Create(std::move(c)));
    auto shared = std::make_shared<Shared>();
    shared->key = key;
    shared->own = own_pool;
    shared->pool = std::move(pool);
    it = pools_.emplace(key, std::move(shared)).first;
  }
  it->second->users++;
  return std::unique_ptr<TierSandbox>(new FncallTierSandbox(this, it->second));
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
    DSEC_LOG(warn, "daemon: destroying fncall pool: {}", s.ToString());
  }
}

absl::StatusOr<int> FncallTier::CleanupOrphans() {
  return container::CleanupOrphans(options_.state_root);
}

}  // namespace dsec::daemon
