// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm sandbox run --tier container`: creates a container sandbox from
// EROFS layers, runs one command in it, prints its output and exits with its
// status; the sandbox is destroyed on the way out.
#include "cmd/container_commands.h"

#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sandbox/layers/layer_refs.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"
#include "cmd/fncall_commands.h"
#include "cmd/microvm_commands.h"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/container_tier.h"
#include "sandbox/container/netns_pool.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/policy.h"
#include "sandbox/network/sandbox_network.h"
#include "base/logging.h"

namespace dsec::cmd {

namespace {

// Exit statuses besides the command's own (as timeout(1) and docker use).
constexpr int kExitTimeout = 124;
constexpr int kExitRuntimeError = 125;
constexpr int kExitNotFound = 127;

struct RunOptions {
  std::string tier = "container";
  std::string lang = "python";  // --tier fncall
  std::vector<std::string> layers;  // image files or store references; none = base:bookworm
  std::string store;                // layer store for references
  uint64_t memory_mib = 512;
  uint64_t pids = 512;
  double cpus = 0;
  uint64_t upper_mib = 1024;
  int64_t timeout_s = 60;
  uint64_t output_cap_bytes = 16 << 20;
  uint64_t output_rate_bytes = 0;
  std::vector<std::string> env;
  std::string cwd = "/";
  std::string state_dir = container::kDefaultStateRoot;
  std::string log_level = "warn";
  // --userns: a user namespace whose root is --userns-base outside (uids
  // and gids base .. base+65535).
  bool userns = false;
  uint32_t userns_base = 1u << 20;
  // --allow / --deny: a network with this egress policy (sandbox/network);
  // neither: no network. The node network's options as the daemon's.
  std::vector<std::string> allow, deny;
  std::string net_subnet = "10.201.0.0/16";
  std::vector<std::string> net_uplinks;
  std::string net_dns_upstream;
  // --tier microvm ("" = the tier's defaults)
  std::string microvm_kernel;
  std::string microvm_rootfs;
  std::string microvm_state_dir;
  std::vector<std::string> command;
};

void WriteAll(FILE* f, const std::string& data) {
  if (!data.empty()) fwrite(data.data(), 1, data.size(), f);
  fflush(f);
}

int Run(const RunOptions& o) {
  log::SetLevel(o.log_level);
  if ((!o.allow.empty() || !o.deny.empty()) && o.tier != "container") {
    fprintf(stderr, "dsec-vmm: --allow/--deny: `sandbox run --tier %s` gives no network yet\n", o.tier.c_str());
    return 2;
  }
  if (o.tier == "fncall") {
    return RunFncall({o.lang, o.layers, o.store, o.memory_mib, o.pids, o.timeout_s,
                      o.output_cap_bytes, o.output_rate_bytes, o.env, o.cwd == "/" ? "/tmp" : o.cwd,
                      o.log_level, o.command});
  }
  if (o.tier == "microvm") {
    return RunMicrovm({o.layers, o.store, o.memory_mib, o.cpus, o.timeout_s, o.output_cap_bytes,
                       o.output_rate_bytes, o.env, o.cwd == "/" ? "" : o.cwd, o.microvm_kernel,
                       o.microvm_rootfs, o.microvm_state_dir, o.log_level, o.command});
  }
  if (o.tier != "container") {
    fprintf(stderr, "dsec-vmm: tier \"%s\" is not available\n", o.tier.c_str());
    return 2;
  }
  if (o.command.empty()) {
    fprintf(stderr, "dsec-vmm: no command given (sandbox run ... -- CMD ARGS)\n");
    return 2;
  }
  // One sandbox in this process: namespaces made ahead would be wasted.
  container::NetnsPool::SetDefaultTarget(0);
  // The default state root lives in memory (a tmpfs if /run is on disk).
  if (o.state_dir == container::kDefaultStateRoot) {
    if (auto m = container::MountStateRootTmpfs(o.state_dir); !m.ok()) {
      DSEC_LOG(warn, "container: state root on tmpfs: {}", m.status().ToString());
    }
  }
  // Sandboxes a killed runtime left behind go first.
  if (auto removed = container::CleanupOrphans(o.state_dir); !removed.ok()) {
    DSEC_LOG(warn, "container: orphan cleanup: {}", removed.status().ToString());
  }
  uint32_t rnd = 0;
  if (::getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = static_cast<uint32_t>(::getpid());
  container::SandboxConfig config;
  config.id = absl::StrFormat("run-%d-%08x", ::getpid(), rnd);
  auto images = layers::ResolveLayerRefs(o.layers, layers::LayerRefOptionsFor(o.store, SelfExePath()));
  if (!images.ok()) {
    fprintf(stderr, "dsec-vmm: layers: %s\n", std::string(images.status().message()).c_str());
    return absl::IsNotFound(images.status()) || absl::IsInvalidArgument(images.status())
               ? 2
               : kExitRuntimeError;
  }
  config.layers = std::move(*images);
  config.limits.memory_bytes = o.memory_mib << 20;
  config.limits.pids_max = o.pids;
  if (o.cpus > 0) {
    config.limits.cpu_quota_us = static_cast<int64_t>(o.cpus * config.limits.cpu_period_us);
  }
  config.upper_size_bytes = o.upper_mib << 20;
  config.state_root = o.state_dir;
  if (o.userns) {
    config.user_namespace = container::UserNamespaceMap{o.userns_base, o.userns_base, 65536};
  }
  // The network's policy is read before anything is made: a bad rule is
  // the caller's error (2), not the runtime's.
  std::optional<network::NetworkSpec> net_spec;
  if (!o.allow.empty() || !o.deny.empty()) {
    auto spec = network::ParseNetworkSpec(nlohmann::json{{"egress", {{"allow", o.allow}, {"deny", o.deny}}}});
    if (!spec.ok()) {
      fprintf(stderr, "dsec-vmm: %s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    net_spec = std::move(*spec);
  }
  std::unique_ptr<network::NodeNetwork> node;
  if (net_spec) {
    network::NodeNetworkOptions no;
    no.subnet = o.net_subnet;
    no.dns_upstream = o.net_dns_upstream;
    std::vector<std::string> uplinks = o.net_uplinks;
    if (uplinks.empty()) {
      if (std::string def = network::DefaultRouteInterface(); !def.empty()) uplinks = {def};
    }
    if (!(uplinks.size() == 1 && uplinks[0] == "none")) no.uplinks = uplinks;
    (void)network::CleanupStaleNodeNetwork(no.subnet);
    auto n = network::NodeNetwork::Create(no);
    if (!n.ok()) {
      fprintf(stderr, "dsec-vmm: sandbox network: %s\n", std::string(n.status().message()).c_str());
      return absl::IsInvalidArgument(n.status()) ? 2 : kExitRuntimeError;
    }
    node = std::move(*n);
  }
  auto sandbox = container::Sandbox::Create(std::move(config));
  if (!sandbox.ok()) {
    fprintf(stderr, "dsec-vmm: creating the sandbox: %s\n", sandbox.status().ToString().c_str());
    return kExitRuntimeError;
  }
  std::shared_ptr<network::SandboxNetwork> net;
  std::string made_cgroup;
  // Goes before the sandbox is destroyed below, and on every early return.
  auto close_network = [&] {
    if (net) net->Close();
    net.reset();
    if (!made_cgroup.empty()) (void)container::KillAndRemoveCgroup(made_cgroup);
    made_cgroup.clear();
  };
  if (net_spec) {
    absl::StatusOr<std::string> dir = container::SandboxCgroup2Dir(**sandbox, &made_cgroup);
    absl::StatusOr<std::shared_ptr<network::SandboxNetwork>> n =
        dir.ok() ? container::AddSandboxNetwork(**sandbox, *dir, node.get(), *net_spec)
                 : absl::StatusOr<std::shared_ptr<network::SandboxNetwork>>(dir.status());
    if (!n.ok()) {
      fprintf(stderr, "dsec-vmm: sandbox network: %s\n", n.status().ToString().c_str());
      (void)(*sandbox)->Destroy();
      close_network();
      return kExitRuntimeError;
    }
    net = std::move(*n);
  }
  container::ExecOptions exec;
  exec.argv = o.command;
  if (!o.env.empty()) {
    exec.env = container::SandboxConfig{}.env;
    for (const std::string& e : o.env) exec.env.push_back(e);
  }
  exec.cwd = o.cwd;
  exec.timeout_ms = o.timeout_s * 1000;
  exec.output_cap_bytes = o.output_cap_bytes;
  exec.output_rate_bytes_per_s = o.output_rate_bytes;
  auto result = (*sandbox)->Exec(exec);
  if (!result.ok()) {
    (void)(*sandbox)->Destroy();
    close_network();
    fprintf(stderr, "dsec-vmm: %s\n", result.status().ToString().c_str());
    return absl::IsNotFound(result.status()) || absl::IsPermissionDenied(result.status())
               ? kExitNotFound
               : kExitRuntimeError;
  }
  WriteAll(stdout, result->stdout_data);
  WriteAll(stderr, result->stderr_data);
  if (result->output_dropped_bytes > 0) {
    fprintf(stderr, "dsec-vmm: %llu output bytes dropped (cap %llu bytes)\n",
            static_cast<unsigned long long>(result->output_dropped_bytes),
            static_cast<unsigned long long>(o.output_cap_bytes));
  }
  if (result->oom_killed) fprintf(stderr, "dsec-vmm: the sandbox ran out of memory\n");
  int status = result->status();
  if (result->timed_out) {
    fprintf(stderr, "dsec-vmm: command timed out after %lld s\n",
            static_cast<long long>(o.timeout_s));
    status = kExitTimeout;
  }
  absl::Status destroyed = (*sandbox)->Destroy();
  close_network();
  if (!destroyed.ok()) {
    fprintf(stderr, "dsec-vmm: destroying the sandbox: %s\n", destroyed.ToString().c_str());
    return kExitRuntimeError;
  }
  return status;
}

// The "sandbox" group may already exist if another tier registered first.
CLI::App* SandboxGroup(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == "sandbox") return sub;
  }
  CLI::App* group = app.add_subcommand("sandbox", "Sandboxes: run commands in a tier");
  group->require_subcommand(1);
  return group;
}

}  // namespace

void RegisterContainerCommands(CLI::App& app, CommandRegistry& registry) {
  CLI::App* sandbox = SandboxGroup(app);
  auto opts = std::make_shared<RunOptions>();
  CLI::App* run = sandbox->add_subcommand(
      "run", "Create a sandbox, run CMD ARGS in it, print its output, exit with its status "
             "(124 timeout, 125 runtime error, 127 command not found)");
  run->add_option("--tier", opts->tier, "Sandbox tier")
      ->capture_default_str()
      ->check(CLI::IsMember({"container", "fncall", "microvm"}));
  run->add_option("--microvm-kernel", opts->microvm_kernel,
                  "microvm tier: guest kernel (default <cache>/guest-kernel/current/vmlinux)");
  run->add_option("--microvm-rootfs", opts->microvm_rootfs,
                  "microvm tier: the dsec-agent root image (default <cache>/guest-image/rootfs.erofs)");
  run->add_option("--microvm-state-dir", opts->microvm_state_dir,
                  "microvm tier: root of microVM state directories (default /run/dsec-vmm/microvm)");
  run->add_option("--lang", opts->lang, "fncall tier: python (CODE is Python) or bash (CODE is a script)")
      ->check(CLI::IsMember({"python", "bash"}));
  run->add_option("--layers,--layer", opts->layers,
                  "EROFS image files or layer-store references (name:version, sha256:...; a "
                  "reference brings its parents), lowest first; default base:bookworm, built on "
                  "first use")
      ->delimiter(',')
      // One value per occurrence (comma lists or repeats): a vector option
      // that swallows words makes CLI11 take the first `--` as the end of
      // its list, and the command's own options (`sh -c`) then fail.
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  const char* store_env = std::getenv("DSEC_LAYER_STORE");
  opts->store = store_env != nullptr && *store_env != '\0' ? store_env : layers::kDefaultStoreRoot;
  run->add_option("--store", opts->store, "Layer store for references (env DSEC_LAYER_STORE)")
      ->capture_default_str();
  run->add_option("--memory-mib", opts->memory_mib, "Memory limit (MiB; swap held to it)");
  run->add_option("--pids", opts->pids, "Process limit");
  run->add_option("--cpus", opts->cpus, "CPU quota in CPUs (0 = none)");
  run->add_option("--upper-mib", opts->upper_mib, "Size of the writable layer (MiB)");
  run->add_option("--timeout-s", opts->timeout_s, "Kill the command after this long")
      ->check(CLI::PositiveNumber);
  run->add_option("--output-cap-bytes", opts->output_cap_bytes,
                  "stdout+stderr kept at most (excess dropped and counted; 0 = no cap)");
  run->add_option("--output-rate-bytes", opts->output_rate_bytes,
                  "Output rate limit in bytes/s (0 = none)");
  run->add_option("--env", opts->env, "KEY=VALUE added to the default environment (repeat it)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--cwd", opts->cwd, "Working directory inside the sandbox");
  run->add_option("--state-dir", opts->state_dir, "Root of sandbox state directories");
  run->add_option("--log-level", opts->log_level, "trace|debug|info|warn|error|off");
  run->add_flag("--userns", opts->userns,
                "Container tier: run in a user namespace (root inside is --userns-base outside; "
                "files keep their ids on disk)");
  run->add_option("--userns-base", opts->userns_base,
                  "First host uid/gid of the namespace's 65536 ids")
      ->capture_default_str()
      ->check(CLI::Range(1u, 0xfffeffffu));
  run->add_option("--allow", opts->allow,
                 "Container tier: give the sandbox a network that reaches RULE (CIDR[:port], "
                 "host[:port], *.domain; repeat it); without --allow/--deny: no network")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--deny", opts->deny, "Container tier: never reach RULE (wins over --allow; repeat it)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--net-subnet", opts->net_subnet, "IPv4 subnet of the sandbox's network")
      ->capture_default_str();
  run->add_option("--net-uplink", opts->net_uplinks,
                  "Interfaces its traffic leaves by, NATed (default: the default route's; 'none')")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--net-dns-upstream", opts->net_dns_upstream,
                  "The node resolver's upstream (default: /etc/resolv.conf's first)");
  run->add_option("command", opts->command, "CMD ARGS (after --)")->required();
  registry.Add(run, [opts] { return Run(*opts); });

  auto state_dir = std::make_shared<std::string>(container::kDefaultStateRoot);
  CLI::App* cleanup = sandbox->add_subcommand(
      "cleanup", "Remove sandboxes (processes, mounts, cgroups) left by killed runtimes");
  cleanup->add_option("--state-dir", *state_dir, "Root of sandbox state directories");
  registry.Add(cleanup, [state_dir] {
    auto removed = container::CleanupOrphans(*state_dir);
    if (!removed.ok()) {
      fprintf(stderr, "dsec-vmm: %s\n", removed.status().ToString().c_str());
      return kExitRuntimeError;
    }
    printf("removed %d orphaned sandbox(es)\n", *removed);
    return 0;
  });
}

}  // namespace dsec::cmd
