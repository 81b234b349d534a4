// SPDX-License-Identifier: Apache-2.0
#include "cmd/microvm_commands.h"

#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "absl/strings/str_format.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "sandbox/layers/layer_refs.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"

namespace dsec::cmd {

namespace {

constexpr int kExitTimeout = 124;
constexpr int kExitRuntimeError = 125;
constexpr int64_t kBootTimeoutMs = 120'000;

void WriteOut(FILE* f, std::string_view data) {
  if (!data.empty()) std::fwrite(data.data(), 1, data.size(), f);
}

}  // namespace

int RunMicrovm(const MicrovmRunOptions& o) {
  log::SetLevel(o.log_level);
  if (o.command.empty()) {
    std::fprintf(stderr, "dsec-vmm: no command given (sandbox run ... -- CMD ARGS)\n");
    return 2;
  }
  std::map<std::string, std::string> env;
  for (const std::string& e : o.env) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "dsec-vmm: --env %s: expected KEY=VALUE\n", e.c_str());
      return 2;
    }
    env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  auto images = layers::ResolveLayerRefs(o.layers, layers::LayerRefOptionsFor(o.store, SelfExePath()));
  if (!images.ok()) {
    std::fprintf(stderr, "dsec-vmm: layers: %s\n", std::string(images.status().message()).c_str());
    return absl::IsNotFound(images.status()) || absl::IsInvalidArgument(images.status())
               ? 2
               : kExitRuntimeError;
  }
  if (absl::Status dax = microvm::CheckDaxLayers(*images); !dax.ok()) {
    std::fprintf(stderr, "dsec-vmm: %s\n", std::string(dax.message()).c_str());
    return 2;
  }
  microvm::VmLauncherOptions lo;
  lo.kernel = o.kernel;
  lo.rootfs = o.rootfs;
  microvm::VmLauncher launcher(lo);
  if (absl::Status host = launcher.CheckHost(); !host.ok()) {
    std::fprintf(stderr, "dsec-vmm: the microvm tier cannot run here: %s\n",
                 std::string(host.message()).c_str());
    return kExitRuntimeError;
  }
  microvm::MicrovmSandboxOptions so;
  if (!o.state_dir.empty()) so.state_root = o.state_dir;
  so.boot_timeout_ms = kBootTimeoutMs;
  // Sandboxes a killed run left behind go first.
  if (auto removed = microvm::CleanupOrphans(so.state_root); !removed.ok()) {
    DSEC_LOG(warn, "microvm: orphan cleanup: {}", removed.status().ToString());
  }
  uint32_t rnd = 0;
  if (::getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = static_cast<uint32_t>(::getpid());
  microvm::MicrovmSpec spec;
  spec.id = absl::StrFormat("run-%d-%08x", ::getpid(), rnd);
  spec.layers = *images;
  spec.memory_mib = o.memory_mib;
  spec.cpus = o.cpus;
  auto sandbox = microvm::MicrovmSandbox::Create(launcher, spec, so);
  if (!sandbox.ok()) {
    std::fprintf(stderr, "dsec-vmm: creating the microVM: %s\n", sandbox.status().ToString().c_str());
    return kExitRuntimeError;
  }
  agent::ExecRequest req;
  req.argv = o.command;
  req.env = env;
  req.cwd = o.cwd;
  req.timeout_ms = static_cast<uint64_t>(o.timeout_s) * 1000;
  req.output_cap_bytes = o.output_cap_bytes;
  req.output_rate_bytes_per_s = o.output_rate_bytes;
  // Output as it comes, each stream to its own.
  auto done = (*sandbox)->Exec(req, [](int stream, std::string_view data) {
    WriteOut(stream == 2 ? stderr : stdout, data);
  });
  std::fflush(stdout);
  int status = kExitRuntimeError;
  if (!done.ok()) {
    std::fprintf(stderr, "dsec-vmm: %s\n", done.status().ToString().c_str());
    // What the monitor said (its log, stop reason, the guest's console).
    std::fprintf(stderr, "dsec-vmm: %s\n", (*sandbox)->host().ExitReport().c_str());
  } else {
    const uint64_t dropped = done->stdout_dropped + done->stderr_dropped;
    if (dropped > 0) {
      std::fprintf(stderr, "dsec-vmm: %llu output bytes dropped (cap %llu bytes)\n",
                   static_cast<unsigned long long>(dropped),
                   static_cast<unsigned long long>(o.output_cap_bytes));
    }
    if (done->timed_out) {
      std::fprintf(stderr, "dsec-vmm: command timed out after %lld s\n",
                   static_cast<long long>(o.timeout_s));
      status = kExitTimeout;
    } else if (done->exit_code) {
      status = *done->exit_code;
    } else if (done->signal) {
      status = 128 + *done->signal;
    }
  }
  if (absl::Status s = (*sandbox)->Destroy(); !s.ok()) {
    std::fprintf(stderr, "dsec-vmm: destroying the microVM: %s\n", s.ToString().c_str());
    return kExitRuntimeError;
  }
  return status;
}

}  // namespace dsec::cmd
