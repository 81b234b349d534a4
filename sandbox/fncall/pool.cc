// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/pool.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sched/isolation.h"
#include "sandbox/network/sandbox_network.h"
#include "base/file_io.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::fncall {

namespace {

// What a zygote holds before its first call, for sizing before one is
// measured.
constexpr uint64_t kPythonZygoteEstimate = 32ull << 20;
constexpr uint64_t kBashZygoteEstimate = 8ull << 20;
// Idle workers are looked at this often for retirement.
constexpr int64_t kRetireCheckMs = 1000;

// Waits on `cv` until notified or until MonotonicNowNs() reaches
// deadline_ns; true once the deadline has passed.
bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns) {
  const int64_t left_ns = deadline_ns - MonotonicNowNs();
  return left_ns <= 0 || cv.wait_for(lock, std::chrono::nanoseconds(left_ns)) == std::cv_status::timeout;
}

absl::Status Mkdir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoToStatus(absl::StrCat("mkdir ", path));
  }
  if (::chmod(path.c_str(), mode) != 0) return ErrnoToStatus(absl::StrCat("chmod ", path));
  return absl::OkStatus();
}

absl::Status ValidateConfig(const PoolConfig& c) {
  if (c.id.empty() || c.id.size() > 40 || c.id == "." || c.id == "..") {
    return absl::InvalidArgumentError(absl::StrCat("pool id \"", c.id, "\" must be 1-40 chars"));
  }
  for (char ch : c.id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' &&
        ch != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("pool id \"", c.id, "\" may hold only [A-Za-z0-9_.-]"));
    }
  }
  if (c.layers.empty()) return absl::InvalidArgumentError("a pool needs at least one layer");
  DSEC_RETURN_IF_ERROR(container::CheckLayerFiles(c.layers));
  // The overlay's lowerdir= list cannot carry these.
  if (c.state_root.empty() || c.state_root.find_first_of(":,") != std::string::npos) {
    return absl::InvalidArgumentError("state_root must be non-empty without ':' or ','");
  }
  if (c.limits.timeout_ms <= 0) return absl::InvalidArgumentError("timeout_ms must be positive");
  if (c.limits.memory_bytes != 0 && c.limits.memory_bytes < (4ull << 20)) {
    return absl::InvalidArgumentError("memory_bytes must be at least 4 MiB (or 0: no limit)");
  }
  if (c.max_workers < 1 || c.min_idle < 0 || c.min_idle > c.max_workers) {
    return absl::InvalidArgumentError("need 1 <= max_workers and 0 <= min_idle <= max_workers");
  }
  if (c.scratch_bytes < (1 << 20)) return absl::InvalidArgumentError("scratch_bytes < 1 MiB");
  if (c.hostname.empty() || c.hostname.size() > 64) {
    return absl::InvalidArgumentError("hostname must be 1-64 chars");
  }
  for (const std::string& m : c.preload) {
    for (char ch : m) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.') {
        return absl::InvalidArgumentError(absl::StrCat("preload module \"", m, "\" is not a name"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const container::SeccompProgram*> DefaultSeccomp() {
  static const absl::StatusOr<container::SeccompProgram>* program =
      new absl::StatusOr<container::SeccompProgram>(container::BuildDefaultSeccompProgram());
  if (!program->ok()) return program->status();
  return &**program;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(PoolConfig config) {
  DSEC_RETURN_IF_ERROR(ValidateConfig(config));
  if (config.interpreter.empty()) {
    config.interpreter = config.language == Language::kPython ? "/usr/bin/python3" : "/bin/bash";
  }
  DSEC_ASSIGN_OR_RETURN(const container::SeccompProgram* seccomp, DefaultSeccomp());
  DSEC_ASSIGN_OR_RETURN(container::StateDir state,
                        container::StateDir::Create(config.state_root, config.id));
  std::unique_ptr<Pool> pool(new Pool(std::move(config), std::move(state)));
  pool->seccomp_ = seccomp;
  // Any error below destroys `pool`, which undoes what was done.
  if (const sched::SandboxCgroup* qos = pool->config_.isolation ? pool->config_.isolation->cgroup()
                                                                 : nullptr) {
    DSEC_RETURN_IF_ERROR(pool->state_.RecordCgroup(qos->cpuset_dir().path()));
    if (qos->cpu_dir() != nullptr) DSEC_RETURN_IF_ERROR(pool->state_.RecordCgroup(qos->cpu_dir()->path()));
  }
  DSEC_RETURN_IF_ERROR(pool->MountRoot());
  const PoolConfig& c = pool->config_;
  uint64_t per_worker = c.limits.memory_bytes +
                        (c.language == Language::kPython ? kPythonZygoteEstimate : kBashZygoteEstimate);
  uint64_t fit = per_worker == 0 ? c.max_workers : c.memory_budget_bytes / per_worker;
  pool->max_workers_ = static_cast<int>(std::clamp<uint64_t>(fit, 1, c.max_workers));
  {
    std::lock_guard<std::mutex> lock(pool->mu_);
    pool->stats_.max_workers = pool->max_workers_;
  }
  pool->refill_ = std::thread([p = pool.get()] { p->RefillLoop(); });
  DSEC_LOG(debug, "fncall: pool={} language={} max_workers={}", c.id, LanguageName(c.language),
           pool->max_workers_);
  return pool;
}

absl::Status Pool::MountRoot() {
  const std::string& dir = state_.path();
  // Shared with the container tier's sandboxes and other pools on the same
  // images (layer_mounts.h); own mounts below the state dir otherwise.
  container::LayerMountCache& cache = container::LayerMountCache::Default();
  if (!cache.sharing()) DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/layers"), 0755));
  std::string lowers;
  std::vector<std::string> layer_dirs;
  for (size_t i = 0; i < config_.layers.size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(auto layer,
                          cache.Acquire(config_.layers[i], absl::StrCat(dir, "/layers/", i)));
    layer_dirs.push_back(layer->lower_dir());
    layer_mounts_.push_back(std::move(layer));
  }
  // The skeleton is the top lower layer: the mount points a worker needs,
  // whatever the layers hold. With no upper layer the root is read-only.
  const std::string skel = absl::StrCat(dir, "/skel");
  DSEC_RETURN_IF_ERROR(Mkdir(skel, 0755));
  for (const char* sub : {"/dev", "/proc", "/sys"}) {
    DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(skel, sub), 0755));
  }
  DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(skel, "/tmp"), 01777));
  if (config_.network) {
    // The node resolver, over whatever the layers hold (the root is
    // read-only; overlayfs merges skel/etc with the layers' /etc).
    DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(skel, "/etc"), 0755));
    DSEC_RETURN_IF_ERROR(
        dsec::WriteFile(absl::StrCat(skel, "/etc/resolv.conf"), config_.network->ResolvConf(), 0644));
  }
  lowers = skel;
  for (auto it = layer_dirs.rbegin(); it != layer_dirs.rend(); ++it) absl::StrAppend(&lowers, ":", *it);
  root_dir_ = absl::StrCat(dir, "/root");
  DSEC_RETURN_IF_ERROR(Mkdir(root_dir_, 0755));
  DSEC_ASSIGN_OR_RETURN(root_, container::Mount::Create("overlay", root_dir_, "overlay",
                                                        MS_RDONLY | MS_NOSUID | MS_NODEV,
                                                        absl::StrCat("lowerdir=", lowers)));
  return absl::OkStatus();
}

