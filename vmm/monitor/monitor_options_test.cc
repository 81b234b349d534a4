// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/monitor_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "base/scoped_fd.h"
#include "vmm/vm/device_table.h"

namespace dsec::monitor {
namespace {

// Parses `args` as dsec-monitor would.
absl::StatusOr<MonitorOptions> Parse(std::vector<std::string> args, MonitorFlags* out = nullptr) {
  CLI::App app;
  MonitorFlags flags;
  AddMonitorFlags(app, flags);
  std::vector<const char*> argv = {"dsec-monitor"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (out != nullptr) *out = flags;
  return ResolveMonitorOptions(flags);
}

TEST(MonitorOptionsTest, FlagsBecomeTypedDevicesInTableOrder) {
  auto o = Parse({"--kernel", "/k", "--pmem", "/i/a.erofs,ro", "--vsock", "3,/s/v.sock", "--rng",
                  "--balloon", "--balloon-target-mib", "2", "--disk", "/d.raw", "--pmem", "/i/b.erofs"});
  ASSERT_TRUE(o.ok()) << o.status();
  std::vector<std::string> kinds;
  for (const auto& d : o->config.devices) kinds.emplace_back(d->kind().name());
  EXPECT_EQ(kinds, (std::vector<std::string>{"rng", "balloon", "disk", "vsock", "pmem", "pmem"}));
  EXPECT_EQ(o->config.devices[4]->ToJson()["path"], "/i/a.erofs");
}

TEST(MonitorOptionsTest, PrintConfigOutputIsAConfigFileForTheSameVm) {
  auto o = Parse({"--kernel", "/k", "--mem-mib", "64", "--console", "none", "--pmem", "/i/a,ro",
                  "--control", "/s/c.sock", "--log-level", "info", "--reclaim", "pageout"});
  ASSERT_TRUE(o.ok()) << o.status();
  const nlohmann::json j = MonitorOptionsToJson(*o);
  char path[] = "/tmp/dsec-monitor-config-XXXXXX";
  ASSERT_TRUE(ScopedFd(::mkstemp(path)).valid());
  std::ofstream(path) << j.dump(2);
  auto from_file = Parse({"--config", path});
  ::unlink(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(MonitorOptionsToJson(*from_file), j);
  EXPECT_EQ(from_file->control, "/s/c.sock");
  EXPECT_EQ(from_file->reclaim.mode, "pageout");
  EXPECT_EQ(from_file->config.console.kind, vm::ConsoleConfig::Kind::kNone);
}

TEST(MonitorOptionsTest, ConfigExcludesTheOtherFlags) {
  EXPECT_FALSE(Parse({"--config", "/x.json", "--kernel", "/k"}).ok());
  EXPECT_FALSE(Parse({"--config", "/x.json", "--rng"}).ok());
  auto missing = Parse({"--config", "/nonexistent/config.json"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(MonitorOptionsTest, BadConfigFilesNameTheField) {
  char path[] = "/tmp/dsec-monitor-config-XXXXXX";
  ASSERT_TRUE(ScopedFd(::mkstemp(path)).valid());
  for (auto [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kernel": "/k", "monitor": {"log_level": "loud"}})", "monitor.log_level"},
           {R"({"kernel": "/k", "monitor": {"reclaim": {"mode": "all"}}})", "monitor.reclaim.mode"},
           {R"({"kernel": "/k", "devices": [{"type": "pmem"}]})", "devices[0].path"},
           {R"({"kernel": "/k", "extra": 1})", "extra"}}) {
    std::ofstream(path, std::ios::trunc) << text;
    auto o = Parse({"--config", path});
    ASSERT_FALSE(o.ok()) << text;
    EXPECT_EQ(FieldOf(o.status()), field) << text << ": " << o.status();
    EXPECT_NE(o.status().message().find(path), absl::string_view::npos) << o.status();
  }
  std::ofstream(path, std::ios::trunc) << "{not json";
  EXPECT_EQ(Parse({"--config", path}).status().code(), absl::StatusCode::kInvalidArgument);
  ::unlink(path);
}

bool HasExtra(const jail::FilterExtras& e, jail::ThreadKind thread, const std::string& name) {
  for (const jail::ExtraSyscall& c : e.syscalls) {
    if (c.thread == thread && c.name == name) return true;
  }
  return false;
}

TEST(MonitorOptionsTest, TheJailAllowsWhatTheConfiguredDevicesNeedAndNoMore) {
  // A VM without a disk gets none of the disk's calls.
  auto rng = Parse({"--kernel", "/k", "--rng"});
  ASSERT_TRUE(rng.ok()) << rng.status();
  EXPECT_TRUE(rng->jail.extras.syscalls.empty());
  EXPECT_TRUE(rng->jail.extras.ioctls.empty());
  const std::vector<std::string> loop =
      jail::AllowedSyscalls(jail::ThreadKind::kEventLoop, rng->jail.extras);
  for (const char* call : {"pwritev2", "fdatasync", "io_uring_enter", "fallocate", "socket"}) {
    EXPECT_EQ(std::count(loop.begin(), loop.end(), call), 0) << call;
  }
  // Two disks: the disk's calls once, on the threads it names, each with
  // its why.
  auto disks = Parse({"--kernel", "/k", "--disk", "/a.raw", "--disk", "/b.raw"});
  ASSERT_TRUE(disks.ok()) << disks.status();
  const jail::FilterExtras& e = disks->jail.extras;
  EXPECT_TRUE(HasExtra(e, jail::ThreadKind::kEventLoop, "pwritev2"));
  EXPECT_TRUE(HasExtra(e, jail::ThreadKind::kMain, "io_uring_enter"));
  EXPECT_FALSE(HasExtra(e, jail::ThreadKind::kEventLoop, "socket"));
  size_t pwritev2 = 0;
  for (const jail::ExtraSyscall& c : e.syscalls) {
    pwritev2 += c.name == "pwritev2" ? 1 : 0;
    EXPECT_EQ(c.why.rfind("disk: ", 0), 0u) << c.why;
  }
  EXPECT_EQ(pwritev2, 1u);
  // vsock: unix sockets only, and its ioctls.
  auto vsock = Parse({"--kernel", "/k", "--vsock", "3,/s/v.sock"});
  ASSERT_TRUE(vsock.ok()) << vsock.status();
  bool unix_only = false;
  for (const jail::ExtraSyscall& c : vsock->jail.extras.syscalls) {
    if (c.name == "socket") unix_only = c.unix_socket_only;
  }
  EXPECT_TRUE(unix_only);
  EXPECT_FALSE(vsock->jail.extras.ioctls.empty());
}

TEST(MonitorOptionsTest, EveryDeviceKindsCallsPassTheJailsCheck) {
  auto all = Parse({"--kernel", "/k", "--rng", "--balloon", "--disk", "/d.raw", "--net", "tap0",
                    "--vsock", "3,/s/v.sock", "--pmem", "/i/a.erofs,ro"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->config.devices.size(), vm::DeviceKinds().size());
  EXPECT_TRUE(jail::CheckFilterExtras(all->jail.extras).ok());
}

TEST(MonitorOptionsTest, BalloonReclaimNeedsABalloon) {
  auto o = Parse({"--kernel", "/k", "--reclaim", "balloon"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("needs --balloon"), absl::string_view::npos);
  EXPECT_TRUE(Parse({"--kernel", "/k", "--reclaim", "balloon", "--balloon"}).ok());
}

TEST(MonitorOptionsTest, JailFlagsAndKeysMeanTheSame) {
  auto o = Parse({"--kernel", "/k", "--uid", "1900000007", "--gid", "1900000008", "--seccomp",
                  "log", "--reclaim", "pageout"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->jail.uid, 1900000007u);
  EXPECT_EQ(*o->jail.gid, 1900000008u);
  EXPECT_EQ(o->jail.seccomp, jail::SeccompMode::kLog);
  EXPECT_FALSE(o->reclaim.try_damon);  // DAMON's sysfs is root's
  const nlohmann::json j = MonitorOptionsToJson(*o);
  EXPECT_EQ(j["monitor"]["uid"], 1900000007u);
  EXPECT_EQ(j["monitor"]["seccomp"], "log");
  auto back = MonitorOptionsFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(MonitorOptionsToJson(*back), j);
  // The default: filters on, credentials kept.
  auto d = Parse({"--kernel", "/k"});
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->jail.uid.has_value());
  EXPECT_EQ(d->jail.seccomp, jail::kDefaultSeccompMode);
}

TEST(MonitorOptionsTest, BadJailSettingsNameTheFieldOrFlag) {
  nlohmann::json j = {{"kernel", "/k"}, {"monitor", {{"seccomp", "strict"}}}};
  absl::Status s = MonitorOptionsFromJson(j).status();
  EXPECT_NE(s.message().find("monitor.seccomp"), std::string::npos) << s;
  j = {{"kernel", "/k"}, {"monitor", {{"uid", 0}, {"gid", 5}}}};
  s = MonitorOptionsFromJson(j).status();
  EXPECT_NE(s.message().find("monitor.uid"), std::string::npos) << s;
  s = Parse({"--kernel", "/k", "--uid", "1900000001"}).status();
  EXPECT_NE(s.message().find("--uid and --gid"), std::string::npos) << s;
  s = Parse({"--kernel", "/k", "--qos", "be", "--uid", "1900000001", "--gid", "1900000001"}).status();
  EXPECT_NE(s.message().find("--qos needs"), std::string::npos) << s;
  s = Parse({"--kernel", "/k", "--test-hook", "nonsense"}).status();
  EXPECT_NE(s.message().find("--test-hook nonsense"), std::string::npos) << s;
}

}  // namespace
}  // namespace dsec::monitor
