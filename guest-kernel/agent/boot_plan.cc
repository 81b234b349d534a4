// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/boot_plan.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "guest-kernel/agent/protocol.h"

namespace dsec::agent {

namespace {

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

std::vector<std::string> SplitKernelCmdline(std::string_view cmdline) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  bool quoted = false;
  for (char c : cmdline) {
    if (c == '"') {
      quoted = !quoted;
      in_word = true;
      continue;
    }
    if (!quoted && (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0')) {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
      continue;
    }
    cur += c;
    in_word = true;
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

namespace {

std::optional<uint32_t> ParseIpv4(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  if (parts.size() != 4) return std::nullopt;
  uint32_t out = 0;
  for (absl::string_view p : parts) {
    uint32_t octet = 0;
    if (p.empty() || p.size() > 3 || !absl::SimpleAtoi(p, &octet) || octet > 255) return std::nullopt;
    out = (out << 8) | octet;
  }
  return out;
}

}  // namespace

std::optional<NetConfig> ParseNetConfig(std::string_view value) {
  const std::string owned(value);
  std::vector<absl::string_view> parts = absl::StrSplit(owned, ',');
  if (parts.size() != 2) return std::nullopt;
  std::vector<absl::string_view> cidr = absl::StrSplit(parts[0], '/');
  if (cidr.size() != 2) return std::nullopt;
  NetConfig n;
  std::optional<uint32_t> address = ParseIpv4(cidr[0]), gateway = ParseIpv4(parts[1]);
  if (!address || !gateway || *address == 0 || *gateway == 0 || *address == *gateway) return std::nullopt;
  if (!absl::SimpleAtoi(cidr[1], &n.prefix_len) || n.prefix_len < 1 || n.prefix_len > 32) return std::nullopt;
  n.address = *address;
  n.gateway = *gateway;
  return n;
}

std::string Ipv4String(uint32_t a) {
  return absl::StrCat(a >> 24, ".", (a >> 16) & 0xff, ".", (a >> 8) & 0xff, ".", a & 0xff);
}

BootConfig ParseBootConfig(std::string_view cmdline) {
  BootConfig cfg;
  auto warn = [&cfg](std::string w) { cfg.warnings.push_back(std::move(w)); };
  for (const std::string& word : SplitKernelCmdline(cmdline)) {
    if (word.rfind("dsec.", 0) != 0) continue;
    size_t eq = word.find('=');
    std::string key = word.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (key == "dsec.layers") {
      cfg.layers.clear();
      for (absl::string_view dev : absl::StrSplit(Absl(value), ',')) {
        if (dev.empty()) continue;
        if (dev[0] != '/') {
          warn(absl::StrCat("dsec.layers: ignoring ", dev, " (not an absolute path)"));
          continue;
        }
        cfg.layers.emplace_back(dev);
      }
    } else if (key == "dsec.upper") {
      uint64_t mib = kDefaultUpperMib;
      bool ok = value == "tmpfs";
      if (value.rfind("tmpfs:", 0) == 0) {
        ok = absl::SimpleAtoi(Absl(value).substr(6), &mib) && mib >= 1 && mib <= (1u << 20);
      }
      if (ok) {
        cfg.upper_mib = mib;
      } else {
        cfg.upper_mib = kDefaultUpperMib;
        warn(absl::StrCat("dsec.upper: ignoring \"", value,
                          "\" (want tmpfs:<MiB>); using tmpfs:", kDefaultUpperMib));
      }
    } else if (key == "dsec.run") {
      cfg.run.reset();
      if (value.empty()) continue;
      absl::StatusOr<std::string> cmd = Base64Decode(value);
      if (!cmd.ok()) {
        warn(absl::StrCat("dsec.run: not base64 (", cmd.status().message(), "); nothing to run"));
      } else if (cmd->find('\0') != std::string::npos) {
        warn("dsec.run: command holds NUL; nothing to run");
      } else {
        cfg.run = *std::move(cmd);
      }
    } else if (key == "dsec.oneshot") {
      if (value == "1" || value == "" || value == "true" || value == "yes") {
        cfg.oneshot = true;
      } else if (value == "0" || value == "false" || value == "no") {
        cfg.oneshot = false;
      } else {
        warn(absl::StrCat("dsec.oneshot: ignoring \"", value, "\" (want 0 or 1)"));
      }
    } else if (key == "dsec.port") {
      uint32_t port = 0;
      // 0xffffffff is VMADDR_PORT_ANY.
      if (absl::SimpleAtoi(Absl(value), &port) && port != 0 && port != 0xffffffffu) {
        cfg.port = port;
      } else {
        warn(absl::StrCat("dsec.port: ignoring \"", value, "\"; using ", kDefaultAgentPort));
      }
    } else if (key == "dsec.net") {
      cfg.net = ParseNetConfig(value);
      cfg.net_malformed = !cfg.net.has_value();
      if (cfg.net_malformed) {
        warn(absl::StrCat("dsec.net: malformed \"", value, "\" (want <address>/<prefix>,<gateway>)"));
      }
    } else {
      warn(absl::StrCat("unknown parameter ", key));
    }
  }
  return cfg;
}

std::string OverlayOptions(const std::vector<std::string>& lower_uppermost_first,
                           const std::string& upper_dir, const std::string& work_dir) {
  return absl::StrCat("lowerdir=", absl::StrJoin(lower_uppermost_first, ":"),
                      ",upperdir=", upper_dir, ",workdir=", work_dir,
                      ",redirect_dir=off,metacopy=off");
}

MountPlan BuildMountPlan(const BootConfig& config) {
  MountPlan plan;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    plan.layers.push_back({config.layers[i], absl::StrCat(plan.layers_dir, "/", i)});
  }
  plan.upper_tmpfs_data = absl::StrCat("size=", config.upper_mib, "m,mode=0755");
  std::vector<std::string> lower;
  for (auto it = plan.layers.rbegin(); it != plan.layers.rend(); ++it) lower.push_back(it->dir);
  if (lower.empty()) lower.push_back("/");
  plan.overlay_data = OverlayOptions(lower, plan.upper_dir, plan.work_dir);
  return plan;
}

bool MountHasOption(std::string_view mountinfo, std::string_view mount_point,
                    std::string_view option) {
  bool found = false;
  for (absl::string_view line : absl::StrSplit(Absl(mountinfo), '\n', absl::SkipEmpty())) {
    // "<id> <parent> <maj:min> <root> <mount point> <opts> [tags...] - <type> <source> <super opts>"
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 5 || f[4] != Absl(mount_point)) continue;
    size_t dash = 5;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size()) continue;
    found = false;  // a later mount at the same point hides earlier ones
    for (absl::string_view opt : absl::StrSplit(f[dash + 3], ',')) {
      if (opt == Absl(option)) found = true;
    }
  }
  return found;
}

}  // namespace dsec::agent
