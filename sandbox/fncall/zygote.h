// SPDX-License-Identifier: Apache-2.0
// Code that runs in a worker process cloned by the runtime: it builds the
// sandbox root (the container tier's BuildSandboxRoot), locks itself down
// (capabilities, no_new_privs, seccomp, not dumpable) and becomes the
// worker's zygote: PID 1 of the worker's pid namespace, which forks one
// fresh child per call, and after the call kills and reaps everything else
// in the namespace. For Python it execs the interpreter on the embedded
// zygote script; for bash the loop below is the zygote and each call is a
// fresh exec of bash. Everything after the clone is async-signal-safe.
#pragma once

#include <string>
#include <vector>

#include "sandbox/container/child_process.h"
#include "sandbox/container/seccomp_policy.h"

namespace dsec::fncall {

enum class Language { kPython, kBash };

// "python" / "bash".
const char* LanguageName(Language language);

// The Python zygote script (runs as `python3 -I -B -c SCRIPT CTL_FD PRELOAD`).
const char* PythonZygoteScript();

struct ZygotePlan {
  container::RootPlan root;  // root.report_fd = report_fd
  Language language = Language::kPython;
  std::string interpreter;         // python3 or bash inside the root
  std::vector<std::string> argv;   // python: the zygote's own argv
  std::vector<std::string> env;    // the zygote's own environment
  const container::SeccompProgram* seccomp = nullptr;
  int control_fd = -1;  // the zygote's end of the control socketpair
  int go_fd = -1;       // read end: the runtime put us in the cgroups
  int report_fd = -1;   // write end, close-on-exec: ChildError on failure
  // Built by Finalize() before the clone.
  std::vector<char*> argv_c, env_c;
  void Finalize();
};

// Name of a setup step reported as a ChildError.
const char* ZygoteStepName(int32_t step);

// Body of the cloned worker. Never returns.
[[noreturn]] void RunZygote(const ZygotePlan& plan);

}  // namespace dsec::fncall
