// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/wire.h"

#include <gtest/gtest.h>

#include "sandbox/e2b/templates.h"

namespace dsec::e2b {
namespace {

using nlohmann::json;

TEST(Templates, ParsesFlag) {
  auto t = ParseTemplateFlag("py=base:bookworm,python:1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "py");
  EXPECT_EQ(t->tier, "container");
  EXPECT_EQ(t->layers, (std::vector<std::string>{"base:bookworm", "python:1"}));
  EXPECT_FALSE(ParseTemplateFlag("py").ok());
  EXPECT_FALSE(ParseTemplateFlag("py=").ok());
  EXPECT_FALSE(ParseTemplateFlag("a b=x").ok());
}

TEST(Templates, FileRoundTrips) {
  std::map<std::string, Template> m;
  m["py"] = Template{"py", "container", {"base:bookworm", "python:1"}, 2.0, 1024, "be"};
  auto back = ParseTemplateFile(TemplateFileJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)["py"].layers, m["py"].layers);
  EXPECT_EQ(*(*back)["py"].cpus, 2.0);
  EXPECT_EQ(*(*back)["py"].memory_mib, 1024u);
  EXPECT_EQ(*(*back)["py"].qos, "be");
  EXPECT_FALSE(ParseTemplateFile(json{{"templates", {{"x", {{"layers", "notalist"}}}}}}).ok());
}

TEST(Create, ReadsWhatTheSdkSends) {
  auto r = ParseCreateRequest(json::parse(R"({"templateID":"base","timeout":300,"metadata":{"k":"v"},
      "envVars":{"A":"1"},"autoPause":false})"), 86400);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->template_id, "base");
  EXPECT_EQ(r->timeout_s, 300);
  EXPECT_EQ(r->env_vars.at("A"), "1");
  EXPECT_EQ(r->metadata["k"], "v");
  EXPECT_FALSE(r->task_id);
  r = ParseCreateRequest(json::parse(R"({"templateID":"base","metadata":{"dsec_task_id":"t-1"}})"), 86400);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->task_id, "t-1");
  EXPECT_EQ(NodeCreateBody(Template{"t", "container", {}, 1.0, std::nullopt, "ls"}, 60, r->task_id),
            json::parse(R"({"tier":"container","ttl_s":60,"cpus":1.0,"qos":"ls","task_id":"t-1"})"));
}

TEST(Create, RefusesWhatTheNodeLacksByName) {
  auto r = ParseCreateRequest(json::parse(R"({"templateID":"base","autoPause":true})"), 86400);
  EXPECT_TRUE(absl::IsUnimplemented(r.status()));
  EXPECT_NE(r.status().message().find("autoPause"), std::string::npos);
  r = ParseCreateRequest(json::parse(R"({"templateID":"base","volumeMounts":[{"name":"v","path":"/m"}]})"), 86400);
  EXPECT_TRUE(absl::IsUnimplemented(r.status()));
  EXPECT_FALSE(ParseCreateRequest(json::parse(R"({"timeout":5})"), 86400).ok());
  EXPECT_FALSE(ParseCreateRequest(json::parse(R"({"templateID":"base","timeout":-1})"), 86400).ok());
  EXPECT_FALSE(ParseCreateRequest(json::parse(R"({"templateID":"base","timeout":999999})"), 86400).ok());
}

TEST(Start, TranslatesToANodeExec) {
  auto r = ParseStartRequest(json::parse(
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"B":"2"},"cwd":"work"},"stdin":false})"));
  ASSERT_TRUE(r.ok()) << r.status();
  json exec = NodeExecBody(*r, {{"A", "1"}, {"B", "1"}}, 60000, 3600);
  EXPECT_EQ(exec["argv"], json::parse(R"(["/bin/bash","-l","-c","echo hi"])"));
  EXPECT_EQ(exec["env"]["A"], "1");
  EXPECT_EQ(exec["env"]["B"], "2");  // the request's win
  EXPECT_EQ(exec["cwd"], "/work");
  EXPECT_EQ(exec["timeout_s"], 60);
  EXPECT_EQ(NodeExecBody(*r, {}, 0, 3600)["timeout_s"], 3600);  // E2B's 0: no limit
  EXPECT_EQ(NodeExecBody(*r, {}, 1, 3600)["timeout_s"], 1);
  EXPECT_FALSE(NodeExecBody(*r, {}, -1, 3600).contains("timeout_s"));
}

