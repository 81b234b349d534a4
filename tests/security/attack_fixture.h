// SPDX-License-Identifier: Apache-2.0
// Shared set-up for the container security tests: a busybox + probe EROFS
// image built once per test process, sandboxes made on it, and a teardown
// that destroys them and asserts nothing is left on the host.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/test_image.h"
#ifdef DSEC_ATTACK_NETWORK
#include "sandbox/network/node_network.h"
#include "sandbox/network/sandbox_network.h"
#endif

namespace dsec::container::security {

class ContainerAttackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;
  void TearDown() override;

  // A sandbox on the base image, with small limits; `tweak` edits the config.
  Sandbox& NewSandbox(const std::string& name,
                      const std::function<void(SandboxConfig&)>& tweak = nullptr);
  static ExecResult Sh(Sandbox& sb, const std::string& script, int64_t timeout_ms = 20000);
  static ExecResult Run(Sandbox& sb, const ExecOptions& options);
  static ExecResult Cmd(Sandbox& sb, std::vector<std::string> argv);
  // Processes in the sandbox's cgroups (init included).
  static std::vector<pid_t> CgroupMembers(const Sandbox& sb);
  // Expects the sandbox's cgroups to hold its init (which also starts the
  // exec processes) and nothing else.
  static void ExpectOnlyInit(const Sandbox& sb);
  static std::string image() { return image_; }
  static std::string dir() { return dir_->path(); }

 private:
  struct Record {
    std::string state_dir;
    std::vector<std::string> cgroups;
    pid_t init = 0;
  };
  static inline testing::TempDir* dir_ = nullptr;
  static inline std::string image_;
  static inline std::string skip_;
  std::vector<std::unique_ptr<Sandbox>> sandboxes_;
  std::vector<Record> records_;
#ifdef DSEC_ATTACK_NETWORK
  // The third build (container_attack_net_test): every sandbox has a
  // network whose policy allows nothing, in a namespace the node wired
  // ahead, its programs on the sandbox's v2 cgroup (as the tier does it).
  static inline network::NodeNetwork* node_ = nullptr;
  std::vector<std::unique_ptr<network::SandboxNetwork>> networks_;
  std::vector<std::string> host_ends_;
#endif
};

}  // namespace dsec::container::security
