// SPDX-License-Identifier: Apache-2.0
#include "cmd/fncall_commands.h"

#include <sys/random.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sandbox/layers/layer_refs.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/fncall/pool.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::cmd {

namespace {

constexpr int kExitLimit = 124;
constexpr int kExitRuntimeError = 125;

}  // namespace

int RunFncall(const FncallRunOptions& o) {
  log::SetLevel(o.log_level);
  if (o.lang != "python" && o.lang != "bash") {
    fprintf(stderr, "dsec-vmm: --lang must be python or bash\n");
    return 2;
  }
  if (o.command.empty()) {
    fprintf(stderr, "dsec-vmm: no code given (sandbox run --tier fncall -- CODE [ARGS])\n");
    return 2;
  }
  if (auto removed = container::CleanupOrphans(fncall::kDefaultStateRoot); !removed.ok()) {
    DSEC_LOG(warn, "fncall: orphan cleanup: {}", removed.status().ToString());
  }
  auto images = layers::ResolveFncallLayers(o.lang, o.layers,
                                            layers::LayerRefOptionsFor(o.store, SelfExePath()));
  if (!images.ok()) {
    fprintf(stderr, "dsec-vmm: layers: %s\n", std::string(images.status().message()).c_str());
    return absl::IsNotFound(images.status()) || absl::IsInvalidArgument(images.status())
               ? 2
               : kExitRuntimeError;
  }
  uint32_t rnd = 0;
  if (::getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = static_cast<uint32_t>(::getpid());
  fncall::PoolConfig config;
  config.id = absl::StrFormat("run-%d-%08x", ::getpid(), rnd);
  config.layers = std::move(*images);
  config.language = o.lang == "python" ? fncall::Language::kPython : fncall::Language::kBash;
  config.limits.memory_bytes = o.memory_mib << 20;
  config.limits.pids = o.pids;
  config.limits.timeout_ms = o.timeout_s * 1000;
  config.limits.output_cap_bytes = o.output_cap_bytes;
  config.limits.output_rate_bytes_per_s = o.output_rate_bytes;
  config.max_workers = 1;
  config.min_idle = 1;
  for (const std::string& e : o.env) config.env.push_back(e);
  auto pool = fncall::Pool::Create(std::move(config));
  if (!pool.ok()) {
    fprintf(stderr, "dsec-vmm: creating the fncall pool: %s\n", pool.status().ToString().c_str());
    return kExitRuntimeError;
  }
  fncall::CallRequest req;
  req.code = o.command[0];
  req.args.assign(o.command.begin() + 1, o.command.end());
  req.cwd = o.cwd;
  if (::isatty(0) == 0) {
    // Piped stdin goes to the call (a terminal does not).
    char buf[65536];
    ssize_t n;
    while ((n = ::read(0, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) req.stdin_data.append(buf, static_cast<size_t>(n));
    }
  }
  auto result = (*pool)->Call(req);
  if (!result.ok()) {
    fprintf(stderr, "dsec-vmm: %s\n", result.status().ToString().c_str());
    return kExitRuntimeError;
  }
  fwrite(result->stdout_data.data(), 1, result->stdout_data.size(), stdout);
  fflush(stdout);
  fwrite(result->stderr_data.data(), 1, result->stderr_data.size(), stderr);
  if (result->output_dropped_bytes > 0) {
    fprintf(stderr, "dsec-vmm: %llu output bytes dropped\n",
            static_cast<unsigned long long>(result->output_dropped_bytes));
  }
  int status = result->status();
  if (result->killed_by != fncall::KilledBy::kNone) {
    fprintf(stderr, "dsec-vmm: call killed: %s limit\n", fncall::KilledByName(result->killed_by));
    status = kExitLimit;
  }
  if (absl::Status s = (*pool)->Destroy(); !s.ok()) {
    fprintf(stderr, "dsec-vmm: destroying the pool: %s\n", s.ToString().c_str());
    return kExitRuntimeError;
  }
  return status;
}

}  // namespace dsec::cmd
