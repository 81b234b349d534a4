// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/daemon.h"

#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace dsec::daemon {

using nlohmann::json;

absl::StatusOr<std::vector<std::unique_ptr<tier::Tier>>> MakeTiers(
    const std::vector<std::unique_ptr<tier::TierSetup>>& setups,
    std::map<std::string, std::string>* unavailable) {
  std::vector<std::unique_ptr<tier::Tier>> tiers;
  for (const auto& setup : setups) {
    const std::string& name = setup->traits().name;
    absl::StatusOr<std::unique_ptr<tier::Tier>> t = setup->Make();
    if (t.ok()) {
      tiers.push_back(std::move(*t));
    } else if (absl::IsUnavailable(t.status())) {
      (*unavailable)[name] = std::string(t.status().message());
    } else {
      return absl::Status(t.status().code(), absl::StrCat("the ", name, " tier: ", t.status().message()));
    }
  }
  return tiers;
}

json CleanupPreviousRun(const std::vector<std::unique_ptr<tier::Tier>>& tiers) {
  json found = json::object();
  for (const auto& t : tiers) {
    const tier::TierTraits& traits = t->traits();
    auto n = t->CleanupOrphans();
    found[absl::StrCat(traits.name, "_", traits.orphans)] = n.ok() ? *n : 0;
    if (!n.ok()) found[absl::StrCat(traits.name, "_error")] = n.status().ToString();
  }
  return found;
}

int RunDaemon(DaemonOptions o, const std::vector<std::unique_ptr<tier::TierSetup>>& setups) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Request buffers of 256 KiB and more (bodies, file reads, answers) are
  // mmapped and go back to the kernel when freed. glibc's default raises
  // the mmap threshold to the size of each mmapped block freed (up to
  // 32 MiB), after which such buffers come from the worker threads'
  // arenas and stay: a malformed-request run left 436 MiB behind with the
  // default, under 8 MiB with the threshold fixed (docs/benchmarks.md).
  // malloc_trim after large frees would walk every arena under its lock
  // for what this returns at free.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);

  auto tiers = MakeTiers(setups, &o.service.unavailable_tiers);
  if (!tiers.ok()) {
    fprintf(stderr, "dsec-vmmd: %s\n", tiers.status().ToString().c_str());
    return 1;
  }
  json recovered = CleanupPreviousRun(*tiers);

  std::unique_ptr<trajectory::TrajectoryStore> store;
  if (!o.trajectory_dir.empty()) {
    trajectory::StoreOptions so;
    so.max_task_bytes = o.max_task_bytes;
    so.max_node_bytes = o.max_node_bytes;
    auto s = trajectory::TrajectoryStore::Open(o.trajectory_dir, so);
    if (!s.ok()) {
      fprintf(stderr, "dsec-vmmd: trajectory store %s: %s\n", o.trajectory_dir.c_str(),
              s.status().ToString().c_str());
      return 1;
    }
    store = std::move(*s);
    json logs = json::object();
    for (const auto& [task, what] : store->Recovered()) logs[task] = what;
    recovered["trajectory_logs_repaired"] = logs;
    recovered["trajectory_tasks"] = store->Tasks().size();
  }
  DSEC_LOG(info, "daemon: recovered from the previous run: {}", recovered.dump());

  // QoS placement through sched/ (logs what it found; never fatal). The
  // previous run's QoS cgroups went with its sandboxes' records above.
  if (o.qos_placement && o.service.qos == nullptr) o.service.qos = QosPlacer::ForHost();

  Service service(o.service, std::move(*tiers), std::move(store));
  service.SetRecovered(recovered);

  auto server = HttpServer::Start(&service, o.http);
  if (!server.ok()) {
    fprintf(stderr, "dsec-vmmd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (!o.http.socket_path.empty()) DSEC_LOG(info, "daemon: listening on {}", o.http.socket_path);
  if (!o.http.tcp_host.empty()) {
    DSEC_LOG(info, "daemon: listening on {}:{} (bearer token)", o.http.tcp_host, (*server)->tcp_port());
  }
  std::vector<std::unique_ptr<FrontEnd>> front_ends;
  for (const FrontEndStarter& start : o.front_ends) {
    auto fe = start(&service);
    if (!fe.ok()) {
      fprintf(stderr, "dsec-vmmd: %s\n", fe.status().ToString().c_str());
      for (auto& f : front_ends) f->Stop();
      (*server)->Stop();
      return 1;
    }
    front_ends.push_back(std::move(*fe));
  }
  // Ready line for supervisors and tests.
  printf("dsec-vmmd ready socket=%s tcp_port=%d\n", o.http.socket_path.c_str(), (*server)->tcp_port());
  fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  DSEC_LOG(info, "daemon: signal {}, stopping", sig);
  for (auto& f : front_ends) f->Stop();
  (*server)->Stop();
  service.DestroyAll();
  return 0;
}

}  // namespace dsec::daemon
