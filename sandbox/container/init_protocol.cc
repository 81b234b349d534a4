// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_protocol.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dsec::container {

namespace {

absl::Status Append(const std::vector<std::string>& list, const char* what, std::string* body) {
  for (const std::string& s : list) {
    if (s.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("exec: ", what, " holds a NUL byte"));
    }
    body->append(s);
    body->push_back('\0');
  }
  return absl::OkStatus();
}

struct InitConfigHeader {
  uint32_t magic;
  uint32_t flags;
  uint64_t nofile;
  uint32_t merged_bytes;
  uint32_t hostname_bytes;
  uint32_t filter_insns;
  uint32_t overlay_bytes;
  uint32_t cwd_bytes;
  uint32_t reserved;
};

bool ReadExactly(int fd, void* buf, size_t len) {
  char* c = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::read(fd, c, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    c += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string EncodeInitConfig(const InitConfig& config) {
  const uint32_t flags = (config.join_netns ? kInitJoinNetns : 0) |
                         (config.join_userns ? kInitJoinUserns : 0) |
                         (config.overlay_on_control ? kInitOverlayOnControl : 0) |
                         (config.netns_on_control ? kInitNetnsOnControl : 0) |
                         (config.sys_on_control ? kInitSysOnControl : 0) |
                         (config.dev_on_control ? kInitDevOnControl : 0);
  InitConfigHeader h{kInitConfigMagic, flags, config.nofile,
                     static_cast<uint32_t>(config.merged.size()),
                     static_cast<uint32_t>(config.hostname.size()),
                     static_cast<uint32_t>(config.seccomp.size()),
                     static_cast<uint32_t>(config.overlay.size()),
                     static_cast<uint32_t>(config.cwd.size()), 0};
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out += config.merged;
  out += config.hostname;
  out += config.overlay;
  out += config.cwd;
  out.append(reinterpret_cast<const char*>(config.seccomp.data()),
             config.seccomp.size() * sizeof(sock_filter));
  return out;
}

bool ReadInitConfig(int fd, InitConfig* config) {
  InitConfigHeader h;
  if (!ReadExactly(fd, &h, sizeof(h)) || h.magic != kInitConfigMagic ||
      (h.flags & ~(kInitJoinNetns | kInitJoinUserns | kInitOverlayOnControl | kInitNetnsOnControl |
                   kInitSysOnControl | kInitDevOnControl)) != 0 ||
      ((h.flags & kInitNetnsOnControl) != 0 &&
       (h.flags & (kInitJoinNetns | kInitJoinUserns | kInitOverlayOnControl)) != kInitOverlayOnControl) ||
      ((h.flags & (kInitSysOnControl | kInitDevOnControl)) != 0 &&
       (h.flags & (kInitJoinUserns | kInitOverlayOnControl)) != kInitOverlayOnControl) ||
      h.merged_bytes == 0 ||
      h.merged_bytes > kMaxInitPathBytes || h.hostname_bytes == 0 ||
      h.hostname_bytes > kMaxInitHostnameBytes || h.filter_insns > kMaxInitFilterInsns ||
      h.overlay_bytes > kMaxInitOverlayBytes || h.cwd_bytes > kMaxInitPathBytes) {
    return false;
  }
  config->merged.resize(h.merged_bytes);
  config->hostname.resize(h.hostname_bytes);
  config->overlay.resize(h.overlay_bytes);
  config->cwd.resize(h.cwd_bytes);
  config->seccomp.resize(h.filter_insns);
  if (!ReadExactly(fd, config->merged.data(), h.merged_bytes) ||
      !ReadExactly(fd, config->hostname.data(), h.hostname_bytes) ||
      !ReadExactly(fd, config->overlay.data(), h.overlay_bytes) ||
      !ReadExactly(fd, config->cwd.data(), h.cwd_bytes) ||
      !ReadExactly(fd, config->seccomp.data(), h.filter_insns * sizeof(sock_filter))) {
    return false;
  }
  if (config->merged.find('\0') != std::string::npos ||
      config->hostname.find('\0') != std::string::npos ||
      config->overlay.find('\0') != std::string::npos ||
      config->cwd.find('\0') != std::string::npos) {
    return false;
  }
  config->nofile = h.nofile;
  config->join_netns = (h.flags & kInitJoinNetns) != 0;
  config->join_userns = (h.flags & kInitJoinUserns) != 0;
  config->overlay_on_control = (h.flags & kInitOverlayOnControl) != 0;
  config->netns_on_control = (h.flags & kInitNetnsOnControl) != 0;
  config->sys_on_control = (h.flags & kInitSysOnControl) != 0;
  config->dev_on_control = (h.flags & kInitDevOnControl) != 0;
  return true;
}

absl::StatusOr<std::string> EncodeExecRequest(const ExecSpec& spec, ExecRequestHeader* header) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("exec: empty argv");
  if (spec.exec_paths.empty()) return absl::InvalidArgumentError("exec: no path to run");
  std::string body;
  size_t need = spec.cwd.size() + 1;
  for (const auto* list : {&spec.argv, &spec.env, &spec.exec_paths}) {
    for (const std::string& s : *list) need += s.size() + 1;
  }
  if (need > kMaxExecRequestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("exec: argv, env and cwd take ", need, " bytes (at most ",
                     kMaxExecRequestBytes, ")"));
  }
  body.reserve(need);
  if (absl::Status s = Append(spec.argv, "argv", &body); !s.ok()) return s;
  if (absl::Status s = Append(spec.env, "env", &body); !s.ok()) return s;
  if (absl::Status s = Append(spec.exec_paths, "argv[0]", &body); !s.ok()) return s;
  if (absl::Status s = Append({spec.cwd}, "cwd", &body); !s.ok()) return s;
  *header = ExecRequestHeader{};
  header->body_bytes = static_cast<uint32_t>(body.size());
  header->uid = spec.uid;
  header->gid = spec.gid;
  header->argc = static_cast<uint32_t>(spec.argv.size());
  header->envc = static_cast<uint32_t>(spec.env.size());
  header->pathc = static_cast<uint32_t>(spec.exec_paths.size());
  header->flags = (spec.kill_group_on_exit ? kExecKillGroupOnExit : 0) |
                  (spec.copy_stdin_to_stdout ? kExecCopyStdinToStdout : 0);
  return body;
}

