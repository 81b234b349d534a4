// SPDX-License-Identifier: Apache-2.0
#include "base/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace dsec {

namespace {
std::string ErrnoMessage(std::string_view what, int err) {
  return absl::StrCat(absl::string_view(what.data(), what.size()), ": ", std::strerror(err),
                      " (errno ", err, ")");
}
}  // namespace

absl::Status ErrnoStatus(std::string_view what, int err) {
  return absl::InternalError(ErrnoMessage(what, err));
}

absl::Status ErrnoToStatus(std::string_view what, int err) {
  std::string msg = ErrnoMessage(what, err);
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
      return absl::ResourceExhaustedError(msg);
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::UnavailableError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EBUSY:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(absl::string_view(context.data(), context.size()),
                                               ": ", status.message()));
  // Payloads (the request field at fault, ...) survive the added context.
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

namespace internal {
void CheckFailed(const char* file, int line, const char* expr, std::string_view message) {
  std::fprintf(stderr, "DSEC_CHECK failed at %s:%d: %s %.*s\n", file, line, expr,
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}
}  // namespace internal

}  // namespace dsec
