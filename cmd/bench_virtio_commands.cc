// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench blk` and `dsec-vmm bench vsock`.
#include "cmd/bench_virtio_commands.h"

#include <memory>
#include <string>

#include "bench/blk_bench.h"
#include "bench/vsock_bench.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"
#include "base/logging.h"

namespace dsec::cmd {

void RegisterVirtioBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  // The monitor's own log lines (device set-up at info) would interleave
  // with the figures; warnings and errors still show.
  auto log_level = std::make_shared<std::string>("warn");
  CLI::App* blk = bench->add_subcommand(
      "blk", "virtio-blk throughput/IOPS of the test guest vs. the same I/O from the host");
  auto blk_opts = std::make_shared<bench::BlkBenchOptions>();
  blk->add_option("--mib", blk_opts->mib, "MiB moved per mode (seqread, seqwrite, randread, randwrite)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  blk->add_option("--runs", blk_opts->runs, "Runs of every mode (figures are medians)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  blk->add_option("--image-mib", blk_opts->image_mib, "Size of the temporary disk image")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  blk->add_option("--kernel", blk_opts->kernel,
                  "Test guest ELF (default: the one built next to dsec-vmm)");
  blk->add_flag("--json", blk_opts->json, "Print one JSON object");
  blk->add_option("--log-level", *log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  registry.Add(blk, [blk_opts, log_level] {
    log::SetLevel(*log_level);
    bench::BlkBenchOptions o = *blk_opts;
    if (o.kernel.empty()) o.kernel = monitor::DefaultTestGuestPath();
    return bench::RunBlkBench(o);
  });

  CLI::App* vsock = bench->add_subcommand(
      "vsock", "virtio-vsock throughput both ways vs. a unix socket pair on the host");
  auto vsock_opts = std::make_shared<bench::VsockBenchOptions>();
  vsock->add_option("--mib", vsock_opts->mib, "MiB moved each way")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  vsock->add_option("--runs", vsock_opts->runs, "Runs of every transfer (figures are medians)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  vsock->add_option("--kernel", vsock_opts->kernel,
                    "Test guest ELF (default: the one built next to dsec-vmm)");
  vsock->add_flag("--json", vsock_opts->json, "Print one JSON object");
  vsock->add_option("--log-level", *log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  registry.Add(vsock, [vsock_opts, log_level] {
    log::SetLevel(*log_level);
    bench::VsockBenchOptions o = *vsock_opts;
    if (o.kernel.empty()) o.kernel = monitor::DefaultTestGuestPath();
    return bench::RunVsockBench(o);
  });
}

}  // namespace dsec::cmd
