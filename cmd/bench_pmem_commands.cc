// SPDX-License-Identifier: Apache-2.0
#include "cmd/bench_pmem_commands.h"

#include <memory>

#include "bench/pmem_density_bench.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"

namespace dsec::cmd {

void RegisterPmemBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* pmem = bench->add_subcommand(
      "pmem-density", "Peak host memory of N guests reading one image: pmem-DAX vs virtio-blk");
  auto opts = std::make_shared<bench::PmemDensityOptions>();
  pmem->add_option("--vms", opts->vms, "Test guests at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  pmem->add_option("--image-mib", opts->image_mib, "Image size (even)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 16));
  pmem->add_option("--dir", opts->dir, "Directory for the image (disk-backed)")
      ->capture_default_str();
  pmem->add_option("--kernel", opts->kernel,
                   "Test guest ELF (default: the one built next to dsec-vmm)");
  pmem->add_flag("--json", opts->json, "Print one JSON object");
  registry.Add(pmem, [opts] {
    bench::PmemDensityOptions o = *opts;
    o.monitor = monitor::MonitorBinaryPath();
    if (o.kernel.empty()) o.kernel = monitor::DefaultTestGuestPath();
    return bench::RunPmemDensityBench(o);
  });
}

}  // namespace dsec::cmd
