// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/daemon.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/daemon/container_tier.h"
#include "sandbox/daemon/fncall_tier.h"
#include "sandbox/daemon/microvm_tier.h"
#include "base/logging.h"

namespace dsec::daemon {

using nlohmann::json;

namespace {
FncallTierOptions FncallOptions(const DaemonOptions& o) {
  FncallTierOptions fo;
  fo.state_root = o.fncall_state_root;
  fo.max_workers_per_pool = o.fncall_max_workers;
  fo.max_unused_pools = o.fncall_max_unused_pools;
  return fo;
}

MicrovmTierOptions MicrovmOptions(const DaemonOptions& o) {
  MicrovmTierOptions m;
  if (!o.microvm_state_root.empty()) m.state_root = o.microvm_state_root;
  m.vm.kernel = o.microvm_kernel;
  m.vm.rootfs = o.microvm_rootfs;
  return m;
}
}  // namespace

std::vector<std::unique_ptr<Tier>> MakeTiers(const DaemonOptions& o) {
  // The tiers this node offers: one registration line each.
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<ContainerTier>(
      ContainerTierOptions{o.container_state_root, o.upper_size_bytes, o.container_init_pool}));
  tiers.push_back(std::make_unique<FncallTier>(FncallOptions(o)));
  tiers.push_back(std::make_unique<MicrovmTier>(MicrovmOptions(o)));
  return tiers;
}

json CleanupPreviousRun(const std::vector<std::unique_ptr<Tier>>& tiers) {
  json found = json::object();
  for (const auto& t : tiers) {
    const TierTraits& traits = t->traits();
    auto n = t->CleanupOrphans();
    found[absl::StrCat(traits.name, "_", traits.orphans)] = n.ok() ? *n : 0;
    if (!n.ok()) found[absl::StrCat(traits.name, "_error")] = n.status().ToString();
  }
  return found;
}

int RunDaemon(DaemonOptions o) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  for (const std::string& root : {o.container_state_root, o.fncall_state_root}) {
    ::mkdir(root.c_str(), 0700);  // parents: /run/dsec-vmm may be missing
  }
  if (o.container_state_root == container::kDefaultStateRoot) {
    ::mkdir("/run/dsec-vmm", 0755);
    ::mkdir(o.container_state_root.c_str(), 0700);
    if (auto m = container::MountStateRootTmpfs(o.container_state_root); !m.ok()) {
      DSEC_LOG(warn, "daemon: state root on tmpfs: {}", m.status().ToString());
    }
  }
  std::vector<std::unique_ptr<Tier>> tiers = MakeTiers(o);
  json recovered = CleanupPreviousRun(tiers);

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

  o.service.unavailable_tiers.emplace("fullvm", "the full-VM tier (libvirt/QEMU) is not built yet");
  Service service(o.service, std::move(tiers), std::move(store));
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
  // Ready line for supervisors and tests.
  printf("dsec-vmmd ready socket=%s tcp_port=%d\n", o.http.socket_path.c_str(), (*server)->tcp_port());
  fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  DSEC_LOG(info, "daemon: signal {}, stopping", sig);
  (*server)->Stop();
  service.DestroyAll();
  return 0;
}

}  // namespace dsec::daemon
