// SPDX-License-Identifier: Apache-2.0
// dsec-vmmd: the node daemon (`dsec-vmm serve` execs it). Parses flags (its
// own and each tier's, node_tiers.h), wires the layer references of create
// requests to the layer store (sandbox/layers/layer_refs.h: base:bookworm is
// built on first use) and runs sandbox/daemon.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sandbox/layers/layer_refs.h"
#include "base/file_io.h"
#include "sandbox/daemon/daemon.h"
#include "sandbox/daemon/front_end.h"
#include "sandbox/daemon/node_capacity.h"
#include "sandbox/daemon/node_tiers.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/network/node_network.h"
#include "base/logging.h"
#include "base/status.h"

namespace {

constexpr char kPythonToolkit[] = "python:1";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dsec-vmmd: the dsec-vmm node daemon (REST/JSON API, docs/api.yaml)"};
  dsec::daemon::DaemonOptions o;
  const std::vector<std::unique_ptr<dsec::tier::TierSetup>> tiers = dsec::daemon::NodeTiers();
  std::string listen, token_file, log_level = "info";
  const char* store_env = std::getenv("DSEC_LAYER_STORE");
  std::string store = store_env != nullptr && *store_env != '\0' ? store_env : dsec::layers::kDefaultStoreRoot;
  uint64_t task_quota_mib = 64, node_quota_mib = 4096;
  app.add_option("--socket", o.http.socket_path, "Unix socket of the API (mode 0600, directory 0700)")
      ->capture_default_str();
  app.add_option("--listen", listen, "Also listen on TCP HOST:PORT (needs --token-file)");
  app.add_option("--token-file", token_file, "Bearer token for TCP clients (first line of the file)");
  app.add_option("--trajectory-dir", o.trajectory_dir, "Trajectory logs")->capture_default_str();
  app.add_option("--task-quota-mib", task_quota_mib, "Trajectory bytes per task")->capture_default_str();
  app.add_option("--node-quota-mib", node_quota_mib, "Trajectory bytes per node")->capture_default_str();
  app.add_option("--store", store, "Layer store (env DSEC_LAYER_STORE)")->capture_default_str();
  o.service.snapshot_dir = dsec::daemon::kDefaultSnapshotDir;
  app.add_option("--snapshot-dir", o.service.snapshot_dir,
                 "Sandbox snapshots' records (their files are layers of the store; \"\" = none)")
      ->capture_default_str();
  std::vector<std::string> image_dirs;
  app.add_option("--layer-image-dir", image_dirs,
                 "A directory whose EROFS images creates may name by absolute path (repeatable; the "
                 "store's own images always can; anything else must be a store reference)");
  uint64_t max_layer_mib = o.service.max_layer_bytes >> 20;
  uint64_t layer_reserve_mib = o.service.layer_store_reserve_bytes >> 20;
  app.add_option("--max-layer-mib", max_layer_mib, "Largest layer pack_diff makes (sparse files count whole)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  app.add_option("--layer-store-reserve-mib", layer_reserve_mib,
                 "Disk space pack_diff leaves free on the layer store's file system")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
  app.add_option("--max-sandboxes", o.service.max_sandboxes, "Sandboxes per node")->capture_default_str();
  std::vector<std::string> capacity_limits;
  app.add_option("--capacity-limit", capacity_limits,
                 "NAME=N: count at most N of a node resource (memory in MiB, pids, fds, mounts, cgroups, "
                 "netns, inotify), below what the host allows; repeatable");
  dsec::daemon::CapacityOptions capacity;
  int64_t memory_reserve_mib = capacity.reserve[static_cast<int>(dsec::daemon::Resource::kMemory)] >> 20;
  app.add_option("--memory-reserve-mib", memory_reserve_mib,
                 "Host memory (MemAvailable) a create must leave free")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  bool no_capacity_check = false;
  app.add_flag("--no-capacity-check", no_capacity_check,
               "Do not check the node's resources at create (only --max-sandboxes)");
  app.add_option("--max-concurrent-execs", o.service.max_concurrent_execs, "Execs running at once")
      ->capture_default_str();
  app.add_option("--threads", o.http.threads, "HTTP worker threads per listener")->capture_default_str();
  app.add_option("--max-connections-per-client", o.http.max_connections_per_client,
                 "Open API connections per client (TCP: address; unix socket: process), per listener")
      ->capture_default_str();
  app.add_option("--max-connections", o.http.max_connections, "Open API connections per listener")
      ->capture_default_str();
  app.add_option("--header-timeout-ms", o.http.header_timeout_ms,
                 "A request head must arrive within this of its first byte (408 after)")
      ->capture_default_str();
  app.add_option("--body-timeout-ms", o.http.body_timeout_ms,
                 "A request body must arrive within this of its head (408 after)")
      ->capture_default_str();
  bool no_qos_placement = false;
  app.add_flag("--no-qos-placement", no_qos_placement,
               "Do not place sandboxes by their qos through sched/ (they report qos_applied=false)");
  dsec::network::NodeNetworkOptions net;
  std::vector<std::string> uplinks;
  app.add_option("--net-subnet", net.subnet, "IPv4 subnet of sandboxes with a network (one daemon per subnet)")
      ->capture_default_str();
  app.add_option("--net-uplink", uplinks,
                 "Interfaces sandbox traffic leaves by, NATed (default: the default route's; 'none': "
                 "sandboxes reach only this node)");
  app.add_option("--net-dns-upstream", net.dns_upstream,
                 "The node resolver's upstream server (default: /etc/resolv.conf's first)");
  net.netns_ahead = 4;
  app.add_option("--net-netns-ahead", net.netns_ahead,
                 "Network namespaces wired ahead for container creates (each holds an address; 0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")->capture_default_str();
  for (const auto& t : tiers) t->AddFlags(app);
  // Other APIs linked into this binary (front_end.h), each with its flags.
  const std::vector<std::unique_ptr<dsec::daemon::FrontEndSetup>> front_ends = dsec::daemon::LinkedFrontEnds();
  for (const auto& f : front_ends) f->AddFlags(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  dsec::log::SetLevel(log_level);
  for (const auto& f : front_ends) {
    auto start = f->Starter();
    if (!start.ok()) {
      fprintf(stderr, "dsec-vmmd: %s\n", std::string(start.status().message()).c_str());
      return 2;
    }
    if (*start) o.front_ends.push_back(*std::move(start));
  }
  for (const std::string& l : capacity_limits) {
    const auto eq = l.find('=');
    const auto r = dsec::daemon::ResourceByName(l.substr(0, eq == std::string::npos ? 0 : eq));
    int64_t n = 0;
    if (eq == std::string::npos || !r || !absl::SimpleAtoi(l.substr(eq + 1), &n) || n < 0 ||
        n > (int64_t{1} << 40)) {
      fprintf(stderr,
              "dsec-vmmd: --capacity-limit %s: want NAME=N, NAME one of memory (MiB), pids, fds, mounts, "
              "cgroups, netns, inotify\n",
              l.c_str());
      return 2;
    }
    capacity.limits[*r] = *r == dsec::daemon::Resource::kMemory ? n << 20 : n;
  }
  capacity.reserve[static_cast<int>(dsec::daemon::Resource::kMemory)] = memory_reserve_mib << 20;
  // Every sandbox holds descriptors here (pidfds, control sockets, its
  // writable layer): as many as the host allows.
  DSEC_LOG(info, "daemon: {}", dsec::daemon::RaiseOpenFileLimit());
  if (!no_capacity_check) {
    o.service.capacity = std::make_shared<dsec::daemon::NodeCapacity>(std::move(capacity));
  }
  o.service.max_layer_bytes = max_layer_mib << 20;
  o.service.layer_store_reserve_bytes = layer_reserve_mib << 20;
  o.max_task_bytes = task_quota_mib << 20;
  o.max_node_bytes = node_quota_mib << 20;
  o.qos_placement = !no_qos_placement;
  if (o.http.threads < 2 || o.http.threads > 1024) {
    fprintf(stderr, "dsec-vmmd: --threads must be in [2, 1024]\n");
    return 2;
  }
  if (o.http.max_connections_per_client < 1 || o.http.max_connections < o.http.max_connections_per_client ||
      o.http.header_timeout_ms < 100 || o.http.body_timeout_ms < 100) {
    fprintf(stderr,
            "dsec-vmmd: --max-connections-per-client must be >= 1 and <= --max-connections; "
            "timeouts at least 100 ms\n");
    return 2;
  }
  if (!listen.empty()) {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos) {
      fprintf(stderr, "dsec-vmmd: --listen wants HOST:PORT\n");
      return 2;
    }
    o.http.tcp_host = listen.substr(0, colon);
    o.http.tcp_port = atoi(listen.substr(colon + 1).c_str());
    if (o.http.tcp_port < 0 || o.http.tcp_port > 65535) {
      fprintf(stderr, "dsec-vmmd: bad port in --listen\n");
      return 2;
    }
    if (token_file.empty()) {
      fprintf(stderr, "dsec-vmmd: --listen needs --token-file (TCP clients must authenticate)\n");
      return 2;
    }
    std::ifstream in(token_file);
    std::string line;
    if (!in || !std::getline(in, line) || absl::StripAsciiWhitespace(line).size() < 16) {
      fprintf(stderr, "dsec-vmmd: %s must hold a token of at least 16 characters\n", token_file.c_str());
      return 2;
    }
    o.http.token = std::string(absl::StripAsciiWhitespace(line));
  }
  o.service.layer_store = store;
  if (uplinks.empty()) {
    if (std::string def = dsec::network::DefaultRouteInterface(); !def.empty()) uplinks = {def};
  }
  if (!(uplinks.size() == 1 && uplinks[0] == "none")) net.uplinks = uplinks;
  // Restart cleanup: what a killed predecessor's node network left.
  if (auto stale = dsec::network::CleanupStaleNodeNetwork(net.subnet); !stale.ok()) {
    DSEC_LOG(warn, "network: restart cleanup: {}", stale.status().ToString());
  }
  // Made on the first create that asks for a network; lives until exit.
  static dsec::network::NodeNetworkProvider node_network(net);
  o.service.node_network = [] { return node_network.Get(); };
  o.service.network_health = [] { return node_network.Health(); };

