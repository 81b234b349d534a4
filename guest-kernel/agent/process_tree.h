// SPDX-License-Identifier: Apache-2.0
// Finding and killing every process of one exec: its process group and
// session (each exec runs setsid, so both are numbered by the leader's pid),
// its descendants while the leader is unreaped (a `setsid` child leaves the
// group but stays a descendant), and any process that still holds one of the
// exec's pipes (strays that escaped both, e.g. after a double fork).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::agent {

struct ProcEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
};

// Parses one /proc/<pid>/stat line (the command name may hold spaces and
// parentheses).
absl::StatusOr<ProcEntry> ParseProcStat(std::string_view line);

// Every process in `proc_root` (normally "/proc"); processes that vanish
// while being read are skipped.
std::vector<ProcEntry> ReadProcTable(const std::string& proc_root = "/proc");

// Pure selection: processes whose group or session is `leader`, plus (if
// include_descendants) every descendant of `leader` by parent links.
// `self` and pid 1 are never selected.
std::vector<pid_t> SelectExecTree(const std::vector<ProcEntry>& table, pid_t leader,
                                  bool include_descendants, pid_t self);

// Processes (other than `self`) with an open descriptor on one of the pipes
// identified by inode number.
std::vector<pid_t> FindPipeHolders(const std::vector<ino_t>& pipe_inodes, pid_t self,
                                   const std::string& proc_root = "/proc");

// Stops every process of the exec (SIGSTOP, repeated until no new member
// appears, so nothing forks away meanwhile), then SIGKILLs them all.
// `leader_unreaped`: the leader's pid cannot have been reused, so walking its
// descendants is safe. Returns the number of processes signalled.
int KillExecTree(pid_t leader, bool leader_unreaped, const std::vector<ino_t>& pipe_inodes);

}  // namespace dsec::agent