void Pool::RefillLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t backoff_ms = 0;
  while (!stopping_) {
    const int idle = static_cast<int>(idle_.size());
    const int total = idle + busy_ + starting_;
    const bool grow = idle + starting_ < config_.min_idle + waiters_ && total < max_workers_;
    if (grow && backoff_ms == 0) {
      WorkerOptions o;
      o.sequence = next_sequence_++;
      o.id = absl::StrCat(config_.id, "-w", o.sequence);
      o.dir = absl::StrCat(state_.path(), "/w", o.sequence);
      o.root = root_dir_;
      o.language = config_.language;
      o.interpreter = config_.interpreter;
      o.preload = config_.preload;
      o.seccomp = seccomp_;
      o.limits = config_.limits;
      o.scratch_bytes = config_.scratch_bytes;
      o.hostname = config_.hostname;
      o.setup_timeout_ms = config_.setup_timeout_ms;
      o.isolation = config_.isolation.get();
      o.network = config_.network.get();
      const container::StateDir* state = &state_;
      o.record_cgroup = [state](const std::string& d) { return state->RecordCgroup(d); };
      ++starting_;
      lock.unlock();
      auto worker = Worker::Start(o);
      lock.lock();
      --starting_;
      if (worker.ok()) {
        ++stats_.workers_started;
        consecutive_failures_ = 0;
        live_pids_.push_back((*worker)->pid());
        (*worker)->idle_since_ns = MonotonicNowNs();
        idle_.push_back(std::move(*worker));
      } else {
        ++stats_.setup_failures;
        ++consecutive_failures_;
        last_setup_error_ = worker.status();
        DSEC_LOG(warn, "fncall: pool={} worker {} setup failed: {}", config_.id, o.id,
                 worker.status().ToString());
        if (consecutive_failures_ >= config_.max_setup_failures) {
          backoff_ms = std::min<int64_t>(
              100ll << std::min(consecutive_failures_ - config_.max_setup_failures, 7), 10000);
        }
      }
      cv_.notify_all();
      continue;
    }
    // Retire the longest-idle worker beyond min_idle once it idled too long.
    if (!grow && idle > config_.min_idle + waiters_ &&
        MonotonicNowNs() - idle_.front()->idle_since_ns > config_.idle_timeout_ms * 1'000'000) {
      std::unique_ptr<Worker> old = std::move(idle_.front());
      idle_.pop_front();
      live_pids_.erase(std::remove(live_pids_.begin(), live_pids_.end(), old->pid()),
                       live_pids_.end());
      ++stats_.workers_retired;
      lock.unlock();
      old.reset();
      lock.lock();
      continue;
    }
    int64_t wait_ms = backoff_ms > 0 ? backoff_ms : kRetireCheckMs;
    refill_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms));
    backoff_ms = 0;
  }
}

