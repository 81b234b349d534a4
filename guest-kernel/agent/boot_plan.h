// SPDX-License-Identifier: Apache-2.0
// The pure half of the agent's PID-1 mode: parsing the dsec.* kernel
// parameters and planning the mounts. No I/O here, so all of it is
// unit-tested on the host (pid1.cc carries the plan out).
//
// The kernel does not hand dotted parameters to init, so PID 1 reads
// /proc/cmdline and parses it with ParseBootConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsec::agent {

inline constexpr uint64_t kDefaultUpperMib = 256;
inline constexpr uint32_t kDefaultAgentPort = 1024;

// dsec.net=<address>/<prefix>,<gateway>: the guest's eth0 (IPv4, host
// order), its default route and resolver (the gateway: the node resolver).
struct NetConfig {
  uint32_t address = 0;
  int prefix_len = 0;
  uint32_t gateway = 0;
};

struct BootConfig {
  // dsec.layers=/dev/pmem1,/dev/pmem2: EROFS layer devices, lowest first.
  std::vector<std::string> layers;
  // dsec.upper=tmpfs:<MiB>
  uint64_t upper_mib = kDefaultUpperMib;
  // dsec.run=<base64>: the decoded shell command.
  std::optional<std::string> run;
  // dsec.oneshot=1
  bool oneshot = false;
  // dsec.port=<n>: the vsock port the agent listens on.
  uint32_t port = kDefaultAgentPort;
  // dsec.net; a malformed value leaves it empty and sets net_malformed
  // (the sandbox asked for a network it cannot have: PID 1 stops).
  std::optional<NetConfig> net;
  bool net_malformed = false;
  // One line per ignored or malformed parameter (printed on the console).
  std::vector<std::string> warnings;
};

// "a.b.c.d/len,e.f.g.h": len 1..32, both addresses non-zero and different
// (the host checked the rest; the kernel refuses what it cannot use).
std::optional<NetConfig> ParseNetConfig(std::string_view value);
// Dotted quad of a host-order address.
std::string Ipv4String(uint32_t address);

// Splits a command line into parameters as the kernel does: whitespace
// separates, double quotes group (and are removed).
std::vector<std::string> SplitKernelCmdline(std::string_view cmdline);

// Parses the dsec.* parameters of a whole command line. Never fails: PID 1
// must come up whatever the command line says, so a bad value is a warning
// and the default. A repeated parameter: the last one wins.
BootConfig ParseBootConfig(std::string_view cmdline);

struct LayerMount {
  std::string device;
  std::string dir;  // /layers/<i>, i counting from the lowest layer
};

// Where everything goes. Paths are absolute in the initial root, except
// where noted.
struct MountPlan {
  // A small tmpfs over /layers holds the per-layer mount points, so the
  // root image (read-only EROFS) needs only the empty /layers directory.
  std::string layers_dir = "/layers";
  std::vector<LayerMount> layers;
  // Same for /run: a tmpfs there, then the upper tmpfs at /run/upper.
  std::string run_dir = "/run";
  std::string upper_mount = "/run/upper";
  std::string upper_tmpfs_data;  // "size=<MiB>m,mode=0755"
  std::string upper_dir = "/run/upper/upper";
  std::string work_dir = "/run/upper/work";
  std::string newroot = "/newroot";
  std::string overlay_data;
  // Inside the new root: where the layer mounts stay visible (read-only)
  // after the pivot. The upper directory stays hidden (the agent keeps a
  // descriptor to it for pack_diff).
  std::string visible_layers_dir = "/run/dsec/layers";
};

// Overlay mount data: lowerdir (uppermost first, ':'-separated), upperdir,
// workdir, and redirect_dir=off,metacopy=off so that the upper directory is
// self-contained for pack_diff.
std::string OverlayOptions(const std::vector<std::string>& lower_uppermost_first,
                           const std::string& upper_dir, const std::string& work_dir);

// With no layers, the root image itself ("/") is the only lower layer.
MountPlan BuildMountPlan(const BootConfig& config);

// True if /proc/self/mountinfo text shows, for the mount at `mount_point`
// (the last one there), `option` among its filesystem options (e.g.
// "dax=always": EROFS accepts dax=always on a device without DAX support but
// turns it off, so a successful mount proves nothing).
bool MountHasOption(std::string_view mountinfo, std::string_view mount_point,
                    std::string_view option);

}  // namespace dsec::agent