  // dsec-vmm (for the base-layer script's `layer build`) lives beside us.
  std::string self = dsec::SelfExePath();
  std::string dir = self.substr(0, self.rfind('/'));
  dsec::layers::LayerRefOptions lo;
  lo.store_root = store;
  lo.dsec_vmm = dir + "/dsec-vmm";
  lo.build_script = dsec::layers::FindBaseLayerScript(lo.dsec_vmm);
  // Clients name layers: store references, or images under the store or a
  // --layer-image-dir (the kernel parses whatever file it is given as
  // EROFS).
  lo.untrusted_args = true;
  {
    auto made = dsec::layers::LayerStore::Create(store);  // its layers/ must exist to be resolved
    if (!made.ok()) DSEC_LOG(warn, "layer store {}: {}", store, made.status().ToString());
    image_dirs.insert(image_dirs.begin(), store + "/layers");
    auto dirs = dsec::layers::CanonicalImageDirs(image_dirs);
    if (!dirs.ok()) {
      fprintf(stderr, "dsec-vmmd: --layer-image-dir: %s\n", std::string(dirs.status().message()).c_str());
      return 2;
    }
    lo.image_dirs = *dirs;
  }
  o.service.resolve_layers = [lo](const std::string&, const std::vector<std::string>& refs)
      -> absl::StatusOr<std::vector<std::string>> {
    auto images = dsec::layers::ResolveLayerRefs(refs, lo);
    if (absl::IsNotFound(images.status()) &&
        std::find(refs.begin(), refs.end(), kPythonToolkit) != refs.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", kPythonToolkit, " layer is missing: run `dsec-vmm sandbox run --tier fncall -- "
          "'print(1)'` once (it builds it) or name layers explicitly (",
          images.status().message(), ")"));
    }
    return images;
  };
  return dsec::daemon::RunDaemon(std::move(o), tiers);
}