size_t ExecRequestPointerSlots(const ExecRequestHeader& h) {
  // argv + NULL, envp + NULL, paths.
  return static_cast<size_t>(h.argc) + 1 + static_cast<size_t>(h.envc) + 1 + h.pathc;
}

bool ParseExecRequest(const ExecRequestHeader& h, char* body, size_t len, char** slots,
                      size_t nslots, ParsedExecRequest* out) {
  if (h.magic != kExecRequestMagic || h.body_bytes != len || len > kMaxExecRequestBytes) {
    return false;
  }
  if (h.argc == 0 || h.pathc == 0 || (h.flags & ~(kExecKillGroupOnExit | kExecCopyStdinToStdout)) != 0) {
    return false;
  }
  // Every string takes at least its NUL: more strings than bytes cannot fit
  // (and the sums below cannot overflow).
  const uint64_t strings = static_cast<uint64_t>(h.argc) + h.envc + h.pathc + 1;
  if (strings > len || nslots < ExecRequestPointerSlots(h)) return false;
  size_t at = 0;
  // The init trusts these bytes no more than guest input: each string must
  // end with a NUL inside the body.
  auto next = [&](char** s) {
    if (at >= len) return false;
    const void* nul = std::memchr(body + at, '\0', len - at);
    if (nul == nullptr) return false;
    *s = body + at;
    at = static_cast<size_t>(static_cast<const char*>(nul) - body) + 1;
    return true;
  };
  char** argv = slots;
  char** envp = argv + h.argc + 1;
  char** paths = envp + h.envc + 1;
  for (uint32_t i = 0; i < h.argc; ++i) {
    if (!next(&argv[i])) return false;
  }
  argv[h.argc] = nullptr;
  for (uint32_t i = 0; i < h.envc; ++i) {
    if (!next(&envp[i])) return false;
  }
  envp[h.envc] = nullptr;
  for (uint32_t i = 0; i < h.pathc; ++i) {
    if (!next(&paths[i]) || paths[i][0] == '\0') return false;
  }
  char* cwd = nullptr;
  if (!next(&cwd) || cwd[0] == '\0' || at != len) return false;
  out->argv = argv;
  out->envp = envp;
  out->paths = paths;
  out->npaths = h.pathc;
  out->cwd = cwd;
  return true;
}

}  // namespace dsec::container