absl::StatusOr<std::unique_ptr<Worker>> Pool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t deadline = MonotonicNowNs() + config_.setup_timeout_ms * 1'000'000;
  ++waiters_;
  if (idle_.empty()) refill_cv_.notify_one();
  absl::Status error;
  while (idle_.empty()) {
    if (stopping_) {
      error = absl::FailedPreconditionError("fncall pool is shutting down");
      break;
    }
    if (consecutive_failures_ >= config_.max_setup_failures) {
      error = absl::UnavailableError(absl::StrCat(
          "fncall: workers cannot be set up: ", last_setup_error_.ToString()));
      break;
    }
    if (WaitUntil(cv_, lock, deadline) && idle_.empty()) {
      error = absl::DeadlineExceededError("fncall: no worker became ready in time");
      break;
    }
  }
  --waiters_;
  if (!error.ok()) return error;
  std::unique_ptr<Worker> w = std::move(idle_.front());
  idle_.pop_front();
  ++busy_;
  // Keep min_idle warm behind this call (only wake the refill thread when
  // it can act: a wake-up per call costs a context switch).
  if (static_cast<int>(idle_.size()) + starting_ < config_.min_idle &&
      static_cast<int>(idle_.size()) + busy_ + starting_ < max_workers_) {
    refill_cv_.notify_one();
  }
  return w;
}

void Pool::Release(std::unique_ptr<Worker> worker) {
  std::unique_lock<std::mutex> lock(mu_);
  --busy_;
  ++stats_.calls;
  if (!worker->broken()) {
    worker->idle_since_ns = MonotonicNowNs();
    idle_.push_back(std::move(worker));
    cv_.notify_all();
    return;
  }
  ++stats_.workers_replaced;
  live_pids_.erase(std::remove(live_pids_.begin(), live_pids_.end(), worker->pid()),
                   live_pids_.end());
  refill_cv_.notify_one();
  cv_.notify_all();
  lock.unlock();
  worker.reset();  // kills the zygote, removes its cgroups and scratch
}

