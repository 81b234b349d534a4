// SPDX-License-Identifier: Apache-2.0
#include "bpf/cgroup_attach.h"

#include <bpf/libbpf.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"

namespace dsec::bpf {

absl::Status AttachAllToCgroup(std::span<const CgroupProgram> progs, const std::string& cgroup_dir,
                               std::string_view owner) {
  const absl::string_view who(owner.data(), owner.size());
  ScopedFd dir(open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::NotFoundError(
        absl::StrCat(who, ": opening cgroup ", cgroup_dir, ": ", std::strerror(errno)));
  }
  for (const CgroupProgram& p : progs) {
    struct bpf_link* link = bpf_program__attach_cgroup(p.prog, dir.get());
    if (link == nullptr) {
      const int err = errno;
      for (const CgroupProgram& q : progs) {  // all or nothing
        if (*q.link != nullptr) {
          bpf_link__destroy(*q.link);
          *q.link = nullptr;
        }
      }
      return absl::UnavailableError(absl::StrCat(who, ": attaching ", bpf_program__name(p.prog),
                                                 " to cgroup ", cgroup_dir, ": ", std::strerror(err)));
    }
    *p.link = link;
  }
  return absl::OkStatus();
}

}  // namespace dsec::bpf
