// SPDX-License-Identifier: Apache-2.0
#include "cmd/exec_sibling.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/file_io.h"

namespace dsec::cmd {

int ExecSibling(const std::string& name, const std::vector<std::string>& args) {
  const std::string path = PathBesideSelf(name);
  if (::access(path.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "dsec-vmm: %s is missing (%s); build the %s target next to dsec-vmm\n",
                 path.c_str(), std::strerror(errno), name.c_str());
    return 2;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(path.c_str(), argv.data());
  std::fprintf(stderr, "dsec-vmm: exec %s: %s\n", path.c_str(), std::strerror(errno));
  return 125;
}

}  // namespace dsec::cmd
