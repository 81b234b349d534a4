// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/requests.h"

#include <gtest/gtest.h>

#include "base/json_fields.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;

std::string Field(const absl::Status& s) { return dsec::FieldOf(s).value_or("<none>"); }

TEST(CreateRequestTest, ReadsEveryField) {
  json j = {{"tier", "container"}, {"lang", "python"}, {"layers", {"base:bookworm", "ws:1"}},
            {"cpus", 1.5}, {"memory_mib", 256}, {"pids", 64}, {"qos", "ls"}, {"ttl_s", 30},
            {"task_id", "t-1"}, {"user_namespace", true}};
  auto r = ParseCreateRequest(j, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tier, "container");
  EXPECT_EQ(r->layers.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->cpus, 1.5);
  EXPECT_EQ(*r->memory_mib, 256u);
  EXPECT_EQ(*r->qos, "ls");
  EXPECT_EQ(*r->ttl_s, 30);
  // The tier's own options are left for its traits to read.
  EXPECT_EQ(r->tier_fields, json({{"lang", "python"}, {"user_namespace", true}}));
}

TEST(CreateRequestTest, ErrorsNameTheField) {
  const RequestLimits limits{100, 10};
  struct Case {
    json j;
    std::string field;
  } cases[] = {
      {json::object(), "tier"},
      {{{"tier", ""}}, "tier"},
      {{{"tier", 3}}, "tier"},
      {{{"tier", "container"}, {"cpus", 0}}, "cpus"},
      {{{"tier", "container"}, {"cpus", 0.001}}, "cpus"},
      {{{"tier", "container"}, {"cpus", "1"}}, "cpus"},
      {{{"tier", "container"}, {"memory_mib", 1}}, "memory_mib"},
      {{{"tier", "container"}, {"pids", -1}}, "pids"},
      {{{"tier", "container"}, {"qos", "fast"}}, "qos"},
      {{{"tier", "container"}, {"ttl_s", 101}}, "ttl_s"},
      {{{"tier", "container"}, {"task_id", "../x"}}, "task_id"},
      {{{"tier", "container"}, {"layers", {"a", 1}}}, "layers[1]"},
  };
  for (const Case& c : cases) {
    auto r = ParseCreateRequest(c.j, limits);
    ASSERT_FALSE(r.ok()) << c.j.dump();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Field(r.status()), c.field) << c.j.dump() << ": " << r.status();
  }
  EXPECT_EQ(Field(ParseCreateRequest(json::array(), limits).status()), "");
  // Fields no common parser knows go to the tier (which refuses unknown
  // ones, sandbox/tier/options.h), untouched.
  auto extra = ParseCreateRequest({{"tier", "container"}, {"extra", {1, 2}}, {"user_namespace", "yes"}}, limits);
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(extra->tier_fields, json({{"extra", {1, 2}}, {"user_namespace", "yes"}}));
}

TEST(FileModeTest, OctalUpTo07777) {
  EXPECT_EQ(*ParseFileMode(""), 0644u);
  EXPECT_EQ(*ParseFileMode("0755"), 0755u);
  EXPECT_EQ(*ParseFileMode("7777"), 07777u);
  EXPECT_EQ(*ParseFileMode("00600"), 0600u);
  for (const char* bad : {"8", "0x1ff", "-1", "17777", "000000", "rw"}) {
    auto m = ParseFileMode(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_EQ(Field(m.status()), "mode") << bad;
  }
}

TEST(ExecRequestTest, ReadsArgvCodeStdinEnv) {
  auto r = ParseExecRequest({{"argv", {"sh", "-c", "true"}}, {"stdin_b64", "aGk="}, {"env", {{"A", "1"}}},
                             {"cwd", "/work"}, {"timeout_s", 5}, {"idempotent", true}},
                            {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->argv.size(), 3u);
  EXPECT_EQ(r->stdin_data, "hi");
  EXPECT_EQ(r->env.at("A"), "1");
  EXPECT_EQ(r->cwd, "/work");
  EXPECT_EQ(*r->timeout_s, 5);
  EXPECT_TRUE(r->idempotent);
  // The largest variable execve takes: NAME=value and its NUL in 32 pages.
  auto largest = ParseExecRequest({{"env", {{"A", std::string(131069, 'x')}}}}, {});
  EXPECT_TRUE(largest.ok()) << largest.status();
  auto code = ParseExecRequest({{"code", "print(1)"}, {"stdin", "x"}}, {});
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code->code, "print(1)");
  EXPECT_EQ(code->stdin_data, "x");
}

TEST(ExecRequestTest, ErrorsNameTheField) {
  const RequestLimits limits{100, 10};
  struct Case {
    json j;
    std::string field;
  } cases[] = {
      {{{"argv", "sh"}}, "argv"},
      {{{"argv", {"a", 1}}}, "argv"},
      {{{"argv", {std::string("a\0b", 3)}}}, "argv"},
      {{{"code", ""}}, "code"},
      {{{"stdin", "a"}, {"stdin_b64", "YQ=="}}, "stdin_b64"},
      {{{"stdin_b64", "!!"}}, "stdin_b64"},
      {{{"env", {{"A=B", "1"}}}}, "env"},
      {{{"env", {{"A", 1}}}}, "env"},
      {{{"cwd", "work"}}, "cwd"},
      {{{"timeout_s", 11}}, "timeout_s"},
      {{{"idempotent", 1}}, "idempotent"},
      {{{"argv", {"x"}}, {"shell", true}}, "shell"},
      // What execve would refuse with E2BIG is the client's error.
      {{{"argv", {"x", std::string(131072, 'a')}}}, "argv[1]"},
      {{{"env", {{"BIG", std::string(900000, 'x')}}}}, "env.BIG"},
      {{{"env", {{"A", std::string(131070, 'x')}}}}, "env.A"},  // A=...NUL is 131073
      {{{"env", {{"A", std::string(100000, 'x')}, {"B", std::string(100000, 'x')},
                  {"C", std::string(100000, 'x')}}}}, "env"},
  };
  for (const Case& c : cases) {
    auto r = ParseExecRequest(c.j, limits);
    ASSERT_FALSE(r.ok()) << c.j.dump();
    EXPECT_EQ(Field(r.status()), c.field) << c.j.dump() << ": " << r.status();
  }
}

TEST(LayerRequestsTest, NamesVersionsAndPaths) {
  auto p = ParsePackDiffRequest({{"name", "env"}, {"version", "2"}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->name, "env");
  EXPECT_EQ(Field(ParsePackDiffRequest({{"name", "a:b"}, {"version", "1"}}).status()), "name");
  EXPECT_EQ(Field(ParsePackDiffRequest({{"name", "a"}}).status()), "version");
  EXPECT_EQ(Field(ParsePackDiffRequest({{"name", "a"}, {"version", "1"}, {"x", 1}}).status()), "x");
  auto a = ParseAddLayerRequest({{"name", "ws"}, {"version", "1"}, {"path", "/src"}, {"parent", "base:1"}});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a->parent, "base:1");
  EXPECT_EQ(Field(ParseAddLayerRequest({{"name", "ws"}, {"version", "1"}, {"path", "rel"}}).status()), "path");
  EXPECT_EQ(Field(ParseAddLayerRequest({{"name", "ws"}, {"version", "1"}, {"path", "/s"}, {"parent", ""}})
                      .status()),
            "parent");
}

}  // namespace
}  // namespace dsec::daemon
