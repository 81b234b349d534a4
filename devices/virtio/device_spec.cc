// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/device_spec.h"

#include "absl/strings/str_cat.h"

namespace dsec::virtio {

absl::StatusOr<PathWithMode> ParsePathWithMode(std::string_view flag, std::string_view arg) {
  PathWithMode out;
  out.path = std::string(arg);
  const size_t comma = arg.rfind(',');
  if (comma != std::string_view::npos) {
    const std::string_view suffix = arg.substr(comma + 1);
    if (suffix == "ro") {
      out.path = std::string(arg.substr(0, comma));
      out.read_only = true;
    } else if (!suffix.empty() && suffix.find('/') == std::string_view::npos) {
      // A bare word after the last comma is an option, not part of a path.
      return absl::InvalidArgumentError(absl::StrCat("--", absl::string_view(flag.data(), flag.size()),
                                                     " ", absl::string_view(arg.data(), arg.size()),
                                                     ": unknown option '",
                                                     absl::string_view(suffix.data(), suffix.size()),
                                                     "' (expected ro)"));
    }
  }
  if (out.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", absl::string_view(flag.data(), flag.size()), ": empty path"));
  }
  return out;
}

absl::StatusOr<std::vector<PathWithMode>> PathFlags(const DeviceFlagValues& values,
                                                    std::string_view flag) {
  std::vector<PathWithMode> out;
  auto it = values.find(flag);
  if (it == values.end()) return out;
  for (const std::string& arg : it->second) {
    absl::StatusOr<PathWithMode> p = ParsePathWithMode(flag, arg);
    if (!p.ok()) return p.status();
    out.push_back(std::move(*p));
  }
  return out;
}

absl::StatusOr<PathWithMode> ReadPathFields(JsonFields& f) {
  PathWithMode out;
  absl::StatusOr<std::string> path = f.String("path", 4096);
  if (!path.ok()) return path.status();
  if (path->empty()) return InvalidField(f.Path("path"), f.Path("path") + " is empty");
  out.path = std::move(*path);
  absl::StatusOr<std::optional<bool>> ro = f.OptBool("read_only");
  if (!ro.ok()) return ro.status();
  out.read_only = ro->value_or(false);
  return out;
}

}  // namespace dsec::virtio
