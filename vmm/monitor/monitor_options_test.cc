// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/monitor_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

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
