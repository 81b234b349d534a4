// SPDX-License-Identifier: Apache-2.0
// Status helpers shared by all of dsec-vmm. Abseil 20220623 has Status and
// StatusOr but neither RETURN_IF_ERROR nor ASSIGN_OR_RETURN, so they live here.
#pragma once

#include <cerrno>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec {

// Builds an Internal status for a failed syscall: "<what>: <strerror> (errno N)".
// Call it right after the failing call, before anything can clobber errno,
// or pass the saved errno explicitly.
absl::Status ErrnoStatus(std::string_view what, int err = errno);

// Same, but maps the errno to the status code that means the same thing
// (ENOENT -> NotFound, EACCES/EPERM -> PermissionDenied, ENOMEM/ENOSPC/EMFILE
// -> ResourceExhausted, EINVAL -> InvalidArgument, ENOSYS/EOPNOTSUPP ->
// Unavailable, EEXIST -> AlreadyExists, EBUSY -> FailedPrecondition; the
// rest -> Internal).
absl::Status ErrnoToStatus(std::string_view what, int err = errno);

// Prefixes a status message with context, keeping its code and payloads.
// Note: Debian's Abseil 20220623 has its own absl::string_view (not
// std::string_view); convert explicitly at the boundary.
absl::Status Annotate(const absl::Status& status, std::string_view context);

namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr,
                              std::string_view message);
}  // namespace internal

}  // namespace dsec

#define DSEC_STATUS_CONCAT_INNER(a, b) a##b
#define DSEC_STATUS_CONCAT(a, b) DSEC_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define DSEC_RETURN_IF_ERROR(expr)                        \
  do {                                                    \
    ::absl::Status dsec_status_ = (expr);                 \
    if (!dsec_status_.ok()) return dsec_status_;          \
  } while (0)

// DSEC_ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr; on error returns
// its status, otherwise moves the value into `lhs` (which may declare a
// variable, e.g. `auto fd`).
#define DSEC_ASSIGN_OR_RETURN(lhs, expr) \
  DSEC_ASSIGN_OR_RETURN_IMPL(DSEC_STATUS_CONCAT(dsec_statusor_, __LINE__), lhs, expr)
#define DSEC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// Always-on invariant check: a broken invariant of our own code (never a
// guest- or client-controlled value) aborts with file:line.
#define DSEC_CHECK(cond)                                               \
  do {                                                                 \
    if (!(cond)) ::dsec::internal::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define DSEC_CHECK_OK(expr)                                                     \
  do {                                                                          \
    ::absl::Status dsec_check_status_ = (expr);                                 \
    if (!dsec_check_status_.ok())                                               \
      ::dsec::internal::CheckFailed(__FILE__, __LINE__, #expr,                  \
                                    dsec_check_status_.ToString());             \
  } while (0)

#ifdef NDEBUG
#define DSEC_DCHECK(cond) \
  do {                    \
    (void)sizeof(cond);   \
  } while (0)
#else
#define DSEC_DCHECK(cond) DSEC_CHECK(cond)
#endif
