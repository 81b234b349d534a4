// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_protocol.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/scoped_fd.h"
#include "gtest/gtest.h"

namespace dsec::container {
namespace {

struct Parsed {
  bool ok = false;
  std::vector<std::string> argv, env, paths;
  std::string cwd;
};

Parsed Parse(const ExecRequestHeader& h, std::string body) {
  // As the init does: never more slots than a valid request could need.
  std::vector<char*> slots(std::min(ExecRequestPointerSlots(h), body.size() + 3));
  ParsedExecRequest r;
  Parsed p;
  p.ok = ParseExecRequest(h, body.data(), body.size(), slots.data(), slots.size(), &r);
  if (!p.ok) return p;
  for (char* const* a = r.argv; *a != nullptr; ++a) p.argv.emplace_back(*a);
  for (char* const* e = r.envp; *e != nullptr; ++e) p.env.emplace_back(*e);
  for (uint32_t i = 0; i < r.npaths; ++i) p.paths.emplace_back(r.paths[i]);
  p.cwd = r.cwd;
  return p;
}

ExecSpec Spec() {
  ExecSpec s;
  s.argv = {"sh", "-c", "echo hi", ""};
  s.env = {"PATH=/bin", "EMPTY="};
  s.exec_paths = {"/usr/bin/sh", "/bin/sh"};
  s.cwd = "/work";
  s.uid = 1000;
  s.gid = 100;
  return s;
}

// The configuration as the init reads it, through a pipe.
bool ReadBack(const InitConfig& config, InitConfig* out) {
  int p[2];
  if (::pipe(p) != 0) return false;
  ScopedFd r(p[0]), w(p[1]);
  const std::string encoded = EncodeInitConfig(config);
  if (::write(w.get(), encoded.data(), encoded.size()) != static_cast<ssize_t>(encoded.size())) return false;
  w.Reset();
  return ReadInitConfig(r.get(), out);
}

// A configuration with these flags, read back: whether the init takes it.
bool TakesFlags(bool overlay_on_control, bool netns_on_control, bool join_netns, bool join_userns,
                InitConfig* got, bool sys_on_control = false, bool dev_on_control = false) {
  InitConfig c;
  c.merged = std::string(6, 'm');
  c.hostname = std::string(1, 'h');
  c.overlay_on_control = overlay_on_control;
  c.netns_on_control = netns_on_control;
  c.join_netns = join_netns;
  c.join_userns = join_userns;
  c.sys_on_control = sys_on_control;
  c.dev_on_control = dev_on_control;
  return ReadBack(c, got);
}

TEST(InitProtocolTest, ANamespaceOnTheControlSocketComesOnlyWithTheOverlayAlone) {
  InitConfig got;
  ASSERT_TRUE(TakesFlags(true, true, false, false, &got));
  EXPECT_TRUE(got.overlay_on_control);
  EXPECT_TRUE(got.netns_on_control);
  EXPECT_FALSE(got.join_netns);
  ASSERT_TRUE(TakesFlags(true, false, false, false, &got));
  EXPECT_FALSE(got.netns_on_control);
  // Two sources of one namespace, or one the init makes itself: refused.
  EXPECT_FALSE(TakesFlags(false, true, false, false, &got));
  EXPECT_FALSE(TakesFlags(true, true, true, false, &got));
  EXPECT_FALSE(TakesFlags(true, true, false, true, &got));
}

TEST(InitProtocolTest, ASysfsOnTheControlSocketComesWithTheOverlayAndNoUserNamespace) {
  auto takes = [](bool overlay_on_control, bool join_netns, bool join_userns, InitConfig* got) {
    return TakesFlags(overlay_on_control, false, join_netns, join_userns, got, /*sys_on_control=*/true);
  };
  InitConfig got;
  ASSERT_TRUE(takes(true, false, false, &got));
  EXPECT_TRUE(got.sys_on_control);
  ASSERT_TRUE(takes(true, true, false, &got));  // with a namespace to join: fine
  EXPECT_TRUE(got.sys_on_control);
  EXPECT_FALSE(takes(false, false, false, &got));
  EXPECT_FALSE(takes(true, false, true, &got));
  ASSERT_TRUE(TakesFlags(true, false, false, false, &got));
  EXPECT_FALSE(got.sys_on_control);
}

TEST(InitProtocolTest, ADevDirectoryOnTheControlSocketComesWithTheOverlayAndNoUserNamespace) {
  auto takes = [](bool overlay_on_control, bool join_netns, bool join_userns, bool sys, InitConfig* got) {
    return TakesFlags(overlay_on_control, false, join_netns, join_userns, got, sys, /*dev_on_control=*/true);
  };
  InitConfig got;
  ASSERT_TRUE(takes(true, false, false, false, &got));
  EXPECT_TRUE(got.dev_on_control);
  EXPECT_FALSE(got.sys_on_control);
  ASSERT_TRUE(takes(true, true, false, true, &got));  // with the sysfs and a namespace to join
  EXPECT_TRUE(got.dev_on_control);
  EXPECT_TRUE(got.sys_on_control);
  EXPECT_FALSE(takes(false, false, false, false, &got));
  EXPECT_FALSE(takes(true, false, true, false, &got));
  ASSERT_TRUE(TakesFlags(true, false, false, false, &got));
  EXPECT_FALSE(got.dev_on_control);
}

TEST(InitProtocolTest, RequestRoundTrips) {
  ExecRequestHeader h;
  auto body = EncodeExecRequest(Spec(), &h);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(h.magic, kExecRequestMagic);
  EXPECT_EQ(h.body_bytes, body->size());
  EXPECT_EQ(h.uid, 1000u);
  EXPECT_EQ(h.gid, 100u);
  EXPECT_EQ(h.flags, kExecKillGroupOnExit);
  Parsed p = Parse(h, *body);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.argv, Spec().argv);
  EXPECT_EQ(p.env, Spec().env);
  EXPECT_EQ(p.paths, Spec().exec_paths);
  EXPECT_EQ(p.cwd, "/work");
  ExecSpec no_env = Spec();
  no_env.env.clear();
  no_env.kill_group_on_exit = false;
  body = EncodeExecRequest(no_env, &h);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(h.flags, 0u);
  p = Parse(h, *body);
  ASSERT_TRUE(p.ok);
  EXPECT_TRUE(p.env.empty());
  ExecSpec copy = Spec();
  copy.copy_stdin_to_stdout = true;
  body = EncodeExecRequest(copy, &h);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(h.flags, kExecKillGroupOnExit | kExecCopyStdinToStdout);
}

TEST(InitProtocolTest, EncodeRefusesWhatCannotCross) {
  ExecRequestHeader h;
  ExecSpec s = Spec();
  s.argv.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeExecRequest(s, &h).status()));
  s = Spec();
  s.exec_paths.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeExecRequest(s, &h).status()));
  s = Spec();
  s.env.push_back(std::string("A=\0B", 4));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeExecRequest(s, &h).status()));
  s = Spec();
  s.cwd = std::string("/\0x", 3);
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeExecRequest(s, &h).status()));
  s = Spec();
  s.argv.push_back(std::string(kMaxExecRequestBytes, 'x'));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeExecRequest(s, &h).status()));
}