TEST(Start, RefusesPtyByNameAndTakesStdinAsABoolean) {
  auto r = ParseStartRequest(json::parse(R"({"process":{"cmd":"sh"},"pty":{"size":{"cols":80,"rows":24}}})"));
  EXPECT_TRUE(absl::IsUnimplemented(r.status()));
  r = ParseStartRequest(json::parse(R"({"process":{"cmd":"sh"},"stdin":true})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stdin);
  r = ParseStartRequest(json::parse(R"({"process":{"cmd":"sh"},"stdin":false})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stdin);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseStartRequest(json::parse(R"({"process":{"cmd":"sh"},"stdin":"yes"})")).status()));
  EXPECT_FALSE(ParseStartRequest(json::parse(R"({"process":{"cmd":""}})")).ok());
  EXPECT_FALSE(ParseStartRequest(json::parse(R"({"process":{"cmd":"sh","args":[1]}})")).ok());
}

TEST(SendInput, TakesBase64StdinAndRefusesPtyInputByName) {
  auto r = ParseStdinInput(json::parse(R"({"process":{"pid":1},"input":{"stdin":"aGkK"}})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "hi\n");
  EXPECT_TRUE(absl::IsUnimplemented(ParseStdinInput(json::parse(R"({"input":{"pty":"aGkK"}})")).status()));
  for (const char* bad : {R"({})", R"({"input":{}})", R"({"input":{"stdin":5}})", R"({"input":{"stdin":"!!"}})",
                          R"({"input":"aGkK"})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseStdinInput(json::parse(bad)).status())) << bad;
  }
}

TEST(SendSignal, TakesKillAndTermByNameOrNumberOnly) {
  using nlohmann::json;
  EXPECT_EQ(*ParseSignal(json{{"signal", "SIGNAL_SIGKILL"}}), 9);
  EXPECT_EQ(*ParseSignal(json{{"signal", "SIGNAL_SIGTERM"}}), 15);
  EXPECT_EQ(*ParseSignal(json{{"signal", 9}}), 9);
  for (const json& bad : {json::object(), json{{"signal", "SIGNAL_SIGHUP"}}, json{{"signal", 1}},
                          json{{"signal", 9.5}}, json{{"signal", nullptr}}, json{{"signal", {9}}}}) {
    absl::StatusOr<int> s = ParseSignal(bad);
    EXPECT_FALSE(s.ok()) << bad.dump();
    EXPECT_NE(std::string(s.status().message()).find("signal"), std::string::npos) << s.status();
  }
}

TEST(ProcessEnd, MapsExitsSignalsAndTimeouts) {
  auto end = ProcessEndOf(json::parse(R"({"exit":{"exit_code":3,"signal":null,"timed_out":false}})"));
  ASSERT_TRUE(end.status.ok());
  EXPECT_EQ(end.end_event["event"]["end"]["exitCode"], 3);
  EXPECT_EQ(end.end_event["event"]["end"]["status"], "exit status 3");
  end = ProcessEndOf(json::parse(R"({"exit":{"exit_code":null,"signal":9,"timed_out":false,"killed_by":"memory"}})"));
  EXPECT_EQ(end.end_event["event"]["end"]["exitCode"], -1);
  EXPECT_EQ(end.end_event["event"]["end"]["exited"], false);
  EXPECT_NE(end.end_event["event"]["end"]["error"].get<std::string>().find("memory"), std::string::npos);
  end = ProcessEndOf(json::parse(R"({"exit":{"exit_code":null,"signal":9,"timed_out":true}})"));
  EXPECT_TRUE(absl::IsDeadlineExceeded(end.status));
  end = ProcessEndOf(json::parse(R"({"error":{"code":"NOT_FOUND","message":"no sandbox"}})"));
  EXPECT_TRUE(absl::IsNotFound(end.status));
}

TEST(Files, EntryInfoIsProtobufJson) {
  json e = EntryInfoJson("/etc/hosts", json{{"name", "hosts"}, {"type", "file"}, {"size", 12}, {"mode", 0100644}});
  EXPECT_EQ(e["type"], "FILE_TYPE_FILE");
  EXPECT_EQ(e["size"], "12");
  EXPECT_EQ(e["mode"], 0644);
  EXPECT_EQ(e["permissions"], "-rw-r--r--");
  EXPECT_EQ(EntryInfoJson("/x", json{{"size", "bad"}})["size"], "0");
  EXPECT_EQ(AbsolutePath("a/b/"), "/a/b");
  EXPECT_EQ(ParentOf("/a/b"), "/a");
  EXPECT_EQ(ParentOf("/a"), "/");
}

TEST(Files, WatchRequestsAndWatcherIds) {
  auto w = ParseWatchRequest(json::parse(R"({"path":"d/","recursive":true,"allowNetworkMounts":false})"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->path, "/d");
  EXPECT_TRUE(w->recursive);
  EXPECT_TRUE(absl::IsUnimplemented(ParseWatchRequest(json::parse(R"({"path":"/","includeEntry":true})")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseWatchRequest(json::parse(R"({"path":"/","recursive":"yes"})")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseWatchRequest(json::parse(R"({"recursive":true})")).status()));
  EXPECT_EQ(*ParseWatcherId(json::parse(R"({"watcherId":"w1"})")), "w1");
  EXPECT_EQ(*ParseWatcherId(json::parse(R"({"watcher_id":"w2"})")), "w2");
  for (const char* bad : {R"({})", R"({"watcherId":""})", R"({"watcherId":7})", R"([])"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseWatcherId(json::parse(bad)).status())) << bad;
  }
}

TEST(Keys, CompareWholly) {
  EXPECT_TRUE(KeyMatches("e2b_0123456789abcdef", "e2b_0123456789abcdef"));
  EXPECT_FALSE(KeyMatches("e2b_0123456789abcdeX", "e2b_0123456789abcdef"));
  EXPECT_FALSE(KeyMatches("e2b_0123456789abcdef0", "e2b_0123456789abcdef"));
  EXPECT_FALSE(KeyMatches("", ""));
}

}  // namespace
}  // namespace dsec::e2b
