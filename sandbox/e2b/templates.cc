// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/templates.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec::e2b {

using nlohmann::json;

absl::StatusOr<std::map<std::string, Template>> ReadTemplateFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::map<std::string, Template>();
  std::stringstream ss;
  ss << in.rdbuf();
  json doc = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  auto t = ParseTemplateFile(doc);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::Status WriteTemplateFile(const std::string& path, const std::map<std::string, Template>& templates) {
  // Whole or not at all: a daemon reading it meanwhile sees the old or the new.
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << TemplateFileJson(templates).dump(2) << "\n";
    if (!out.flush()) return absl::InternalError(absl::StrCat("write ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoToStatus(absl::StrCat("rename ", tmp));
  return absl::OkStatus();
}

}  // namespace dsec::e2b