CallLimits Pool::LimitsFor(const CallRequest& r) const {
  CallLimits l = config_.limits;
  if (r.timeout_ms) l.timeout_ms = *r.timeout_ms;
  if (r.memory_bytes) l.memory_bytes = *r.memory_bytes;
  if (r.pids) l.pids = *r.pids;
  if (r.output_cap_bytes) l.output_cap_bytes = *r.output_cap_bytes;
  if (r.output_rate_bytes_per_s) l.output_rate_bytes_per_s = *r.output_rate_bytes_per_s;
  return l;
}

absl::StatusOr<CallResult> Pool::Call(const CallRequest& request) {
  const CallLimits limits = LimitsFor(request);
  if (limits.timeout_ms <= 0) return absl::InvalidArgumentError("timeout_ms must be positive");
  if (limits.memory_bytes != 0 && limits.memory_bytes < (4ull << 20)) {
    return absl::InvalidArgumentError("memory_bytes must be at least 4 MiB (or 0: no limit)");
  }
  if (limits.memory_bytes > config_.limits.memory_bytes && config_.limits.memory_bytes != 0) {
    return absl::InvalidArgumentError("memory_bytes exceeds the pool's limit");
  }
  if (request.cwd.find('\0') != std::string::npos || request.cwd.empty() || request.cwd[0] != '/') {
    return absl::InvalidArgumentError("cwd must be an absolute path");
  }
  const std::vector<std::string>& env = request.env.empty() ? config_.env : request.env;
  for (int attempt = 0;; ++attempt) {
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<Worker> w, Acquire());
    bool delivered = false;
    auto result = w->Call(request, env, limits, &delivered);
    if (result.ok()) {
      if (absl::Status s = w->WipeScratch(); !s.ok()) {
        DSEC_LOG(warn, "fncall: pool={} {}", config_.id, s.ToString());
      }
    }
    Release(std::move(w));
    // A zygote that died while idle never saw the request: try another.
    if (!result.ok() && !delivered && !absl::IsInvalidArgument(result.status()) && attempt < 2) {
      continue;
    }
    return result;
  }
}

absl::Status Pool::WaitReady(int n, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t deadline = MonotonicNowNs() + timeout_ms * 1'000'000;
  waiters_ += n;  // ask the refill thread for them
  refill_cv_.notify_one();
  absl::Status error;
  while (static_cast<int>(idle_.size()) < std::min(n, max_workers_)) {
    if (consecutive_failures_ >= config_.max_setup_failures) {
      error = absl::UnavailableError(absl::StrCat("fncall: workers cannot be set up: ",
                                                  last_setup_error_.ToString()));
      break;
    }
    if (WaitUntil(cv_, lock, deadline)) {
      error = absl::DeadlineExceededError(
          absl::StrCat("fncall: ", idle_.size(), " of ", n, " workers ready in time"));
      break;
    }
  }
  waiters_ -= n;
  return error;
}

PoolStats Pool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PoolStats s = stats_;
  s.idle = static_cast<int>(idle_.size());
  s.busy = busy_;
  s.starting = starting_;
  return s;
}

std::vector<pid_t> Pool::WorkerPids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_pids_;
}

Pool::~Pool() {
  if (absl::Status s = Destroy(); !s.ok()) {
    DSEC_LOG(warn, "fncall: pool={} destroy: {}", config_.id, s.ToString());
  }
}

absl::Status Pool::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  std::deque<std::unique_ptr<Worker>> idle;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    refill_cv_.notify_all();
    cv_.notify_all();
    // Calls in flight give their workers back first.
    cv_.wait_for(lock, std::chrono::seconds(30), [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return busy_ == 0;
    });
  }
  if (refill_.joinable()) refill_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle.swap(idle_);
    live_pids_.clear();
  }
  absl::Status first;
  auto note = [&first](absl::Status s) {
    if (!s.ok() && first.ok()) first = s;
  };
  for (auto& w : idle) note(w->Destroy());
  idle.clear();
  note(root_.Unmount());
  layer_mounts_.clear();  // shared ones stay cached; own ones unmount
  if (first.ok()) note(state_.Remove());
  return first;
}

}  // namespace dsec::fncall
