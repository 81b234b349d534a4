// SPDX-License-Identifier: Apache-2.0
#include "bpf/cgroup_attach.h"

#include <bpf/libbpf.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::bpf {

absl::StatusOr<std::unique_ptr<CgroupLinks>> AttachEachToCgroup(std::span<struct bpf_program* const> progs,
                                                                const std::string& cgroup_dir,
                                                                std::string_view owner) {
  const absl::string_view who(owner.data(), owner.size());
  ScopedFd dir(open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::NotFoundError(
        absl::StrCat(who, ": opening cgroup ", cgroup_dir, ": ", std::strerror(errno)));
  }
  std::vector<struct bpf_link*> links;
  for (struct bpf_program* p : progs) {
    struct bpf_link* link = bpf_program__attach_cgroup(p, dir.get());
    if (link == nullptr) {
      const int err = errno;
      CgroupLinks undo(std::move(links));  // all or nothing
      return absl::UnavailableError(absl::StrCat(who, ": attaching ", bpf_program__name(p), " to cgroup ",
                                                 cgroup_dir, ": ", std::strerror(err)));
    }
    links.push_back(link);
  }
  return std::make_unique<CgroupLinks>(std::move(links));
}

CgroupLinks::~CgroupLinks() {
  for (struct bpf_link* l : links_) bpf_link__destroy(l);
}

absl::Status AttachAllToCgroup(std::span<const CgroupProgram> progs, const std::string& cgroup_dir,
                               std::string_view owner) {
  std::vector<struct bpf_program*> programs;
  for (const CgroupProgram& p : progs) programs.push_back(p.prog);
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<CgroupLinks> links, AttachEachToCgroup(programs, cgroup_dir, owner));
  // The links go to the skeleton's slots (it destroys them).
  std::vector<struct bpf_link*> released = links->Release();
  for (size_t i = 0; i < progs.size(); ++i) *progs[i].link = released[i];
  return absl::OkStatus();
}

}  // namespace dsec::bpf