TEST(InitProtocolTest, ParseRejectsMalformedRequests) {
  ExecRequestHeader good;
  auto body = EncodeExecRequest(Spec(), &good);
  ASSERT_TRUE(body.ok());
  ASSERT_TRUE(Parse(good, *body).ok);
  auto with = [&](auto change) {
    ExecRequestHeader h = good;
    std::string b = *body;
    change(h, b);
    return Parse(h, b).ok;
  };
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.magic ^= 1; }));
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.body_bytes += 1; }));
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.argc = 0; }));
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.pathc = 0; }));
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.flags = 4; }));
  EXPECT_TRUE(with([](ExecRequestHeader& h, std::string&) { h.flags = kExecCopyStdinToStdout; }));
  // One string more or fewer than the body holds.
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.envc += 1; }));
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.envc -= 1; }));
  // Counts far beyond the body cannot fit and are refused before use.
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string&) { h.argc = 0xffffffffu; }));
  // The last NUL missing; bytes after the cwd; an empty path or cwd.
  EXPECT_FALSE(with([](ExecRequestHeader&, std::string& b) { b.back() = 'x'; }));
  EXPECT_FALSE(with([](ExecRequestHeader& h, std::string& b) {
    b.push_back('x');
    h.body_bytes += 1;
  }));
  ExecSpec empty_cwd = Spec();
  empty_cwd.cwd = "";
  ExecRequestHeader h;
  auto b = EncodeExecRequest(empty_cwd, &h);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(Parse(h, *b).ok);
  ExecSpec empty_path = Spec();
  empty_path.exec_paths = {""};
  b = EncodeExecRequest(empty_path, &h);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(Parse(h, *b).ok);
  // Too few pointer slots.
  std::vector<char*> slots(ExecRequestPointerSlots(good) - 1);
  std::string copy = *body;
  ParsedExecRequest r;
  EXPECT_FALSE(ParseExecRequest(good, copy.data(), copy.size(), slots.data(), slots.size(), &r));
}

}  // namespace
}  // namespace dsec::container
